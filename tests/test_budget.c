/* test_budget.c: the budget planner (planner/budget.c, stages.c,
 * pareto.c, pareto_svg.c), no device. On random small chains the rotor DP's
 * plan costs exactly what a slow exhaustive search over the same persistent
 * schedule space finds (the search enumerates schedules recursively, turns
 * each into actions with a generic free-after-last-use rule written here,
 * and measures it with the simulator), and never more than the best
 * keep/discard plan over all wrap flags. Also: plans fit their budgets, a
 * generous budget is the none plan, Chen's sqrt(n) is never cheaper at the
 * same peak, deep uniform chains fit 2 sqrt(n) block activations with at
 * most one extra forward, too-small budgets name the minimum, residual
 * blocks become single stages, auto, the Pareto front and its SVG. */
#include "testutil.h"
#include "plangraphs.h"
#include "stages.h"
#include "report_svg.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define S CLREMAT_MAX_SLOTS
#define MAXK 10

/* ------------------------------------------------------------ brute force */

typedef struct sched {
    int *op; /* +i+1: forward of stage i; -(i+1): backward of stage i */
    int n;
} sched;

typedef struct slist {
    sched *v;
    int n, cap;
} slist;

static void push_sched(slist *l, const int *a, int na, const int *b, int nb, const int *c, int nc)
{
    sched s;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->v = realloc(l->v, sizeof *l->v * (size_t)l->cap);
    }
    s.n = na + nb + nc;
    s.op = malloc(sizeof(int) * (size_t)(s.n + 1));
    if (na) /* an empty part may be NULL, which memcpy must not be given */
        memcpy(s.op, a, sizeof(int) * (size_t)na);
    if (nb)
        memcpy(s.op + na, b, sizeof(int) * (size_t)nb);
    if (nc)
        memcpy(s.op + na + nb, c, sizeof(int) * (size_t)nc);
    l->v[l->n++] = s;
}

/* Every persistent schedule of stages s..t, by direct recursion. */
static slist *enumerate(slist memo[MAXK][MAXK], int done[MAXK][MAXK], int s, int t)
{
    slist *out = &memo[s][t];
    int pre[MAXK];
    if (done[s][t])
        return out;
    done[s][t] = 1;
    if (s == t) {
        int fb[2] = {s + 1, -(s + 1)};
        push_sched(out, fb, 2, NULL, 0, NULL, 0);
        return out;
    }
    { /* forward s keeping all, the rest, backward s */
        slist *rest = enumerate(memo, done, s + 1, t);
        int f = s + 1, b = -(s + 1);
        for (int i = 0; i < rest->n; i++)
            push_sched(out, &f, 1, rest->v[i].op, rest->v[i].n, &b, 1);
    }
    for (int j = s + 1; j <= t; j++) { /* forward s..j-1, Solve(j, t), Solve(s, j-1) */
        slist *right = enumerate(memo, done, j, t), *left = enumerate(memo, done, s, j - 1);
        for (int i = s; i < j; i++)
            pre[i - s] = i + 1;
        for (int a = 0; a < right->n; a++)
            for (int b = 0; b < left->n; b++)
                push_sched(out, pre, j - s, right->v[a].op, right->v[a].n, left->v[b].op, left->v[b].n);
    }
    return out;
}

/* Whether comp[i] (a forward or backward) reads a slot of layer L. */
static int reads_layer(const clremat_graph *g, const clremat_layer_cost *c, const clremat_action *a, int L)
{
    const clremat_layer *l = &g->layers[a->layer];
    if (a->kind == CLREMAT_ACT_FORWARD || a->kind == CLREMAT_ACT_RECOMPUTE) {
        for (int k = 0; k < l->n_inputs; k++)
            if (l->inputs[k] == L)
                return 1;
    } else if (a->kind == CLREMAT_ACT_BACKWARD) {
        if (a->layer == L && c[L].bwd_needs_slots)
            return 1;
        for (int k = 0; k < l->n_inputs; k++)
            if (l->inputs[k] == L && (c[a->layer].bwd_needs_inputs >> k & 1u))
                return 1;
    }
    return 0;
}

