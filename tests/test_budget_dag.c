/* test_budget_dag.c: budget: against an independent brute force over every
 * wrap-flag subset (the space list_of_layers, full, larger_than and none
 * span) of random small DAGs (residual blocks, overlapping skips, nested and
 * repeated blocks), at many budgets; the reported minimum peak and whom it
 * is credited to; the Pareto front holds only non-dominated points. No
 * device. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plan.h"
#include "plangraphs.h"
#include "testutil.h"

#define MAXV 14

typedef struct dag {
    clremat_graph *g;
    int wide[256], n_wide; /* layers whose output has the residual width */
    int id;
} dag;

static void add_wide(dag *d)
{
    d->wide[d->n_wide++] = d->g->n_layers - 1;
}

static void name_next(dag *d, char *name, size_t len, const char *prefix)
{
    snprintf(name, len, "%s%d", prefix, d->id++);
}

static void units(pg_rng *r, dag *d, int w, int depth);

static void unit(pg_rng *r, dag *d, int w, int depth, int kind)
{
    char name[32];
    switch (kind) {
    case 0: /* dense of the residual width, with or without activation */
        name_next(d, name, sizeof name, "d");
        pg_add(d->g, pg_dense(name, w, pg_int(r, 0, 1) ? CLREMAT_ACT_GELU_TANH : CLREMAT_ACT_NONE));
        add_wide(d);
        break;
    case 1: /* up then down: a wide intermediate */
        name_next(d, name, sizeof name, "up");
        pg_add(d->g, pg_dense(name, w * pg_int(r, 2, 5), CLREMAT_ACT_RELU));
        name_next(d, name, sizeof name, "dn");
        pg_add(d->g, pg_dense(name, w, CLREMAT_ACT_NONE));
        add_wide(d);
        break;
    case 2:
        name_next(d, name, sizeof name, "act");
        pg_add(d->g, pg_simple(name, CLREMAT_ACTIVATION));
        add_wide(d);
        break;
    case 3: { /* a skip from any earlier layer of the same width (they overlap) */
        int from = d->wide[pg_int(r, 0, d->n_wide - 1)];
        name_next(d, name, sizeof name, "skip");
        pg_add(d->g, pg_addl(name, d->g->n_layers - 1, from));
        add_wide(d);
        break;
    }
    case 4: { /* residual block */
        int in = d->g->n_layers - 1, seen = d->n_wide;
        name_next(d, name, sizeof name, "res");
        ck_assert_msg(clremat_graph_begin_block(d->g, name, 0) == CLREMAT_OK, "%s", d->g->error);
        units(r, d, w, depth + 1);
        name_next(d, name, sizeof name, "add");
        pg_add(d->g, pg_addl(name, d->g->n_layers - 1, in));
        ck_assert_int_eq(clremat_graph_end_block(d->g), CLREMAT_OK);
        d->n_wide = seen; /* only a block's output is visible outside it */
        add_wide(d);
        break;
    }
    case 5: { /* plain (nested) block */
        int seen = d->n_wide;
        name_next(d, name, sizeof name, "blk");
        ck_assert_msg(clremat_graph_begin_block(d->g, name, 0) == CLREMAT_OK, "%s", d->g->error);
        units(r, d, w, depth + 1);
        ck_assert_int_eq(clremat_graph_end_block(d->g), CLREMAT_OK);
        d->n_wide = seen;
        add_wide(d);
        break;
    }
    default: { /* a block repeated twice: the same structure, two instances */
        pg_rng save = *r;
        for (int k = 0; k < 2; k++) {
            int seen = d->n_wide;
            *r = save;
            snprintf(name, sizeof name, "rep%d_%d", d->id++, k);
            ck_assert_msg(clremat_graph_begin_block(d->g, name, 0) == CLREMAT_OK, "%s", d->g->error);
            units(r, d, w, depth + 1);
            ck_assert_int_eq(clremat_graph_end_block(d->g), CLREMAT_OK);
            d->n_wide = seen;
            add_wide(d);
        }
        break;
    }
    }
}

static void units(pg_rng *r, dag *d, int w, int depth)
{
    int n = pg_int(r, 1, 2);
    for (int u = 0; u < n; u++)
        unit(r, d, w, depth, pg_int(r, 0, depth < 2 ? 6 : 3));
}

