/* test_attention_choice.c: budget:/auto choosing the mode of attention
 * layers marked "attention": "auto" (planner/variants.c,
 * host/attn_variants.c). Without a device: the fixed modes keep such
 * layers plain; budget:/auto switch them to memory_efficient where that is
 * the cheapest way to fit (models/long_context.json at T = 4096: a budget
 * no plain plan reaches is met with zero recompute), keep them plain when
 * the none plan fits, and the merged costs are the memory-efficient ones.
 * On a device: a budget plan that switches every attention layer runs with
 * predicted == measured peak, and its losses and parameters are bitwise
 * those of the same model written "memory_efficient" under none (the
 * bitwise invariant within the attention mode); skips (77) without one. */
#include "testutil.h"
#include "testmodel.h"
#include "data.h"
#include "executor.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* g with every attention layer set to mode. */
static void set_modes(clremat_graph *g, int mode)
{
    for (int l = 0; l < g->n_layers; l++)
        if (g->layers[l].type == CLREMAT_ATTENTION)
            g->layers[l].attn_mode = mode;
}

static int n_switched(const clremat_graph *g, const clremat_plan *p)
{
    int n = 0;
    for (int l = 0; p->variant && l < g->n_layers; l++) {
        ck_assert(!p->variant[l] || g->layers[l].type == CLREMAT_ATTENTION);
        n += p->variant[l] != 0;
    }
    return n;
}

static uint64_t plan_peak(const clremat_graph *g, const char *mode, uint64_t limit, clremat_plan *out,
                          clremat_layer_cost **costs)
{
    clremat_policy p;
    ck_assert_int_eq(clremat_policy_parse(mode, &p), CLREMAT_OK);
    ck_assert_msg(clremat_plan_for(g, 1, &p, 2, limit, NULL, out, costs) == CLREMAT_OK, "%s: %s", mode,
                  clremat_last_error());
    return out->peak_bytes;
}

START_TEST(test_choice_planner)
{
    clremat_graph *g = test_load_model("long_context.json");
    clremat_plan none, mem, pl, tmp;
    clremat_layer_cost *costs = NULL;
    uint64_t none_peak, mem_peak;
    clremat_policy p;
    char mode[64];

    /* fixed modes: "auto" layers run plain (the probabilities slot) */
    none_peak = plan_peak(g, "none", 0, &none, &costs);
    ck_assert_ptr_null(none.variant);
    for (int l = 0; l < g->n_layers; l++)
        if (g->layers[l].type == CLREMAT_ATTENTION)
            ck_assert_str_eq(costs[l].slot_name[2], "probs");
    free(costs);
    plan_peak(g, "full", 0, &tmp, NULL);
    ck_assert_ptr_null(tmp.variant);
    clremat_plan_free(&tmp);

    /* the memory-efficient none plan: the budget the plain modes cannot reach */
    set_modes(g, CLREMAT_ATTN_MEMORY_EFFICIENT);
    mem_peak = plan_peak(g, "none", 0, &mem, NULL);
    set_modes(g, CLREMAT_ATTN_AUTO);
    ck_assert(mem_peak < none_peak / 4);
    fprintf(stderr, "long_context batch 1: none plain %llu bytes, none memory_efficient %llu bytes\n",
            (unsigned long long)none_peak, (unsigned long long)mem_peak);
    snprintf(mode, sizeof mode, "budget:%llu", (unsigned long long)mem_peak);
    set_modes(g, CLREMAT_ATTN_PLAIN);
    ck_assert_int_eq(clremat_policy_parse(mode, &p), CLREMAT_OK);
    ck_assert_int_eq(clremat_plan_for(g, 1, &p, 2, 0, NULL, &tmp, NULL), CLREMAT_ERR_PLAN);
    set_modes(g, CLREMAT_ATTN_AUTO);

    /* budget at that peak: both layers switched, nothing recomputed */
    plan_peak(g, mode, 0, &pl, &costs);
    ck_assert_int_eq(n_switched(g, &pl), 2);
    ck_assert_uint_eq(pl.peak_bytes, mem_peak);
    ck_assert_int_eq(pl.n_recompute_actions, 0);
    for (int l = 0; l < g->n_layers; l++)
        if (g->layers[l].type == CLREMAT_ATTENTION)
            ck_assert_str_eq(costs[l].slot_name[2], "stats");
    free(costs);
    clremat_plan_free(&pl);

    /* auto with that limit: the same choice */
    plan_peak(g, "auto", mem_peak, &pl, NULL);
    ck_assert_int_eq(n_switched(g, &pl), 2);
    ck_assert_uint_eq(pl.peak_bytes, mem_peak);
    clremat_plan_free(&pl);

    /* room for the plain none plan: nothing switched, the none plan */
    snprintf(mode, sizeof mode, "budget:%llu", (unsigned long long)none_peak);
    plan_peak(g, mode, 0, &pl, NULL);
    ck_assert_ptr_null(pl.variant);
    ck_assert_uint_eq(pl.peak_bytes, none_peak);
    clremat_plan_free(&pl);
    plan_peak(g, "auto", none_peak, &pl, NULL);
    ck_assert_ptr_null(pl.variant);
    clremat_plan_free(&pl);

    /* below every plan: the error names the smallest peak, with the attention note */
    ck_assert_int_eq(clremat_policy_parse("budget:1MiB", &p), CLREMAT_OK);
    ck_assert_int_eq(clremat_plan_for(g, 1, &p, 2, 0, NULL, &tmp, NULL), CLREMAT_ERR_PLAN);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "smallest peak"));
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "memory-efficient"));

    clremat_plan_free(&none);
    clremat_plan_free(&mem);
    clremat_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------- device */

