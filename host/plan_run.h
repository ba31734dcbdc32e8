/* plan_run.h: what `clremat plan` computes, callable from the command and
 * from the embedding API (include/clremat_api.h) alike: a model's plan under
 * a remat mode (with the device's memory for auto and its GEMM path when
 * asked) and the Pareto sweep. */
#ifndef CLREMAT_PLAN_RUN_H
#define CLREMAT_PLAN_RUN_H

#include "executor.h"

/** The sweep plans every point on the whole model: its work grows as
 * points x layers. Past this product the point count is refused with the
 * largest count the model allows. */
#define CLREMAT_PARETO_MAX_WORK ((int64_t)10000000)

/** What to plan (the options of `clremat plan`). */
typedef struct clremat_plan_request {
    const char *remat;          /**< remat mode (NULL: "none") */
    int64_t batch;              /**< the step's batch */
    int64_t accumulate;         /**< micro-batches per step (<= 1: none): the plan is one micro-batch's */
    const clremat_opt_config *opt; /**< optimizer (its no_fused_update counts) */
    const char *device;         /**< device whose memory auto plans for (without memory_limit) and whose GEMM
                                     path gemm plans for; NULL: the default */
    uint64_t memory_limit;      /**< 0: none (auto takes the device's memory) */
    const char *gemm;           /**< NULL: plan without a device; else "native", "clblast" or "auto" on device */
    int overlap;                /**< recompute on a second queue */
    const char *offload;        /**< "all" or layer names (NULL: none) */
} clremat_plan_request;

/** The planner's opt_states argument for opt and accumulate micro-batches
 * per step: its state count, with the fused update where it applies
 * (clremat_trainer_fused). */
int clremat_plan_opt_states(const clremat_opt_config *opt, int accumulate, const clremat_graph *g);

/** Plans gr as rq asks: *pol the parsed mode, *plan the plan, *costs the
 * per-layer costs (free() it), *ctx the context opened for rq->gemm (NULL
 * otherwise; clremat_ctx_destroy it). On failure a status with the message
 * in clremat_last_error(), nothing to free. */
int clremat_plan_run(const clremat_graph *gr, const clremat_plan_request *rq, clremat_policy *pol,
                     clremat_plan *plan, clremat_layer_cost **costs, clremat_ctx **ctx);

/** The Pareto sweep of gr at batch (per micro-batch of batch / accumulate):
 * *pts[0..*n) the front over points budgets, *marks[0..*nm) the
 * Keras-style modes (free() both). Too many points for the model
 * (CLREMAT_PARETO_MAX_WORK): CLREMAT_ERR_INVALID_ARGUMENT naming the largest
 * count allowed. */
int clremat_pareto_run(const clremat_graph *gr, int64_t batch, int accumulate, int opt_states, int points,
                       clremat_pareto_point **pts, int *n, clremat_pareto_mark **marks, int *nm);

#endif
