/* accumulate.c: gradient accumulation in the planner. A step of batch B with
 * --accumulate K runs K micro-batches of B / K samples through one plan made
 * at the micro-batch; parameter gradients are summed into an accumulation
 * buffer (one float per parameter, part of the plan's fixed bytes) and the
 * optimizer updates once. Batchnorm layers sum their micro-batches'
 * statistics (3 floats per channel, in the same fixed bytes) for one update
 * of their moving statistics a step. Pure C. */
#include "plan.h"
#include "error.h"
#include <stdint.h>
#include <stdio.h>

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
        char alt[48] = "";
        if (hi <= INT32_MAX) /* the next multiple only where a batch may be that large */
            snprintf(alt, sizeof alt, " or %lld", (long long)hi);
        if (lo > 0)
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                     "batch %lld is not divisible by --accumulate %lld (%lld = %lld x %lld + %lld): "
                                     "use a batch that is a multiple of %lld (%lld%s)",
                                     (long long)batch, (long long)accumulate, (long long)batch,
                                     (long long)accumulate, (long long)(batch / accumulate),
                                     (long long)(batch % accumulate), (long long)accumulate, (long long)lo, alt);
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                 "batch %lld is not divisible by --accumulate %lld (a micro-batch needs at least one "
                                 "sample): use a batch that is a multiple of %lld (%lld)",
                                 (long long)batch, (long long)accumulate, (long long)accumulate, (long long)hi);
    }
    *micro = batch / accumulate;
    return CLREMAT_OK;
}

int64_t clremat_bn_moving_sums_floats(const clremat_layer *L)
{
    if (L->type != CLREMAT_BATCHNORM || L->n_params < 2)
        return 0;
    return 3 * L->params[L->n_params - 1].elems; /* per channel: mean shift, its square, variance */
}

uint64_t clremat_accum_bytes(const clremat_plan_input *in)
{
    int64_t n = 0;
    if (in->accumulate <= 1 && in->replicas <= 1)
        return 0;
    if (in->accumulate > 1)
        n = clremat_graph_trainable_elems(in->g); /* frozen: no gradient */
    for (int l = 0; l < in->g->n_layers; l++) /* several batches a step: batchnorm's sums */
        n += clremat_bn_moving_sums_floats(&in->g->layers[l]);
    return (uint64_t)n * sizeof(float);
}

void clremat_plan_set_accumulate(const clremat_plan_input *in, clremat_plan *out)
{
    out->accumulate = in->accumulate > 1 ? in->accumulate : 1;
    out->accum_bytes = clremat_accum_bytes(in);
}
