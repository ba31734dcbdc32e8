/* test_planner.c: the planner on hand-built graphs with hand-written costs,
 * no device: which tensors each remat mode keeps or discards (nested blocks,
 * the larger_than boundary, unknown names, "remat": true blocks), and the
 * memory simulator's bookkeeping. */
#include "testutil.h"
#include "plan.h"
#include <stdio.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS

static clremat_layer dense(const char *name, int64_t units, clremat_act act)
{
    clremat_layer l;
    memset(&l, 0, sizeof l);
    snprintf(l.name, sizeof l.name, "%s", name);
    l.type = CLREMAT_DENSE;
    l.units = units;
    l.act = act;
    l.use_bias = 1;
    return l;
}

static clremat_layer simple(const char *name, clremat_layer_type type)
{
    clremat_layer l;
    memset(&l, 0, sizeof l);
    snprintf(l.name, sizeof l.name, "%s", name);
    l.type = type;
    l.act = type == CLREMAT_ACTIVATION ? CLREMAT_ACT_RELU : CLREMAT_ACT_NONE;
    return l;
}

/* Costs written by hand from the layer semantics (independent of backend/). */
static void fake_costs(const clremat_graph *g, int64_t batch, clremat_layer_cost *c)
{
    for (int l = 0; l < g->n_layers; l++) {
        const clremat_layer *L = &g->layers[l];
        size_t out = (size_t)(batch * clremat_shape_elems(&L->out_shape)) * 4;
        memset(&c[l], 0, sizeof c[l]);
        c[l].n_slots = 1;
        c[l].slot_bytes[0] = out ? out : 8;
        c[l].act_source = -1;
        c[l].fwd_flops = (double)out;
        c[l].bwd_flops = 2.0 * (double)out;
        switch (L->type) {
        case CLREMAT_DENSE:
            c[l].bwd_needs_inputs = 1;
            if (L->act != CLREMAT_ACT_NONE) {
                c[l].n_slots = 2;
                c[l].slot_bytes[1] = out;
                c[l].bwd_needs_slots = 2;
                c[l].act_source = 1;
            }
            break;
        case CLREMAT_ACTIVATION:
            c[l].bwd_needs_inputs = 1;
            c[l].act_source = 0;
            c[l].act_from_input = 1;
            break;
        case CLREMAT_SOFTMAX_CE:
        case CLREMAT_MSE:
            c[l].slot_bytes[0] = 8;
            c[l].bwd_needs_inputs = 1;
            c[l].fwd_temp_bytes = (size_t)batch * 4;
            break;
        default:
            break;
        }
    }
}

static void add(clremat_graph *g, clremat_layer l)
{
    ck_assert_msg(clremat_graph_add_layer(g, &l) == CLREMAT_OK, "add %s: %s", l.name, g->error);
}

/* input [16] -> d0 gelu -> d1 gelu -> d2 gelu -> d3 (logits 4) -> loss */
static clremat_graph *chain(void)
{
    clremat_graph *g = clremat_graph_new("chain");
    clremat_shape in = {1, {16}};
    clremat_graph_set_input(g, &in, 0);
    add(g, dense("d0", 32, CLREMAT_ACT_GELU_TANH));
    add(g, dense("d1", 32, CLREMAT_ACT_GELU_TANH));
    add(g, dense("d2", 32, CLREMAT_ACT_GELU_TANH));
    add(g, dense("d3", 4, CLREMAT_ACT_NONE));
    add(g, simple("loss", CLREMAT_SOFTMAX_CE));
    ck_assert_msg(clremat_graph_finalize(g) == CLREMAT_OK, "%s", g->error);
    return g;
}

static int plan_mode(clremat_graph *g, int64_t batch, const char *mode, clremat_plan *p, clremat_layer_cost *c)
{
    clremat_policy pol;
    clremat_plan_input in = {g, batch, c, 2, 8, NULL};
    fake_costs(g, batch, c);
    ck_assert_int_eq(clremat_policy_parse(mode, &pol), CLREMAT_OK);
    return clremat_plan_build(&in, &pol, p);
}

/* Checks the simulator's own bookkeeping. */
static void check_sim(const clremat_plan *p)
{
    uint64_t peak = p->fixed_bytes;
    for (int i = 0; i < p->n_actions; i++) {
        ck_assert_uint_ge(p->actions[i].peak_during, p->actions[i].live_after);
        if (p->actions[i].peak_during > peak)
            peak = p->actions[i].peak_during;
    }
    ck_assert_uint_eq(peak, p->peak_bytes);
    ck_assert_uint_eq(p->actions[p->n_actions - 1].live_after, p->fixed_bytes);
}

