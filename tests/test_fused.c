/* test_fused.c: the optimizer update fused into the backward (issue 21).
 * On every bundled model, for SGD with momentum, Adam and AdamW, under
 * several remat modes: losses and parameters after a few steps bitwise
 * identical to the unfused update (--no-fused-update), the measured peak
 * equal to the prediction to the byte in both, the fixed bytes lower by
 * exactly the gradient bytes, and on the native GEMM path the dense layers'
 * updates run in the GEMM epilogue and the bias reduction (no separate
 * step kernel for them). The GEMM that reads a discarded activation
 * output as act(pre-activation) while packing has the bits of the
 * recompute kernel followed by the plain GEMM. Without a device: the
 * predicate's conditions. */
#include "testutil.h"
#include "testmodel.h"
#include "data.h"
#include "executor.h"
#include "gemm.h"
#include "kernel_run.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const model_files[] = {"mlp_deep.json", "transformer.json", "resnet_mlp.json",
                                          "regression.json"};
#define N_MODELS (sizeof model_files / sizeof model_files[0])
static const char *const optimizers[] = {"sgd", "adamw", "adam"};
static const char *const modes[] = {"none", "full", "activations", "full+overlap"};
#define N_MODES (sizeof modes / sizeof modes[0])
#define STEPS 3
#define BATCH 8

typedef struct run_out {
    float loss[STEPS];
    float *params;
    uint64_t predicted, measured, fixed;
    int fused;
    int step_kernel_launches;       /* clremat_sgd_step / clremat_adam_step in the last step */
    int act_bwd_launches;           /* clremat_act_bwdw / clremat_act_bwd8 in the last step */
} run_out;

/* 1: run() trains with the activation backward unfused (fuse_act_grad 0) */
static int act_grad_off;

