/* budget_solver.h: internal to the budget planner, shared by budget.c and
 * pareto.c: the rotor dynamic program over a graph's stages, solved once,
 * then asked for plans at any budget up to the one it was built for. */
#ifndef CLREMAT_BUDGET_SOLVER_H
#define CLREMAT_BUDGET_SOLVER_H

#include "flagsearch.h"
#include "stages.h"

/** The solver: stages, the exact minimum-peak program, the discretized
 * least-cost table, and the Keras-mode candidate plans it also considers. */
#define CLREMAT_BSOLVER_CANDS 16

typedef struct clremat_bsolver {
    const clremat_plan_input *in;
    clremat_stages st;
    uint64_t fixed;
    int K, nk;                  /**< stages; keep-input variants tabled (1 or 2) */
    /* exact minimum peak per (keep, segment): bytes above the start, its cost, its choice */
    int64_t *mp;
    double *mc;
    short *mw;
    /* least cost per (keep, segment, memory units 0..smax) and its choice */
    int64_t unit;               /**< bytes per memory unit */
    int smax;                   /**< top memory index in the table */
    int exact;                  /**< unit divides every quantity: the table is exact */
    double *C;
    short *W;
    /* candidates: none, full, activations, sqrt, then larger_than and
     * list_of_layers per top-level block (n_cand of them; no actions = not built) */
    clremat_plan cand[CLREMAT_BSOLVER_CANDS];
    double cand_cost[CLREMAT_BSOLVER_CANDS];
    int n_cand;
    /* the search over flag plans (exact over wrap flags on small graphs) */
    clremat_fsearch fs;
    uint64_t min_peak;          /**< smallest peak of any plan the solver can make */
    double min_peak_cost;       /**< the least recompute cost at that peak */
    char min_peak_by[128];      /**< the cheapest mode reaching it ("activations", "list_of_layers:a,b", ...) */
    const char *limit_name;     /**< what the budget is called in refusals ("budget", "memory limit") */
} clremat_bsolver;

/** Cuts the graph, measures the stages, solves the minimum-peak program and
 * builds the candidate plans. */
int clremat_bsolver_init(clremat_bsolver *b, const clremat_plan_input *in);

/** Builds the least-cost table for budgets up to max_budget bytes. */
int clremat_bsolver_table(clremat_bsolver *b, uint64_t max_budget);

/** The cheapest plan found within budget (table built for at least budget).
 * A budget below b->min_peak fails with CLREMAT_ERR_PLAN naming it. */
int clremat_bsolver_plan(clremat_bsolver *b, uint64_t budget, clremat_plan *out);

/** Frees the solver. */
void clremat_bsolver_free(clremat_bsolver *b);

#endif /* CLREMAT_BUDGET_SOLVER_H */
