/* stream_bench.c: memory bandwidth of the elementwise and optimizer kernels
 * against a STREAM-like copy kernel on the same device, in one process.
 * Usage: stream_bench [--device SEL] [--floats N] [--reps N]
 * Prints JSON: for each kernel the bytes it moves per call (each array read
 * or written once), the median seconds over reps timed calls (host clock
 * around clFinish, after a warm-up), GB/s and the ratio to the copy's GB/s.
 * The kernels alternate within each rep (copy, then every other kernel once),
 * so load from other processes hits all of them alike.
 * Kernels (the ones training launches, with the launchers' arguments):
 * clremat_stream_copy8 (2 arrays), clremat_act_fwd8 GELU (2),
 * clremat_act_bwd8 GELU in place (3: x, dy read, dx written),
 * clremat_dropout8 rate 0.1 (2), clremat_add8 (3), clremat_copy_acc8 with
 * acc (3: the gradient accumulation dst += src), clremat_colsum8 (the bias
 * gradient: rows x cols read, cols written, rows = 256), clremat_sgd_step
 * (5: p, g, v read; p, v written), clremat_adam_step as Adam and AdamW (7:
 * p, g, m, v read; p, m, v written); batchnorm's training forward and
 * backward through the layer's launchers (backend/layer_batchnorm.c) on
 * [floats / 16, 16], ResNet-20's first stage: forward 3 arrays (x read by
 * the statistics and by the normalization, y written; the per-block
 * partials are small), backward 5 (x and dy read by the sums and by the
 * input gradient, dx written).
 * Mixed precision (issue 16): the 16-bit kernels the mixed layers launch,
 * every array in bfloat16 and then in binary16 (2 bytes an element):
 * clremat_cvt16x8 with GELU (the activation forward), clremat_act_bwd16
 * GELU in place, clremat_dropout16 (on 16-lane devices the wide kernels
 * training launches there: clremat_cvt16w, clremat_act_bwd16w,
 * clremat_dropout16w), clremat_add16; GELU over at least
 * CLREMAT_ACT_TABLE_MIN_ELEMS elements as the mixed layers launch it there,
 * by table (act_table.h: the table taken from the pool and filled, then
 * clremat_cvt16_table / clremat_act_bwd16_table, all inside the timing).
 * Each also reports
 * vs_float32, its median time over that of the float32 kernel doing the same
 * on the same number of elements (0.5 would be the bytes' ratio). */
#include "bench_util.h"
#include "backend.h"
#include "colsum.h"
#include "kernel_run.h"
#include "optim.h"
#include "layers.h"
#include "mixed_precision.h"
#include "act_table.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { K_COPY, K_ACT_FWD, K_ACT_BWD, K_DROPOUT, K_ADD, K_ACC, K_COLSUM, K_SGD, K_ADAM, K_ADAMW, K_BN_FWD, K_BN_BWD,
       K_ACT_FWD_BF, K_ACT_BWD_BF, K_DROPOUT_BF, K_ADD_BF, K_ACT_FWD_H, K_ACT_BWD_H, K_DROPOUT_H, K_ADD_H, K_COUNT };
enum { K_FIRST16 = K_ACT_FWD_BF, K_PER_FMT = K_ACT_FWD_H - K_ACT_FWD_BF };
static const char *const names[K_COUNT] = {"copy",     "gelu_forward", "gelu_backward", "dropout",
                                           "add",      "grad_accumulate", "bias_grad",   "sgd_step",
                                           "adam_step", "adamw_step",  "batchnorm_forward", "batchnorm_backward",
                                           "gelu_forward_bf16", "gelu_backward_bf16", "dropout_bf16", "add_bf16",
                                           "gelu_forward_fp16", "gelu_backward_fp16", "dropout_fp16", "add_fp16"};
static const double arrays[K_COUNT] = {2, 2, 3, 2, 3, 3, 1 + 1.0 / 256, 5, 7, 7, 3, 5, 2, 3, 2, 3, 2, 3, 2, 3};
/* the float32 kernel a 16-bit one does the work of */
static const int twin[K_PER_FMT] = {K_ACT_FWD, K_ACT_BWD, K_DROPOUT, K_ADD};

static int elem_bytes(int k)
{
    return k >= K_FIRST16 ? 2 : 4;
}
enum { COLSUM_ROWS = 256, BN_C = 16 };

