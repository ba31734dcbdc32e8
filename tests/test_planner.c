/* test_planner.c: the planner on hand-built graphs with hand-written costs,
 * no device: which tensors each remat mode keeps or discards (nested blocks,
 * the larger_than boundary, unknown names, "remat": true blocks), and the
 * memory simulator's bookkeeping. The graphs and costs come from
 * plangraphs.c (pg_chain, pg_acts, pg_boundary, pg_nested, pg_deep). */
#include "testutil.h"
#include "plan.h"
#include "plangraphs.h"
#include <stdio.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS

static int plan_mode(clremat_graph *g, int64_t batch, const char *mode, clremat_plan *p, clremat_layer_cost *c)
{
    clremat_policy pol;
    clremat_plan_input in = {.g = g, .batch = batch, .costs = c, .opt_states = 2, .scratch_bytes = 8};
    pg_fake_costs(g, batch, c);
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
    clremat_graph *g = pg_chain();
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
    clremat_graph *g = pg_chain();
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
    clremat_graph *g = pg_acts();
    clremat_layer_cost c[8];
    clremat_plan p;
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
    clremat_graph *g = pg_boundary();
    clremat_layer_cost c[8];
    clremat_plan p;
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

START_TEST(test_list_of_layers_block_and_nesting)
{
    clremat_graph *g = pg_nested(0);
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
    clremat_graph *g = pg_nested(1);
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
    clremat_graph *g = pg_deep(40, 64); /* in 64 -> 40 x dense 64 gelu -> head -> loss */
    clremat_layer_cost *c;
    clremat_plan pn, pf;
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

/* `clremat plan` refuses every option it would ignore, naming it (once,
 * --points without --pareto, and --overlap, --actions, --remat or
 * --memory-limit with it, were dropped silently, and a --device matching no
 * device was accepted unless --remat auto planned for it). */
START_TEST(test_plan_cli_ignored_options)
{
    static const struct {
        const char *args, *want;
    } bad[] = {
        {"--points 7", "plan: --points N sets the Pareto sweep's budgets: it needs --pareto"},
        {"--poi=7 --remat full", "--points N sets the Pareto sweep's budgets: it needs --pareto"},
        {"--pareto --overlap", "plan: --pareto sweeps every budget on the whole model without a device: --overlap "
                               "does not apply to it"},
        {"--pareto --actions --remat full", "--remat, --actions do not apply to it"},
        {"--pareto --remat none", "--remat does not apply to it"},
        {"--pareto --memory-limit 1GiB", "--memory-limit does not apply to it"},
        {"--pareto --device 0:0", "--device does not apply to it"},
        {"--pareto --gemm native", "--gemm does not apply to it"},
        {"--pareto --offload all", "--offload does not go with --overlap or --pareto"},
        {"--device 0:0", "plan: --device SEL gives the memory --remat auto plans for (without --memory-limit), "
                         "or with --gemm the device planned on: with --remat none it is not used"},
        {"--remat auto --memory-limit 1GiB --device 0:0", "with --remat auto and --memory-limit it is not used"},
    };
    const char *dir = getenv("CLREMAT_MODELS");
    char model[1024], args[2048], err[4096], *out = malloc(1 << 20);
    snprintf(model, sizeof model, "%s/mlp_deep.json", dir ? dir : "models");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "plan %s %s", model, bad[i].args);
        ck_assert_msg(test_run_tool(args, err, sizeof err) != 0, "%s: exit 0", args);
        ck_assert_msg(strstr(err, bad[i].want), "%s: %s", args, err);
    }
    /* a device selection that matches nothing: refused, whether auto plans
     * for it or not, given to plan or before it (without OpenCL: no device) */
    snprintf(args, sizeof args, "plan %s --remat auto --device no-such-device-xyz", model);
    ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "'no-such-device-xyz' matches no OpenCL device") || strstr(err, "no OpenCL device"),
                  "%s", err);
    snprintf(args, sizeof args, "--device no-such-device-xyz plan %s", model);
    ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "'no-such-device-xyz' matches no OpenCL device") || strstr(err, "no OpenCL device"),
                  "%s", err);
    snprintf(args, sizeof args, "--device no-such-device-xyz plan %s --pareto --points 3", model);
    ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "'no-such-device-xyz' matches no OpenCL device") || strstr(err, "no OpenCL device"),
                  "%s", err);
    /* what applies still runs */
    snprintf(args, sizeof args, "plan %s --pareto --points 3 --batch 8 --accumulate 2 --no-fused-update --json", model);
    test_tool_stdout(args, out, 1 << 20);
    snprintf(args, sizeof args, "plan %s --remat full --overlap --actions --memory-limit 1GiB", model);
    test_tool_stdout(args, out, 1 << 20);
    free(out);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("planner", 0, &tc);
    tcase_add_test(tc, test_none_keeps_everything_needed);
    tcase_add_test(tc, test_full_discards_internals_keeps_inputs);
    tcase_add_test(tc, test_activations_mode);
    tcase_add_test(tc, test_larger_than_boundary);
    tcase_add_test(tc, test_list_of_layers_block_and_nesting);
    tcase_add_test(tc, test_remat_block_always_wrapped);
    tcase_add_test(tc, test_policy_parse_errors);
    tcase_add_test(tc, test_deep_chain_full_lowers_peak);
    tcase_add_test(tc, test_plan_cli_ignored_options);
    return test_run_suite(s);
}