/* Removes recomputations whose results nothing reads before the layer runs
 * again or the step ends (dead work), until none is left. */
static int drop_dead(const clremat_graph *g, const clremat_layer_cost *c, clremat_action *comp, int nc)
{
    int changed = 1;
    while (changed) {
        changed = 0;
        for (int i = 0; i < nc; i++) {
            int L = comp[i].layer, used = 0;
            if (comp[i].kind != CLREMAT_ACT_RECOMPUTE || L == g->n_layers - 1)
                continue;
            for (int j = i + 1; j < nc && !used; j++) {
                if ((comp[j].kind == CLREMAT_ACT_FORWARD || comp[j].kind == CLREMAT_ACT_RECOMPUTE) &&
                    comp[j].layer == L)
                    break;
                used = reads_layer(g, c, &comp[j], L);
            }
            if (!used) {
                memmove(&comp[i], &comp[i + 1], sizeof *comp * (size_t)(nc - i - 1));
                nc--;
                changed = 1;
                break;
            }
        }
    }
    return nc;
}

/* A compute sequence to actions: stage i is layer i (a chain); dead
 * recomputations removed (the planner never plans them); every tensor freed
 * right after its last use before it is produced again; the loss value
 * freed after the update. */
static int to_actions(const clremat_graph *g, const clremat_layer_cost *c, const sched *sc, clremat_action *out)
{
    int n = g->n_layers, loss = n - 1, nc = 0, na = 0;
    clremat_action comp[256];
    int free_after[256][8], n_free[256];
    unsigned char ran[64] = {0};
    for (int i = 0; i < sc->n; i++) {
        int L = sc->op[i] > 0 ? sc->op[i] - 1 : -sc->op[i] - 1;
        memset(&comp[nc], 0, sizeof comp[nc]);
        comp[nc].layer = L;
        if (sc->op[i] > 0) {
            comp[nc++].kind = ran[L] ? CLREMAT_ACT_RECOMPUTE : CLREMAT_ACT_FORWARD;
            ran[L] = 1;
        } else {
            comp[nc++].kind = CLREMAT_ACT_BACKWARD;
            if (L != loss) {
                memset(&comp[nc], 0, sizeof comp[nc]);
                comp[nc].kind = CLREMAT_ACT_FREE_GRAD;
                comp[nc++].layer = L;
            }
        }
    }
    nc = drop_dead(g, c, comp, nc);
    memset(n_free, 0, sizeof n_free);
    for (int L = 0; L < n; L++)
        for (int s = 0; s < c[L].n_slots; s++) {
            int start = -1, last = -1;
            for (int i = 0; i < nc; i++) {
                const clremat_layer *l = &g->layers[comp[i].layer];
                int uses = 0, produces = 0;
                if (comp[i].kind == CLREMAT_ACT_FORWARD || comp[i].kind == CLREMAT_ACT_RECOMPUTE) {
                    produces = comp[i].layer == L;
                    for (int k = 0; k < l->n_inputs; k++)
                        uses |= s == 0 && l->inputs[k] == L;
                } else if (comp[i].kind == CLREMAT_ACT_BACKWARD) {
                    const clremat_layer_cost *cn = &c[comp[i].layer];
                    uses = comp[i].layer == L && (cn->bwd_needs_slots >> s & 1u);
                    for (int k = 0; k < l->n_inputs; k++)
                        uses |= s == 0 && l->inputs[k] == L && (cn->bwd_needs_inputs >> k & 1u);
                }
                if (produces) {
                    if (start >= 0)
                        free_after[last][n_free[last]++] = L * S + s;
                    start = last = i;
                } else if (uses) {
                    last = i;
                }
            }
            if (start >= 0 && !(L == loss && s == 0))
                free_after[last][n_free[last]++] = L * S + s;
        }
    for (int i = 0; i < nc; i++) {
        out[na++] = comp[i];
        for (int k = 0; k < n_free[i]; k++) {
            memset(&out[na], 0, sizeof out[na]);
            out[na].kind = CLREMAT_ACT_FREE;
            out[na].layer = free_after[i][k] / S;
            out[na++].slot = free_after[i][k] % S;
        }
    }
    memset(&out[na], 0, sizeof out[na]);
    out[na].kind = CLREMAT_ACT_UPDATE;
    out[na++].layer = -1;
    memset(&out[na], 0, sizeof out[na]);
    out[na].kind = CLREMAT_ACT_FREE;
    out[na++].layer = loss;
    return na;
}