/* A batchnorm layer (gamma, beta, moving mean and variance) on [BN_C] and
 * its buffers besides the stream arrays: stats, parameters, gradients and
 * the workspaces its cost asks for. */
typedef struct bn_bench {
    clremat_layer L;
    clremat_graph g;
    clremat_layer_cost cost;
    clremat_buf *stats, *param[4], *grad[4], *fws, *bws;
} bn_bench;

static int bn_open(clremat_ctx *ctx, bn_bench *bn, int64_t rows)
{
    static const char *const pname[4] = {"gamma", "beta", "moving_mean", "moving_variance"};
    const float one[BN_C] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    int st;
    memset(bn, 0, sizeof *bn);
    snprintf(bn->L.name, sizeof bn->L.name, "bn");
    bn->L.type = CLREMAT_BATCHNORM;
    bn->L.n_inputs = 1;
    bn->L.inputs[0] = -1;
    bn->L.block = -1;
    bn->L.in_shape[0].rank = 1;
    bn->L.in_shape[0].dims[0] = BN_C;
    bn->L.out_shape = bn->L.in_shape[0];
    bn->L.eps = 1e-3;
    bn->L.momentum = 0.99;
    bn->L.center = bn->L.scale = 1;
    for (int p = 0; p < 4; p++) {
        snprintf(bn->L.params[p].name, sizeof bn->L.params[p].name, "%s", pname[p]);
        bn->L.params[p].shape = bn->L.in_shape[0];
        bn->L.params[p].elems = BN_C;
        bn->L.params[p].frozen = p >= 2;
    }
    bn->L.n_params = 4;
    snprintf(bn->g.name, sizeof bn->g.name, "stream_bench");
    bn->g.layers = &bn->L;
    bn->g.n_layers = bn->g.cap_layers = 1;
    bn->g.open_block = -1;
    bn->g.finalized = 1;
    if ((st = clremat_layer_cost_of(&bn->g, 0, rows, &bn->cost)) != CLREMAT_OK ||
        (st = clremat_pool_alloc(ctx->pool, 3 * BN_C * sizeof(float), "bn stats", &bn->stats)) != CLREMAT_OK ||
        (st = clremat_pool_alloc(ctx->pool, bn->cost.fwd_temp_bytes, "bn fwd workspace", &bn->fws)) != CLREMAT_OK ||
        (st = clremat_pool_alloc(ctx->pool, bn->cost.bwd_temp_bytes, "bn bwd workspace", &bn->bws)) != CLREMAT_OK)
        return st;
    for (int p = 0; p < 4; p++)
        if ((st = clremat_pool_alloc(ctx->pool, sizeof one, "bn param", &bn->param[p])) != CLREMAT_OK ||
            (st = clremat_write(ctx, bn->param[p], 0, sizeof one, one)) != CLREMAT_OK ||
            (st = clremat_pool_alloc(ctx->pool, sizeof one, "bn grad", &bn->grad[p])) != CLREMAT_OK)
            return st;
    return CLREMAT_OK;
}

static void bn_close(clremat_ctx *ctx, bn_bench *bn)
{
    clremat_buf *bs[3] = {bn->stats, bn->fws, bn->bws};
    for (int i = 0; i < 3; i++)
        if (bs[i])
            clremat_pool_release(ctx->pool, bs[i]);
    for (int p = 0; p < 4; p++) {
        if (bn->param[p])
            clremat_pool_release(ctx->pool, bn->param[p]);
        if (bn->grad[p])
            clremat_pool_release(ctx->pool, bn->grad[p]);
    }
}

/* The layer's training forward (x = b[0], y = b[1]) or backward (dy =
 * b[2], dx = b[1]), as the executor calls it. */
static int bn_launch(clremat_ctx *ctx, bn_bench *bn, int backward, int64_t rows, clremat_buf *b[4])
{
    clremat_layer_call c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.g = &bn->g;
    c.batch = rows;
    c.in[0] = b[0];
    c.slot[0] = b[1];
    c.slot[1] = bn->stats;
    for (int p = 0; p < 4; p++) {
        c.param[p] = bn->param[p];
        c.grad[p] = bn->grad[p];
    }
    if (!backward) {
        c.temp = bn->fws;
        return clremat_layer_forward(&c);
    }
    c.temp = bn->bws;
    c.dout = b[2];
    c.din[0] = b[1];
    return clremat_layer_backward(&c);
}

