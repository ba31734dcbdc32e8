/* test_loop_budget.c: the per-work-item loop budget (backend/loop_budget.h;
 * Mesa's llvmpipe leaves a work-item's loops silently after 65535
 * iterations in all). Without a device: the bounds of the kernels' loops
 * (one per family, from the loops of kernels.cl), that every kernel the
 * table names exists in kernels.cl, the split arithmetic, and the refusal's
 * message (kernel, loop, iterations, budget, device). On a device: a launch
 * over the budget is refused before anything is enqueued; the column sums
 * of 70001 x 13 floats (five tail columns) split into launches under a
 * small budget give the same bits as under the device's own budget (none on
 * PoCL: one launch; llvmpipe's on rusticl, where one launch would leave
 * its loops early) and the host's double sums; and the native GEMM split
 * into launches over K gives the same bits as one launch, plain and with
 * the dense epilogue; bundled models (float32 and mixed bfloat16) trained
 * three steps under a small budget for every kernel but the native GEMM,
 * so that their row sums, token scans and losses go in split launches,
 * end with the losses and parameters of the same run without a budget, bit
 * for bit, and a model over the budget is refused, naming its layer, before
 * a step runs; a GEMM calibration made under a budget is not taken
 * without it. The layers' split launches are checked against their double
 * references in test_layers_core (dense), test_layers_seq (layernorm,
 * embedding, cross-entropy) and test_layers_llm (rmsnorm). */
#include "testutil.h"
#include "testmodel.h"
#include "backend.h"
#include "data.h"
#include "executor.h"
#include "colsum.h"
#include "gemm.h"
#include "layers.h"
#include "loop_budget.h"
#include "kernel_run.h"
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static int64_t iters(const char *k, const int64_t *a, int n) { return clremat_loop_iterations(k, a, n, NULL); }

START_TEST(test_bounds)
{
    /* column sums: one walk for the whole blocks, one per tail column */
    const int64_t cs[] = {70000, 13, 13, 0, 1};
    ck_assert_int_eq(iters("clremat_colsum8", cs, 5), 16 + 5 + 70000 * 6);
    ck_assert_int_eq(iters("clremat_colsum8_upd16", cs, 3), 16 + 5 + 70000 * 6);
    /* cross-entropy: three passes over the classes; a Llama vocabulary is over llvmpipe's budget */
    const int64_t ce[] = {512, 32000};
    ck_assert_int_eq(iters("ce_backward", ce, 2), 96003);
    ck_assert_int_gt(iters("ce_backward16", ce, 2), CLREMAT_LLVMPIPE_LOOP_BUDGET);
    ck_assert_int_eq(iters("ce_forward_rows", ce, 2), 64002);
    /* layernorm: three passes forward, two backward, rows [r0, rows) for the parameters */
    const int64_t ln[] = {4096, 1000, 0, 0, 0, 0, 0, 1024};
    ck_assert_int_eq(iters("ln_forward", ln, 2), 3003);
    ck_assert_int_eq(iters("ln_backward_dx", ln, 2), 2002);
    ck_assert_int_eq(iters("ln_backward_params", ln, 8), 4096 - 1024 + 1);
    /* the embedding's tokens [t0, t1): dim + 2 + tokens * (dim + 1) */
    const int64_t emb[] = {300, 64, 1000, 0, 0, 0, 100};
    ck_assert_int_eq(iters("emb_backward_table", emb, 7), 66 + 200 * 65);
    ck_assert_int_eq(iters("emb_backward_table_acc", emb, 7), 66 + 200 * 65);
    /* the loss's rows [i0, i1) */
    const int64_t loss[] = {100000, 1, 0, 0, 0, 40000, 50000};
    ck_assert_int_eq(iters("seq_loss_finish", loss, 7), 20002);
    /* memory-efficient attention at T = 512, dh = 64: over llvmpipe's budget */
    const int64_t fl[] = {512, 4, 4, 64, 0, 0, 0, 0, 0, 1, 0, 16, 16};
    ck_assert_int_gt(iters("flash_attn_fwd", fl, 13), CLREMAT_LLVMPIPE_LOOP_BUDGET);
    /* the tiled GEMM: 40 a 16-deep k-tile */
    const int64_t tg[] = {0, 0, 64, 64, 1600};
    ck_assert_int_eq(iters("clremat_gemm_tiled", tg, 5), 101 * 40);
    /* elementwise kernels have no loop over a size; the native GEMM keeps its own budget */
    ck_assert_int_eq(iters("clremat_add8", cs, 2), -1);
    ck_assert_int_eq(iters("clremat_gemm_cpu", cs, 5), -1);
}
END_TEST