static double cost_of(const clremat_plan *p, const double *lc)
{
    double c = 0;
    if (!lc)
        return p->recompute_flops;
    for (int i = 0; i < p->n_actions; i++)
        if (p->actions[i].kind == CLREMAT_ACT_RECOMPUTE)
            c += lc[p->actions[i].layer];
    return c;
}

typedef struct pc {
    uint64_t peak;
    double cost;
} pc;

/* (peak, cost) of every persistent schedule of the chain. */
static int brute_force(const clremat_plan_input *in, pc **out)
{
    int K = in->g->n_layers, n = 0;
    static slist memo[MAXK][MAXK];
    static int done[MAXK][MAXK];
    slist *all;
    clremat_action acts[600];
    memset(memo, 0, sizeof memo);
    memset(done, 0, sizeof done);
    all = enumerate(memo, done, 0, K - 1);
    *out = malloc(sizeof **out * (size_t)all->n);
    for (int i = 0; i < all->n; i++) {
        clremat_plan p;
        int na = to_actions(in->g, in->costs, &all->v[i], acts);
        ck_assert_msg(clremat_plan_from_actions(in, acts, na, NULL, &p) == CLREMAT_OK, "schedule %d: %s", i,
                      clremat_last_error());
        (*out)[n].peak = p.peak_bytes;
        (*out)[n++].cost = cost_of(&p, in->layer_cost);
        clremat_plan_free(&p);
    }
    for (int s = 0; s < K; s++)
        for (int t = 0; t < K; t++) {
            for (int i = 0; i < memo[s][t].n; i++)
                free(memo[s][t].v[i].op);
            free(memo[s][t].v);
        }
    return n;
}

static double bf_best(const pc *v, int n, uint64_t budget)
{
    double best = HUGE_VAL;
    for (int i = 0; i < n; i++)
        if (v[i].peak <= budget && v[i].cost < best)
            best = v[i].cost;
    return best;
}

/* Best keep/discard plan over every per-layer wrap flag combination. */
static double flags_best(const clremat_plan_input *in, uint64_t budget)
{
    int n = in->g->n_layers;
    double best = HUGE_VAL;
    unsigned char wl[16], wb[4] = {0};
    for (int mask = 0; mask < 1 << (n - 1); mask++) {
        clremat_plan p;
        for (int l = 0; l < n; l++)
            wl[l] = l < n - 1 && (mask >> l & 1);
        ck_assert_int_eq(clremat_plan_from_flags(in, wl, wb, NULL, &p), CLREMAT_OK);
        if (p.peak_bytes <= budget && cost_of(&p, in->layer_cost) < best)
            best = cost_of(&p, in->layer_cost);
        clremat_plan_free(&p);
    }
    return best;
}