/* What a mixed GELU layer's launch does where it reads a table
 * (act_table.h): takes the table from the pool, fills it, looks it up over
 * the n elements of h (forward: h[1] = GELU(h[0]); backward in place:
 * h[2] *= GELU'(h[0])), releases it. */
static int gelu16_by_table(clremat_ctx *ctx, int backward, cl_int n, cl_int fmt, clremat_buf *h[3])
{
    clremat_buf *table = NULL;
    int st = clremat_pool_alloc(ctx->pool, (size_t)CLREMAT_ACT_TABLE_ENTRIES * sizeof(float), "table", &table);
    if (st == CLREMAT_OK)
        st = clremat_act_table_fill(ctx, table, CLREMAT_ACT_GELU_TANH, fmt, backward);
    if (st == CLREMAT_OK)
        st = backward ? clremat_op_mul_dact_table(ctx, n, table, h[0], h[2], fmt, h[2], fmt, 0)
                      : clremat_op_convert_table(ctx, h[0], h[1], fmt, n, table, 1.0f, 0);
    if (table)
        clremat_pool_release(ctx->pool, table);
    return st;
}

/* The 16-bit kernels on h (three arrays of format fmt), with the float32
 * kernels' arguments. */
static int launch16(clremat_ctx *ctx, int k, cl_int n, cl_int fmt, clremat_buf *h[3], int64_t step)
{
    cl_mem m0 = clremat_mem(h[0]), m1 = clremat_mem(h[1]), m2 = clremat_mem(h[2]);
    cl_int act = 2 /* CLREMAT_ACT_GELU_TANH */, acc = 0;
    cl_float rate = 0.1f, scale = 1.0f / 0.9f, one = 1.0f;
    cl_uint lo = 1234, hi = 0, ustep = (cl_uint)step, layer = 3, off = 0;
    const int kind = (k - K_FIRST16) % K_PER_FMT + K_FIRST16;
    if ((kind == K_ACT_FWD_BF || kind == K_ACT_BWD_BF) && clremat_act_table_bytes(act, fmt, n))
        return gelu16_by_table(ctx, kind == K_ACT_BWD_BF, n, fmt, h);
    switch (kind) {
    case K_ACT_FWD_BF:
        return clremat_run1d(ctx, clremat_ew_name(ctx, act, "clremat_cvt16w", "clremat_cvt16x8"),
                             clremat_ew_items(ctx, act, n), sizeof n, &n, sizeof act, &act, sizeof one, &one,
                             sizeof acc, &acc, sizeof fmt, &fmt, sizeof m0, &m0, sizeof fmt, &fmt, sizeof m1, &m1,
                             (size_t)0);
    case K_ACT_BWD_BF:
        return clremat_run1d(ctx, clremat_ew_name(ctx, act, "clremat_act_bwd16w", "clremat_act_bwd16"),
                             clremat_ew_items(ctx, act, n), sizeof n, &n, sizeof act, &act, sizeof acc, &acc,
                             sizeof fmt, &fmt, sizeof m0, &m0, sizeof fmt, &fmt, sizeof m2, &m2, sizeof fmt, &fmt,
                             sizeof m2, &m2, (size_t)0);
    case K_DROPOUT_BF:
        return clremat_run1d(ctx, clremat_ew_name(ctx, CLREMAT_ACT_NONE, "clremat_dropout16w", "clremat_dropout16"),
                             clremat_ew_items(ctx, CLREMAT_ACT_NONE, n), sizeof n, &n, sizeof acc, &acc,
                             sizeof rate, &rate, sizeof scale, &scale, sizeof lo, &lo, sizeof hi, &hi, sizeof ustep,
                             &ustep, sizeof layer, &layer, sizeof fmt, &fmt, sizeof m0, &m0, sizeof fmt, &fmt,
                             sizeof m1, &m1, sizeof off, &off, (size_t)0);
    default:
        return clremat_run1d(ctx, "clremat_add16", ((int64_t)n + 7) / 8, sizeof n, &n, sizeof fmt, &fmt, sizeof m0, &m0,
                             sizeof fmt, &fmt, sizeof m2, &m2, sizeof fmt, &fmt, sizeof m1, &m1, (size_t)0);
    }
}