/* Every kernel the table names is a kernel of kernels.cl (a renamed kernel
 * would silently lose its check). */
START_TEST(test_names_exist)
{
    static const char *const names[] = {
        "clremat_colsum", "clremat_colsum8", "clremat_colsum8_16", "clremat_colsum8_upd", "clremat_colsum8_upd16",
        "clremat_sum_bcast", "ln_forward", "ln_forward16", "ln_backward_dx", "ln_backward_dx16",
        "ln_backward_dx_act", "rms_forward", "rms_backward_dx", "ln_backward_params", "ln_backward_params_act",
        "rms_backward_scale", "ln_backward_params16", "emb_backward_table", "emb_backward_table_acc",
        "emb_backward_table16", "emb_backward_pos", "emb_backward_pos16", "attn_softmax_fwd", "attn_softmax_fwd16",
        "attn_softmax_bwd", "attn_softmax_bwd16", "ce_forward_rows", "ce_forward_rows16", "ce_backward",
        "ce_backward16", "mse_partial", "seq_loss_finish", "flash_attn_fwd", "flash_attn_bwd_dkdv",
        "flash_attn_bwd_dq", "flash_attn_bwd_dot", "conv_col2im", "pool2d_fwd", "pool2d_bwd", "gap_fwd",
        "bn_stats_part", "bn_bwd_part", "bn_stats_finish", "bn_bwd_finish", "bn_apply", "bn_bwd_dx",
        "conv_fwd_direct", "conv_bwd_data_direct", "conv_wgrad_direct", "conv_dw_wgrad", "conv_wgrad_reduce",
        "conv_dw_fwd", "conv_dw_bwd_data", "clremat_gemm_tiled"};
    const int64_t a[CLREMAT_LOOP_MAX_ARGS] = {0};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char pat[96];
        snprintf(pat, sizeof pat, "void %s(", names[i]);
        ck_assert_msg(strstr(clremat_kernels_source, pat) != NULL, "kernel %s is not in kernels.cl", names[i]);
        ck_assert_msg(iters(names[i], a, CLREMAT_LOOP_MAX_ARGS) >= 0, "kernel %s has no bound", names[i]);
    }
}
END_TEST

START_TEST(test_chunks)
{
    clremat_ctx c;
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(clremat_loop_chunk(&c, 10, 9, 5000), 5000); /* no budget: everything at once */
    c.loop_budget = 100;
    ck_assert_int_eq(clremat_loop_chunk(&c, 10, 9, 5000), 10);   /* 10 + 9 * 10 = 100 */
    ck_assert_int_eq(clremat_loop_chunk(&c, 10, 9, 7), 7);
    ck_assert_int_eq(clremat_loop_chunk(&c, 10, 200, 7), 1);     /* one, which the check then refuses */
    ck_assert_int_eq(clremat_loop_chunk(&c, 10, 0, 7), 7);
    /* the column sums' launches keep within the budget */
    c.loop_budget = CLREMAT_LLVMPIPE_LOOP_BUDGET;
    for (int64_t cols = 1; cols <= 17; cols++) {
        const int64_t rows = clremat_colsum_rows_per_launch(&c, 1000000, cols);
        const int64_t a[2] = {rows, cols}, b[2] = {rows + 1, cols};
        ck_assert_int_le(iters("clremat_colsum8", a, 2), c.loop_budget);
        ck_assert_int_gt(iters("clremat_colsum8", b, 2), c.loop_budget);
    }
}
END_TEST