/* A random DAG with between minv and maxv wrap flags (non-loss layers and blocks). */
static clremat_graph *random_dag(pg_rng *r, int minv, int maxv)
{
    for (;;) {
        dag d;
        int w = 4 * pg_int(r, 1, 4), vars;
        clremat_shape in = {1, {w}};
        memset(&d, 0, sizeof d);
        d.g = clremat_graph_new("dag");
        clremat_graph_set_input(d.g, &in, 0);
        pg_add(d.g, pg_dense("first", w, CLREMAT_ACT_GELU_TANH));
        add_wide(&d);
        for (int i = pg_int(r, 2, 4); i > 0; i--)
            units(r, &d, w, 0);
        pg_add(d.g, pg_dense("head", 3, CLREMAT_ACT_NONE));
        pg_add(d.g, pg_simple("loss", CLREMAT_SOFTMAX_CE));
        ck_assert_msg(clremat_graph_finalize(d.g) == CLREMAT_OK, "%s", d.g->error);
        vars = d.g->n_layers - 1 + d.g->n_blocks;
        if (vars >= minv && vars <= maxv)
            return d.g;
        clremat_graph_free(d.g);
    }
}

typedef struct pc {
    uint64_t peak;
    double cost;
} pc;

/* (peak, cost) of every wrap-flag subset, plus activations and save_dots. */
static int brute_force(const clremat_plan_input *in, pc *v)
{
    const clremat_graph *g = in->g;
    int nl = g->n_layers, nb = g->n_blocks, nv = nl - 1 + nb, n = 0;
    unsigned char wl[64], wb[64];
    static const char *const modes[] = {"activations", "save_dots"};
    for (long mask = 0; mask < 1L << nv; mask++) {
        clremat_plan p;
        memset(wl, 0, sizeof wl);
        memset(wb, 0, sizeof wb);
        for (int k = 0; k < nv; k++)
            if (mask >> k & 1) {
                if (k < nl - 1)
                    wl[k] = 1;
                else
                    wb[k - (nl - 1)] = 1;
            }
        ck_assert_msg(clremat_plan_from_flags(in, wl, wb, NULL, &p) == CLREMAT_OK, "%s", clremat_last_error());
        v[n].peak = p.peak_bytes;
        v[n++].cost = clremat_plan_recompute_cost(in, &p);
        clremat_plan_free(&p);
    }
    for (int m = 0; m < 2; m++) {
        clremat_policy pol;
        clremat_plan p;
        ck_assert_int_eq(clremat_policy_parse(modes[m], &pol), CLREMAT_OK);
        ck_assert_msg(clremat_plan_build(in, &pol, &p) == CLREMAT_OK, "%s", clremat_last_error());
        v[n].peak = p.peak_bytes;
        v[n++].cost = clremat_plan_recompute_cost(in, &p);
        clremat_plan_free(&p);
    }
    return n;
}

static double best_within(const pc *v, int n, uint64_t budget)
{
    double best = HUGE_VAL;
    for (int i = 0; i < n; i++)
        if (v[i].peak <= budget && v[i].cost < best)
            best = v[i].cost;
    return best;
}

/* The planner's minimum, read from its refusal of a budget of 1 byte, and
 * the mode it credits it to. */
static uint64_t planner_min(const clremat_plan_input *in, char *by, size_t len)
{
    clremat_plan p;
    const char *e, *at;
    unsigned long long v = 0;
    ck_assert_int_eq(clremat_plan_budget(in, 1, &p), CLREMAT_ERR_PLAN);
    e = clremat_last_error();
    at = strstr(e, "reaches");
    ck_assert_ptr_nonnull(at);
    at = strstr(at, ": ");
    ck_assert_ptr_nonnull(at);
    ck_assert_int_eq(sscanf(at + 2, "%llu bytes (", &v), 1);
    at = strstr(at, "bytes (") + 7;
    snprintf(by, len, "%.*s", (int)(strstr(at, "; fixed") - at), at);
    return v;
}

