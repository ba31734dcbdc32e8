/* test_layers_llm.c: the small-language-model layers (issue 13): rmsnorm,
 * rope, multiply, and attention with grouped-query heads (kv_heads),
 * without biases and with RoPE on q and k. Each goes through the
 * layercheck harness (device forward/backward vs the double references of
 * ref_llm.c and ref_seq.c, din overwrite/accumulate, finite differences)
 * over several shapes; then specific checks: RoPE at position 0 is the
 * identity and preserves each pair's norm, kv_heads = heads matches the
 * plain layout, and the cost model (sizes of slots, parameters and
 * workspaces). Dense variants: LoRA (through the harness, the frozen
 * base's gradients included) and a dense layer tied to an embedding's table
 * (forward, backward and the embedding's accumulation into the shared
 * gradient, against a double reference). Skips (77) without a device. */
#include "testutil.h"
#include "backend.h"
#include "layers.h"
#include "layercheck.h"
#include "ref_seq.h"
#include "ref_llm.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT 300

/* ------------------------------------------------------------ references */

static void rms_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = lc_layer(io);
    ref_rmsnorm_fwd((int)lc_rows(&L->in_shape[0], io->batch), lc_last_dim(&L->in_shape[0]), L->eps, io->in[0],
                    io->param[0], out);
}

static void rms_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = lc_layer(io);
    ref_rmsnorm_bwd((int)lc_rows(&L->in_shape[0], io->batch), lc_last_dim(&L->in_shape[0]), L->eps, io->in[0],
                    io->param[0], dout, din[0], grad[0]);
}

static void rope_geom(const clremat_layer *L, int64_t batch, int *rows, int *T, int *D, int *hd)
{
    *T = (int)L->in_shape[0].dims[0];
    *D = (int)L->in_shape[0].dims[1];
    *hd = L->head_dim > 0 ? (int)L->head_dim : *D;
    *rows = (int)(batch * *T);
}

static void rope_fwd(const lc_io *io, double *out)
{
    int rows, T, D, hd;
    rope_geom(lc_layer(io), io->batch, &rows, &T, &D, &hd);
    memcpy(out, io->in[0], sizeof(double) * (size_t)rows * D);
    ref_rope(rows, T, D, 0, D / hd, hd, lc_layer(io)->rope_theta, 0, out);
}

static void rope_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    int rows, T, D, hd;
    (void)grad;
    rope_geom(lc_layer(io), io->batch, &rows, &T, &D, &hd);
    if (!din[0])
        return;
    memcpy(din[0], dout, sizeof(double) * (size_t)rows * D);
    ref_rope(rows, T, D, 0, D / hd, hd, lc_layer(io)->rope_theta, 1, din[0]);
}

static void mul_fwd(const lc_io *io, double *out)
{
    int64_t n = io->batch * clremat_shape_elems(&lc_layer(io)->in_shape[0]);
    for (int64_t i = 0; i < n; i++)
        out[i] = io->in[0][i] * io->in[1][i];
}

static void mul_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    int64_t n = io->batch * clremat_shape_elems(&lc_layer(io)->in_shape[0]);
    (void)grad;
    for (int64_t i = 0; i < n; i++) {
        if (din[0])
            din[0][i] = dout[i] * io->in[1][i];
        if (din[1])
            din[1][i] = dout[i] * io->in[0][i];
    }
}

static ref_attn attn_cfg(const lc_io *io)
{
    const clremat_layer *L = lc_layer(io);
    ref_attn a = {(int)io->batch, (int)L->in_shape[0].dims[0], (int)L->in_shape[0].dims[1], L->heads, L->causal,
                  L->rate, io->seed, (uint32_t)io->step, (uint32_t)io->layer, L->kv_heads, L->rope_theta};
    return a;
}

/* parameters: wqkv, bqkv, wo, bo with biases; wqkv, wo without */
static void attn_fwd(const lc_io *io, double *out)
{
    ref_attn a = attn_cfg(io);
    int bias = lc_layer(io)->n_params == 4;
    ref_attention_fwd(&a, io->in[0], io->param[0], bias ? io->param[1] : NULL, io->param[bias ? 2 : 1],
                      bias ? io->param[3] : NULL, out, NULL, NULL, NULL);
}