#define STEPS 3
#define BATCH 4

typedef struct run_out {
    float loss[STEPS];
    float *params;
    size_t param_bytes;
    uint64_t predicted, measured;
    int switched;
} run_out;

static void run_mode(clremat_ctx *ctx, clremat_graph *g, const clremat_dataset *d, const char *mode, run_out *out)
{
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t;
    float *x = malloc(sizeof(float) * (size_t)(BATCH * d->train.x_elems));
    float *y = malloc(sizeof(float) * (size_t)(BATCH * d->train.y_elems));
    ck_assert_int_eq(clremat_policy_parse(mode, &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults("adam", &opt), 0);
    ck_assert_msg(clremat_trainer_new_costs(ctx, g, BATCH, &pol, &opt, 7, NULL, 0, &t) == CLREMAT_OK, "%s: %s",
                  mode, clremat_ctx_last_error(ctx));
    clremat_pool_reset_peaks(ctx->pool);
    for (int s = 0; s < STEPS; s++) {
        float correct;
        clremat_data_batch(&d->train, 7, s, BATCH, x, y);
        ck_assert_msg(clremat_trainer_step(t, x, y, &out->loss[s], &correct) == CLREMAT_OK, "%s step %d: %s", mode,
                      s, clremat_ctx_last_error(ctx));
        ck_assert(isfinite(out->loss[s]));
    }
    out->predicted = t->plan.peak_bytes;
    out->measured = clremat_pool_get_stats(ctx->pool).live_peak;
    out->switched = n_switched(g, &t->plan);
    out->param_bytes = t->plan.param_bytes;
    out->params = malloc(out->param_bytes);
    ck_assert_int_eq(clremat_trainer_get_params(t, out->params), CLREMAT_OK);
    clremat_trainer_free(t);
    free(x);
    free(y);
}

START_TEST(test_choice_device)
{
    clremat_graph *g = test_load_model("transformer_flash.json");
    clremat_ctx *ctx;
    clremat_dataset d;
    clremat_plan mem;
    run_out ref, got, plain;
    char mode[64];
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_msg(clremat_data_synthetic(g, NULL, 7, 64, 16, &d) == CLREMAT_OK, "%s", clremat_last_error());

    /* reference: written memory_efficient, no remat */
    set_modes(g, CLREMAT_ATTN_MEMORY_EFFICIENT);
    run_mode(ctx, g, &d, "none", &ref);
    ck_assert_uint_eq(ref.measured, ref.predicted);
    {
        clremat_policy p;
        clremat_opt_config opt;
        ck_assert_int_eq(clremat_opt_defaults("adam", &opt), 0);
        ck_assert_int_eq(clremat_policy_parse("none", &p), CLREMAT_OK);
        /* planned as the trainer runs: with the fused update where it applies */
        ck_assert_int_eq(clremat_plan_for_ctx(ctx, g, BATCH, &p,
                                              2 | (clremat_trainer_fused(&opt, 1, g) ? CLREMAT_PLAN_FUSED_UPDATE : 0), 0,
                                              NULL, 0, &mem, NULL, NULL, NULL),
                         CLREMAT_OK);
    }
    /* "auto" layers, budget at the memory-efficient none peak */
    set_modes(g, CLREMAT_ATTN_AUTO);
    snprintf(mode, sizeof mode, "budget:%llu", (unsigned long long)mem.peak_bytes);
    run_mode(ctx, g, &d, mode, &got);
    fprintf(stderr, "transformer_flash (auto) %s: %d layers switched, predicted %llu, measured %llu\n", mode,
            got.switched, (unsigned long long)got.predicted, (unsigned long long)got.measured);
    ck_assert_uint_eq(got.measured, got.predicted);
    ck_assert_int_eq(got.switched, 2);
    ck_assert_int_eq(memcmp(got.loss, ref.loss, sizeof ref.loss), 0);
    ck_assert_int_eq(memcmp(got.params, ref.params, ref.param_bytes), 0);

    /* the same "auto" model under none runs plain: measured == predicted, and
     * within float32 rounding of the memory-efficient run (not bitwise) */
    run_mode(ctx, g, &d, "none", &plain);
    ck_assert_uint_eq(plain.measured, plain.predicted);
    ck_assert_int_eq(plain.switched, 0);
    ck_assert(plain.predicted > ref.predicted);
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(fabsf(plain.loss[s] - ref.loss[s]) <= 1e-4f * fabsf(ref.loss[s]), "step %d: plain %.9g, "
                      "memory_efficient %.9g", s, plain.loss[s], ref.loss[s]);

    clremat_plan_free(&mem);
    free(ref.params);
    free(got.params);
    free(plain.params);
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attention_choice");
    TCase *tc = tcase_create("planner");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_choice_planner);
    suite_add_tcase(s, tc);
    if (!test_have_device()) {
        int rc = test_run_suite(s);
        return rc != EXIT_SUCCESS ? rc : TEST_SKIP;
    }
    tc = tcase_create("device");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_choice_device);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
