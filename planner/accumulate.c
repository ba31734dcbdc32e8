/* accumulate.c: gradient accumulation in the planner. A step of batch B with
 * --accumulate K runs K micro-batches of B / K samples through one plan made
 * at the micro-batch; parameter gradients are summed into an accumulation
 * buffer (one float per parameter, part of the plan's fixed bytes) and the
 * optimizer updates once. Pure C. */
#include "plan.h"
#include "error.h"

int clremat_accumulate_split(int64_t batch, int64_t accumulate, int64_t *micro)
{
    if (accumulate < 1 || accumulate > CLREMAT_MAX_ACCUMULATE)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--accumulate %lld is outside [1, %d]",
                                 (long long)accumulate, CLREMAT_MAX_ACCUMULATE);
    if (batch < 1)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "batch size must be positive, got %lld",
                                 (long long)batch);
    if (batch % accumulate != 0) {
        int64_t lo = batch / accumulate * accumulate, hi = lo + accumulate;
        if (lo > 0)
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                     "batch %lld is not divisible by --accumulate %lld (%lld = %lld x %lld + %lld): "
                                     "use a batch that is a multiple of %lld (%lld or %lld)",
                                     (long long)batch, (long long)accumulate, (long long)batch,
                                     (long long)accumulate, (long long)(batch / accumulate),
                                     (long long)(batch % accumulate), (long long)accumulate, (long long)lo,
                                     (long long)hi);
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                 "batch %lld is not divisible by --accumulate %lld (a micro-batch needs at least one "
                                 "sample): use a batch that is a multiple of %lld (%lld)",
                                 (long long)batch, (long long)accumulate, (long long)accumulate, (long long)hi);
    }
    *micro = batch / accumulate;
    return CLREMAT_OK;
}

uint64_t clremat_accum_bytes(const clremat_plan_input *in)
{
    if (in->accumulate <= 1)
        return 0;
    return (uint64_t)clremat_graph_trainable_elems(in->g) * sizeof(float); /* frozen: no gradient */
}

void clremat_plan_set_accumulate(const clremat_plan_input *in, clremat_plan *out)
{
    out->accumulate = in->accumulate > 1 ? in->accumulate : 1;
    out->accum_bytes = clremat_accum_bytes(in);
}