static int launch(clremat_ctx *ctx, int k, cl_int n, clremat_buf *b[4], clremat_buf *h[2][3],
                  const clremat_opt_config *opt[3], int64_t step, bn_bench *bn)
{
    cl_mem m0 = clremat_mem(b[0]), m1 = clremat_mem(b[1]), m2 = clremat_mem(b[2]);
    cl_int act = 2 /* CLREMAT_ACT_GELU_TANH */, acc = 0, one = 1, rows = COLSUM_ROWS, cols = n / COLSUM_ROWS;
    cl_float rate = 0.1f, scale = 1.0f / 0.9f;
    cl_uint lo = 1234, hi = 0, ustep = (cl_uint)step, layer = 3, off = 0;
    clremat_buf *st[2] = {b[2], b[3]};
    if (k >= K_FIRST16) /* bfloat16 (format 2), then binary16 (1) */
        return launch16(ctx, k, n, k < K_FIRST16 + K_PER_FMT ? 2 : 1, h[k >= K_FIRST16 + K_PER_FMT], step);
    switch (k) {
    case K_COPY:
        return clremat_run1d(ctx, "clremat_stream_copy8", ((int64_t)n + 7) / 8, sizeof n, &n, sizeof m0, &m0, sizeof m1,
                             &m1, (size_t)0);
    case K_ACT_FWD:
        return clremat_run1d(ctx, clremat_ew_name(ctx, act, "clremat_act_fwdw", "clremat_act_fwd8"),
                             clremat_ew_items(ctx, act, n), sizeof n, &n, sizeof act, &act, sizeof m0, &m0, sizeof m1,
                             &m1, (size_t)0);
    case K_ACT_BWD:
        return clremat_run1d(ctx, clremat_ew_name(ctx, act, "clremat_act_bwdw", "clremat_act_bwd8"),
                             clremat_ew_items(ctx, act, n), sizeof n, &n, sizeof act, &act, sizeof acc, &acc, sizeof m0,
                             &m0, sizeof m2, &m2, sizeof m2, &m2, (size_t)0);
    case K_DROPOUT:
        return clremat_run1d(ctx, "clremat_dropout8", ((int64_t)n + 7) / 8, sizeof n, &n, sizeof acc, &acc,
                             sizeof rate, &rate, sizeof scale, &scale, sizeof lo, &lo, sizeof hi, &hi, sizeof ustep,
                             &ustep, sizeof layer, &layer, sizeof m0, &m0, sizeof m1, &m1, sizeof off, &off,
                             (size_t)0);
    case K_ADD:
        return clremat_run1d(ctx, "clremat_add8", ((int64_t)n + 7) / 8, sizeof n, &n, sizeof m0, &m0, sizeof m2,
                             &m2, sizeof m1, &m1, (size_t)0);
    case K_ACC:
        return clremat_run1d(ctx, "clremat_copy_acc8", ((int64_t)n + 7) / 8, sizeof n, &n, sizeof one, &one,
                             sizeof m1, &m1, sizeof m0, &m0, (size_t)0);
    case K_COLSUM:
        return clremat_colsum(ctx, "stream_bench", rows, cols, cols, 0, b[0], 0, b[1]);
    case K_BN_FWD:
    case K_BN_BWD:
        return bn_launch(ctx, bn, k == K_BN_BWD, n / BN_C, b);
    default:
        return clremat_opt_step(ctx, opt[k - K_SGD], step, b[0], b[1], st, n);
    }
}