START_TEST(test_message)
{
    clremat_ctx c;
    const int64_t ln[] = {1, 30000};
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(clremat_loop_check(&c, "ln_forward", ln, 2), CLREMAT_OK);
    c.loop_budget = CLREMAT_LLVMPIPE_LOOP_BUDGET;
    snprintf(c.info.name, sizeof c.info.name, "llvmpipe (LLVM 15.0.6, 256 bits)");
    ck_assert_int_eq(clremat_loop_check(&c, "ln_forward", ln, 2), CLREMAT_ERR_TOO_LARGE);
    const char *m = clremat_ctx_last_error(&c);
    ck_assert_msg(strstr(m, "ln_forward") && strstr(m, "90003") && strstr(m, "65535") && strstr(m, "llvmpipe") &&
                      strstr(m, "layernorm"),
                  "message: %s", m);
    c.loop_budget = 1000;
    c.loop_budget_env = 1;
    ck_assert_int_eq(clremat_loop_check(&c, "ln_forward", ln, 2), CLREMAT_ERR_TOO_LARGE);
    m = clremat_ctx_last_error(&c);
    ck_assert_msg(strstr(m, "CLREMAT_LOOP_BUDGET") && strstr(m, "1000"), "message: %s", m);
    const int64_t ok[] = {1, 332};
    ck_assert_int_eq(clremat_loop_check(&c, "ln_forward", ok, 2), CLREMAT_OK);
}
END_TEST

/* A launch over the budget is refused before it is enqueued. */
START_TEST(test_refused_before_launch)
{
    clremat_ctx *ctx;
    clremat_buf *x;
    cl_int rows = 1, D = 30000;
    cl_float eps = 1e-5f;
    cl_mem m;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (size_t)D * sizeof(float), "x", &x), CLREMAT_OK);
    m = clremat_mem(x);
    ctx->loop_budget = CLREMAT_LLVMPIPE_LOOP_BUDGET;
    clremat_ctx_fail_launch_at(ctx, 0, 0); /* starts the launch count */
    ck_assert_int_eq(clremat_run1d(ctx, "ln_forward", rows, sizeof rows, &rows, sizeof D, &D, sizeof eps, &eps,
                                   sizeof m, &m, sizeof m, &m, sizeof m, &m, sizeof m, &m, sizeof m, &m, (size_t)0),
                     CLREMAT_ERR_TOO_LARGE);
    ck_assert_uint_eq(clremat_ctx_launch_count(ctx), 0);
    ck_assert_ptr_nonnull(strstr(clremat_ctx_last_error(ctx), "ln_forward"));
    clremat_pool_release(ctx->pool, x);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Column sums of x (rows x cols) on the device under ctx's budget. */
static void device_colsum(clremat_ctx *ctx, const clremat_buf *x, clremat_buf *y, int64_t rows, int64_t cols,
                          float *out)
{
    ck_assert_int_eq(clremat_colsum(ctx, "test", rows, cols, cols, 0, x, 0, y), CLREMAT_OK);
    ck_assert_int_eq(clremat_finish(ctx), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, y, 0, (size_t)cols * sizeof(float), out), CLREMAT_OK);
}

START_TEST(test_colsum_split_bits)
{
    enum { ROWS = 70001, COLS = 13 };
    clremat_ctx *ctx;
    clremat_buf *x, *y;
    float *h = malloc((size_t)ROWS * COLS * sizeof(float)), own[COLS], small[COLS], one[COLS];
    double ref[COLS] = {0}, mag[COLS] = {0};
    int64_t device_budget;
    ck_assert_ptr_nonnull(h);
    for (int64_t i = 0; i < (int64_t)ROWS * COLS; i++) /* sums that round differently in another order; mean 0.5 */
        h[i] = 0.5f + (float)sin(0.013 * (double)i) * (1.0f + (float)(i % 11) * 0.37f);
    for (int64_t r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            ref[c] += h[r * COLS + c];
            mag[c] += fabs(h[r * COLS + c]);
        }
    TEST_OPEN_CTX(ctx, 0);
    device_budget = ctx->loop_budget;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (size_t)ROWS * COLS * sizeof(float), "x", &x), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, COLS * sizeof(float), "y", &y), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, x, 0, (size_t)ROWS * COLS * sizeof(float), h), CLREMAT_OK);
    device_colsum(ctx, x, y, ROWS, COLS, own); /* the device's own budget: none on PoCL, llvmpipe's on rusticl */
    ctx->loop_budget = 1000;
    device_colsum(ctx, x, y, ROWS, COLS, small); /* 70001 rows in 47-row launches */
    ck_assert_int_eq(clremat_colsum_rows_per_launch(ctx, ROWS, COLS), (1000 - 21) / 6);
    for (int c = 0; c < COLS; c++) {
        ck_assert_msg(memcmp(&own[c], &small[c], sizeof(float)) == 0, "column %d: %.9g in one launch or %lld, %.9g in "
                      "launches of %lld rows", c, own[c], (long long)clremat_colsum_rows_per_launch(ctx, ROWS, COLS),
                      small[c], (long long)((1000 - 21) / 6));
        ck_assert_msg(fabs(own[c] - ref[c]) <= 1e-4 * mag[c], "column %d: %.9g, host %.9g", c, own[c], ref[c]);
    }
    if (device_budget > 0) { /* what one launch does on this device: printed, not held to */
        ctx->loop_budget = 0;
        device_colsum(ctx, x, y, ROWS, COLS, one);
        printf("loop budget %lld: one launch of 70001 rows gives column 0 = %.9g (host %.9g), split launches %.9g\n",
               (long long)device_budget, one[0], ref[0], own[0]);
    }
    clremat_pool_release(ctx->pool, x);
    clremat_pool_release(ctx->pool, y);
    clremat_ctx_destroy(ctx);
    free(h);
}
END_TEST