START_TEST(test_dp_equals_exhaustive_search)
{
    pg_rng r = {77};
    int checked = 0;
    for (int it = 0; it < 40; it++) {
        int nd = pg_int(&r, 2, 6); /* 3..7 stages with the loss */
        clremat_graph *g = pg_dense_chain(nd);
        clremat_layer_cost c[16];
        double lc[16];
        clremat_plan_input in = {.g = g, .batch = 2, .costs = c, .opt_states = 2, .scratch_bytes = 8};
        pc *v;
        int nv;
        uint64_t lo = UINT64_MAX, hi = 0;
        pg_random_chain_costs(&r, g, c, it % 3 == 2);
        if (it % 2) {
            for (int l = 0; l < g->n_layers; l++)
                lc[l] = pg_int(&r, 1, 50) * 0.25;
            in.layer_cost = lc;
        }
        nv = brute_force(&in, &v);
        for (int i = 0; i < nv; i++) {
            lo = v[i].peak < lo ? v[i].peak : lo;
            hi = v[i].peak > hi ? v[i].peak : hi;
        }
        /* the minimum is exact: one byte less is refused, naming it */
        {
            clremat_plan p;
            char num[32];
            snprintf(num, sizeof num, "%llu bytes", (unsigned long long)lo);
            ck_assert_int_eq(clremat_plan_budget(&in, lo - 1, &p), CLREMAT_ERR_PLAN);
            ck_assert_msg(strstr(clremat_last_error(), num) != NULL, "%s", clremat_last_error());
        }
        for (int k = 0; k < 12; k++) {
            uint64_t budget = k == 0 ? lo : k == 1 ? hi : v[pg_int(&r, 0, nv - 1)].peak - (uint64_t)pg_int(&r, 0, 1);
            clremat_plan p;
            double want = bf_best(v, nv, budget), got;
            if (budget < lo)
                continue;
            ck_assert_msg(clremat_plan_budget(&in, budget, &p) == CLREMAT_OK, "%s", clremat_last_error());
            got = cost_of(&p, in.layer_cost);
            ck_assert_uint_le(p.peak_bytes, budget);
            ck_assert_msg(got == want, "chain of %d stages (%d schedules), budget %llu: planner %g, exhaustive %g",
                          nd + 1, nv, (unsigned long long)budget, got, want);
            ck_assert(got <= flags_best(&in, budget));
            clremat_plan_free(&p);
            checked++;
        }
        free(v);
        clremat_graph_free(g);
    }
    ck_assert_int_gt(checked, 300);
}
END_TEST

/* ------------------------------------------------------------ properties */

static clremat_layer_cost *costs_for(const clremat_graph *g, int64_t batch)
{
    clremat_layer_cost *c = calloc((size_t)g->n_layers, sizeof *c);
    pg_fake_costs(g, batch, c);
    return c;
}

static void plan_mode(const clremat_plan_input *in, const char *mode, clremat_plan *p)
{
    clremat_policy pol;
    ck_assert_int_eq(clremat_policy_parse(mode, &pol), CLREMAT_OK);
    ck_assert_msg(clremat_plan_build(in, &pol, p) == CLREMAT_OK, "%s: %s", mode, clremat_last_error());
}

START_TEST(test_generous_budget_is_none)
{
    clremat_graph *g = pg_residual(4, 16);
    clremat_layer_cost *c = costs_for(g, 8);
    clremat_plan_input in = {.g = g, .batch = 8, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    clremat_plan none, b;
    clremat_policy pol;
    plan_mode(&in, "none", &none);
    for (int k = 0; k < 2; k++) {
        uint64_t budget = k ? none.peak_bytes : none.peak_bytes * 10;
        ck_assert_int_eq(clremat_plan_budget(&in, budget, &b), CLREMAT_OK);
        ck_assert_uint_eq(b.peak_bytes, none.peak_bytes);
        ck_assert(b.recompute_flops == 0);
        ck_assert_int_eq(b.n_actions, none.n_actions);
        ck_assert_int_eq(b.policy.kind, CLREMAT_POLICY_BUDGET);
        clremat_plan_free(&b);
    }
    /* through the policy string and plan_build */
    ck_assert_int_eq(clremat_policy_parse("budget:1GiB", &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_plan_build(&in, &pol, &b), CLREMAT_OK);
    ck_assert_uint_eq(b.peak_bytes, none.peak_bytes);
    ck_assert_str_eq(b.policy.text, "budget:1GiB");
    clremat_plan_free(&b);
    /* auto: none when it fits, else the budget plan for the limit */
    ck_assert_int_eq(clremat_plan_auto(&in, none.peak_bytes, &b), CLREMAT_OK);
    ck_assert_uint_eq(b.peak_bytes, none.peak_bytes);
    ck_assert_int_eq(b.policy.kind, CLREMAT_POLICY_AUTO);
    clremat_plan_free(&b);
    ck_assert_int_eq(clremat_plan_auto(&in, none.peak_bytes - 1, &b), CLREMAT_OK);
    ck_assert_uint_lt(b.peak_bytes, none.peak_bytes);
    ck_assert(b.recompute_flops > 0);
    clremat_plan_free(&b);
    pol.kind = CLREMAT_POLICY_AUTO;
    ck_assert_int_eq(clremat_plan_build(&in, &pol, &b), CLREMAT_ERR_PLAN);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "clremat_plan_auto"));
    clremat_plan_free(&none);
    free(c);
    clremat_graph_free(g);
}
END_TEST

