/* test_overlap_plan.c: the overlapped plan (planner/overlap.c) without a
 * device, on every bundled model and remat mode: the same actions in the
 * same order as the sequential plan, hence the same predicted peak to the
 * byte (overlap costs no memory), and well-formed queue flags: every run on
 * the recompute queue is recompute work opened by a marker and closed by a
 * join before anything needs its results. */
#include "testutil.h"
#include "testmodel.h"
#include "executor.h"
#include <stdio.h>
#include <string.h>

typedef struct model_case {
    const char *file;
    const char *block;      /* a block name for list_of_layers (NULL: none) */
    const char *layer;      /* a layer name for list_of_layers */
    int overlaps_full;      /* full mode overlaps at least one run */
} model_case;

static const model_case models[] = {
    {"mlp_deep.json", NULL, "dense_5", 1},
    {"transformer.json", "encoder_block", "encoder_block_1/attn", 1},
    {"resnet_mlp.json", "res_block", "res_block_2/d1", 1},
    {"regression.json", NULL, "h2", 1},
};
#define N_MODELS (sizeof models / sizeof models[0])

/* Checks the queue flags of an overlapped plan; returns the runs moved. */
static int check_flags(const clremat_plan *p, const char *what)
{
    int runs = 0, open = 0; /* open: a marker seen since the last join */
    for (int i = 0; i < p->n_actions; i++) {
        const clremat_action *a = &p->actions[i];
        if (a->join) {
            ck_assert_msg(i > 0 && p->actions[i - 1].queue == 1, "%s: join at %d after no recompute run", what, i);
            ck_assert_msg(a->queue == 0, "%s: join on the recompute queue at %d", what, i);
            open = 0;
        }
        if (a->marker) {
            ck_assert_msg(a->queue == 0 && a->kind == CLREMAT_ACT_BACKWARD, "%s: marker at %d on a %s", what, i,
                          clremat_action_name(a->kind));
            open = 1;
        }
        if (a->queue == 1) {
            ck_assert_msg(a->kind == CLREMAT_ACT_RECOMPUTE || a->kind == CLREMAT_ACT_FREE,
                          "%s: %s at %d on the recompute queue", what, clremat_action_name(a->kind), i);
            ck_assert_msg(open, "%s: recompute-queue action %d without a marker before it", what, i);
            ck_assert_msg(i + 1 < p->n_actions, "%s: recompute run at the end", what);
            if (p->actions[i + 1].queue == 0) {
                ck_assert_msg(p->actions[i + 1].join, "%s: no join after the recompute run ending at %d", what, i);
                runs++;
            }
            if (i == 0 || p->actions[i - 1].queue == 0)
                ck_assert_msg(p->actions[i].kind == CLREMAT_ACT_RECOMPUTE, "%s: run at %d starts with a free", what, i);
        }
    }
    ck_assert_msg(!open, "%s: a marker without a join", what);
    return runs;
}

static void compare(const clremat_graph *g, const char *file, const char *mode, int must_overlap)
{
    clremat_policy pol;
    clremat_plan seq, ovl;
    char what[256];
    int runs;
    snprintf(what, sizeof what, "%s %s", file, mode);
    ck_assert_int_eq(clremat_policy_parse(mode, &pol), CLREMAT_OK);
    ck_assert_msg(clremat_plan_for_ctx(NULL, g, 8, &pol, 2, 0, NULL, 0, &seq, NULL, NULL, NULL) == CLREMAT_OK, "%s: %s",
                  what, clremat_last_error());
    ck_assert_msg(clremat_plan_for_ctx(NULL, g, 8, &pol, 2, 0, NULL, 1, &ovl, NULL, NULL, NULL) == CLREMAT_OK, "%s: %s",
                  what, clremat_last_error());
    ck_assert(ovl.overlap && !seq.overlap);
    ck_assert_msg(ovl.peak_bytes == seq.peak_bytes, "%s: overlapped peak %llu, sequential %llu", what,
                  (unsigned long long)ovl.peak_bytes, (unsigned long long)seq.peak_bytes);
    ck_assert_int_eq(ovl.n_actions, seq.n_actions);
    for (int i = 0; i < seq.n_actions; i++) {
        const clremat_action *a = &seq.actions[i], *b = &ovl.actions[i];
        ck_assert_msg(a->kind == b->kind && a->layer == b->layer && a->slot == b->slot &&
                          a->alloc_slots == b->alloc_slots && a->want_din == b->want_din &&
                          a->alloc_din == b->alloc_din && a->peak_during == b->peak_during &&
                          a->live_after == b->live_after,
                      "%s: action %d differs (%s %d vs %s %d)", what, i, clremat_action_name(a->kind), a->layer,
                      clremat_action_name(b->kind), b->layer);
        ck_assert(!a->queue && !a->marker && !a->join);
    }
    ck_assert_uint_eq(ovl.fixed_bytes, seq.fixed_bytes);
    ck_assert(ovl.recompute_flops == seq.recompute_flops);
    runs = check_flags(&ovl, what);
    ck_assert_int_eq(runs, ovl.n_overlapped);
    if (must_overlap)
        ck_assert_msg(ovl.n_overlapped > 0, "%s: nothing overlapped", what);
    clremat_plan_free(&seq);
    clremat_plan_free(&ovl);
}