static void run(clremat_ctx *ctx, clremat_graph *g, const clremat_dataset *d, const char *opt_name,
                const char *mode, int no_fused, run_out *out)
{
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t;
    float *x = malloc(sizeof(float) * (size_t)(BATCH * d->train.x_elems));
    float *y = malloc(sizeof(float) * (size_t)(BATCH * d->train.y_elems));
    char base_mode[64];
    const char *plus = strstr(mode, "+overlap");
    snprintf(base_mode, sizeof base_mode, "%.*s", plus ? (int)(plus - mode) : (int)strlen(mode), mode);
    ck_assert_int_eq(clremat_policy_parse(base_mode, &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults(opt_name, &opt), 0);
    opt.no_fused_update = no_fused;
    ck_assert_msg(clremat_trainer_new_costs(ctx, g, BATCH, &pol, &opt, 11, NULL, plus != NULL, &t) == CLREMAT_OK,
                  "%s %s: %s", opt_name, mode, clremat_ctx_last_error(ctx));
    t->fuse_act_grad = !act_grad_off;
    clremat_pool_reset_peaks(ctx->pool);
    for (int s = 0; s < STEPS; s++) {
        float correct;
        clremat_data_batch(&d->train, 11, s, BATCH, x, y);
        clremat_trainer_set_profiling(t, s == STEPS - 1);
        ck_assert_msg(clremat_trainer_step(t, x, y, &out->loss[s], &correct) == CLREMAT_OK, "%s %s step %d: %s",
                      opt_name, mode, s, clremat_ctx_last_error(ctx));
        ck_assert(isfinite(out->loss[s]));
    }
    out->predicted = t->plan.peak_bytes;
    out->measured = clremat_pool_get_stats(ctx->pool).live_peak;
    out->fixed = t->plan.fixed_bytes;
    out->fused = t->fused;
    out->step_kernel_launches = out->act_bwd_launches = 0;
    for (int k = 0; k < t->n_kprof; k++) {
        if (!strcmp(t->kprof[k].name, "clremat_sgd_step") || !strcmp(t->kprof[k].name, "clremat_adam_step"))
            out->step_kernel_launches += t->kprof[k].launches;
        if (!strcmp(t->kprof[k].name, "clremat_act_bwdw") || !strcmp(t->kprof[k].name, "clremat_act_bwd8"))
            out->act_bwd_launches += t->kprof[k].launches;
    }
    out->params = malloc(t->plan.param_bytes);
    ck_assert_int_eq(clremat_trainer_get_params(t, out->params), CLREMAT_OK);
    clremat_trainer_free(t);
    free(x);
    free(y);
}

/* Parameters whose update the layers apply themselves on this context
 * (clremat_layer_fuses_update) and all parameters, as counts. */
static void count_self(clremat_ctx *ctx, const clremat_graph *g, int *self, int *all)
{
    *self = *all = 0;
    for (int l = 0; l < g->n_layers; l++)
        for (int p = 0; p < g->layers[l].n_params; p++) {
            (*all)++;
            *self += clremat_layer_fuses_update(ctx, g, l, p, BATCH);
        }
}

START_TEST(test_fused_bitwise_and_exact)
{
    const char *file = model_files[_i];
    clremat_ctx *ctx;
    clremat_graph *g = test_load_model(file);
    clremat_dataset d;
    const size_t pbytes = (size_t)clremat_graph_param_elems(g) * sizeof(float);
    int self, all;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_msg(clremat_data_synthetic(g, NULL, 11, 256, 32, &d) == CLREMAT_OK, "%s", clremat_last_error());
    count_self(ctx, g, &self, &all);
    /* slow implementations (test_reduced): two optimizers (SGD and AdamW,
     * the two update formulas) under none and full */
    const size_t n_opts = test_reduced() ? 2 : 3, n_modes = test_reduced() ? 2 : N_MODES;
    for (size_t o = 0; o < n_opts; o++)
        for (size_t m = 0; m < n_modes; m++) {
            run_out u, f;
            run(ctx, g, &d, optimizers[o], modes[m], 1, &u);
            run(ctx, g, &d, optimizers[o], modes[m], 0, &f);
            ck_assert(!u.fused && f.fused);
            for (int s = 0; s < STEPS; s++)
                ck_assert_msg(memcmp(&u.loss[s], &f.loss[s], sizeof(float)) == 0,
                              "%s %s %s step %d: fused loss %.9g, unfused %.9g", file, optimizers[o], modes[m], s,
                              (double)f.loss[s], (double)u.loss[s]);
            ck_assert_msg(memcmp(u.params, f.params, pbytes) == 0, "%s %s %s: fused parameters differ", file,
                          optimizers[o], modes[m]);
            ck_assert_msg(u.measured == u.predicted && f.measured == f.predicted,
                          "%s %s %s: unfused peak %llu (predicted %llu), fused %llu (predicted %llu)", file,
                          optimizers[o], modes[m], (unsigned long long)u.measured, (unsigned long long)u.predicted,
                          (unsigned long long)f.measured, (unsigned long long)f.predicted);
            /* every parameter of the bundled models has one use: no gradient is fixed memory */
            ck_assert_msg(u.fixed - f.fixed == pbytes, "%s %s %s: fixed bytes %llu unfused, %llu fused (gradients %zu)",
                          file, optimizers[o], modes[m], (unsigned long long)u.fixed, (unsigned long long)f.fixed,
                          pbytes);
            ck_assert_msg(f.predicted < u.predicted, "%s %s %s: fused peak %llu not below unfused %llu", file,
                          optimizers[o], modes[m], (unsigned long long)f.predicted, (unsigned long long)u.predicted);
            /* one step kernel per parameter unfused; fused, only for the
             * parameters whose layers cannot update them themselves */
            ck_assert_int_eq(u.step_kernel_launches, all);
            ck_assert_int_eq(f.step_kernel_launches, all - self);
            if (m == 0)
                fprintf(stderr, "%s %s: peak %llu unfused, %llu fused (%d of %d parameters updated by their layer)\n",
                        file, optimizers[o], (unsigned long long)u.predicted, (unsigned long long)f.predicted, self,
                        all);
            free(u.params);
            free(f.params);
        }
    /* the dense layers' updates are fused where the path allows it */
    if (clremat_gemm_resolve(ctx) == CLREMAT_GEMM_NATIVE && (!strcmp(file, "mlp_deep.json") || !strcmp(file, "regression.json")))
        ck_assert_msg(self == all, "%s: %d of %d parameters fused on the native path", file, self, all);
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

static clremat_buf *upload(clremat_ctx *ctx, const float *h, size_t n)
{
    clremat_buf *b = NULL;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, n * sizeof(float), "test", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, b, 0, n * sizeof(float), h), CLREMAT_OK);
    return b;
}