/* n_graphs random DAGs with minv..maxv wrap flags, n_budgets budgets each. */
static void check_dags(uint64_t seed, int n_graphs, int minv, int maxv, int n_budgets)
{
    pg_rng r = {seed};
    static pc v[(1L << MAXV) + 4];
    int graphs = 0, budgets = 0;
    long subsets = 0;
    for (int it = 0; it < n_graphs; it++) {
        clremat_graph *g = random_dag(&r, minv, maxv);
        clremat_layer_cost *c = calloc((size_t)g->n_layers, sizeof *c);
        clremat_plan_input in = {g, 2, c, 2, 8, NULL};
        int nv;
        uint64_t lo = UINT64_MAX, hi = 0, pmin;
        double cost_at_min = HUGE_VAL;
        char by[200];
        pg_fake_costs(g, 2, c);
        nv = brute_force(&in, v);
        subsets += nv;
        for (int i = 0; i < nv; i++) {
            lo = v[i].peak < lo ? v[i].peak : lo;
            hi = v[i].peak > hi ? v[i].peak : hi;
        }
        for (int i = 0; i < nv; i++)
            if (v[i].peak == lo && v[i].cost < cost_at_min)
                cost_at_min = v[i].cost;
        /* the minimum: never above the least peak of the space; credited to
         * a plan at that peak at least as cheap as any in the space */
        pmin = planner_min(&in, by, sizeof by);
        ck_assert_uint_le(pmin, lo);
        if (pmin == lo) {
            clremat_plan p;
            ck_assert_msg(clremat_plan_budget(&in, lo, &p) == CLREMAT_OK, "%s", clremat_last_error());
            ck_assert_uint_eq(p.peak_bytes, lo);
            ck_assert_msg(clremat_plan_recompute_cost(&in, &p) <= cost_at_min,
                          "graph %d: at the least peak %llu the planner recomputes %g, a plan of the space %g "
                          "(minimum credited to %s)", it, (unsigned long long)lo, clremat_plan_recompute_cost(&in, &p),
                          cost_at_min, by);
            clremat_plan_free(&p);
            if (strncmp(by, "wrap ", 5) != 0 && strncmp(by, "the rotor", 9) != 0) {
                /* a mode the user can name: it reaches that peak at that cost */
                clremat_policy pol;
                ck_assert_msg(clremat_policy_parse(by, &pol) == CLREMAT_OK, "%s", by);
                ck_assert_msg(clremat_plan_build(&in, &pol, &p) == CLREMAT_OK, "%s: %s", by, clremat_last_error());
                ck_assert_uint_eq(p.peak_bytes, lo);
                ck_assert(clremat_plan_recompute_cost(&in, &p) <= cost_at_min);
                clremat_plan_free(&p);
            }
        }
        for (int k = 0; k < n_budgets; k++) {
            uint64_t budget = k == 0 ? lo : k == 1 ? hi : k < n_budgets / 2 ? v[pg_int(&r, 0, nv - 1)].peak
                                                                 : lo + (uint64_t)pg_int(&r, 0, (int)(hi - lo));
            double want = best_within(v, nv, budget);
            clremat_plan p;
            ck_assert_msg(clremat_plan_budget(&in, budget, &p) == CLREMAT_OK, "%s", clremat_last_error());
            ck_assert_uint_le(p.peak_bytes, budget);
            ck_assert_msg(clremat_plan_recompute_cost(&in, &p) <= want,
                          "graph %d (%d layers, %d blocks), budget %llu: planner %g, a wrap subset %g", it,
                          g->n_layers, g->n_blocks, (unsigned long long)budget, clremat_plan_recompute_cost(&in, &p),
                          want);
            clremat_plan_free(&p);
            budgets++;
        }
        { /* the front: sorted, strictly cheaper, none dominated by the space */
            clremat_pareto_point *pts;
            int np;
            ck_assert_int_eq(clremat_plan_pareto(&in, 9, &pts, &np), CLREMAT_OK);
            for (int i = 0; i < np; i++) {
                if (i) {
                    ck_assert_uint_gt(pts[i].peak_bytes, pts[i - 1].peak_bytes);
                    ck_assert(pts[i].recompute_cost < pts[i - 1].recompute_cost);
                }
                ck_assert(best_within(v, nv, pts[i].peak_bytes) >= pts[i].recompute_cost);
            }
            free(pts);
        }
        graphs++;
        free(c);
        clremat_graph_free(g);
    }
    ck_assert_int_eq(graphs, n_graphs);
    ck_assert_int_eq(budgets, n_graphs * n_budgets);
    ck_assert_int_gt(subsets, n_graphs * (1L << minv));
}

START_TEST(test_budget_beats_every_wrap_subset)
{
    check_dags(20240 + (uint64_t)_i, 10, 5, 11, 24); /* 32 to 2048 subsets each */
}
END_TEST

START_TEST(test_budget_beats_every_wrap_subset_large)
{
    check_dags(777 + (uint64_t)_i, 2, 13, 14, 8);    /* 8192 to 16384 subsets each */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("budget_dag");
    TCase *tc = tcase_create("brute_force");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_budget_beats_every_wrap_subset, 0, 3);
    tcase_add_loop_test(tc, test_budget_beats_every_wrap_subset_large, 0, 2);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
