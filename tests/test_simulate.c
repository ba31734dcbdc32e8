/* test_simulate.c: the memory simulator on its own (planner/simulate.c),
 * no device. Replaying schedule.c's action list of every policy on the
 * planner's test graphs and on random graphs must reproduce schedule.c's
 * masks, allocations and peaks exactly (two independent implementations of
 * the executor's allocation rules), and invalid lists are refused naming
 * the action and the layer. Half the cases add forward and backward
 * workspace to the costs (pg_workspace_costs), and every action's peak must
 * cover its workspace. */
#include "testutil.h"
#include "plangraphs.h"
#include <stdio.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS

static void compare(const clremat_plan *a, const clremat_plan *b, const char *what)
{
    int n = a->n_layers;
    ck_assert_int_eq(b->n_layers, n);
    ck_assert_int_eq(b->n_actions, a->n_actions);
    for (int i = 0; i < a->n_actions; i++) {
        const clremat_action *x = &a->actions[i], *y = &b->actions[i];
        ck_assert_msg(x->kind == y->kind && x->layer == y->layer && x->slot == y->slot, "%s: action %d", what, i);
        ck_assert_msg(x->alloc_slots == y->alloc_slots, "%s: action %d alloc_slots %u vs %u", what, i,
                      x->alloc_slots, y->alloc_slots);
        ck_assert_msg(x->want_din == y->want_din && x->alloc_din == y->alloc_din, "%s: action %d din", what, i);
        ck_assert_msg(x->peak_during == y->peak_during, "%s: action %d peak %llu vs %llu", what, i,
                      (unsigned long long)x->peak_during, (unsigned long long)y->peak_during);
        ck_assert_msg(x->live_after == y->live_after, "%s: action %d live_after", what, i);
    }
    ck_assert_msg(a->peak_bytes == b->peak_bytes, "%s: peak %llu vs %llu", what,
                  (unsigned long long)a->peak_bytes, (unsigned long long)b->peak_bytes);
    ck_assert_uint_eq(a->fixed_bytes, b->fixed_bytes);
    ck_assert_uint_eq(a->param_bytes, b->param_bytes);
    ck_assert_msg(a->kept_act_bytes == b->kept_act_bytes, "%s: kept bytes %llu vs %llu", what,
                  (unsigned long long)a->kept_act_bytes, (unsigned long long)b->kept_act_bytes);
    ck_assert_msg(memcmp(a->kept, b->kept, (size_t)n * S) == 0, "%s: kept masks differ", what);
    ck_assert_msg(memcmp(a->recomputes, b->recomputes, sizeof(int) * (size_t)n) == 0, "%s: recomputes", what);
    /* the simulator's wrapped_layer: RECOMPUTEd at least once; schedule.c's
     * is the wrap flags, and it skips recomputations nothing needs */
    for (int l = 0; l < n; l++) {
        int rec = 0;
        for (int i = 0; i < b->n_actions; i++)
            rec |= b->actions[i].kind == CLREMAT_ACT_RECOMPUTE && b->actions[i].layer == l;
        ck_assert_msg(b->wrapped_layer[l] == rec, "%s: wrapped_layer[%d]", what, l);
        ck_assert_msg(!rec || a->wrapped_layer[l], "%s: layer %d recomputed but not wrapped", what, l);
    }
    ck_assert(a->recompute_flops == b->recompute_flops);
    ck_assert(a->step_flops == b->step_flops);
    ck_assert_int_eq(a->n_recompute_actions, b->n_recompute_actions);
    ck_assert_int_eq(a->n_fused_act_reads, b->n_fused_act_reads);
}

/* Each forward, recompute and backward action's peak covers its workspace,
 * counted independently of both simulators: at least the live bytes before
 * it plus the workspace (frees lower the live bytes; they are not checked). */
static void check_workspace(const clremat_plan *a, const clremat_layer_cost *c, const char *what)
{
    uint64_t before = a->fixed_bytes;
    for (int i = 0; i < a->n_actions; i++) {
        const clremat_action *x = &a->actions[i];
        size_t ws = x->kind == CLREMAT_ACT_BACKWARD ? c[x->layer].bwd_temp_bytes
                  : x->kind == CLREMAT_ACT_FORWARD || x->kind == CLREMAT_ACT_RECOMPUTE ? c[x->layer].fwd_temp_bytes
                  : 0;
        if (x->kind == CLREMAT_ACT_BACKWARD || x->kind == CLREMAT_ACT_FORWARD || x->kind == CLREMAT_ACT_RECOMPUTE)
            ck_assert_msg(x->peak_during >= before + ws, "%s: action %d (layer %d) peak %llu < %llu live + %zu "
                          "workspace", what, i, x->layer, (unsigned long long)x->peak_during,
                          (unsigned long long)before, ws);
        before = x->live_after;
    }
}