/* The GEMM that packs act(A) (a discarded activation output read from the
 * pre-activation) against the activation materialized by the recompute
 * kernel and then a plain GEMM: the same bits, for every activation, with
 * edge tiles (M, N not multiples of the 6 x 16 register tile) and K over
 * several k-blocks. The native path (the only one that packs). */
START_TEST(test_fused_activation_read_bitwise)
{
    /* M (in), N (units), K (rows); 613: several M blocks (m0 > 0); 61 x 530
     * x 270: several column blocks walked by one work-group over two
     * k-blocks (on devices with the largest blocks, 256 x 256) */
    static const int64_t shapes[][3] = {{37, 21, 29}, {96, 64, 300}, {7, 130, 5}, {613, 19, 33}, {61, 530, 270}};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int act = CLREMAT_ACT_RELU; act < CLREMAT_ACT_COUNT; act++) {
            const int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
            float *hx = malloc(sizeof(float) * (size_t)(K * M)), *hd = malloc(sizeof(float) * (size_t)(K * N));
            float *c1 = calloc((size_t)(M * N), sizeof(float)), *c2 = calloc((size_t)(M * N), sizeof(float));
            clremat_buf *pre, *dz, *x, *ca, *cb;
            cl_int n = (cl_int)(K * M), iact = act;
            cl_mem mp, mx;
            for (int64_t i = 0; i < K * M; i++)
                hx[i] = (float)((i * 37 % 101) - 50) / 17.0f;
            for (int64_t i = 0; i < K * N; i++)
                hd[i] = (float)((i * 53 % 89) - 44) / 31.0f;
            pre = upload(ctx, hx, (size_t)(K * M));
            dz = upload(ctx, hd, (size_t)(K * N));
            x = upload(ctx, hx, (size_t)(K * M));
            ca = upload(ctx, c1, (size_t)(M * N));
            cb = upload(ctx, c2, (size_t)(M * N));
            mp = clremat_mem(pre);
            mx = clremat_mem(x);
            /* the unfused recomputation: x = act(pre) by the recompute kernel, then x^T dZ */
            ck_assert_int_eq(clremat_run1d(ctx, "clremat_act_fwd8", (K * M + 7) / 8, sizeof n, &n, sizeof iact, &iact,
                                           sizeof mp, &mp, sizeof mx, &mx, (size_t)0),
                             CLREMAT_OK);
            ck_assert_int_eq(clremat_gemm_on(ctx, CLREMAT_GEMM_NATIVE, 1, 0, M, N, K, 1.0f, x, 0, M, 0, dz, 0, N, 0,
                                             0.0f, ca, 0, N, 0, 1),
                             CLREMAT_OK);
            /* fused: act applied while packing pre */
            ck_assert_int_eq(clremat_gemm_acta_native(ctx, 1, 0, M, N, K, act, pre, M, dz, N, cb), CLREMAT_OK);
            ck_assert_int_eq(clremat_read(ctx, ca, 0, sizeof(float) * (size_t)(M * N), c1), CLREMAT_OK);
            ck_assert_int_eq(clremat_read(ctx, cb, 0, sizeof(float) * (size_t)(M * N), c2), CLREMAT_OK);
            ck_assert_msg(memcmp(c1, c2, sizeof(float) * (size_t)(M * N)) == 0, "act %d, %lldx%lldx%lld: bits differ",
                          act, (long long)M, (long long)N, (long long)K);
            clremat_pool_release(ctx->pool, pre);
            clremat_pool_release(ctx->pool, dz);
            clremat_pool_release(ctx->pool, x);
            clremat_pool_release(ctx->pool, ca);
            clremat_pool_release(ctx->pool, cb);
            free(hx);
            free(hd);
            free(c1);
            free(c2);
        }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* A dense layer's activation backward fused into the GEMM of its
 * consumer's input gradient (clremat_gemm_dact: dY = dZ W^T, then dY *
 * act'(pre) before the store) against the plain GEMM followed by the
 * activation-backward kernel in place, as the unfused backward runs them:
 * the same bits for every activation, on the native path (the epilogue of
 * the last k-block; edge tiles, several k-blocks and column blocks) and on
 * CLBlast (the GEMM, then the kernel). With store_act the same gradient,
 * and the pre-activation replaced by act(pre) with the bits of the
 * activation kernel the forward's recomputation runs (clremat_act_fwdw). */