/* Budgets swept over [min, none]: every plan fits, cost never rises with the budget. */
static void sweep_fits(const clremat_plan_input *in)
{
    clremat_plan none, p;
    uint64_t lo;
    double prev = HUGE_VAL;
    unsigned char zeros[512] = {0};
    ck_assert_int_lt(in->g->n_layers, 512);
    ck_assert_int_eq(clremat_plan_from_flags(in, zeros, zeros, NULL, &none), CLREMAT_OK); /* keep everything */
    ck_assert_msg(clremat_plan_budget(in, 1, &p) == CLREMAT_ERR_PLAN, "%s", clremat_last_error());
    ck_assert_int_eq(sscanf(strstr(clremat_last_error(), "reaches for model"), "reaches for model '%*[^']' at batch %*d: %llu",
                            (unsigned long long *)&lo), 1);
    ck_assert_uint_le(lo, none.peak_bytes);
    for (int k = 0; k <= 20; k++) {
        uint64_t budget = lo + (none.peak_bytes - lo) * (uint64_t)k / 20;
        ck_assert_msg(clremat_plan_budget(in, budget, &p) == CLREMAT_OK, "%s", clremat_last_error());
        ck_assert_uint_le(p.peak_bytes, budget);
        ck_assert_msg(p.recompute_flops <= prev * (1 + 1e-12), "%s: cost rose with the budget at %llu (step %d, range %llu..%llu): %g after %g",
                      in->g->name, (unsigned long long)budget, k, (unsigned long long)lo,
                      (unsigned long long)none.peak_bytes, p.recompute_flops, prev);
        prev = p.recompute_flops;
        clremat_plan_free(&p);
    }
    ck_assert(prev == 0); /* the budget planner does not force "remat": true blocks */
    clremat_plan_free(&none);
}

START_TEST(test_plans_fit_their_budgets)
{
    clremat_graph *gs[5] = {pg_chain(), pg_nested(0), pg_residual(5, 16), pg_deep(30, 32), NULL};
    pg_rng r = {5};
    gs[4] = pg_random(&r);
    for (int i = 0; i < 5; i++) {
        clremat_layer_cost *c = costs_for(gs[i], 16);
        clremat_plan_input in = {.g = gs[i], .batch = 16, .costs = c, .opt_states = 2, .scratch_bytes = 8};
        sweep_fits(&in);
        free(c);
        clremat_graph_free(gs[i]);
    }
    for (int it = 0; it < 25; it++) {
        clremat_graph *g = pg_random(&r);
        clremat_layer_cost *c = costs_for(g, 4);
        clremat_plan_input in = {.g = g, .batch = 4, .costs = c, .opt_states = 1, .scratch_bytes = 8};
        sweep_fits(&in);
        free(c);
        clremat_graph_free(g);
    }
}
END_TEST

START_TEST(test_sqrt_never_cheaper)
{
    pg_rng r = {9};
    for (int it = 0; it < 12; it++) {
        clremat_graph *g = it < 4 ? pg_deep(8 + 9 * it, 16) : pg_dense_chain(pg_int(&r, 3, 7));
        clremat_layer_cost *c = calloc((size_t)g->n_layers, sizeof *c);
        clremat_plan_input in = {.g = g, .batch = 8, .costs = c, .opt_states = 2, .scratch_bytes = 8};
        clremat_plan sq, dp;
        if (it < 4)
            pg_fake_costs(g, 8, c);
        else
            pg_random_chain_costs(&r, g, c, 0);
        ck_assert_int_eq(clremat_plan_sqrt(&in, &sq), CLREMAT_OK);
        ck_assert_int_eq(clremat_plan_budget(&in, sq.peak_bytes, &dp), CLREMAT_OK);
        ck_assert_uint_le(dp.peak_bytes, sq.peak_bytes);
        ck_assert_msg(dp.recompute_flops <= sq.recompute_flops, "rotor %g > sqrt %g", dp.recompute_flops,
                      sq.recompute_flops);
        if (it < 4) /* Chen: every segment recomputed once */
            ck_assert(sq.recompute_flops > 0);
        clremat_plan_free(&sq);
        clremat_plan_free(&dp);
        free(c);
        clremat_graph_free(g);
    }
}
END_TEST

