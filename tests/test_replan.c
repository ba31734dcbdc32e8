/* test_replan.c: a step that runs out of device memory in the middle is
 * replanned and retried (clremat_trainer_step_replan). With an allocation
 * or a launch (CL_OUT_OF_RESOURCES) failing in the middle of step 2 of 5,
 * the step is retried under a smaller budget plan and the run's losses and
 * parameters are bitwise those of a run that never failed; the new plan
 * stays, its predicted peak is lower and is what the pool measures after.
 * A failure during the optimizer update is not retried (parameters may be
 * half updated). Through clremat_train_run_ctx the result reports the
 * replan. These run the unfused update (no_fused_update): with the update
 * fused into the backward (the default), the update begins with the first
 * backward, so only a failure before it is replanned, which
 * test_fused_update_replans_forward_only checks. A device test. */
#include "testutil.h"
#include "data.h"
#include "executor.h"
#include "train.h"
#include <string.h>

#define BATCH 8
#define STEPS 5

typedef struct run {
    float losses[STEPS];
    float *params;
    uint64_t allocs_per_step, launches_per_step, fixed_allocs;
} run;

typedef struct fixture {
    clremat_ctx *ctx;
    clremat_graph *g;
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_dataset d;
    float *x, *y;
} fixture;

static void setup(fixture *f, const char *mode)
{
    char path[1024];
    const char *dir = getenv("CLREMAT_MODELS");
    memset(f, 0, sizeof *f);
    TEST_OPEN_CTX(f->ctx, 0);
    snprintf(path, sizeof path, "%s/transformer.json", dir ? dir : "models");
    ck_assert_msg(clremat_graph_load(path, &f->g) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(clremat_policy_parse(mode, &f->pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults("adam", &f->opt), 0);
    f->opt.no_fused_update = 1; /* the retry of a whole step: see the header */
    ck_assert_int_eq(clremat_data_synthetic(f->g, NULL, 7, 64, 8, &f->d), CLREMAT_OK);
    f->x = malloc(sizeof(float) * (size_t)(BATCH * f->d.train.x_elems));
    f->y = malloc(sizeof(float) * (size_t)(BATCH * f->d.train.y_elems));
}

static void teardown(fixture *f)
{
    free(f->x);
    free(f->y);
    clremat_data_free(&f->d);
    clremat_graph_free(f->g);
    clremat_ctx_destroy(f->ctx);
}

/* Runs STEPS steps; a fault (allocation fault_alloc or launch fault_launch
 * of step fault_step, counted from that step's start) is injected. */
static clremat_trainer *train(fixture *f, run *r, int fault_step, uint64_t fault_alloc, uint64_t fault_launch,
                              int *status_at_fault)
{
    clremat_trainer *t = NULL;
    uint64_t a0 = clremat_pool_get_stats(f->ctx->pool).allocs;
    ck_assert_msg(clremat_trainer_new(f->ctx, f->g, BATCH, &f->pol, &f->opt, 3, &t) == CLREMAT_OK, "%s",
                  clremat_ctx_last_error(f->ctx));
    r->fixed_allocs = clremat_pool_get_stats(f->ctx->pool).allocs - a0;
    for (int s = 0; s < STEPS; s++) {
        float correct;
        uint64_t b0 = clremat_pool_get_stats(f->ctx->pool).allocs;
        int st;
        clremat_data_batch(&f->d.train, 7, s, BATCH, f->x, f->y);
        if (s == fault_step && fault_alloc)
            clremat_pool_fail_at(f->ctx->pool, fault_alloc);
        clremat_ctx_fail_launch_at(f->ctx, s == fault_step ? fault_launch : 0, CL_OUT_OF_RESOURCES);
        st = clremat_trainer_step_replan(t, f->x, f->y, &r->losses[s], &correct);
        if (s == 0) {
            r->allocs_per_step = clremat_pool_get_stats(f->ctx->pool).allocs - b0;
            r->launches_per_step = clremat_ctx_launch_count(f->ctx);
        }
        clremat_pool_fail_at(f->ctx->pool, 0);
        clremat_ctx_fail_launch_at(f->ctx, 0, 0);
        if (s == fault_step && status_at_fault) {
            *status_at_fault = st;
            if (st != CLREMAT_OK)
                return t;
        }
        ck_assert_msg(st == CLREMAT_OK, "step %d: %s", s, clremat_ctx_last_error(f->ctx));
    }
    r->params = malloc(t->plan.param_bytes);
    ck_assert_int_eq(clremat_trainer_get_params(t, r->params), CLREMAT_OK);
    return t;
}

static void check_replanned_run(const char *mode, int by_launch)
{
    fixture f;
    run ref, got;
    clremat_trainer *t;
    uint64_t old_peak;
    int st = -1;
    setup(&f, mode);
    t = train(&f, &ref, -1, 0, 0, NULL);
    old_peak = t->plan.peak_bytes;
    ck_assert_int_eq(t->replans, 0);
    clremat_trainer_free(t);
    /* a fault in the middle of step 2 */
    t = train(&f, &got, 2, by_launch ? 0 : ref.allocs_per_step / 2, by_launch ? ref.launches_per_step / 2 : 0, &st);
    ck_assert_msg(st == CLREMAT_OK, "%s: the faulted step was not recovered: %s", mode, clremat_ctx_last_error(f.ctx));
    ck_assert_int_eq(t->replans, 1);
    ck_assert_int_eq(t->replan_step, 2);
    ck_assert_uint_eq(t->replan_from, old_peak);
    ck_assert_uint_lt(t->replan_to, old_peak);
    ck_assert_uint_eq(t->plan.peak_bytes, t->replan_to);
    ck_assert_ptr_nonnull(strstr(t->replan_reason, "fault injected"));
    /* the pool measured the new plan's peak since the replan */
    ck_assert_uint_eq(clremat_pool_get_stats(f.ctx->pool).live_peak, t->plan.peak_bytes);
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(memcmp(&got.losses[s], &ref.losses[s], sizeof(float)) == 0, "%s step %d: loss %.9g != %.9g",
                      mode, s, (double)got.losses[s], (double)ref.losses[s]);
    ck_assert_msg(memcmp(got.params, ref.params, t->plan.param_bytes) == 0, "%s: parameters differ", mode);
    clremat_trainer_free(t);
    free(ref.params);
    free(got.params);
    teardown(&f);
}

START_TEST(test_allocation_fault_replans)
{
    check_replanned_run("none", 0);
    check_replanned_run("list_of_layers:encoder_block", 0);
}
END_TEST

START_TEST(test_launch_fault_replans)
{
    check_replanned_run("none", 1);
}
END_TEST

/* The last launches of a step are the update's: a fault there is returned. */
START_TEST(test_fault_in_update_is_not_retried)
{
    fixture f;
    run ref, got;
    clremat_trainer *t;
    int st = 0;
    setup(&f, "none");
    t = train(&f, &ref, -1, 0, 0, NULL);
    clremat_trainer_free(t);
    free(ref.params);
    t = train(&f, &got, 1, 0, ref.launches_per_step, &st);
    ck_assert_int_eq(st, CL_OUT_OF_RESOURCES);
    ck_assert(t->update_started);
    ck_assert_int_eq(t->replans, 0);
    clremat_trainer_free(t);
    teardown(&f);
}
END_TEST

/* With the fused update: a fault in the forward (before any parameter
 * changed) is replanned and retried, bitwise; a fault in the backward, where
 * parameters are being updated, is returned, not retried, and the step's
 * tensors are given back. */
START_TEST(test_fused_update_replans_forward_only)
{
    fixture f;
    run ref, got;
    clremat_trainer *t;
    int st = -1;
    setup(&f, "none");
    f.opt.no_fused_update = 0;
    t = train(&f, &ref, -1, 0, 0, NULL);
    ck_assert(t->fused);
    clremat_trainer_free(t);
    /* the second allocation of step 2 is a forward's: replanned */
    t = train(&f, &got, 2, 2, 0, &st);
    ck_assert_msg(st == CLREMAT_OK, "the faulted forward was not recovered: %s", clremat_ctx_last_error(f.ctx));
    ck_assert_int_eq(t->replans, 1);
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(memcmp(&got.losses[s], &ref.losses[s], sizeof(float)) == 0, "step %d: loss %.9g != %.9g", s,
                      (double)got.losses[s], (double)ref.losses[s]);
    ck_assert_msg(memcmp(got.params, ref.params, t->plan.param_bytes) == 0, "parameters differ");
    clremat_trainer_free(t);
    free(got.params);
    /* the last allocation of step 1 is in the backward: returned */
    t = train(&f, &got, 1, ref.allocs_per_step, 0, &st);
    ck_assert_int_eq(st, CLREMAT_ERR_OUT_OF_MEMORY);
    ck_assert(t->update_started);
    ck_assert_int_eq(t->replans, 0);
    ck_assert_uint_eq(clremat_pool_get_stats(f.ctx->pool).live_bytes, t->plan.fixed_bytes);
    clremat_trainer_free(t);
    free(ref.params);
    teardown(&f);
}
END_TEST

/* The training loop uses the retry and reports it in its result. */
START_TEST(test_train_run_reports_replan)
{
    fixture f;
    run ref;
    clremat_trainer *t;
    clremat_train_config cfg;
    clremat_train_result a, b;
    char path[1024];
    const char *dir = getenv("CLREMAT_MODELS");
    setup(&f, "none");
    t = train(&f, &ref, -1, 0, 0, NULL);
    clremat_trainer_free(t);
    free(ref.params);
    snprintf(path, sizeof path, "%s/transformer.json", dir ? dir : "models");
    memset(&cfg, 0, sizeof cfg);
    cfg.model_path = path;
    cfg.batch = BATCH;
    cfg.steps = STEPS;
    cfg.seed = 3;
    cfg.optimizer = "adam";
    cfg.no_fused_update = 1;
    cfg.train_samples = 64;
    cfg.val_samples = 16;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    ck_assert_msg(clremat_train_run_ctx(f.ctx, &cfg, &a) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(a.replans, 0);
    /* trainer creation, three whole steps, then half of the fourth */
    clremat_pool_fail_at(f.ctx->pool, ref.fixed_allocs + 3 * ref.allocs_per_step + ref.allocs_per_step / 2);
    ck_assert_msg(clremat_train_run_ctx(f.ctx, &cfg, &b) == CLREMAT_OK, "%s", clremat_last_error());
    clremat_pool_fail_at(f.ctx->pool, 0);
    ck_assert_int_eq(b.replans, 1);
    ck_assert_int_eq(b.replan_step, 3);
    ck_assert_uint_lt(b.replan_to_peak, b.replan_from_peak);
    ck_assert_uint_eq(b.predicted_peak, b.replan_to_peak);
    ck_assert_uint_eq(b.measured_peak, b.predicted_peak);
    ck_assert_int_eq(b.steps_run, STEPS);
    ck_assert(memcmp(a.losses, b.losses, sizeof(float) * STEPS) == 0);
    ck_assert(memcmp(a.final_params, b.final_params, a.param_bytes) == 0);
    clremat_train_result_free(&a);
    clremat_train_result_free(&b);
    teardown(&f);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("replan", 300, &tc);
    tcase_add_test(tc, test_allocation_fault_replans);
    tcase_add_test(tc, test_launch_fault_replans);
    tcase_add_test(tc, test_fault_in_update_is_not_retried);
    tcase_add_test(tc, test_train_run_reports_replan);
    tcase_add_test(tc, test_fused_update_replans_forward_only);
    return test_run_device_suite(s);
}