/* The native GEMM's launches over parts of K (the weight gradient's shape,
 * a long K) give the bits of one launch, plain and with a bias epilogue. */
START_TEST(test_native_k_split_bits)
{
    enum { M = 40, N = 24, K = 3000 };
    clremat_ctx *ctx;
    clremat_buf *A, *B, *C, *bias, *out;
    float *ha = malloc(M * K * sizeof(float)), *hb = malloc(K * N * sizeof(float)), c1[M * N], c2[M * N];
    float o1[M * N], o2[M * N];
    ck_assert_ptr_nonnull(ha);
    ck_assert_ptr_nonnull(hb);
    for (int i = 0; i < M * K; i++)
        ha[i] = (float)sin(0.37 * i) * 1.3f;
    for (int i = 0; i < K * N; i++)
        hb[i] = (float)cos(0.11 * i);
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_ctx_set_gemm(ctx, CLREMAT_GEMM_NATIVE), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, M * K * sizeof(float), "A", &A), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, K * N * sizeof(float), "B", &B), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, M * N * sizeof(float), "C", &C), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, A, 0, M * K * sizeof(float), ha), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, B, 0, K * N * sizeof(float), hb), CLREMAT_OK);
    for (int tA = 0; tA < 2; tA++) {
        ctx->loop_budget = 0, ctx->gemm_max_iterations = 0;
        ck_assert_int_eq(clremat_gemm(ctx, tA, 0, M, N, K, 1.0f, A, 0, tA ? M : K, 0, B, 0, N, 0, 0.0f, C, 0, N, 0, 1),
                         CLREMAT_OK);
        ck_assert_int_eq(clremat_read(ctx, C, 0, sizeof c1, c1), CLREMAT_OK);
        ctx->loop_budget = 8000, ctx->gemm_max_iterations = 6000; /* a few k-blocks a launch */
        ck_assert_int_eq(clremat_gemm(ctx, tA, 0, M, N, K, 1.0f, A, 0, tA ? M : K, 0, B, 0, N, 0, 0.0f, C, 0, N, 0, 1),
                         CLREMAT_OK);
        ck_assert_int_eq(clremat_read(ctx, C, 0, sizeof c2, c2), CLREMAT_OK);
        ck_assert_msg(memcmp(c1, c2, sizeof c1) == 0, "tA %d: K in parts differs from one launch", tA);
    }
    /* the dense forward: bias and ReLU on the last part only (pre, out) */
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, N * sizeof(float), "bias", &bias), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, M * N * sizeof(float), "out", &out), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, bias, 0, N * sizeof(float), hb), CLREMAT_OK);
    for (int split = 0; split < 2; split++) {
        ctx->loop_budget = split ? 8000 : 0, ctx->gemm_max_iterations = split ? 6000 : 0;
        ck_assert_int_eq(clremat_gemm_dense_on(ctx, CLREMAT_GEMM_NATIVE, M, K, N, A, B, bias, CLREMAT_ACT_RELU, C, out),
                         CLREMAT_OK);
        ck_assert_int_eq(clremat_read(ctx, C, 0, sizeof c1, split ? c2 : c1), CLREMAT_OK);
        ck_assert_int_eq(clremat_read(ctx, out, 0, sizeof o1, split ? o2 : o1), CLREMAT_OK);
    }
    ck_assert_msg(memcmp(c1, c2, sizeof c1) == 0 && memcmp(o1, o2, sizeof o1) == 0,
                  "dense epilogue: K in parts differs from one launch");
    for (int i = 0; i < M * N; i++)
        ck_assert_msg(o1[i] == (c1[i] > 0.0f ? c1[i] : 0.0f), "out %d is not relu(pre)", i);
    clremat_pool_release(ctx->pool, bias);
    clremat_pool_release(ctx->pool, out);
    clremat_pool_release(ctx->pool, A);
    clremat_pool_release(ctx->pool, B);
    clremat_pool_release(ctx->pool, C);
    clremat_ctx_destroy(ctx);
    free(ha);
    free(hb);
}
END_TEST

