/* test_layers_llm.c: the small-language-model layers (issue 13): rmsnorm,
 * rope, multiply, and attention with grouped-query heads (kv_heads),
 * without biases and with RoPE on q and k. Each goes through the
 * layercheck harness (device forward/backward vs the double references of
 * ref_llm.c and ref_seq.c, din overwrite/accumulate, finite differences)
 * over several shapes; then specific checks: RoPE at position 0 is the
 * identity and preserves each pair's norm, kv_heads = heads matches the
 * plain layout, and the cost model (sizes of slots, parameters and
 * workspaces). Skips (77) without a device. */
#include "testutil.h"
#include "backend.h"
#include "layers.h"
#include "layercheck.h"
#include "ref_seq.h"
#include "ref_llm.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define TIMEOUT 300

static const clremat_layer *layer_of(const lc_io *io) { return &io->g->layers[io->layer]; }

static int64_t rows_of(const clremat_shape *s, int64_t batch)
{
    for (int i = 0; i + 1 < s->rank; i++)
        batch *= s->dims[i];
    return batch;
}

static int last_of(const clremat_shape *s) { return (int)s->dims[s->rank - 1]; }

/* ------------------------------------------------------------ references */

static void rms_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = layer_of(io);
    ref_rmsnorm_fwd((int)rows_of(&L->in_shape[0], io->batch), last_of(&L->in_shape[0]), L->eps, io->in[0],
                    io->param[0], out);
}

static void rms_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = layer_of(io);
    ref_rmsnorm_bwd((int)rows_of(&L->in_shape[0], io->batch), last_of(&L->in_shape[0]), L->eps, io->in[0],
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
    rope_geom(layer_of(io), io->batch, &rows, &T, &D, &hd);
    memcpy(out, io->in[0], sizeof(double) * (size_t)rows * D);
    ref_rope(rows, T, D, 0, D / hd, hd, layer_of(io)->rope_theta, 0, out);
}

static void rope_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    int rows, T, D, hd;
    (void)grad;
    rope_geom(layer_of(io), io->batch, &rows, &T, &D, &hd);
    if (!din[0])
        return;
    memcpy(din[0], dout, sizeof(double) * (size_t)rows * D);
    ref_rope(rows, T, D, 0, D / hd, hd, layer_of(io)->rope_theta, 1, din[0]);
}

static void mul_fwd(const lc_io *io, double *out)
{
    int64_t n = io->batch * clremat_shape_elems(&layer_of(io)->in_shape[0]);
    for (int64_t i = 0; i < n; i++)
        out[i] = io->in[0][i] * io->in[1][i];
}

static void mul_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    int64_t n = io->batch * clremat_shape_elems(&layer_of(io)->in_shape[0]);
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
    const clremat_layer *L = layer_of(io);
    ref_attn a = {(int)io->batch, (int)L->in_shape[0].dims[0], (int)L->in_shape[0].dims[1], L->heads, L->causal,
                  L->rate, io->seed, (uint32_t)io->step, (uint32_t)io->layer, L->kv_heads, L->rope_theta};
    return a;
}

/* parameters: wqkv, bqkv, wo, bo with biases; wqkv, wo without */
static void attn_fwd(const lc_io *io, double *out)
{
    ref_attn a = attn_cfg(io);
    int bias = layer_of(io)->n_params == 4;
    ref_attention_fwd(&a, io->in[0], io->param[0], bias ? io->param[1] : NULL, io->param[bias ? 2 : 1],
                      bias ? io->param[3] : NULL, out, NULL, NULL, NULL);
}

static void attn_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    ref_attn a = attn_cfg(io);
    int bias = layer_of(io)->n_params == 4;
    ref_attention_bwd(&a, io->in[0], io->param[0], bias ? io->param[1] : NULL, io->param[bias ? 2 : 1],
                      bias ? io->param[3] : NULL, dout, din[0], grad[0], bias ? grad[1] : NULL, grad[bias ? 2 : 1],
                      bias ? grad[3] : NULL);
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
    tcase_add_test(tc, test_rope_check);
    tcase_add_test(tc, test_multiply_check);
    tcase_add_test(tc, test_attention_gqa_check);
    tcase_add_test(tc, test_rope_properties);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