START_TEST(test_act_grad_gemm_bitwise)
{
    /* rows, in (N of dY), units (K) */
    static const int64_t shapes[][3] = {{37, 21, 29}, {96, 64, 300}, {7, 130, 5}, {613, 19, 33}, {61, 530, 270}};
    static const clremat_gemm_path paths[] = {CLREMAT_GEMM_NATIVE, CLREMAT_GEMM_CLBLAST};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t pi = 0; pi < 2; pi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int act = CLREMAT_ACT_RELU; act < CLREMAT_ACT_COUNT; act++) {
                const int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
                float *hz = malloc(sizeof(float) * (size_t)(M * K)), *hw = malloc(sizeof(float) * (size_t)(N * K));
                float *hp = malloc(sizeof(float) * (size_t)(M * N)), *c1 = malloc(sizeof(float) * (size_t)(M * N));
                float *c2 = malloc(sizeof(float) * (size_t)(M * N)), *x1 = malloc(sizeof(float) * (size_t)(M * N));
                float *x2 = malloc(sizeof(float) * (size_t)(M * N));
                clremat_buf *dz, *w, *pre, *ca, *cb, *pre2, *xa;
                cl_int n = (cl_int)(M * N), iact = act, acc = 0;
                cl_mem mp, mc;
                ck_assert(hz && hw && hp && c1 && c2 && x1 && x2);
                for (int64_t i = 0; i < M * K; i++)
                    hz[i] = (float)((i * 37 % 101) - 50) / 17.0f;
                for (int64_t i = 0; i < N * K; i++)
                    hw[i] = (float)((i * 53 % 89) - 44) / 131.0f;
                for (int64_t i = 0; i < M * N; i++) /* both signs, zero and large magnitudes */
                    hp[i] = (float)((i * 29 % 97) - 48) / 9.0f;
                for (int64_t i = 0; i < M * N; i++)
                    c1[i] = -3.0f; /* overwritten: beta 0 */
                dz = upload(ctx, hz, (size_t)(M * K));
                w = upload(ctx, hw, (size_t)(N * K));
                pre = upload(ctx, hp, (size_t)(M * N));
                ca = upload(ctx, c1, (size_t)(M * N));
                cb = upload(ctx, c1, (size_t)(M * N));
                pre2 = upload(ctx, hp, (size_t)(M * N));
                xa = upload(ctx, c1, (size_t)(M * N));
                mp = clremat_mem(pre);
                mc = clremat_mem(ca);
                ck_assert_int_eq(clremat_ctx_set_gemm(ctx, paths[pi]), CLREMAT_OK);
                /* unfused: dY = dZ W^T, then dY *= act'(pre) in place (layer_dense.c's kernel) */
                ck_assert_int_eq(clremat_gemm(ctx, 0, 1, M, N, K, 1.0f, dz, 0, K, 0, w, 0, K, 0, 0.0f, ca, 0, N, 0, 1),
                                 CLREMAT_OK);
                ck_assert_int_eq(clremat_run1d(ctx, clremat_ew_name(ctx, act, "clremat_act_bwdw", "clremat_act_bwd8"),
                                               clremat_ew_items(ctx, act, M * N), sizeof n, &n, sizeof iact, &iact,
                                               sizeof acc, &acc, sizeof mp, &mp, sizeof mc, &mc, sizeof mc, &mc,
                                               (size_t)0),
                                 CLREMAT_OK);
                ck_assert_int_eq(clremat_op_act_forward(ctx, act, M * N, pre, xa), CLREMAT_OK);
                for (int store = 0; store < 2; store++) {
                    ck_assert_int_eq(clremat_gemm_dact(ctx, 0, 1, M, N, K, dz, K, w, K, cb, act, store ? pre2 : pre,
                                                       store),
                                     CLREMAT_OK);
                    ck_assert_int_eq(clremat_read(ctx, ca, 0, sizeof(float) * (size_t)(M * N), c1), CLREMAT_OK);
                    ck_assert_int_eq(clremat_read(ctx, cb, 0, sizeof(float) * (size_t)(M * N), c2), CLREMAT_OK);
                    for (int64_t i = 0; i < M * N; i++)
                        ck_assert_msg(memcmp(&c1[i], &c2[i], sizeof(float)) == 0,
                                      "%s, act %d, store_act %d, %lldx%lldx%lld: element %lld fused %.9g, unfused %.9g",
                                      clremat_gemm_path_name(paths[pi]), act, store, (long long)M, (long long)N,
                                      (long long)K, (long long)i, (double)c2[i], (double)c1[i]);
                    /* the pre-activation: kept without store_act, act(pre) with it */
                    ck_assert_int_eq(clremat_read(ctx, store ? xa : pre, 0, sizeof(float) * (size_t)(M * N), x1),
                                     CLREMAT_OK);
                    ck_assert_int_eq(clremat_read(ctx, store ? pre2 : pre, 0, sizeof(float) * (size_t)(M * N), x2),
                                     CLREMAT_OK);
                    for (int64_t i = 0; i < M * N; i++)
                        ck_assert_msg(memcmp(&x1[i], &x2[i], sizeof(float)) == 0 &&
                                          (store || memcmp(&x1[i], &hp[i], sizeof(float)) == 0),
                                      "%s, act %d, store_act %d, %lldx%lldx%lld: pre-activation element %lld "
                                      "%.9g after the GEMM, %.9g expected",
                                      clremat_gemm_path_name(paths[pi]), act, store, (long long)M, (long long)N,
                                      (long long)K, (long long)i, (double)x2[i], (double)(store ? x1[i] : hp[i]));
                }
                clremat_pool_release(ctx->pool, dz);
                clremat_pool_release(ctx->pool, w);
                clremat_pool_release(ctx->pool, pre);
                clremat_pool_release(ctx->pool, ca);
                clremat_pool_release(ctx->pool, cb);
                clremat_pool_release(ctx->pool, pre2);
                clremat_pool_release(ctx->pool, xa);
                free(hz);
                free(hw);
                free(hp);
                free(c1);
                free(c2);
                free(x1);
                free(x2);
            }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Training with the activation backward fused (the default) against
 * unfused ($CLREMAT_NO_FUSED_ACT_GRAD=1): on every bundled model of this
 * test and every remat mode, the losses and parameters bitwise identical,
 * the peaks exact in both; on the models with dense -> dense chains, fewer
 * activation-backward launches on the native path under none and
 * activations (full recomputes the producer after its consumer's
 * backward, and overlap recomputes on a queue of its own: unfused there). */
