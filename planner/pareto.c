/* pareto.c: the Pareto sweep (peak bytes against recompute cost over a range
 * of budgets, from the smallest feasible peak to the none plan's) and the
 * Keras-style modes as labelled points for the plot (pareto_svg.c). */
#include "budget_solver.h"
#include "error.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_peak_then_cost(const void *a, const void *b)
{
    const clremat_pareto_point *x = a, *y = b;
    if (x->peak_bytes != y->peak_bytes)
        return x->peak_bytes < y->peak_bytes ? -1 : 1;
    if (x->recompute_cost != y->recompute_cost)
        return x->recompute_cost < y->recompute_cost ? -1 : 1;
    return x->budget < y->budget ? -1 : x->budget > y->budget;
}

int clremat_plan_pareto(const clremat_plan_input *in, int points, clremat_pareto_point **out, int *n)
{
    clremat_bsolver b;
    clremat_pareto_point *pts = NULL;
    uint64_t lo, hi;
    int rc, np = 0, kept = 0;
    double best = HUGE_VAL;

    *out = NULL;
    *n = 0;
    if (points < 2)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "Pareto sweep needs at least 2 points, not %d", points);
    if ((rc = clremat_bsolver_init(&b, in)) != CLREMAT_OK)
        return rc;
    lo = b.min_peak;
    hi = b.cand[0].peak_bytes; /* none */
    if (hi < lo)
        hi = lo;
    pts = calloc((size_t)points + (size_t)b.fs.n, sizeof *pts);
    if (!pts) {
        rc = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        goto done;
    }
    if ((rc = clremat_bsolver_table(&b, hi)) != CLREMAT_OK)
        goto done;
    for (int i = 0; i < points; i++) {
        uint64_t budget = lo + (uint64_t)((long double)(hi - lo) * i / (points - 1));
        clremat_plan p;
        if ((rc = clremat_bsolver_plan(&b, budget, &p)) != CLREMAT_OK)
            goto done;
        pts[np].budget = budget;
        pts[np].peak_bytes = p.peak_bytes;
        pts[np].recompute_cost = clremat_plan_recompute_cost(in, &p);
        np++;
        clremat_plan_free(&p);
    }
    /* the flag search's front at its own peaks: budgets between the evenly
     * spaced ones would otherwise miss them */
    for (int i = 0; i < b.fs.n; i++) {
        clremat_plan p;
        if (b.fs.pts[i].peak < lo || b.fs.pts[i].peak > hi)
            continue;
        if ((rc = clremat_bsolver_plan(&b, b.fs.pts[i].peak, &p)) != CLREMAT_OK)
            goto done;
        pts[np].budget = b.fs.pts[i].peak;
        pts[np].peak_bytes = p.peak_bytes;
        pts[np].recompute_cost = clremat_plan_recompute_cost(in, &p);
        np++;
        clremat_plan_free(&p);
    }
    /* the front: by peak, each strictly cheaper than everything before it
     * (so no point is dominated by another) */
    qsort(pts, (size_t)np, sizeof *pts, by_peak_then_cost);
    for (int i = 0; i < np; i++)
        if (pts[i].recompute_cost < best) {
            best = pts[i].recompute_cost;
            pts[kept++] = pts[i];
        }
    *out = pts;
    *n = kept;
    pts = NULL;
done:
    free(pts);
    clremat_bsolver_free(&b);
    return rc;
}

static int add_mark(const clremat_plan_input *in, const char *mode, clremat_pareto_mark *m)
{
    clremat_policy p;
    clremat_plan plan;
    int rc = clremat_policy_parse(mode, &p);
    if (rc == CLREMAT_OK)
        rc = clremat_plan_build(in, &p, &plan);
    if (rc != CLREMAT_OK)
        return rc;
    snprintf(m->label, sizeof m->label, "%s", mode);
    m->peak_bytes = plan.peak_bytes;
    m->recompute_cost = clremat_plan_recompute_cost(in, &plan);
    clremat_plan_free(&plan);
    return CLREMAT_OK;
}

int clremat_pareto_marks(const clremat_plan_input *in, clremat_pareto_mark **out, int *n)
{
    static const char *const modes[] = {"none", "full", "activations", "larger_than", "save_dots"};
    const clremat_graph *g = in->g;
    clremat_pareto_mark *m = calloc((size_t)g->n_blocks + 5, sizeof *m);
    int k = 0, rc = CLREMAT_OK;
    *out = NULL;
    *n = 0;
    if (!m)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
    for (int i = 0; i < 5 && rc == CLREMAT_OK; i++)
        rc = add_mark(in, modes[i], &m[k++]);
    for (int b = 0; b < g->n_blocks && rc == CLREMAT_OK; b++) {
        char mode[96];
        if (g->blocks[b].parent >= 0)
            continue;
        snprintf(mode, sizeof mode, "list_of_layers:%s", g->blocks[b].name);
        rc = add_mark(in, mode, &m[k++]);
    }
    if (rc != CLREMAT_OK) {
        free(m);
        return rc;
    }
    *out = m;
    *n = k;
    return CLREMAT_OK;
}