START_TEST(test_deep_uniform_chain_sqrt_memory)
{
    for (int n = 64; n <= 100; n += 36) {
        clremat_graph *g = pg_deep(n, 64);
        clremat_layer_cost *c = costs_for(g, 32);
        clremat_plan_input in = {.g = g, .batch = 32, .costs = c, .opt_states = 2, .scratch_bytes = 8};
        uint64_t fixed = clremat_plan_fixed_bytes(&in, NULL);
        uint64_t block = c[0].slot_bytes[0] + c[0].slot_bytes[1]; /* what none keeps per block */
        uint64_t budget = fixed + (uint64_t)(2 * sqrt((double)n) * (double)block);
        double fwd = 0;
        clremat_plan p, none;
        for (int l = 0; l < g->n_layers; l++)
            fwd += c[l].fwd_flops;
        plan_mode(&in, "none", &none);
        ck_assert_uint_gt(none.peak_bytes, budget); /* a real constraint */
        ck_assert_msg(clremat_plan_budget(&in, budget, &p) == CLREMAT_OK, "%s", clremat_last_error());
        ck_assert_uint_le(p.peak_bytes, budget);
        ck_assert_msg(p.recompute_flops <= fwd, "%d blocks: recompute %g > one forward %g", n, p.recompute_flops, fwd);
        clremat_plan_free(&p);
        clremat_plan_free(&none);
        free(c);
        clremat_graph_free(g);
    }
}
END_TEST