START_TEST(test_act_grad_fused_training)
{
    const char *file = model_files[_i];
    clremat_ctx *ctx;
    clremat_graph *g = test_load_model(file);
    clremat_dataset d;
    const size_t pbytes = (size_t)clremat_graph_param_elems(g) * sizeof(float);
    const int chains = !strcmp(file, "mlp_deep.json") || !strcmp(file, "transformer.json");
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_msg(clremat_data_synthetic(g, NULL, 11, 256, 32, &d) == CLREMAT_OK, "%s", clremat_last_error());
    for (size_t m = 0; m < (test_reduced() ? 2 : N_MODES); m++) {
        run_out u, f;
        act_grad_off = 1;
        run(ctx, g, &d, "adamw", modes[m], 0, &u);
        act_grad_off = 0;
        run(ctx, g, &d, "adamw", modes[m], 0, &f);
        for (int s = 0; s < STEPS; s++)
            ck_assert_msg(memcmp(&u.loss[s], &f.loss[s], sizeof(float)) == 0,
                          "%s %s step %d: fused activation backward loss %.9g, unfused %.9g", file, modes[m], s,
                          (double)f.loss[s], (double)u.loss[s]);
        ck_assert_msg(memcmp(u.params, f.params, pbytes) == 0, "%s %s: parameters differ with the activation "
                      "backward fused", file, modes[m]);
        ck_assert_msg(u.measured == u.predicted && f.measured == f.predicted,
                      "%s %s: unfused peak %llu (predicted %llu), fused %llu (predicted %llu)", file, modes[m],
                      (unsigned long long)u.measured, (unsigned long long)u.predicted,
                      (unsigned long long)f.measured, (unsigned long long)f.predicted);
        /* fewer on the native path where P's pre-activation is resident at
         * its consumer's backward: none (kept) and activations (the
         * pre-activation kept, the output discarded); full recomputes P
         * after that backward; CLBlast runs the GEMM and then the kernel */
        if (chains && clremat_gemm_resolve(ctx) == CLREMAT_GEMM_NATIVE &&
            (!strcmp(modes[m], "none") || !strcmp(modes[m], "activations")))
            ck_assert_msg(f.act_bwd_launches < u.act_bwd_launches, "%s %s: %d activation-backward launches fused, "
                          "%d unfused", file, modes[m], f.act_bwd_launches, u.act_bwd_launches);
        else
            ck_assert_msg(f.act_bwd_launches <= u.act_bwd_launches, "%s %s: %d activation-backward launches fused, "
                          "%d unfused", file, modes[m], f.act_bwd_launches, u.act_bwd_launches);
        fprintf(stderr, "%s %s: activation-backward launches %d unfused, %d fused\n", file, modes[m],
                u.act_bwd_launches, f.act_bwd_launches);
        free(u.params);
        free(f.params);
    }
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* The predicate: optimizer, the user's switch, accumulation, replicas. */
START_TEST(test_fused_predicate)
{
    clremat_fused_query q;
    clremat_graph *g = test_load_model("mlp_deep.json");
    clremat_plan_input in;
    memset(&q, 0, sizeof q);
    for (int k = CLREMAT_OPT_SGD; k <= CLREMAT_OPT_ADAMW; k++) {
        q.opt_kind = k;
        ck_assert_int_eq(clremat_fused_update_applies(&q), 1);
    }
    q.opt_kind = CLREMAT_OPT_ADAMW + 1;
    ck_assert_int_eq(clremat_fused_update_applies(&q), 0);
    q.opt_kind = CLREMAT_OPT_ADAM;
    q.disabled = 1;
    ck_assert_int_eq(clremat_fused_update_applies(&q), 0);
    q.disabled = 0;
    q.accumulate = 1;
    ck_assert_int_eq(clremat_fused_update_applies(&q), 1);
    q.accumulate = 4;
    ck_assert_int_eq(clremat_fused_update_applies(&q), 0);
    q.accumulate = 0;
    q.replicas = 2;
    ck_assert_int_eq(clremat_fused_update_applies(&q), 0);
    ck_assert_int_eq(clremat_fused_update_applies(NULL), 0);
    /* per parameter: one use each in the IR; invalid indices none */
    ck_assert_int_eq(clremat_param_uses(g, 0, 0), 1);
    ck_assert_int_eq(clremat_param_uses(g, 0, CLREMAT_MAX_PARAMS), 0);
    ck_assert_int_eq(clremat_param_uses(g, g->n_layers, 0), 0);
    /* the planner's gradient bytes: all unfused, none fused */
    memset(&in, 0, sizeof in);
    in.g = g;
    ck_assert_uint_eq(clremat_plan_grad_bytes(&in), (uint64_t)clremat_graph_param_elems(g) * sizeof(float));
    in.fused_update = 1;
    ck_assert_uint_eq(clremat_plan_grad_bytes(&in), 0);
    clremat_graph_free(g);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("fused", 900, &tc);
    tcase_add_test(tc, test_fused_predicate);
    tcase_add_test(tc, test_fused_activation_read_bitwise);
    tcase_add_loop_test(tc, test_fused_bitwise_and_exact, 0, (int)N_MODELS);
    tcase_add_test(tc, test_act_grad_gemm_bitwise);
    tcase_add_loop_test(tc, test_act_grad_fused_training, 0, (int)N_MODELS);
    return test_run_device_suite(s);
}