/* A GEMM calibration made under a budget (where the native products may be
 * refused and lose) is cached apart: a context without the budget does
 * not take its decision. On PoCL, where the native path wins by about five
 * times, the context without a budget must resolve to it. */
START_TEST(test_calibration_keyed_by_budget)
{
    clremat_ctx *ctx;
    clremat_gemm_path budgeted, plain;
    char dir[] = "/tmp/clremat-calXXXXXX", cmd[128];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XDG_CACHE_HOME", dir, 1); /* no calibration cached yet (this test's own process) */
    TEST_OPEN_CTX(ctx, 0);
    if (!strstr(ctx->info.platform, "Portable Computing Language")) {
        printf("calibration under a budget: not checked on %s\n", ctx->info.platform);
        clremat_ctx_destroy(ctx);
        rmdir(dir);
        return;
    }
    ctx->loop_budget = 3000, ctx->loop_budget_env = 1, ctx->gemm_max_iterations = 2250; /* no native k-block fits */
    budgeted = clremat_gemm_resolve(ctx);
    clremat_ctx_destroy(ctx);
    TEST_OPEN_CTX(ctx, 0);
    plain = clremat_gemm_resolve(ctx);
    printf("calibration: %s under a budget of 3000, %s without\n", clremat_gemm_path_name(budgeted),
           clremat_gemm_path_name(plain));
    clremat_ctx_destroy(ctx);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(plain, CLREMAT_GEMM_NATIVE);
}
END_TEST

#define STEPS 3
#define BATCH 8