static void attn_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    ref_attn a = attn_cfg(io);
    int bias = lc_layer(io)->n_params == 4;
    ref_attention_bwd(&a, io->in[0], io->param[0], bias ? io->param[1] : NULL, io->param[bias ? 2 : 1],
                      bias ? io->param[3] : NULL, dout, din[0], grad[0], bias ? grad[1] : NULL, grad[bias ? 2 : 1],
                      bias ? grad[3] : NULL);
}

/* LoRA dense: y = act(x W + b + s (x A) B), act linear or silu; parameters W, (b), A, B */
static double silu(double v) { return v / (1.0 + exp(-v)); }

static double silu_d(double v)
{
    double sg = 1.0 / (1.0 + exp(-v));
    return sg * (1.0 + v * (1.0 - sg));
}

static void lora_pre(const lc_io *io, double *out)
{
    const clremat_layer *L = lc_layer(io);
    int in = lc_last_dim(&L->in_shape[0]), U = (int)L->units, r = L->lora_rank, ia = L->use_bias ? 2 : 1;
    int64_t rows = lc_rows(&L->in_shape[0], io->batch);
    double s = L->lora_alpha / r;
    for (int64_t i = 0; i < rows; i++)
        for (int u = 0; u < U; u++) {
            double v = L->use_bias ? io->param[1][u] : 0.0;
            for (int k = 0; k < in; k++)
                v += io->in[0][i * in + k] * io->param[0][(size_t)k * U + u];
            for (int j = 0; j < r; j++) {
                double xa = 0;
                for (int k = 0; k < in; k++)
                    xa += io->in[0][i * in + k] * io->param[ia][(size_t)k * r + j];
                v += s * xa * io->param[ia + 1][(size_t)j * U + u];
            }
            out[i * U + u] = v;
        }
}

static void lora_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = lc_layer(io);
    int64_t n = lc_rows(&L->in_shape[0], io->batch) * L->units;
    lora_pre(io, out);
    for (int64_t i = 0; L->act == CLREMAT_ACT_SILU && i < n; i++)
        out[i] = silu(out[i]);
}

static void lora_bwd(const lc_io *io, const double *dout_in, double *din[], double *grad[])
{
    const clremat_layer *L = lc_layer(io);
    int in = lc_last_dim(&L->in_shape[0]), U = (int)L->units, r = L->lora_rank, ia = L->use_bias ? 2 : 1;
    int64_t rows = lc_rows(&L->in_shape[0], io->batch);
    double s = L->lora_alpha / r;
    double *dout = malloc(sizeof(double) * (size_t)(rows * U));
    lora_pre(io, dout); /* dZ = dout * act'(pre) */
    for (int64_t i = 0; i < rows * U; i++)
        dout[i] = L->act == CLREMAT_ACT_SILU ? dout_in[i] * silu_d(dout[i]) : dout_in[i];
    const double *x = io->in[0], *W = io->param[0], *A = io->param[ia], *B = io->param[ia + 1];
    double *gW = grad[0], *gA = grad[ia], *gB = grad[ia + 1];
    memset(gW, 0, sizeof(double) * (size_t)in * U);
    memset(gA, 0, sizeof(double) * (size_t)in * r);
    memset(gB, 0, sizeof(double) * (size_t)r * U);
    if (L->use_bias)
        memset(grad[1], 0, sizeof(double) * (size_t)U);
    if (din[0])
        memset(din[0], 0, sizeof(double) * (size_t)(rows * in));
    for (int64_t i = 0; i < rows; i++) {
        const double *xi = x + i * in, *di = dout + i * U;
        for (int j = 0; j < r; j++) {
            double xa = 0, dxa = 0;
            for (int k = 0; k < in; k++)
                xa += xi[k] * A[(size_t)k * r + j];
            for (int u = 0; u < U; u++) {
                gB[(size_t)j * U + u] += s * xa * di[u];
                dxa += s * di[u] * B[(size_t)j * U + u];
            }
            for (int k = 0; k < in; k++) {
                gA[(size_t)k * r + j] += xi[k] * dxa;
                if (din[0])
                    din[0][i * in + k] += dxa * A[(size_t)k * r + j];
            }
        }
        for (int u = 0; u < U; u++) {
            if (L->use_bias)
                grad[1][u] += di[u];
            for (int k = 0; k < in; k++) {
                gW[(size_t)k * U + u] += xi[k] * di[u];
                if (din[0])
                    din[0][i * in + k] += di[u] * W[(size_t)k * U + u];
            }
        }
    }
    free(dout);
}