START_TEST(test_too_small_budget_names_minimum)
{
    clremat_graph *g = pg_deep(10, 32);
    clremat_layer_cost *c = costs_for(g, 8);
    clremat_plan_input in = {.g = g, .batch = 8, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    clremat_plan p, full;
    unsigned long long min = 0;
    const char *e;
    plan_mode(&in, "full", &full);
    ck_assert_int_eq(clremat_plan_budget(&in, 1000, &p), CLREMAT_ERR_PLAN);
    e = clremat_last_error();
    ck_assert_ptr_nonnull(strstr(e, "1000 bytes"));
    ck_assert_ptr_nonnull(strstr(e, "'deep'"));
    ck_assert_int_eq(sscanf(strstr(e, "at batch 8: "), "at batch 8: %llu bytes", &min), 1);
    ck_assert_uint_le(min, full.peak_bytes);
    ck_assert_int_eq(clremat_plan_budget(&in, min - 1, &p), CLREMAT_ERR_PLAN);
    ck_assert_int_eq(clremat_plan_budget(&in, min, &p), CLREMAT_OK);
    ck_assert_uint_le(p.peak_bytes, min);
    clremat_plan_free(&p);
    clremat_plan_free(&full);
    free(c);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_residual_blocks_are_stages)
{
    clremat_graph *g = pg_residual(3, 8);
    clremat_layer_cost *c = costs_for(g, 4);
    clremat_plan_input in = {.g = g, .batch = 4, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    clremat_stages st;
    ck_assert_int_eq(clremat_stages_build(&in, 0, &st), CLREMAT_OK);
    /* d_in | res_0 | res_1 | res_2 | head | loss */
    ck_assert_int_eq(st.K, 6);
    ck_assert_int_eq(st.hi[0], clremat_graph_find_layer(g, "d_in"));
    for (int i = 0; i < 3; i++) {
        char a[16], add[16];
        snprintf(a, sizeof a, "a_%d", i);
        snprintf(add, sizeof add, "add_%d", i);
        ck_assert_int_eq(st.lo[1 + i], clremat_graph_find_layer(g, a));
        ck_assert_int_eq(st.hi[1 + i], clremat_graph_find_layer(g, add));
        ck_assert(st.inneed[1 + i]); /* a_i's backward reads the block input */
    }
    ck_assert_int_eq(st.lo[5], g->n_layers - 1);
    ck_assert_int_eq(st.hi[5], g->n_layers - 1);
    clremat_stages_free(&st);
    /* merging to at most 4 stages keeps the loss alone */
    ck_assert_int_eq(clremat_stages_build(&in, 4, &st), CLREMAT_OK);
    ck_assert_int_eq(st.K, 4);
    ck_assert_int_eq(st.lo[3], g->n_layers - 1);
    clremat_stages_free(&st);
    free(c);
    clremat_graph_free(g);
}
END_TEST

/* A skip from the first layer over the whole body: the body is one stage. */
START_TEST(test_no_cut_point_fallback)
{
    clremat_graph *g = clremat_graph_new("skip");
    clremat_shape ish = {1, {16}};
    clremat_layer_cost *c;
    clremat_plan none, full, p;
    clremat_stages st;
    char name[16];
    clremat_graph_set_input(g, &ish, 0);
    pg_add(g, pg_dense("first", 16, CLREMAT_ACT_NONE));
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "b%d", i);
        pg_add(g, pg_dense(name, 16, CLREMAT_ACT_GELU_TANH));
    }
    pg_add(g, pg_addl("skip", g->n_layers - 1, 0));
    pg_add(g, pg_simple("loss", CLREMAT_SOFTMAX_CE));
    ck_assert_msg(clremat_graph_finalize(g) == CLREMAT_OK, "%s", g->error);
    c = costs_for(g, 8);
    {
        clremat_plan_input in = {.g = g, .batch = 8, .costs = c, .opt_states = 2, .scratch_bytes = 8};
        ck_assert_int_eq(clremat_stages_build(&in, 0, &st), CLREMAT_OK);
        ck_assert_int_eq(st.K, 3); /* first | b0..skip | loss */
        clremat_stages_free(&st);
        plan_mode(&in, "none", &none);
        plan_mode(&in, "full", &full);
        ck_assert_uint_lt(full.peak_bytes, none.peak_bytes);
        /* the full plan (nested recompute) goes lower than stage checkpointing can */
        ck_assert_int_eq(clremat_plan_budget(&in, full.peak_bytes, &p), CLREMAT_OK);
        ck_assert_uint_le(p.peak_bytes, full.peak_bytes);
        ck_assert(p.recompute_flops <= full.recompute_flops);
        clremat_plan_free(&p);
        ck_assert_int_eq(clremat_plan_budget(&in, none.peak_bytes - 1, &p), CLREMAT_OK);
        ck_assert_uint_lt(p.peak_bytes, none.peak_bytes);
        clremat_plan_free(&p);
    }
    clremat_plan_free(&none);
    clremat_plan_free(&full);
    free(c);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_thousand_layer_chain)
{
    clremat_graph *g = pg_deep(1000, 32);
    clremat_layer_cost *c = costs_for(g, 16);
    clremat_plan_input in = {.g = g, .batch = 16, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    clremat_plan p;
    uint64_t fixed = clremat_plan_fixed_bytes(&in, NULL), budget;
    struct timespec t0, t1;
    budget = fixed + 60 * (c[0].slot_bytes[0] + c[0].slot_bytes[1]);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_msg(clremat_plan_budget(&in, budget, &p) == CLREMAT_OK, "%s", clremat_last_error());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("budget plan of a %d-layer chain: %.3f s, peak %llu of budget %llu, recompute %.3g of forward %.3g\n",
           g->n_layers, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
           (unsigned long long)p.peak_bytes, (unsigned long long)budget, p.recompute_flops,
           p.step_flops - p.recompute_flops);
    ck_assert_uint_le(p.peak_bytes, budget);
    ck_assert(p.recompute_flops > 0);
    clremat_plan_free(&p);
    free(c);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_pareto_front_and_svg)
{
    clremat_graph *g = pg_residual(4, 16);
    clremat_layer_cost *c = costs_for(g, 8);
    clremat_plan_input in = {.g = g, .batch = 8, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    clremat_pareto_point *pts;
    clremat_pareto_mark *marks;
    clremat_plan none;
    int n, nm;
    char dir[] = "/tmp/clremat-paretoXXXXXX", path[128], buf[4096];
    FILE *f;
    size_t len;
    plan_mode(&in, "none", &none);
    ck_assert_int_eq(clremat_plan_pareto(&in, 1, &pts, &n), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_plan_pareto(&in, 24, &pts, &n), CLREMAT_OK);
    ck_assert_int_ge(n, 3);
    for (int i = 0; i < n; i++) {
        ck_assert_uint_le(pts[i].peak_bytes, pts[i].budget);
        if (i > 0) {
            ck_assert_uint_gt(pts[i].peak_bytes, pts[i - 1].peak_bytes);
            ck_assert(pts[i].recompute_cost < pts[i - 1].recompute_cost);
        }
    }
    ck_assert_uint_eq(pts[n - 1].peak_bytes, none.peak_bytes);
    ck_assert(pts[n - 1].recompute_cost == 0);
    ck_assert_int_eq(clremat_pareto_marks(&in, &marks, &nm), CLREMAT_OK);
    ck_assert_int_eq(nm, 5 + 4); /* none, full, activations, larger_than, save_dots, res_0..res_3 */
    ck_assert_str_eq(marks[0].label, "none");
    ck_assert_uint_eq(marks[0].peak_bytes, none.peak_bytes);
    ck_assert_str_eq(marks[4].label, "save_dots");
    ck_assert_str_eq(marks[5].label, "list_of_layers:res_0");
    /* each Keras mode is on or above the front: the front reaches down to
     * its peak, and the front's point with the largest peak within the
     * mode's costs no more (marks above none's peak meet the last point,
     * which costs 0) */
    for (int m = 0; m < nm; m++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (pts[i].peak_bytes <= marks[m].peak_bytes)
                best = i;
        ck_assert_msg(best >= 0, "%s: peak %llu below the front's least peak %llu", marks[m].label,
                      (unsigned long long)marks[m].peak_bytes, (unsigned long long)pts[0].peak_bytes);
        ck_assert_msg(pts[best].recompute_cost <= marks[m].recompute_cost * (1 + 1e-9),
                      "%s below the front: peak %llu, cost %g; the front at peak %llu costs %g", marks[m].label,
                      (unsigned long long)marks[m].peak_bytes, marks[m].recompute_cost,
                      (unsigned long long)pts[best].peak_bytes, pts[best].recompute_cost);
    }
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/front.svg", dir);
    ck_assert_int_eq(clremat_pareto_svg(path, "residual <4> & co", "FLOP", pts, n, marks, nm), CLREMAT_OK);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = 0;
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "<?xml"));
    ck_assert_ptr_nonnull(strstr(buf, "<svg"));
    ck_assert_ptr_nonnull(strstr(buf, "residual &lt;4&gt; &amp; co"));
    snprintf(path, sizeof path, "%s/front.svg.tmp", dir);
    ck_assert_int_ne(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/front.svg", dir);
    remove(path);
    snprintf(path, sizeof path, "%s/missing/front.svg", dir);
    ck_assert_int_eq(clremat_pareto_svg(path, NULL, NULL, pts, n, marks, nm), CLREMAT_ERR_IO);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "missing/front.svg"));
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "No such file or directory"));
    rmdir(dir);
    free(pts);
    free(marks);
    clremat_plan_free(&none);
    free(c);
    clremat_graph_free(g);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("budget", 120, &tc);
    tcase_add_test(tc, test_dp_equals_exhaustive_search);
    tcase_add_test(tc, test_generous_budget_is_none);
    tcase_add_test(tc, test_plans_fit_their_budgets);
    tcase_add_test(tc, test_sqrt_never_cheaper);
    tcase_add_test(tc, test_deep_uniform_chain_sqrt_memory);
    tcase_add_test(tc, test_too_small_budget_names_minimum);
    tcase_add_test(tc, test_residual_blocks_are_stages);
    tcase_add_test(tc, test_no_cut_point_fallback);
    tcase_add_test(tc, test_thousand_layer_chain);
    tcase_add_test(tc, test_pareto_front_and_svg);
    return test_run_suite(s);
}