int main(int argc, char **argv)
{
    const char *device = NULL;
    int64_t floats = 8 << 20;
    int reps = 15;
    clremat_ctx *ctx;
    clremat_buf *b[4] = {NULL, NULL, NULL, NULL}, *h[2][3] = {{NULL, NULL, NULL}, {NULL, NULL, NULL}};
    clremat_opt_config sgd, adam, adamw;
    bn_bench bn;
    const clremat_opt_config *opt[3] = {&sgd, &adam, &adamw};
    double *t[K_COUNT], med[K_COUNT], copy_gbs = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--device"))
            device = argv[i + 1];
        else if (!strcmp(argv[i], "--floats"))
            floats = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: stream_bench [--device SEL] [--floats N] [--reps N]\n");
            return 2;
        }
    }
    if (floats < 8 * COLSUM_ROWS || floats > (1 << 28) || floats % (8 * COLSUM_ROWS) || reps < 1 || reps > 1000) {
        fprintf(stderr, "stream_bench: --floats a multiple of 2048 in [2048, 2^28], --reps in [1, 1000]\n");
        return 2;
    }
    if (clremat_ctx_create(device, 0, &ctx) != CLREMAT_OK) {
        fprintf(stderr, "stream_bench: %s\n", clremat_last_error());
        return 1;
    }
    clremat_opt_defaults("sgd", &sgd);
    clremat_opt_defaults("adam", &adam);
    clremat_opt_defaults("adamw", &adamw);
    {   /* values in [-2, 2) (positive in the second-moment state), as activations and gradients are */
        float *h = malloc((size_t)floats * sizeof(float));
        if (!h)
            return 1;
        for (int64_t j = 0; j < floats; j++)
            h[j] = (float)((j * 7919) % 4096) / 1024.0f - 2.0f;
        for (int i = 0; i < 4; i++) {
            if (i == 3)
                for (int64_t j = 0; j < floats; j++)
                    h[j] = h[j] * h[j] + 1e-3f;
            if (clremat_pool_alloc(ctx->pool, (size_t)floats * sizeof(float), "stream", &b[i]) != CLREMAT_OK ||
                clremat_write(ctx, b[i], 0, (size_t)floats * sizeof(float), h) != CLREMAT_OK) {
                fprintf(stderr, "stream_bench: allocation: %s\n", clremat_ctx_last_error(ctx));
                free(h);
                return 1;
            }
        }
        free(h);
    }
    for (int f = 0; f < 2; f++) /* the same values rounded to bfloat16, binary16 */
        for (int i = 0; i < 3; i++)
            if (clremat_pool_alloc(ctx->pool, (size_t)floats * 2, "stream 16-bit", &h[f][i]) != CLREMAT_OK ||
                clremat_op_convert(ctx, b[i], 0, h[f][i], f ? 1 : 2, floats, 0, 1.0f, 0) != CLREMAT_OK) {
                fprintf(stderr, "stream_bench: 16-bit arrays: %s\n", clremat_ctx_last_error(ctx));
                return 1;
            }
    if (bn_open(ctx, &bn, floats / BN_C) != CLREMAT_OK) {
        fprintf(stderr, "stream_bench: batchnorm: %s\n", clremat_ctx_last_error(ctx));
        return 1;
    }
    printf("{\"device\": \"%s\", \"floats\": %lld, \"reps\": %d, \"kernels\": [", ctx->info.name, (long long)floats,
           reps);
    for (int k = 0; k < K_COUNT; k++)
        if (!(t[k] = malloc(sizeof(double) * (size_t)reps)))
            return 1;
    for (int r = -1; r < reps; r++)
        for (int k = 0; k < K_COUNT; k++) {
            double t0 = clremat_now_s();
            if (launch(ctx, k, (cl_int)floats, b, h, opt, r + 2, &bn) != CLREMAT_OK || clFinish(ctx->queue) != CL_SUCCESS) {
                fprintf(stderr, "stream_bench: %s: %s\n", names[k], clremat_ctx_last_error(ctx));
                return 1;
            }
            if (r >= 0)
                t[k][r] = clremat_now_s() - t0;
        }
    for (int k = 0; k < K_COUNT; k++) {
        qsort(t[k], (size_t)reps, sizeof *t[k], bench_cmp_d);
        med[k] = t[k][reps / 2];
    }
    for (int k = 0; k < K_COUNT; k++) {
        double bytes = arrays[k] * (double)floats * elem_bytes(k);
        if (k == K_COPY)
            copy_gbs = bytes / med[k] * 1e-9;
        printf("%s\n  {\"kernel\": \"%s\", \"arrays\": %g, \"element_bytes\": %d, \"bytes\": %.0f, "
               "\"seconds\": %.6g, \"gb_per_s\": %.3f, \"of_copy\": %.3f", k ? "," : "", names[k], arrays[k],
               elem_bytes(k), bytes, med[k], bytes / med[k] * 1e-9, bytes / med[k] * 1e-9 / copy_gbs);
        if (k >= K_FIRST16)
            printf(", \"vs_float32\": %.3f", med[k] / med[twin[(k - K_FIRST16) % K_PER_FMT]]);
        printf("}");
        free(t[k]);
    }
    printf("\n]}\n");
    bn_close(ctx, &bn);
    for (int i = 0; i < 4; i++)
        clremat_pool_release(ctx->pool, b[i]);
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 3; i++)
            clremat_pool_release(ctx->pool, h[f][i]);
    clremat_ctx_destroy(ctx);
    return 0;
}