/* ----------------------------------------------------------- layer makers */

static void base_layer(clremat_layer *L, const char *name, clremat_layer_type type, int rank, const int64_t *dims)
{
    memset(L, 0, sizeof *L);
    snprintf(L->name, sizeof L->name, "%s", name);
    L->type = type;
    L->n_inputs = 1;
    L->inputs[0] = -1;
    L->block = -1;
    L->in_shape[0] = lc_shape(rank, dims);
    L->out_shape = L->in_shape[0];
}

static void make_attention(clremat_layer *L, int64_t T, int64_t D, int heads, int kv, int bias, double theta,
                           int causal)
{
    int64_t dh = D / heads, w3 = D + 2 * kv * dh;
    int64_t xd[2] = {T, D}, wq[2] = {D, w3}, wo[2] = {D, D};
    int p = 0;
    base_layer(L, "attn", CLREMAT_ATTENTION, 2, xd);
    L->heads = heads;
    L->kv_heads = kv;
    L->causal = causal;
    L->rope_theta = theta;
    L->use_bias = bias;
    lc_set_param(L, p++, "wqkv", 2, wq);
    if (bias)
        lc_set_param(L, p++, "bqkv", 1, &w3);
    lc_set_param(L, p++, "wo", 2, wo);
    if (bias)
        lc_set_param(L, p++, "bo", 1, &D);
}

/* ------------------------------------------------------- harness checks */

/* Under a loop budget of 64 iterations a work-item (lc_small_loop_budget)
 * rmsnorm's scale gradient over 200 rows goes in several launches that
 * continue each other's sums; the layer still matches its reference. */