START_TEST(test_overlap_same_actions_same_peak)
{
    const model_case *m = &models[_i];
    clremat_graph *g = test_load_model(m->file);
    char mode[128];
    compare(g, m->file, "none", 0);
    compare(g, m->file, "full", m->overlaps_full);
    compare(g, m->file, "activations", 0);
    compare(g, m->file, "larger_than:1024", 0);
    if (m->block) {
        snprintf(mode, sizeof mode, "list_of_layers:%s", m->block);
        compare(g, m->file, mode, 1);
    }
    snprintf(mode, sizeof mode, "list_of_layers:%s", m->layer);
    compare(g, m->file, mode, 0);
    {
        clremat_policy none, full;
        clremat_plan pn, pf;
        clremat_policy_parse("none", &none);
        clremat_policy_parse("full", &full);
        ck_assert_int_eq(clremat_plan_for(g, 8, &none, 2, 0, NULL, &pn, NULL), CLREMAT_OK);
        ck_assert_int_eq(clremat_plan_for(g, 8, &full, 2, 0, NULL, &pf, NULL), CLREMAT_OK);
        snprintf(mode, sizeof mode, "budget:%llu", (unsigned long long)(pn.peak_bytes + pf.peak_bytes) / 2);
        compare(g, m->file, mode, 0);
        clremat_plan_free(&pn);
        clremat_plan_free(&pf);
    }
    clremat_graph_free(g);
}
END_TEST

/* A recomputation that rewrites a live tensor (a slot it does not allocate)
 * the backward before it reads stays sequential; allocating every slot, it
 * overlaps. Hand-made actions on mlp_deep (dense_2 reads dense_1). */
START_TEST(test_overlap_refuses_live_rewrite)
{
    clremat_graph *g = test_load_model("mlp_deep.json");
    clremat_layer_cost costs[64];
    clremat_plan_input in = {.g = g, .batch = 8, .costs = costs, .opt_states = 2, .scratch_bytes = 8};
    clremat_action acts[4];
    clremat_plan p;
    int d1 = clremat_graph_find_layer(g, "dense_1"), d2 = clremat_graph_find_layer(g, "dense_2");
    ck_assert_int_ge(d1, 0);
    ck_assert_int_le(g->n_layers, 64);
    for (int l = 0; l < g->n_layers; l++)
        ck_assert_int_eq(clremat_layer_cost_of(g, l, 8, &costs[l]), CLREMAT_OK);
    ck_assert_int_eq(costs[d1].n_slots, 2); /* output and pre-activation */
    for (int k = 0; k < 2; k++) {
        memset(acts, 0, sizeof acts);
        memset(&p, 0, sizeof p);
        acts[0] = (clremat_action){.kind = CLREMAT_ACT_BACKWARD, .layer = d2};
        acts[1] = (clremat_action){.kind = CLREMAT_ACT_RECOMPUTE, .layer = d1, .alloc_slots = k ? 3u : 2u};
        acts[2] = (clremat_action){.kind = CLREMAT_ACT_BACKWARD, .layer = d1};
        acts[3] = (clremat_action){.kind = CLREMAT_ACT_UPDATE, .layer = -1};
        p.actions = acts;
        p.n_actions = 4;
        ck_assert_int_eq(clremat_plan_overlap(&in, &p), CLREMAT_OK);
        ck_assert_int_eq(p.n_overlapped, k);
        ck_assert_int_eq(acts[1].queue, k);
        ck_assert_int_eq(acts[0].marker, k);
        ck_assert_int_eq(acts[2].join, k);
    }
    clremat_graph_free(g);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("overlap_plan", 60, &tc);
    tcase_add_loop_test(tc, test_overlap_same_actions_same_peak, 0, (int)N_MODELS);
    tcase_add_test(tc, test_overlap_refuses_live_rewrite);
    return test_run_suite(s);
}