/* Losses and parameters after STEPS Adam steps of g on ctx (native GEMM). */
static float *train(clremat_ctx *ctx, clremat_graph *g, const clremat_dataset *d, float *loss)
{
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t;
    float *x = malloc(sizeof(float) * (size_t)(BATCH * d->train.x_elems));
    float *y = malloc(sizeof(float) * (size_t)(BATCH * d->train.y_elems)), *params;
    ck_assert_int_eq(clremat_policy_parse("none", &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults("adam", &opt), 0);
    ck_assert_msg(clremat_trainer_new_costs(ctx, g, BATCH, &pol, &opt, 11, NULL, 0, &t) == CLREMAT_OK, "%s: %s",
                  g->name, clremat_ctx_last_error(ctx));
    for (int s = 0; s < STEPS; s++) {
        float correct;
        clremat_data_batch(&d->train, 11, s, BATCH, x, y);
        ck_assert_msg(clremat_trainer_step(t, x, y, &loss[s], &correct) == CLREMAT_OK, "%s step %d: %s", g->name, s,
                      clremat_ctx_last_error(ctx));
    }
    params = malloc(t->plan.param_bytes);
    ck_assert_int_eq(clremat_trainer_get_params(t, params), CLREMAT_OK);
    clremat_trainer_free(t);
    free(x);
    free(y);
    return params;
}

START_TEST(test_models_split_bits)
{
    static const struct {
        const char *file;
        int precision;
        int64_t budget;
    } runs[] = {{"mlp_deep.json", CLREMAT_PREC_FLOAT32, 64},       {"resnet_mlp.json", CLREMAT_PREC_FLOAT32, 300},
                {"transformer.json", CLREMAT_PREC_FLOAT32, 300},   {"llama_tiny.json", CLREMAT_PREC_FLOAT32, 600},
                {"transformer.json", CLREMAT_PREC_MIXED_BFLOAT16, 300}, {"llama_tiny.json", CLREMAT_PREC_MIXED_BFLOAT16, 600}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0] && !(test_reduced() && i >= 3); i++) {
        clremat_graph *g = test_load_model(runs[i].file); /* (once loaded before the reduced run's stop: a leak) */
        clremat_dataset d;
        clremat_ctx *ctx;
        float loss1[STEPS], loss2[STEPS], *p1, *p2;
        const size_t pbytes = (size_t)clremat_graph_param_elems(g) * sizeof(float);
        g->precision = runs[i].precision;
        ck_assert_msg(clremat_data_synthetic(g, NULL, 11, 64, 16, &d) == CLREMAT_OK, "%s", clremat_last_error());
        TEST_OPEN_CTX(ctx, 0);
        ck_assert_int_eq(clremat_ctx_set_gemm(ctx, CLREMAT_GEMM_NATIVE), CLREMAT_OK);
        ctx->loop_budget = 0, ctx->gemm_max_iterations = 0;
        p1 = train(ctx, g, &d, loss1);
        ctx->loop_budget = runs[i].budget, ctx->loop_budget_env = 1;
        p2 = train(ctx, g, &d, loss2);
        ck_assert_msg(memcmp(loss1, loss2, sizeof loss1) == 0, "%s (precision %d): losses %.9g %.9g %.9g without a "
                      "budget, %.9g %.9g %.9g under %lld", runs[i].file, runs[i].precision, loss1[0], loss1[1],
                      loss1[2], loss2[0], loss2[1], loss2[2], (long long)runs[i].budget);
        ck_assert_msg(memcmp(p1, p2, pbytes) == 0, "%s (precision %d): parameters differ under a budget of %lld",
                      runs[i].file, runs[i].precision, (long long)runs[i].budget);
        free(p1);
        free(p2);
        clremat_ctx_destroy(ctx);
        clremat_data_free(&d);
        clremat_graph_free(g);
    }
}
END_TEST

/* A model that cannot keep within the budget is refused when its trainer
 * is made (the layers' dry run), naming the layer and the kernel, and no
 * step runs. */
START_TEST(test_model_refused_at_plan)
{
    clremat_graph *g = test_load_model("llama_tiny.json");
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t = NULL;
    clremat_ctx *ctx;
    const char *m;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_ctx_set_gemm(ctx, CLREMAT_GEMM_NATIVE), CLREMAT_OK);
    ctx->loop_budget = 100, ctx->loop_budget_env = 1, ctx->gemm_max_iterations = 0; /* vocabulary 64: 195 */
    ck_assert_int_eq(clremat_policy_parse("none", &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults("adam", &opt), 0);
    clremat_ctx_fail_launch_at(ctx, 0, 0); /* starts the launch count */
    ck_assert_int_eq(clremat_trainer_new_costs(ctx, g, BATCH, &pol, &opt, 11, NULL, 0, &t), CLREMAT_ERR_TOO_LARGE);
    ck_assert_ptr_null(t);
    ck_assert_uint_eq(clremat_ctx_launch_count(ctx), 0);
    m = clremat_ctx_last_error(ctx);
    ck_assert_msg(strstr(m, "layer ") && strstr(m, "kernel ") && strstr(m, "CLREMAT_LOOP_BUDGET"), "message: %s", m);
    printf("refused: %s\n", m);
    clremat_ctx_destroy(ctx);
    clremat_graph_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loop_budget");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_bounds);
    tcase_add_test(tc, test_names_exist);
    tcase_add_test(tc, test_chunks);
    tcase_add_test(tc, test_message);
    suite_add_tcase(s, tc);
    if (!test_have_device()) {
        int rc = test_run_suite(s);
        return rc != EXIT_SUCCESS ? rc : TEST_SKIP;
    }
    tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_refused_before_launch);
    tcase_add_test(tc, test_colsum_split_bits);
    tcase_add_test(tc, test_native_k_split_bits);
    tcase_add_test(tc, test_calibration_keyed_by_budget);
    tcase_add_test(tc, test_models_split_bits);
    tcase_add_test(tc, test_model_refused_at_plan);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