START_TEST(test_rmsnorm_loop_budget)
{
    const int64_t dims[2] = {50, 16}, D = 16;
    clremat_layer L;
    clremat_graph g;
    lc_spec spec;
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    lc_small_loop_budget(ctx, 64);
    base_layer(&L, "rms", CLREMAT_RMSNORM, 2, dims);
    L.eps = 1e-6;
    lc_set_param(&L, 0, "scale", 1, &D);
    lc_graph_of_layer(&g, &L);
    memset(&spec, 0, sizeof spec);
    spec.g = &g;
    spec.batch = 4;
    spec.fwd = rms_fwd;
    spec.bwd = rms_bwd;
    spec.param_scale = 1.5;
    spec.rng = 191;
    lc_check_layer(ctx, &spec);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_rmsnorm_check)
{
    static const int64_t shapes[][2] = {{5, 7}, {1, 16}, {3, 33}, {4, 1}};
    static const int64_t batches[] = {3, 2, 1, 3};
    /* eps 1e-6 (Llama's) and 0.5, which changes the result visibly */
    static const double eps[] = {1e-6, 0.5};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int s = 0; s < 8; s++) {
        clremat_layer L;
        clremat_graph g;
        lc_spec spec;
        int64_t D = shapes[s % 4][1];
        base_layer(&L, "rms", CLREMAT_RMSNORM, 2, shapes[s % 4]);
        L.eps = eps[s / 4];
        lc_set_param(&L, 0, "scale", 1, &D);
        lc_graph_of_layer(&g, &L);
        memset(&spec, 0, sizeof spec);
        spec.g = &g;
        spec.batch = batches[s % 4];
        spec.fwd = rms_fwd;
        spec.bwd = rms_bwd;
        spec.param_scale = 1.5;
        spec.rng = 110 + (unsigned)s;
        lc_check_layer(ctx, &spec);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_rope_check)
{
    /* {T, D, head_dim (0: D)}, theta */
    static const int64_t shapes[][3] = {{7, 8, 0}, {5, 12, 4}, {1, 6, 2}, {9, 16, 8}};
    static const double theta[] = {10000.0, 100.0, 10000.0, 3.0};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int s = 0; s < 4; s++) {
        clremat_layer L;
        clremat_graph g;
        lc_spec spec;
        base_layer(&L, "rope", CLREMAT_ROPE, 2, shapes[s]);
        L.head_dim = shapes[s][2];
        L.rope_theta = theta[s];
        lc_graph_of_layer(&g, &L);
        memset(&spec, 0, sizeof spec);
        spec.g = &g;
        spec.batch = 2;
        spec.fwd = rope_fwd;
        spec.bwd = rope_bwd;
        spec.rng = 120 + (unsigned)s;
        lc_check_layer(ctx, &spec);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_multiply_check)
{
    static const int64_t shapes[][2] = {{5, 7}, {1, 16}, {3, 1}};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int s = 0; s < 3; s++) {
        clremat_layer L;
        clremat_graph g;
        lc_spec spec;
        base_layer(&L, "mul", CLREMAT_MULTIPLY, 2, shapes[s]);
        L.n_inputs = 2;
        L.in_shape[1] = L.in_shape[0];
        lc_graph_of_layer(&g, &L);
        memset(&spec, 0, sizeof spec);
        spec.g = &g;
        spec.batch = 3;
        spec.fwd = mul_fwd;
        spec.bwd = mul_bwd;
        spec.in_scale = 2.0;
        spec.rng = 130 + (unsigned)s;
        lc_check_layer(ctx, &spec);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

static void check_attention(clremat_ctx *ctx, int64_t batch, int64_t T, int64_t D, int heads, int kv, int bias,
                            double theta, int causal, unsigned rng)
{
    clremat_layer L;
    clremat_graph g;
    lc_spec spec;
    make_attention(&L, T, D, heads, kv, bias, theta, causal);
    lc_graph_of_layer(&g, &L);
    memset(&spec, 0, sizeof spec);
    spec.g = &g;
    spec.batch = batch;
    spec.seed = 0x1234567890abcdefULL;
    spec.step = 3;
    spec.fwd = attn_fwd;
    spec.bwd = attn_bwd;
    spec.param_scale = 0.6;
    spec.rng = rng;
    lc_check_layer(ctx, &spec);
}

START_TEST(test_attention_gqa_check)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    check_attention(ctx, 2, 7, 8, 4, 2, 1, 0.0, 1, 140);       /* grouped-query, 2 kv heads of 2 */
    check_attention(ctx, 2, 5, 12, 3, 1, 1, 0.0, 0, 141);      /* multi-query */
    check_attention(ctx, 2, 7, 8, 4, 2, 0, 0.0, 1, 142);       /* no biases */
    check_attention(ctx, 2, 7, 8, 2, 2, 1, 10000.0, 1, 143);   /* RoPE, kv = heads */
    check_attention(ctx, 2, 6, 16, 4, 2, 0, 500.0, 1, 144);    /* Llama: GQA, RoPE, no bias, causal */
    check_attention(ctx, 1, 1, 8, 4, 1, 0, 10000.0, 1, 145);   /* T = 1 */
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_lora_check)
{
    /* {rows per sample, in, units, rank}, bias, alpha */
    static const int64_t shapes[][4] = {{3, 8, 6, 2}, {1, 5, 7, 1}, {4, 16, 16, 4}, {2, 12, 20, 3}};
    static const int bias[] = {0, 1, 1, 0};
    static const double alpha[] = {16.0, 1.0, 4.0, 6.0};
    static const clremat_act act[] = {CLREMAT_ACT_NONE, CLREMAT_ACT_NONE, CLREMAT_ACT_NONE, CLREMAT_ACT_SILU};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int s = 0; s < 4; s++) {
        clremat_layer L;
        clremat_graph g;
        lc_spec spec;
        int64_t xd[2] = {shapes[s][0], shapes[s][1]}, in = shapes[s][1], U = shapes[s][2], r = shapes[s][3];
        int64_t w[2] = {in, U}, a[2] = {in, r}, b[2] = {r, U};
        int p = 0;
        base_layer(&L, "lora", CLREMAT_DENSE, 2, xd);
        L.out_shape.dims[1] = U;
        L.units = U;
        L.use_bias = bias[s];
        L.lora_rank = (int)r;
        L.lora_alpha = alpha[s];
        L.act = act[s];
        lc_set_param(&L, p++, "kernel", 2, w);
        if (bias[s])
            lc_set_param(&L, p++, "bias", 1, &U);
        lc_set_param(&L, p++, "lora_a", 2, a);
        lc_set_param(&L, p++, "lora_b", 2, b);
        lc_graph_of_layer(&g, &L);
        memset(&spec, 0, sizeof spec);
        spec.g = &g;
        spec.batch = 2;
        spec.fwd = lora_fwd;
        spec.bwd = lora_bwd;
        spec.param_scale = 0.7;
        spec.rng = 150 + (unsigned)s;
        lc_check_layer(ctx, &spec);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* A dense layer tied to an embedding's table [V, D]: out = x table^T; its
 * backward overwrites the table gradient with dout^T x and the embedding's,
 * with grad_accumulate, adds the ids' rows of its dout. Against double
 * references. */
START_TEST(test_tied_dense)
{
    enum { B = 2, T = 5, V = 7, D = 6, R = B * T };
    clremat_layer Ls[2];
    clremat_graph g;
    clremat_layer_call c;
    clremat_buf *bx, *btab, *bgrad, *bout, *bdout, *bdin, *bids, *bdemb;
    float x[R * D], tab[V * D], dout[R * V], ids[R], demb[R * D], out[R * V], din[R * D], grad[V * D];
    int64_t td[2] = {V, D}, xd[2] = {T, D};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int i = 0; i < R * D; i++) {
        x[i] = (float)sin(0.3 * i + 0.2);
        demb[i] = (float)cos(0.7 * i);
    }
    for (int i = 0; i < V * D; i++)
        tab[i] = (float)cos(0.11 * i + 1.0);
    for (int i = 0; i < R * V; i++)
        dout[i] = (float)sin(0.05 * i * i + 0.3);
    for (int i = 0; i < R; i++)
        ids[i] = (float)((i * 3) % V);
    /* layer 0: embedding [T] -> [T, D]; layer 1: dense tied to it */
    base_layer(&Ls[0], "emb", CLREMAT_EMBEDDING, 1, xd);
    Ls[0].out_shape = lc_shape(2, xd);
    Ls[0].vocab = V;
    Ls[0].dim = D;
    lc_set_param(&Ls[0], 0, "table", 2, td);
    base_layer(&Ls[1], "head", CLREMAT_DENSE, 2, xd);
    Ls[1].units = V;
    Ls[1].out_shape.dims[1] = V;
    Ls[1].tie = 1;
    Ls[1].inputs[0] = 0;
    memset(&g, 0, sizeof g);
    g.layers = Ls;
    g.n_layers = g.cap_layers = 2;
    g.open_block = -1;
    g.finalized = 1;
    ck_assert_int_eq(clremat_graph_tied_user(&g, 0), 1);
#define ALLOC(b, n) ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (size_t)(n) * sizeof(float), #b, &b), CLREMAT_OK)
    ALLOC(bx, R * D);
    ALLOC(btab, V * D);
    ALLOC(bgrad, V * D);
    ALLOC(bout, R * V);
    ALLOC(bdout, R * V);
    ALLOC(bdin, R * D);
    ALLOC(bids, R);
    ALLOC(bdemb, R * D);
#undef ALLOC
    ck_assert_int_eq(clremat_write(ctx, bx, 0, sizeof x, x), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, btab, 0, sizeof tab, tab), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, bdout, 0, sizeof dout, dout), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, bids, 0, sizeof ids, ids), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, bdemb, 0, sizeof demb, demb), CLREMAT_OK);
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.g = &g;
    c.layer = 1;
    c.batch = B;
    c.in[0] = bx;
    c.slot[0] = bout;
    c.param[0] = btab;
    c.grad[0] = bgrad;
    ck_assert_int_eq(clremat_layer_forward(&c), CLREMAT_OK);
    c.dout = bdout;
    c.din[0] = bdin;
    ck_assert_int_eq(clremat_layer_backward(&c), CLREMAT_OK);
    /* the embedding adds its part */
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.g = &g;
    c.layer = 0;
    c.batch = B;
    c.in[0] = bids;
    c.param[0] = btab;
    c.grad[0] = bgrad;
    c.grad_accumulate[0] = 1;
    c.dout = bdemb;
    ck_assert_int_eq(clremat_layer_backward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, bout, 0, sizeof out, out), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, bdin, 0, sizeof din, din), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, bgrad, 0, sizeof grad, grad), CLREMAT_OK);
    for (int i = 0; i < R; i++)
        for (int v = 0; v < V; v++) {
            double ref = 0;
            for (int d = 0; d < D; d++)
                ref += (double)x[i * D + d] * tab[v * D + d];
            ck_assert_msg(fabs(out[i * V + v] - ref) <= 1e-5 * (1 + fabs(ref)), "out[%d][%d] %g vs %g", i, v,
                          out[i * V + v], ref);
        }
    for (int i = 0; i < R; i++)
        for (int d = 0; d < D; d++) {
            double ref = 0;
            for (int v = 0; v < V; v++)
                ref += (double)dout[i * V + v] * tab[v * D + d];
            ck_assert_msg(fabs(din[i * D + d] - ref) <= 1e-5 * (1 + fabs(ref)), "din[%d][%d] %g vs %g", i, d,
                          din[i * D + d], ref);
        }
    for (int v = 0; v < V; v++)
        for (int d = 0; d < D; d++) {
            double ref = 0; /* both uses: dout^T x, plus the rows of the tokens with id v */
            for (int i = 0; i < R; i++)
                ref += (double)dout[i * V + v] * x[i * D + d] + (ids[i] == v ? demb[i * D + d] : 0.0);
            ck_assert_msg(fabs(grad[v * D + d] - ref) <= 1e-5 * (1 + fabs(ref)), "grad table[%d][%d] %g vs %g", v,
                          d, grad[v * D + d], ref);
        }
    clremat_pool_release(ctx->pool, bx);
    clremat_pool_release(ctx->pool, btab);
    clremat_pool_release(ctx->pool, bgrad);
    clremat_pool_release(ctx->pool, bout);
    clremat_pool_release(ctx->pool, bdout);
    clremat_pool_release(ctx->pool, bdin);
    clremat_pool_release(ctx->pool, bids);
    clremat_pool_release(ctx->pool, bdemb);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* --------------------------------------------------------- specific checks */