static int count_actions(const clremat_plan *p, clremat_action_kind k, int layer)
{
    int n = 0;
    for (int i = 0; i < p->n_actions; i++)
        if (p->actions[i].kind == k && (layer < 0 || p->actions[i].layer == layer))
            n++;
    return n;
}

START_TEST(test_none_keeps_everything_needed)
{
    clremat_graph *g = chain();
    clremat_layer_cost c[8];
    clremat_plan p;
    ck_assert_int_eq(plan_mode(g, 8, "none", &p, c), CLREMAT_OK);
    check_sim(&p);
    for (int l = 0; l < 3; l++) {
        ck_assert(p.kept[l * S + 0]); /* d_l output: input of the next dense */
        ck_assert(p.kept[l * S + 1]); /* preact: the gelu derivative needs it */
    }
    ck_assert_int_eq(p.n_recompute_actions, 0);
    ck_assert(p.recompute_flops == 0);
    ck_assert_int_eq(count_actions(&p, CLREMAT_ACT_BACKWARD, -1), g->n_layers);
    ck_assert_int_eq(count_actions(&p, CLREMAT_ACT_UPDATE, -1), 1);
    /* fixed = params (x (1 + grad + 2 adam states)) + batch + labels + scratch */
    ck_assert_uint_eq(p.fixed_bytes, p.param_bytes * 4 + 8 * 16 * 4 + 8 * 4 + 8);
    clremat_plan_free(&p);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_full_discards_internals_keeps_inputs)
{
    clremat_graph *g = chain();
    clremat_layer_cost c[8];
    clremat_plan pn, pf;
    ck_assert_int_eq(plan_mode(g, 8, "none", &pn, c), CLREMAT_OK);
    ck_assert_int_eq(plan_mode(g, 8, "full", &pf, c), CLREMAT_OK);
    check_sim(&pf);
    for (int l = 0; l < 3; l++) {
        ck_assert(pf.kept[l * S + 0]);  /* inputs of the next wrapped unit */
        ck_assert(!pf.kept[l * S + 1]); /* internals discarded */
        ck_assert_int_eq(pf.recomputes[l], 1);
        ck_assert_int_eq(count_actions(&pf, CLREMAT_ACT_RECOMPUTE, l), 1);
    }
    ck_assert_int_eq(pf.recomputes[4], 0); /* the loss is never wrapped */
    ck_assert_uint_lt(pf.kept_act_bytes, pn.kept_act_bytes);
    ck_assert_uint_le(pf.peak_bytes, pn.peak_bytes);
    ck_assert(pf.recompute_flops > 0);
    clremat_plan_free(&pn);
    clremat_plan_free(&pf);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_activations_mode)
{
    clremat_graph *g = clremat_graph_new("acts");
    clremat_shape in = {1, {16}};
    clremat_layer_cost c[8];
    clremat_plan p;
    clremat_graph_set_input(g, &in, 0);
    add(g, dense("d0", 32, CLREMAT_ACT_GELU_TANH));
    add(g, dense("d1", 32, CLREMAT_ACT_NONE));
    add(g, simple("act", CLREMAT_ACTIVATION));
    add(g, dense("d2", 4, CLREMAT_ACT_NONE));
    add(g, simple("loss", CLREMAT_SOFTMAX_CE));
    ck_assert_msg(clremat_graph_finalize(g) == CLREMAT_OK, "%s", g->error);
    ck_assert_int_eq(plan_mode(g, 4, "activations", &p, c), CLREMAT_OK);
    check_sim(&p);
    ck_assert(!p.kept[0 * S + 0]);  /* d0's gelu output: recomputed */
    ck_assert(p.kept[0 * S + 1]);   /* d0's pre-activation: kept */
    ck_assert(p.kept[1 * S + 0]);   /* d1 (no activation) output: the act layer's input */
    ck_assert(!p.kept[2 * S + 0]);  /* the activation layer's output */
    ck_assert_int_eq(count_actions(&p, CLREMAT_ACT_RECOMPUTE_ACT, 0), 1);
    ck_assert_int_eq(count_actions(&p, CLREMAT_ACT_RECOMPUTE_ACT, 2), 1);
    ck_assert_int_eq(count_actions(&p, CLREMAT_ACT_RECOMPUTE, -1), 0);
    clremat_plan_free(&p);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_larger_than_boundary)
{
    /* batch 1: d_eq has exactly 40 output elements, d_more 41 */
    clremat_graph *g = clremat_graph_new("boundary");
    clremat_shape in = {1, {8}};
    clremat_layer_cost c[8];
    clremat_plan p;
    clremat_graph_set_input(g, &in, 0);
    add(g, dense("d_eq", 40, CLREMAT_ACT_RELU));
    add(g, dense("d_more", 41, CLREMAT_ACT_RELU));
    add(g, dense("d_out", 3, CLREMAT_ACT_NONE));
    add(g, simple("loss", CLREMAT_SOFTMAX_CE));
    ck_assert_msg(clremat_graph_finalize(g) == CLREMAT_OK, "%s", g->error);
    ck_assert_int_eq(plan_mode(g, 1, "larger_than:40", &p, c), CLREMAT_OK);
    ck_assert(!p.wrapped_layer[0]);
    ck_assert(p.wrapped_layer[1]);
    ck_assert(!p.wrapped_layer[2]);
    ck_assert(p.kept[0 * S + 1]);   /* N elements: not wrapped, internals kept */
    ck_assert(!p.kept[1 * S + 1]);  /* N+1 elements: wrapped */
    ck_assert_int_eq(p.recomputes[1], 1);
    clremat_plan_free(&p);
    /* batch counts: at batch 2 both exceed 40 */
    ck_assert_int_eq(plan_mode(g, 2, "larger_than:40", &p, c), CLREMAT_OK);
    ck_assert(p.wrapped_layer[0] && p.wrapped_layer[1]);
    clremat_plan_free(&p);
    clremat_graph_free(g);
}
END_TEST

