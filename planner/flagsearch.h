/* flagsearch.h: internal to the budget planner. A search over flag plans
 * (per layer and per block wrap flags: the space list_of_layers, full,
 * larger_than and none span; plus activation discards and pinned slots:
 * activations, save_dots and partial keeps inside wrapped blocks), every
 * plan judged by the memory simulator (schedule.c). The result is the
 * Pareto front of (peak, recompute cost) over every plan evaluated, each
 * point with its flags and the name of the mode that found it. Pure C. */
#ifndef CLREMAT_FLAGSEARCH_H
#define CLREMAT_FLAGSEARCH_H

#include <stdint.h>
#include "plan.h"

/** One plan of the front. */
typedef struct clremat_fpoint {
    uint64_t peak;              /**< predicted peak bytes */
    double cost;                /**< clremat_plan_recompute_cost */
    unsigned char *flags;       /**< wrap_layer[nl], wrap_block[nb], act_discard[nl], pin[nl] */
    char label[128];            /**< the mode that gives this plan, e.g. "list_of_layers:a,b" */
} clremat_fpoint;

/** The search and its front. */
typedef struct clremat_fsearch {
    const clremat_plan_input *in;
    int nl, nb, width;          /**< layers, blocks, bytes of one flag vector */
    clremat_fpoint *pts;        /**< the front: by peak ascending, cost strictly descending */
    int n, cap;
    long evaluated;             /**< plans simulated */
    int n_vars;                 /**< wrap flags (non-loss layers and blocks) */
    int exhaustive;             /**< every subset of the wrap flags was simulated */
} clremat_fsearch;

/** Most wrap flags searched exhaustively (2^this plans). */
#define CLREMAT_FSEARCH_EXHAUSTIVE 14
/** Largest graph (layers) searched at all; beyond, only the rotor DP. */
#define CLREMAT_FSEARCH_MAX_LAYERS 700

/** Runs the search: the Keras-mode plans (none, full, activations,
 * larger_than at every threshold that changes the plan on graphs of up to
 * 96 layers, save_dots, each top-level block) as seeds; every subset of
 * the wrap flags when there are at most CLREMAT_FSEARCH_EXHAUSTIVE of them,
 * else every subset of the top-level units' flags when those are few enough;
 * then a Pareto local search (every single-flag change of each front point,
 * wrap, activation discard and pin flags alike) within a bound on the plans
 * simulated. Graphs above CLREMAT_FSEARCH_MAX_LAYERS get an empty front. */
int clremat_fsearch_run(clremat_fsearch *fs, const clremat_plan_input *in);

/** The cheapest front point with peak <= budget, NULL if none. */
const clremat_fpoint *clremat_fsearch_best(const clremat_fsearch *fs, uint64_t budget);

/** Plans a front point (the same plan the search simulated). */
int clremat_fsearch_plan(const clremat_fsearch *fs, const clremat_fpoint *p, clremat_plan *out);

/** Frees the front. */
void clremat_fsearch_free(clremat_fsearch *fs);

#endif /* CLREMAT_FLAGSEARCH_H */