/* RoPE rotates pairs: each (x_i, x_{i+half}) keeps its norm, position 0 is
 * the identity, and the backward is the inverse (dout -> din -> forward of
 * din gives dout back, to float rounding). */
START_TEST(test_rope_properties)
{
    enum { T = 6, D = 8, B = 2, N = B * T * D };
    float x[N], y[N], back[N];
    clremat_layer L;
    clremat_graph g;
    clremat_layer_call c;
    clremat_buf *bx, *by, *bb;
    clremat_ctx *ctx;
    int64_t dims[2] = {T, D};
    TEST_OPEN_CTX(ctx, 0);
    for (int i = 0; i < N; i++)
        x[i] = (float)sin(0.37 * i + 0.1);
    base_layer(&L, "rope", CLREMAT_ROPE, 2, dims);
    L.rope_theta = 10000.0;
    L.head_dim = 4;
    lc_graph_of_layer(&g, &L);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, N * sizeof(float), "x", &bx), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, N * sizeof(float), "y", &by), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, N * sizeof(float), "back", &bb), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, bx, 0, sizeof x, x), CLREMAT_OK);
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.g = &g;
    c.batch = B;
    c.in[0] = bx;
    c.slot[0] = by;
    ck_assert_int_eq(clremat_layer_forward(&c), CLREMAT_OK);
    c.dout = by;
    c.din[0] = bb;
    ck_assert_int_eq(clremat_layer_backward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, by, 0, sizeof y, y), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, bb, 0, sizeof back, back), CLREMAT_OK);
    for (int r = 0; r < B * T; r++)
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 2; i++) {
                int p = r * D + h * 4 + i;
                double n0 = hypot(x[p], x[p + 2]), n1 = hypot(y[p], y[p + 2]);
                ck_assert_msg(fabs(n0 - n1) <= 1e-5, "row %d pair %d: norm %g became %g", r, p, n0, n1);
                if (r % T == 0)
                    ck_assert_msg(y[p] == x[p] && y[p + 2] == x[p + 2], "position 0 is not the identity");
            }
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabs(back[i] - x[i]) <= 1e-5, "rotate back [%d]: %g vs %g", i, back[i], x[i]);
    clremat_pool_release(ctx->pool, bx);
    clremat_pool_release(ctx->pool, by);
    clremat_pool_release(ctx->pool, bb);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_costs)
{
    clremat_layer L;
    clremat_graph g;
    clremat_layer_cost c;
    int64_t xd[2] = {7, 16}, D = 16;
    /* attention T 7, D 16, 4 heads, 2 kv heads (dh 4): qkv width 16 + 16 */
    make_attention(&L, 7, 16, 4, 2, 0, 10000.0, 1);
    lc_graph_of_layer(&g, &L);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 3, &c), CLREMAT_OK);
    ck_assert_int_eq(c.n_slots, 4);
    ck_assert_uint_eq(c.slot_bytes[1], 3 * 7 * 32 * 4);
    ck_assert_uint_eq(c.slot_bytes[2], 3 * 4 * 7 * 7 * 4);
    ck_assert_uint_eq(c.bwd_temp_bytes, (3 * 4 * 7 * 7 + 3 * 7 * 16 + 3 * 7 * 32) * 4);
    ck_assert_uint_eq(c.param_bytes, (16 * 32 + 16 * 16) * 4);
    /* rmsnorm: out and one rstd per row, needs its input and rstd */
    base_layer(&L, "rms", CLREMAT_RMSNORM, 2, xd);
    L.eps = 1e-6;
    lc_set_param(&L, 0, "scale", 1, &D);
    lc_graph_of_layer(&g, &L);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 3, &c), CLREMAT_OK);
    ck_assert_int_eq(c.n_slots, 2);
    ck_assert_uint_eq(c.slot_bytes[0], 3 * 7 * 16 * 4);
    ck_assert_uint_eq(c.slot_bytes[1], 3 * 7 * 4);
    ck_assert_uint_eq(c.bwd_needs_inputs, 1u);
    ck_assert_uint_eq(c.bwd_needs_slots, 2u);
    ck_assert_uint_eq(c.param_bytes, 16 * 4);
    /* rope: saves nothing */
    base_layer(&L, "rope", CLREMAT_ROPE, 2, xd);
    L.rope_theta = 10000.0;
    lc_graph_of_layer(&g, &L);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 3, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.slot_bytes[0], 3 * 7 * 16 * 4);
    ck_assert_uint_eq(c.bwd_needs_inputs, 0u);
    ck_assert_uint_eq(c.bwd_needs_slots, 0u);
    /* multiply: needs both inputs */
    base_layer(&L, "mul", CLREMAT_MULTIPLY, 2, xd);
    L.n_inputs = 2;
    L.in_shape[1] = L.in_shape[0];
    lc_graph_of_layer(&g, &L);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 3, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.bwd_needs_inputs, 3u);
    ck_assert_uint_eq(c.param_bytes, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("layers_llm");
    TCase *tc = tcase_create("costs");
    tcase_add_test(tc, test_costs);
    suite_add_tcase(s, tc);
    if (!test_have_device()) {
        int rc = test_run_suite(s);
        return rc != EXIT_SUCCESS ? rc : TEST_SKIP;
    }
    tc = tcase_create("harness");
    tcase_set_timeout(tc, TIMEOUT);
    tcase_add_test(tc, test_rmsnorm_check);
    tcase_add_test(tc, test_rmsnorm_loop_budget);
    tcase_add_test(tc, test_rope_check);
    tcase_add_test(tc, test_multiply_check);
    tcase_add_test(tc, test_attention_gqa_check);
    tcase_add_test(tc, test_rope_properties);
    tcase_add_test(tc, test_lora_check);
    tcase_add_test(tc, test_tied_dense);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