/* Plans mode with schedule.c, replays its actions, compares. */
static void replay(const clremat_graph *g, const clremat_layer_cost *c, const char *mode)
{
    clremat_plan_input in = {.g = g, .batch = 4, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    clremat_policy pol;
    clremat_plan a, b;
    char what[160];
    ck_assert_int_eq(clremat_policy_parse(mode, &pol), CLREMAT_OK);
    ck_assert_msg(clremat_plan_build(&in, &pol, &a) == CLREMAT_OK, "%s on %s: %s", mode, g->name,
                  clremat_last_error());
    snprintf(what, sizeof what, "%s on %s", mode, g->name);
    ck_assert_msg(clremat_plan_from_actions(&in, a.actions, a.n_actions, &pol, &b) == CLREMAT_OK, "%s: %s", what,
                  clremat_last_error());
    compare(&a, &b, what);
    check_workspace(&a, c, what);
    ck_assert_str_eq(b.policy.text, mode);
    clremat_plan_free(&a);
    clremat_plan_free(&b);
}

static void replay_all_modes(clremat_graph *g)
{
    static const char *const modes[] = {"none", "full", "activations", "larger_than", "larger_than:0",
                                        "larger_than:100"};
    clremat_layer_cost *c = calloc((size_t)g->n_layers, sizeof *c);
    char mode[128];
    for (int ws = 0; ws < 2; ws++) { /* without and with forward and backward workspace */
        pg_fake_costs(g, 4, c);
        if (ws)
            pg_workspace_costs(g, 4, c);
        for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
            replay(g, c, modes[i]);
        for (int l = 0; l < g->n_layers - 1; l++) {
            snprintf(mode, sizeof mode, "list_of_layers:%s", g->layers[l].name);
            replay(g, c, mode);
        }
        for (int b = 0; b < g->n_blocks; b++) {
            snprintf(mode, sizeof mode, "list_of_layers:%s", g->blocks[b].name);
            replay(g, c, mode);
        }
    }
    free(c);
    clremat_graph_free(g);
}

START_TEST(test_replays_planner_graphs)
{
    replay_all_modes(pg_chain());
    replay_all_modes(pg_acts());
    replay_all_modes(pg_boundary());
    replay_all_modes(pg_nested(0));
    replay_all_modes(pg_nested(1));
    replay_all_modes(pg_deep(12, 16));
    replay_all_modes(pg_residual(3, 8));
}
END_TEST

START_TEST(test_replays_random_graphs)
{
    pg_rng r = {20240601};
    for (int it = 0; it < 150; it++) {
        clremat_graph *g = pg_random(&r);
        clremat_layer_cost *c = calloc((size_t)g->n_layers, sizeof *c);
        char mode[256];
        int off;
        pg_fake_costs(g, 4, c);
        if (it % 2) /* half the graphs with workspace */
            pg_workspace_costs(g, 4, c);
        replay(g, c, "none");
        replay(g, c, "full");
        replay(g, c, "activations");
        snprintf(mode, sizeof mode, "larger_than:%d", pg_int(&r, 0, 80));
        replay(g, c, mode);
        /* a random list of layers and blocks */
        off = snprintf(mode, sizeof mode, "list_of_layers:%s", g->layers[pg_int(&r, 0, g->n_layers - 2)].name);
        for (int k = pg_int(&r, 0, 3); k > 0 && off < 200; k--) {
            if (g->n_blocks > 0 && pg_int(&r, 0, 1))
                off += snprintf(mode + off, sizeof mode - (size_t)off, ",%s",
                                g->blocks[pg_int(&r, 0, g->n_blocks - 1)].name);
            else
                off += snprintf(mode + off, sizeof mode - (size_t)off, ",%s",
                                g->layers[pg_int(&r, 0, g->n_layers - 2)].name);
        }
        replay(g, c, mode);
        free(c);
        clremat_graph_free(g);
    }
}
END_TEST

/* The none plan of the chain as bare actions, for corrupting. */
static int bare_none(const clremat_graph *g, const clremat_layer_cost *c, clremat_action **out)
{
    clremat_plan_input in = {.g = g, .batch = 4, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    clremat_policy pol;
    clremat_plan p;
    int n;
    ck_assert_int_eq(clremat_policy_parse("none", &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_plan_build(&in, &pol, &p), CLREMAT_OK);
    n = p.n_actions;
    *out = calloc((size_t)n + 4, sizeof **out);
    for (int i = 0; i < n; i++) {
        (*out)[i].kind = p.actions[i].kind;
        (*out)[i].layer = p.actions[i].layer;
        (*out)[i].slot = p.actions[i].slot;
    }
    clremat_plan_free(&p);
    return n;
}

static int find(const clremat_action *a, int n, clremat_action_kind k, int layer)
{
    for (int i = 0; i < n; i++)
        if (a[i].kind == k && a[i].layer == layer)
            return i;
    return -1;
}

static void remove_at(clremat_action *a, int *n, int i)
{
    memmove(a + i, a + i + 1, sizeof *a * (size_t)(*n - i - 1));
    (*n)--;
}

static void expect_bad(const clremat_graph *g, const clremat_layer_cost *c, clremat_action *a, int n,
                       const char *must1, const char *must2)
{
    clremat_plan_input in = {.g = g, .batch = 4, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    clremat_plan p;
    ck_assert_int_eq(clremat_plan_from_actions(&in, a, n, NULL, &p), CLREMAT_ERR_PLAN);
    ck_assert_msg(strstr(clremat_last_error(), must1) != NULL, "'%s' not in: %s", must1, clremat_last_error());
    if (must2)
        ck_assert_msg(strstr(clremat_last_error(), must2) != NULL, "'%s' not in: %s", must2, clremat_last_error());
    ck_assert_ptr_null(p.actions);
}

START_TEST(test_rejects_invalid_lists)
{
    clremat_graph *g = pg_chain();
    clremat_layer_cost c[8];
    clremat_plan_input in = {.g = g, .batch = 4, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    clremat_action *a;
    clremat_plan p;
    int n, i, d1 = clremat_graph_find_layer(g, "d1"), d2 = clremat_graph_find_layer(g, "d2");
    pg_fake_costs(g, 4, c);

    n = bare_none(g, c, &a);
    ck_assert_int_eq(clremat_plan_from_actions(&in, a, n, NULL, &p), CLREMAT_OK);
    clremat_plan_free(&p);

    /* a forward whose input was never computed */
    i = find(a, n, CLREMAT_ACT_FORWARD, d1);
    remove_at(a, &n, i);
    expect_bad(g, c, a, n, "action 1 (forward of layer 'd2')", "input 'd1'");
    free(a);

    /* backwards out of order */
    n = bare_none(g, c, &a);
    {
        int x = find(a, n, CLREMAT_ACT_BACKWARD, d2), y = find(a, n, CLREMAT_ACT_BACKWARD, d1);
        clremat_action t = a[x];
        a[x] = a[y];
        a[y] = t;
        char want[64];
        snprintf(want, sizeof want, "action %d (backward of layer 'd1')", x);
        expect_bad(g, c, a, n, want, "reverse layer order");
    }
    free(a);

    /* a saved tensor freed before its backward */
    n = bare_none(g, c, &a);
    i = find(a, n, CLREMAT_ACT_BACKWARD, d2);
    memmove(a + i + 1, a + i, sizeof *a * (size_t)(n - i));
    a[i].kind = CLREMAT_ACT_FREE;
    a[i].layer = d2;
    a[i].slot = 1;
    n++;
    expect_bad(g, c, a, n, "backward of layer 'd2'", "saved slot");
    free(a);

    /* something left live at the end */
    n = bare_none(g, c, &a);
    i = find(a, n, CLREMAT_ACT_FREE, d1);
    remove_at(a, &n, i);
    expect_bad(g, c, a, n, "still live", "'d1'");
    free(a);

    /* the loss value freed before the update */
    n = bare_none(g, c, &a);
    {
        clremat_action t = a[n - 1]; /* FREE loss */
        a[n - 1] = a[n - 2];         /* UPDATE */
        a[n - 2] = t;
        expect_bad(g, c, a, n, "loss value", "'loss'");
    }
    free(a);

    /* a layer's backward twice, a forward twice */
    n = bare_none(g, c, &a);
    i = find(a, n, CLREMAT_ACT_BACKWARD, d2);
    memmove(a + i + 1, a + i, sizeof *a * (size_t)(n - i));
    n++;
    expect_bad(g, c, a, n, "backward of layer 'd2'", "already ran");
    free(a);
    n = bare_none(g, c, &a);
    i = find(a, n, CLREMAT_ACT_FORWARD, d1);
    memmove(a + i + 1, a + i, sizeof *a * (size_t)(n - i));
    n++;
    expect_bad(g, c, a, n, "forward of layer 'd1'", "RECOMPUTE");
    free(a);

    /* no update; a layer never going backward */
    n = bare_none(g, c, &a);
    remove_at(a, &n, find(a, n, CLREMAT_ACT_UPDATE, -1));
    expect_bad(g, c, a, n, "the loss value is read by the update", NULL);
    n--; /* without the final FREE of the loss either */
    expect_bad(g, c, a, n, "has no UPDATE", NULL);
    free(a);
    n = bare_none(g, c, &a);
    i = find(a, n, CLREMAT_ACT_BACKWARD, 0);
    remove_at(a, &n, i); /* the backward of d0 */
    remove_at(a, &n, i); /* and its FREE_GRAD */
    expect_bad(g, c, a, n, "update before the backward of 'd0'", NULL);
    free(a);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_fixed_bytes_and_kept)
{
    clremat_graph *g = pg_chain();
    clremat_layer_cost c[8];
    clremat_plan_input in = {.g = g, .batch = 8, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    uint64_t params;
    pg_fake_costs(g, 8, c);
    ck_assert_uint_eq(clremat_plan_fixed_bytes(&in, &params),
                      params * 4 + 8 * 16 * 4 + 8 * 4 + 8);
    ck_assert_uint_eq(params, (uint64_t)clremat_graph_param_elems(g) * 4);
    clremat_graph_free(g);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("simulate", 120, &tc);
    tcase_add_test(tc, test_replays_planner_graphs);
    tcase_add_test(tc, test_replays_random_graphs);
    tcase_add_test(tc, test_rejects_invalid_lists);
    tcase_add_test(tc, test_fixed_bytes_and_kept);
    return test_run_suite(s);
}
