/* plan_run.c: the plan and the Pareto sweep of `clremat plan` (plan_run.h),
 * moved here from tools/cli_plan.c so the embedding API runs the same code. */
#include "plan_run.h"
#include "error.h"
#include <stdlib.h>

int clremat_plan_opt_states(const clremat_opt_config *opt, int accumulate, const clremat_graph *g)
{
    return clremat_opt_state_count(opt->kind) |
           (clremat_trainer_fused(opt, accumulate, g) ? CLREMAT_PLAN_FUSED_UPDATE : 0);
}

int clremat_plan_run(const clremat_graph *gr, const clremat_plan_request *rq, clremat_policy *pol,
                     clremat_plan *plan, clremat_layer_cost **costs, clremat_ctx **ctx)
{
    uint64_t limit = rq->memory_limit;
    int accumulate = rq->accumulate > 1 ? (int)rq->accumulate : 1;
    int st;
    *ctx = NULL;
    *costs = NULL;
    if ((st = clremat_policy_parse(rq->remat ? rq->remat : "none", pol)) == CLREMAT_OK &&
        ((pol->kind == CLREMAT_POLICY_AUTO && !limit) || rq->device)) {
        /* auto plans for the device's memory; a device named but not needed
         * for it (a fixed mode, or a --memory-limit given) is still checked:
         * a selection that matches nothing is refused, never ignored */
        clremat_device_info dev;
        if ((st = clremat_select_device(rq->device, &dev)) == CLREMAT_OK && pol->kind == CLREMAT_POLICY_AUTO &&
            !limit)
            limit = dev.global_mem_bytes;
    }
    if (st == CLREMAT_OK && rq->gemm) { /* plan for a device's GEMM path (its workspace included) */
        clremat_gemm_path gp;
        if ((st = clremat_gemm_path_parse(rq->gemm, &gp)) == CLREMAT_OK &&
            (st = clremat_ctx_create(rq->device, 0, ctx)) == CLREMAT_OK)
            clremat_ctx_set_gemm(*ctx, gp);
    }
    /* with accumulation the plan is one micro-batch's (its peak is what the device holds) */
    if (st || (st = clremat_plan_for_offload(*ctx, gr, rq->batch / accumulate, accumulate, pol,
                                             clremat_plan_opt_states(rq->opt, accumulate, gr), limit, NULL, rq->overlap,
                                             rq->offload, plan, costs, NULL, NULL))) {
        if (*ctx) /* keep the message: destroying the context does not touch it */
            clremat_ctx_destroy(*ctx);
        *ctx = NULL;
        return st;
    }
    return CLREMAT_OK;
}

int clremat_pareto_run(const clremat_graph *gr, int64_t batch, int accumulate, int opt_states, int points,
                       clremat_pareto_point **pts, int *n, clremat_pareto_mark **marks, int *nm)
{
    clremat_plan_input in;
    int64_t layers = gr->n_layers > 0 ? gr->n_layers : 1, max_points = CLREMAT_PARETO_MAX_WORK / layers;
    int st;
    *pts = NULL;
    *marks = NULL;
    *n = *nm = 0;
    if (max_points < 2)
        max_points = 2;
    if (points > max_points)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                 "--points %d is too many for model '%s' (%lld layers): at most %lld (points x "
                                 "layers may not exceed %lld)",
                                 points, gr->name, (long long)layers, (long long)max_points,
                                 (long long)CLREMAT_PARETO_MAX_WORK);
    /* with accumulation the plans are per micro-batch */
    if ((st = clremat_plan_input_for(NULL, gr, batch / accumulate, opt_states, NULL, &in, NULL, NULL)))
        return st;
    in.accumulate = accumulate;
    if ((st = clremat_plan_pareto(&in, points, pts, n)) || (st = clremat_pareto_marks(&in, marks, nm))) {
        free(*pts);
        free(*marks);
        *pts = NULL;
        *marks = NULL;
        *n = *nm = 0;
    }
    free((void *)in.costs);
    return st;
}