/* input -> pre -> block outer { d_a, block inner { d_b, d_c }, d_d } -> head -> loss */
static clremat_graph *nested(int inner_remat)
{
    clremat_graph *g = clremat_graph_new("nested");
    clremat_shape in = {1, {8}};
    clremat_graph_set_input(g, &in, 0);
    add(g, dense("pre", 16, CLREMAT_ACT_RELU));
    ck_assert_int_eq(clremat_graph_begin_block(g, "outer", 0), CLREMAT_OK);
    add(g, dense("d_a", 16, CLREMAT_ACT_RELU));
    ck_assert_int_eq(clremat_graph_begin_block(g, "inner", inner_remat), CLREMAT_OK);
    add(g, dense("d_b", 16, CLREMAT_ACT_RELU));
    add(g, dense("d_c", 16, CLREMAT_ACT_RELU));
    ck_assert_int_eq(clremat_graph_end_block(g), CLREMAT_OK);
    add(g, dense("d_d", 16, CLREMAT_ACT_RELU));
    ck_assert_int_eq(clremat_graph_end_block(g), CLREMAT_OK);
    add(g, dense("head", 3, CLREMAT_ACT_NONE));
    add(g, simple("loss", CLREMAT_SOFTMAX_CE));
    ck_assert_msg(clremat_graph_finalize(g) == CLREMAT_OK, "%s", g->error);
    return g;
}

