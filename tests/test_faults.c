/* test_faults.c: injected faults during a training step with remat, on a
 * device. For every allocation of one step (the pool's clremat_pool_fail_at)
 * and every kernel launch of one step (clremat_ctx_fail_launch_at, with the
 * statuses a lost device or queue gives): the step fails with that status
 * and a message, every tensor of the step is given back (the pool's live
 * bytes are the fixed bytes again), nothing crashes, and once the fault is
 * lifted the next step succeeds; where the fault hit before the optimizer
 * update, that step's loss and parameters are bitwise those of a step that
 * never failed. Also a kernels.cl override that builds but lacks a kernel.
 * With CLREMAT_TEST_REDUCED (slow devices) every 7th k is tried, plus the
 * first and last. The overlapped case (recompute on a second queue) also
 * checks that no fence is left in the pool after a failed step. The cases
 * run the unfused update except the last: with the update fused into the
 * backward, the update (and so the end of bitwise retries) begins with the
 * first backward. */
#include "testutil.h"
#include "data.h"
#include "executor.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define BATCH 4

typedef struct fault_case {
    const char *model, *mode;
    int overlap;            /* recompute on a second queue */
    int fused;              /* the update fused into the backward (else no_fused_update) */
} fault_case;

static const fault_case cases[] = {
    {"transformer.json", "full", 0, 0},
    {"transformer.json", "list_of_layers:encoder_block", 0, 0},
    {"transformer.json", "list_of_layers:encoder_block", 1, 0},
    {"transformer.json", "full", 0, 1},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static void model_path(const char *file, char *path, size_t len)
{
    const char *dir = getenv("CLREMAT_MODELS");
    snprintf(path, len, "%s/%s", dir ? dir : "models", file);
}

/* What one fault-free step from a fresh trainer gives. */
typedef struct reference {
    float loss;
    float *params;          /* after the step */
    uint64_t allocs;        /* pool allocations during the step */
    uint64_t launches;      /* kernel launches during the step */
    uint64_t update_launches; /* of which in the optimizer update (the last ones) */
} reference;

typedef struct fixture {
    clremat_ctx *ctx;
    clremat_graph *g;
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_dataset d;
    float *x, *y;
    int overlap;
    int fused;
} fixture;

static void setup(fixture *f, const fault_case *c)
{
    char path[1024];
    memset(f, 0, sizeof *f);
    f->overlap = c->overlap;
    f->fused = c->fused;
    TEST_OPEN_CTX(f->ctx, 0);
    model_path(c->model, path, sizeof path);
    ck_assert_msg(clremat_graph_load(path, &f->g) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(clremat_policy_parse(c->mode, &f->pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults("adam", &f->opt), 0);
    f->opt.no_fused_update = !c->fused;
    ck_assert_int_eq(clremat_data_synthetic(f->g, NULL, 11, 64, 8, &f->d), CLREMAT_OK);
    f->x = malloc(sizeof(float) * (size_t)(BATCH * f->d.train.x_elems));
    f->y = malloc(sizeof(float) * (size_t)(BATCH * f->d.train.y_elems));
    clremat_data_batch(&f->d.train, 11, 0, BATCH, f->x, f->y);
}

static void teardown(fixture *f)
{
    ck_assert_uint_eq(clremat_pool_get_stats(f->ctx->pool).live_bytes, 0);
    free(f->x);
    free(f->y);
    clremat_data_free(&f->d);
    clremat_graph_free(f->g);
    clremat_ctx_destroy(f->ctx);
}

static clremat_trainer *new_trainer(fixture *f)
{
    clremat_trainer *t = NULL;
    ck_assert_msg(clremat_trainer_new_costs(f->ctx, f->g, BATCH, &f->pol, &f->opt, 5, NULL, f->overlap, &t) ==
                      CLREMAT_OK,
                  "%s", clremat_ctx_last_error(f->ctx));
    ck_assert(!f->overlap || t->plan.n_overlapped > 0);
    return t;
}

static void make_reference(fixture *f, reference *r)
{
    clremat_trainer *t = new_trainer(f);
    uint64_t a0 = clremat_pool_get_stats(f->ctx->pool).allocs;
    float correct;
    memset(r, 0, sizeof *r);
    clremat_ctx_fail_launch_at(f->ctx, 0, 0); /* starts the launch count */
    clremat_trainer_set_profiling(t, 1);
    ck_assert_msg(clremat_trainer_step(t, f->x, f->y, &r->loss, &correct) == CLREMAT_OK, "%s",
                  clremat_ctx_last_error(f->ctx));
    ck_assert(isfinite(r->loss));
    r->allocs = clremat_pool_get_stats(f->ctx->pool).allocs - a0;
    r->launches = clremat_ctx_launch_count(f->ctx);
    for (int l = 0; l <= f->g->n_layers; l++)
        r->update_launches += (uint64_t)t->profile[l].launches[CLREMAT_PHASE_UPDATE];
    r->params = malloc(t->plan.param_bytes);
    ck_assert_int_eq(clremat_trainer_get_params(t, r->params), CLREMAT_OK);
    ck_assert_uint_gt(r->allocs, 10);
    ck_assert_uint_gt(r->launches, r->update_launches);
    ck_assert_uint_gt(r->update_launches, 0);
    clremat_trainer_free(t);
}

/* The k values tried out of 1..n. */
static int try_k(uint64_t k, uint64_t n)
{
    return !test_reduced() || k == 1 || k == n || k % 7 == 0;
}

/* After a failed step: live bytes back to fixed; then the fault-free retry. */
static void check_recovery(fixture *f, clremat_trainer *t, uint64_t fixed, const reference *r, int exact,
                           const char *what, uint64_t k)
{
    float loss, correct;
    ck_assert_msg(clremat_pool_fence_count(f->ctx->pool) == 0, "%s %llu: %zu fences left after the failed step",
                  what, (unsigned long long)k, clremat_pool_fence_count(f->ctx->pool));
    ck_assert_msg(clremat_pool_get_stats(f->ctx->pool).live_bytes == fixed,
                  "%s %llu: %llu live bytes after the failed step, fixed %llu", what, (unsigned long long)k,
                  (unsigned long long)clremat_pool_get_stats(f->ctx->pool).live_bytes, (unsigned long long)fixed);
    ck_assert_msg(clremat_trainer_step(t, f->x, f->y, &loss, &correct) == CLREMAT_OK, "%s %llu: retry: %s", what,
                  (unsigned long long)k, clremat_ctx_last_error(f->ctx));
    ck_assert_msg(isfinite(loss), "%s %llu: retry loss %g", what, (unsigned long long)k, (double)loss);
    if (exact) {
        float *p = malloc(t->plan.param_bytes);
        ck_assert_msg(memcmp(&loss, &r->loss, sizeof loss) == 0, "%s %llu: retry loss %.9g, reference %.9g", what,
                      (unsigned long long)k, (double)loss, (double)r->loss);
        ck_assert_int_eq(clremat_trainer_get_params(t, p), CLREMAT_OK);
        ck_assert_msg(memcmp(p, r->params, t->plan.param_bytes) == 0, "%s %llu: parameters after the retry differ",
                      what, (unsigned long long)k);
        free(p);
    }
    ck_assert_uint_eq(clremat_pool_get_stats(f->ctx->pool).live_bytes, fixed);
}

START_TEST(test_every_allocation_fails_cleanly)
{
    fixture f;
    reference r;
    uint64_t tried = 0;
    setup(&f, &cases[_i]);
    make_reference(&f, &r);
    for (uint64_t k = 1; k <= r.allocs + 1; k++) {
        clremat_trainer *t;
        uint64_t fixed;
        float loss, correct;
        int st;
        if (k <= r.allocs && !try_k(k, r.allocs))
            continue;
        t = new_trainer(&f);
        fixed = clremat_pool_get_stats(f.ctx->pool).live_bytes;
        ck_assert_uint_eq(fixed, t->plan.fixed_bytes);
        clremat_pool_fail_at(f.ctx->pool, k);
        st = clremat_trainer_step(t, f.x, f.y, &loss, &correct);
        if (k == r.allocs + 1) { /* the count is exact: one more is never reached */
            ck_assert_msg(st == CLREMAT_OK, "allocation %llu of %llu: %s", (unsigned long long)k,
                          (unsigned long long)r.allocs, clremat_ctx_last_error(f.ctx));
            clremat_pool_fail_at(f.ctx->pool, 0);
        } else {
            ck_assert_msg(st == CLREMAT_ERR_OUT_OF_MEMORY, "allocation %llu: status %s", (unsigned long long)k,
                          clremat_status_str(st));
            ck_assert_msg(strstr(clremat_ctx_last_error(f.ctx), "fault injected") != NULL, "allocation %llu: %s",
                          (unsigned long long)k, clremat_ctx_last_error(f.ctx));
            clremat_pool_fail_at(f.ctx->pool, 0);
            /* unfused, every allocation precedes the update; fused, the
             * update begins with the first backward: a fault after that
             * leaves some parameters updated */
            ck_assert(f.fused || !t->update_started);
            check_recovery(&f, t, fixed, &r, !t->update_started, "allocation", k);
            tried++;
        }
        clremat_trainer_free(t);
        ck_assert_uint_eq(clremat_pool_get_stats(f.ctx->pool).live_bytes, 0);
    }
    fprintf(stderr, "%s %s%s: %llu allocations per step, %llu injected\n", cases[_i].model, cases[_i].mode,
            cases[_i].overlap ? "+overlap" : cases[_i].fused ? " (fused update)" : "",
            (unsigned long long)r.allocs, (unsigned long long)tried);
    free(r.params);
    teardown(&f);
}
END_TEST

START_TEST(test_every_launch_fails_cleanly)
{
    static const int statuses[] = {CL_OUT_OF_RESOURCES, CL_INVALID_COMMAND_QUEUE, CL_DEVICE_NOT_AVAILABLE};
    fixture f;
    reference r;
    uint64_t tried = 0;
    setup(&f, &cases[_i]);
    make_reference(&f, &r);
    for (uint64_t k = 1; k <= r.launches; k++) {
        clremat_trainer *t;
        uint64_t fixed;
        float loss, correct;
        int st, want = statuses[k % 3];
        if (!try_k(k, r.launches))
            continue;
        t = new_trainer(&f);
        fixed = clremat_pool_get_stats(f.ctx->pool).live_bytes;
        clremat_ctx_fail_launch_at(f.ctx, k, want);
        st = clremat_trainer_step(t, f.x, f.y, &loss, &correct);
        ck_assert_msg(st == want, "launch %llu: status %s, wanted %s", (unsigned long long)k, clremat_status_str(st),
                      clremat_status_str(want));
        ck_assert_msg(strstr(clremat_ctx_last_error(f.ctx), "fault injected") != NULL, "launch %llu: %s",
                      (unsigned long long)k, clremat_ctx_last_error(f.ctx));
        clremat_ctx_fail_launch_at(f.ctx, 0, 0);
        /* a fault inside the update leaves some parameters updated: only a
         * fault before it allows the bitwise comparison */
        ck_assert(f.fused || (k <= r.launches - r.update_launches) == !t->update_started);
        check_recovery(&f, t, fixed, &r, !t->update_started, "launch", k);
        tried++;
        clremat_trainer_free(t);
        ck_assert_uint_eq(clremat_pool_get_stats(f.ctx->pool).live_bytes, 0);
    }
    fprintf(stderr, "%s %s%s: %llu launches per step (%llu in the update), %llu injected\n", cases[_i].model,
            cases[_i].mode, cases[_i].overlap ? "+overlap" : cases[_i].fused ? " (fused update)" : "", (unsigned long long)r.launches, (unsigned long long)r.update_launches,
            (unsigned long long)tried);
    free(r.params);
    teardown(&f);
}
END_TEST

/* A kernels.cl override that builds but lacks the Adam kernel: the context
 * opens, the step fails at the update with the kernel named, cleanly, twice. */
START_TEST(test_missing_kernel)
{
    char src[1024], path[] = "/tmp/clremat-kernelsXXXXXX";
    const char *models = getenv("CLREMAT_MODELS");
    FILE *in, *out;
    char line[4096];
    int fd, renamed = 0;
    fixture f;
    clremat_trainer *t;
    uint64_t fixed;
    snprintf(src, sizeof src, "%s/../kernels.cl", models ? models : "models");
    in = fopen(src, "r");
    ck_assert_msg(in != NULL, "cannot open %s", src);
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    out = fdopen(fd, "w");
    while (fgets(line, sizeof line, in)) {
        char *p = strstr(line, "void clremat_adam_step(");
        if (p) {
            fwrite(line, 1, (size_t)(p - line), out);
            fprintf(out, "void clremat_adam_step_gone(%s", p + strlen("void clremat_adam_step("));
            renamed++;
        } else
            fputs(line, out);
    }
    fclose(in);
    fclose(out);
    ck_assert_int_eq(renamed, 1);
    setenv("CLREMAT_KERNELS", path, 1);
    setup(&f, &cases[0]);
    unsetenv("CLREMAT_KERNELS");
    t = new_trainer(&f);
    fixed = clremat_pool_get_stats(f.ctx->pool).live_bytes;
    for (int i = 0; i < 2; i++) {
        float loss, correct;
        int st = clremat_trainer_step(t, f.x, f.y, &loss, &correct);
        ck_assert_int_eq(st, CL_INVALID_KERNEL_NAME);
        ck_assert_msg(strstr(clremat_ctx_last_error(f.ctx), "clremat_adam_step") != NULL, "%s",
                      clremat_ctx_last_error(f.ctx));
        ck_assert_uint_eq(clremat_pool_get_stats(f.ctx->pool).live_bytes, fixed);
    }
    clremat_trainer_free(t);
    teardown(&f);
    unlink(path);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("faults", 900, &tc);
    tcase_add_loop_test(tc, test_every_allocation_fails_cleanly, 0, N_CASES);
    tcase_add_loop_test(tc, test_every_launch_fails_cleanly, 0, N_CASES);
    tcase_add_test(tc, test_missing_kernel);
    return test_run_device_suite(s);
}