START_TEST(test_list_of_layers_block_and_nesting)
{
    clremat_graph *g = nested(0);
    clremat_layer_cost c[12];
    clremat_plan p;
    int pre = clremat_graph_find_layer(g, "pre"), da = clremat_graph_find_layer(g, "d_a");
    int db = clremat_graph_find_layer(g, "d_b"), dd = clremat_graph_find_layer(g, "d_d");
    ck_assert_int_ge(db, 0);
    ck_assert_int_eq(plan_mode(g, 2, "list_of_layers:outer", &p, c), CLREMAT_OK);
    check_sim(&p);
    ck_assert(p.kept[pre * S + 0]);             /* the block's input */
    for (int l = da; l <= dd; l++) {
        ck_assert(!p.kept[l * S + 1]);
        ck_assert(l == dd || !p.kept[l * S + 0]); /* only what leaves the block (d_d -> head) */
        ck_assert_int_eq(p.recomputes[l], 1);
    }
    ck_assert(p.kept[dd * S + 0]);              /* head (unwrapped) saves its input */
    clremat_plan_free(&p);

    /* full: the outer block is wrapped, and the inner one again inside the recomputation */
    ck_assert_int_eq(plan_mode(g, 2, "full", &p, c), CLREMAT_OK);
    check_sim(&p);
    ck_assert_int_eq(p.recomputes[da], 2);      /* block rerun + its own wrap */
    ck_assert_int_eq(p.recomputes[db], 3);      /* outer, inner, and the layer itself */
    clremat_plan_free(&p);

    /* a layer name */
    ck_assert_int_eq(plan_mode(g, 2, "list_of_layers:d_a", &p, c), CLREMAT_OK);
    ck_assert_int_eq(p.recomputes[da], 1);
    ck_assert_int_eq(p.recomputes[db], 0);
    clremat_plan_free(&p);

    /* an unknown name lists the names there are */
    ck_assert_int_eq(plan_mode(g, 2, "list_of_layers:outer,nope", &p, c), CLREMAT_ERR_PLAN);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "'nope'"));
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "d_b"));
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "inner (block)"));
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_remat_block_always_wrapped)
{
    clremat_graph *g = nested(1);
    clremat_layer_cost c[12];
    clremat_plan p;
    int db = clremat_graph_find_layer(g, "d_b"), da = clremat_graph_find_layer(g, "d_a");
    ck_assert_int_eq(plan_mode(g, 2, "none", &p, c), CLREMAT_OK);
    check_sim(&p);
    ck_assert_int_eq(p.recomputes[db], 1);
    ck_assert_int_eq(p.recomputes[da], 0);
    ck_assert(!p.kept[db * S + 1]);
    ck_assert(p.kept[da * S + 0]);              /* the inner block's input */
    clremat_plan_free(&p);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_policy_parse_errors)
{
    clremat_policy p;
    ck_assert_int_eq(clremat_policy_parse("larger_than", &p), CLREMAT_OK);
    ck_assert_int_eq(p.threshold, 1024);
    ck_assert_int_eq(clremat_policy_parse("larger_than:7", &p), CLREMAT_OK);
    ck_assert_int_eq(p.threshold, 7);
    ck_assert_int_eq(clremat_policy_parse("larger_than:x", &p), CLREMAT_ERR_PLAN);
    ck_assert_int_eq(clremat_policy_parse("bogus", &p), CLREMAT_ERR_PLAN);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "valid modes"));
    ck_assert_int_eq(clremat_policy_parse("list_of_layers:", &p), CLREMAT_ERR_PLAN);
    ck_assert_int_eq(clremat_policy_parse("list_of_layers:a,,b", &p), CLREMAT_ERR_PLAN);
    ck_assert_int_eq(clremat_policy_parse("list_of_layers:a,b", &p), CLREMAT_OK);
    ck_assert_int_eq(p.n_names, 2);
    ck_assert_str_eq(p.names[1], "b");
    ck_assert_int_eq(clremat_policy_parse("budget:64MiB", &p), CLREMAT_OK);
    ck_assert_uint_eq(p.budget, 64ull << 20);
    ck_assert_int_eq(clremat_policy_parse("budget:lots", &p), CLREMAT_ERR_PLAN);
}
END_TEST

START_TEST(test_deep_chain_full_lowers_peak)
{
    clremat_graph *g = clremat_graph_new("deep");
    clremat_shape in = {1, {64}};
    clremat_layer_cost *c;
    clremat_plan pn, pf;
    char name[32];
    clremat_graph_set_input(g, &in, 0);
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof name, "d%d", i);
        add(g, dense(name, 64, CLREMAT_ACT_GELU_TANH));
    }
    add(g, dense("head", 4, CLREMAT_ACT_NONE));
    add(g, simple("loss", CLREMAT_SOFTMAX_CE));
    ck_assert_msg(clremat_graph_finalize(g) == CLREMAT_OK, "%s", g->error);
    c = calloc((size_t)g->n_layers, sizeof *c);
    ck_assert_int_eq(plan_mode(g, 64, "none", &pn, c), CLREMAT_OK);
    ck_assert_int_eq(plan_mode(g, 64, "full", &pf, c), CLREMAT_OK);
    check_sim(&pn);
    check_sim(&pf);
    /* none keeps 40 x (output + preact); full keeps 40 outputs */
    ck_assert_uint_eq(pn.kept_act_bytes - pf.kept_act_bytes, 40u * 64 * 64 * 4);
    ck_assert_uint_lt(pf.peak_bytes, pn.peak_bytes);
    clremat_plan_free(&pn);
    clremat_plan_free(&pf);
    free(c);
    clremat_graph_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("planner");
    TCase *tc = tcase_create("planner");
    tcase_add_test(tc, test_none_keeps_everything_needed);
    tcase_add_test(tc, test_full_discards_internals_keeps_inputs);
    tcase_add_test(tc, test_activations_mode);
    tcase_add_test(tc, test_larger_than_boundary);
    tcase_add_test(tc, test_list_of_layers_block_and_nesting);
    tcase_add_test(tc, test_remat_block_always_wrapped);
    tcase_add_test(tc, test_policy_parse_errors);
    tcase_add_test(tc, test_deep_chain_full_lowers_peak);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
