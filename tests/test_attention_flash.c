/* test_attention_flash.c: the memory-efficient attention mode
 * (backend/attention_flash.c, kernels flash_attn_*). Through the layercheck
 * harness: device forward and backward against the double-precision host
 * reference of the attention layer (ref_seq.c) and finite differences, over
 * odd T, T = 1, T not a multiple of the tile (tiles capped small with
 * CLREMAT_ATTN_TILE so that sequences span many tiles), causal on and off,
 * 1 and 3 heads, dropout, and the plain layer's issue-13 fields
 * (grouped-query kv_heads 2 of 4 and 1 of 3, use_bias false, RoPE theta
 * 10000). Then against the plain attention on the same
 * inputs (forward, input and parameter gradients; the measured relative
 * differences are printed and must stay within float32 rounding), bitwise
 * determinism of forward and backward, the model-file field, and the cost
 * model (stats slot linear in T, no T x T tensor), and models/llama_tiny.json
 * trained with memory-efficient attention: predicted == measured peak, losses
 * within float32 rounding of plain, bitwise across remat modes. Skips (77)
 * without a device, after the device-free checks. */
#include "testutil.h"
#include "backend.h"
#include "layers.h"
#include "layercheck.h"
#include "ref_seq.h"
#include "rng.h"
#include "data.h"
#include "executor.h"
#include "gemm.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT 600

/* ------------------------------------------------------------ references */

static ref_attn attn_cfg(const lc_io *io)
{
    const clremat_layer *L = &io->g->layers[io->layer];
    ref_attn a = {(int)io->batch, (int)L->in_shape[0].dims[0], (int)L->in_shape[0].dims[1], L->heads, L->causal,
                  L->rate, io->seed, (uint32_t)io->step, (uint32_t)io->layer, L->kv_heads, L->rope_theta};
    return a;
}

/* parameters: wqkv, bqkv, wo, bo with biases; wqkv, wo without */
static void attn_fwd(const lc_io *io, double *out)
{
    ref_attn a = attn_cfg(io);
    int bias = io->g->layers[io->layer].n_params == 4;
    ref_attention_fwd(&a, io->in[0], io->param[0], bias ? io->param[1] : NULL, io->param[bias ? 2 : 1],
                      bias ? io->param[3] : NULL, out, NULL, NULL, NULL);
}

static void attn_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    ref_attn a = attn_cfg(io);
    int bias = io->g->layers[io->layer].n_params == 4;
    ref_attention_bwd(&a, io->in[0], io->param[0], bias ? io->param[1] : NULL, io->param[bias ? 2 : 1],
                      bias ? io->param[3] : NULL, dout, din[0], grad[0], bias ? grad[1] : NULL, grad[bias ? 2 : 1],
                      bias ? grad[3] : NULL);
}

/* The issue-13 fields of a hand-built attention layer: kv heads (0: heads),
 * biases, RoPE base (0: none). */
typedef struct attn_ext {
    int kv, nobias;
    double theta;
} attn_ext;

/* A hand-built attention layer over [T, D] in mode mode, with the fields of e. */
static void make_attention_ext(clremat_layer *L, int64_t T, int64_t D, int heads, int causal, double rate, int mode,
                               attn_ext e)
{
    int64_t kv = e.kv > 0 ? e.kv : heads, w3 = D + 2 * kv * (D / heads);
    int64_t xd[2] = {T, D}, wq[2] = {D, w3}, wo[2] = {D, D};
    int p = 0;
    memset(L, 0, sizeof *L);
    snprintf(L->name, sizeof L->name, "attn");
    L->type = CLREMAT_ATTENTION;
    L->n_inputs = 1;
    L->inputs[0] = -1;
    L->block = -1;
    L->in_shape[0] = lc_shape(2, xd);
    L->out_shape = L->in_shape[0];
    L->heads = heads;
    L->causal = causal;
    L->rate = rate;
    L->attn_mode = mode;
    L->kv_heads = e.kv;
    L->use_bias = !e.nobias;
    L->rope_theta = e.theta;
    lc_set_param(L, p++, "wqkv", 2, wq);
    if (!e.nobias)
        lc_set_param(L, p++, "bqkv", 1, &w3);
    lc_set_param(L, p++, "wo", 2, wo);
    if (!e.nobias)
        lc_set_param(L, p++, "bo", 1, &D);
}

/* The plain multi-head layout: kv_heads = heads, biases, no RoPE. */
static void make_attention(clremat_layer *L, int64_t T, int64_t D, int heads, int causal, double rate, int mode)
{
    attn_ext e = {0, 0, 0.0};
    make_attention_ext(L, T, D, heads, causal, rate, mode, e);
}

/* ------------------------------------------------------- harness checks */

static void check_flash_ext(clremat_ctx *ctx, int64_t batch, int64_t T, int64_t D, int heads, int causal,
                            double rate, unsigned rng, attn_ext e)
{
    clremat_layer L;
    clremat_graph g;
    lc_spec spec;
    make_attention_ext(&L, T, D, heads, causal, rate, CLREMAT_ATTN_MEMORY_EFFICIENT, e);
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

static void check_flash(clremat_ctx *ctx, int64_t batch, int64_t T, int64_t D, int heads, int causal, double rate,
                        unsigned rng)
{
    attn_ext e = {0, 0, 0.0};
    check_flash_ext(ctx, batch, T, D, heads, causal, rate, rng, e);
}

START_TEST(test_flash_check)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    check_flash(ctx, 2, 7, 6, 3, 0, 0.0, 31);    /* odd T, 3 heads of 2 */
    check_flash(ctx, 2, 7, 6, 3, 1, 0.0, 32);    /* causal */
    check_flash(ctx, 3, 1, 5, 1, 0, 0.0, 33);    /* T = 1, one head, odd width */
    check_flash(ctx, 1, 5, 9, 3, 1, 0.0, 34);    /* heads of 3 */
    check_flash(ctx, 2, 6, 20, 1, 0, 0.0, 35);   /* width 20 */
    check_flash(ctx, 1, 37, 8, 2, 1, 0.0, 36);   /* 37 rows in one partial tile */
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Small tiles: every sequence spans several tiles and T is not a multiple
 * of the tile (partial last tiles, causal diagonals inside tiles). */
START_TEST(test_flash_small_tiles)
{
    static const char *const tiles[] = {"1", "4", "8"};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int i = 0; i < 3; i++) {
        setenv("CLREMAT_ATTN_TILE", tiles[i], 1);
        check_flash(ctx, 2, 13, 6, 3, 1, 0.0, 40 + (unsigned)i);
        check_flash(ctx, 1, 19, 8, 2, 0, 0.0, 50 + (unsigned)i);
    }
    unsetenv("CLREMAT_ATTN_TILE");
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Grouped-query kv_heads (2 of 4, 1 of 3: multi-query), use_bias false and
 * RoPE theta 10000, alone and together (Llama's layer), causal and not, odd
 * T; with small tiles the sequences span partial tiles. */
START_TEST(test_flash_llm_fields_check)
{
    static const struct { int64_t B, T, D; int heads, causal; double rate; attn_ext e; } cfg[] = {
        {2, 7, 8, 4, 1, 0.0, {2, 0, 0.0}},      {1, 9, 6, 3, 0, 0.0, {1, 0, 0.0}},
        {2, 7, 6, 3, 1, 0.0, {0, 1, 0.0}},      {2, 7, 8, 2, 1, 0.0, {0, 0, 10000.0}},
        {2, 11, 16, 4, 1, 0.0, {2, 1, 10000.0}}, {1, 13, 12, 3, 1, 0.0, {1, 1, 10000.0}},
        {1, 9, 8, 4, 0, 0.0, {2, 1, 10000.0}},  {2, 7, 8, 4, 1, 0.3, {2, 1, 10000.0}},
    };
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
        check_flash_ext(ctx, cfg[i].B, cfg[i].T, cfg[i].D, cfg[i].heads, cfg[i].causal, cfg[i].rate,
                        70 + (unsigned)i, cfg[i].e);
    setenv("CLREMAT_ATTN_TILE", "4", 1);
    for (size_t i = 4; i < 6; i++)
        check_flash_ext(ctx, cfg[i].B, cfg[i].T, cfg[i].D, cfg[i].heads, cfg[i].causal, cfg[i].rate,
                        80 + (unsigned)i, cfg[i].e);
    unsetenv("CLREMAT_ATTN_TILE");
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_flash_dropout_check)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    check_flash(ctx, 2, 7, 6, 3, 0, 0.3, 61);
    check_flash(ctx, 2, 7, 6, 3, 1, 0.5, 62);
    check_flash(ctx, 1, 1, 4, 1, 1, 0.25, 63);   /* T = 1 */
    setenv("CLREMAT_ATTN_TILE", "4", 1);
    check_flash(ctx, 1, 11, 6, 3, 1, 0.3, 64);
    unsetenv("CLREMAT_ATTN_TILE");
    clremat_ctx_destroy(ctx);
}
END_TEST

/* --------------------------------------------------- against the plain mode */

static clremat_buf *upload(clremat_ctx *ctx, const float *h, int64_t n, const char *tag)
{
    clremat_buf *b = NULL;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (size_t)(n > 0 ? n : 1) * sizeof(float), tag, &b), CLREMAT_OK);
    if (h)
        ck_assert_int_eq(clremat_write(ctx, b, 0, (size_t)n * sizeof(float), h), CLREMAT_OK);
    return b;
}

static float *download(clremat_ctx *ctx, const clremat_buf *b, int64_t n)
{
    float *h = malloc(sizeof(float) * (size_t)n);
    ck_assert_int_eq(clremat_read(ctx, b, 0, (size_t)n * sizeof(float), h), CLREMAT_OK);
    return h;
}

static float *uniform_floats(int64_t n, unsigned seed, float scale)
{
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        h[i] = scale * (2.0f * clremat_uniform(clremat_hash(seed, 0, 0, (uint32_t)i)) - 1.0f);
    return h;
}

/* Outputs of one forward and backward of an attention layer. */
typedef struct attn_result {
    float *out, *din, *grad[4];
} attn_result;

static void result_free(attn_result *r)
{
    free(r->out);
    free(r->din);
    for (int p = 0; p < 4; p++)
        free(r->grad[p]);
}

/* Forward then backward of g's layer 0 at batch on the given data, every
 * buffer exactly as the cost says. */
static void run_layer(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, const float *x, float *const *par,
                      const float *dout, uint64_t seed, uint64_t step, attn_result *res)
{
    const clremat_layer *L = &g->layers[0];
    int64_t nx = batch * L->in_shape[0].dims[0] * L->in_shape[0].dims[1];
    clremat_layer_cost cost;
    clremat_layer_call c;
    clremat_buf *tf = NULL, *tb = NULL, *ws = NULL;
    size_t ws_fwd = 0, ws_bwd = 0;
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(clremat_layer_cost_of(g, 0, batch, &cost), CLREMAT_OK);
    /* the GEMM workspace of the context's path (CLBlast's on larger shapes), as a step allocates it */
    ck_assert_msg(clremat_layer_gemm_workspace(ctx, g, 0, batch, &cost, &ws_fwd, &ws_bwd) == CLREMAT_OK,
                  "GEMM workspace: %s", clremat_ctx_last_error(ctx));
    if (ws_fwd || ws_bwd)
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, ws_fwd > ws_bwd ? ws_fwd : ws_bwd, "gemm workspace", &ws),
                         CLREMAT_OK);
    ctx->gemm_ws = ws;
    c.ctx = ctx;
    c.g = g;
    c.batch = batch;
    c.seed = seed;
    c.step = step;
    c.in[0] = upload(ctx, x, nx, "x");
    for (int s = 0; s < cost.n_slots; s++)
        c.slot[s] = upload(ctx, NULL, (int64_t)(cost.slot_bytes[s] / sizeof(float)), "slot");
    memset(res, 0, sizeof *res);
    for (int p = 0; p < L->n_params; p++) {
        c.param[p] = upload(ctx, par[p], L->params[p].elems, "param");
        c.grad[p] = upload(ctx, NULL, L->params[p].elems, "grad");
    }
    if (cost.fwd_temp_bytes)
        tf = upload(ctx, NULL, (int64_t)(cost.fwd_temp_bytes / sizeof(float)), "temp fwd");
    tb = upload(ctx, NULL, (int64_t)(cost.bwd_temp_bytes / sizeof(float)), "temp bwd");
    c.temp = tf;
    ck_assert_msg(clremat_layer_forward(&c) == CLREMAT_OK, "forward: %s", clremat_ctx_last_error(ctx));
    c.dout = upload(ctx, dout, nx, "dout");
    c.din[0] = upload(ctx, NULL, nx, "din");
    c.temp = tb;
    ck_assert_msg(clremat_layer_backward(&c) == CLREMAT_OK, "backward: %s", clremat_ctx_last_error(ctx));
    res->out = download(ctx, c.slot[0], nx);
    res->din = download(ctx, c.din[0], nx);
    for (int p = 0; p < L->n_params; p++)
        res->grad[p] = download(ctx, c.grad[p], L->params[p].elems);
    clremat_pool_release(ctx->pool, c.in[0]);
    clremat_pool_release(ctx->pool, c.din[0]);
    clremat_pool_release(ctx->pool, c.dout);
    for (int s = 0; s < cost.n_slots; s++)
        clremat_pool_release(ctx->pool, c.slot[s]);
    for (int p = 0; p < L->n_params; p++) {
        clremat_pool_release(ctx->pool, c.param[p]);
        clremat_pool_release(ctx->pool, c.grad[p]);
    }
    clremat_pool_release(ctx->pool, tf);
    clremat_pool_release(ctx->pool, tb);
    clremat_pool_release(ctx->pool, ws);
    ctx->gemm_ws = NULL;
}

/* Runs layer L (a one-layer graph) forward and backward `runs` times on
 * the same inputs (uniform data from seed; parameters scaled by pscale),
 * the first in whatever state ctx is, and asserts every run gives the
 * first one's bits: output, input gradient, every parameter gradient. */
static void assert_repeatable(clremat_ctx *ctx, clremat_layer *L, int64_t B, unsigned seed, float pscale, int runs)
{
    clremat_graph g;
    attn_result r[3];
    float *x, *dout, *par[4];
    int64_t n;
    ck_assert(runs >= 2 && runs <= 3);
    lc_graph_of_layer(&g, L);
    n = B * L->in_shape[0].dims[0] * L->in_shape[0].dims[1];
    x = uniform_floats(n, seed, 1.0f);
    dout = uniform_floats(n, seed + 1, 1.0f);
    for (int p = 0; p < L->n_params; p++)
        par[p] = uniform_floats(L->params[p].elems, seed + 2 + (unsigned)p, pscale);
    for (int k = 0; k < runs; k++)
        run_layer(ctx, &g, B, x, par, dout, 9, 2, &r[k]);
    for (int k = 1; k < runs; k++) {
        ck_assert_msg(memcmp(r[0].out, r[k].out, sizeof(float) * (size_t)n) == 0, "run %d: output differs", k);
        ck_assert_msg(memcmp(r[0].din, r[k].din, sizeof(float) * (size_t)n) == 0, "run %d: input gradient differs",
                      k);
        for (int p = 0; p < L->n_params; p++)
            ck_assert_msg(memcmp(r[0].grad[p], r[k].grad[p], sizeof(float) * (size_t)L->params[p].elems) == 0,
                          "run %d: gradient of %s differs", k, L->params[p].name);
    }
    for (int k = 0; k < runs; k++)
        result_free(&r[k]);
    free(x);
    free(dout);
    for (int p = 0; p < L->n_params; p++)
        free(par[p]);
}

/* max |a - b| / max(max |b|, tiny): the difference relative to the
 * tensor's scale (a per-element relative error is meaningless where
 * values cancel to near zero). */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double md = 0.0, mb = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        md = d > md ? d : md;
        mb = fabs((double)b[i]) > mb ? fabs((double)b[i]) : mb;
    }
    return md / mb;
}

/* Largest difference relative to scale of the memory-efficient mode against
 * the plain one over every output (forward out, din, the four gradients). */
#define PLAIN_TOL 1e-5
static double compare_modes_ext(clremat_ctx *ctx, int64_t B, int64_t T, int64_t D, int heads, int causal,
                                double rate, unsigned seed, attn_ext e)
{
    clremat_layer Lp, Lf;
    clremat_graph gp, gf;
    attn_result rp, rf;
    float *x, *par[4] = {NULL, NULL, NULL, NULL}, *dout;
    int64_t nx = B * T * D;
    double worst = 0.0;
    int np;
    make_attention_ext(&Lp, T, D, heads, causal, rate, CLREMAT_ATTN_PLAIN, e);
    make_attention_ext(&Lf, T, D, heads, causal, rate, CLREMAT_ATTN_MEMORY_EFFICIENT, e);
    np = Lp.n_params;
    lc_graph_of_layer(&gp, &Lp);
    lc_graph_of_layer(&gf, &Lf);
    x = uniform_floats(nx, seed, 1.0f);
    dout = uniform_floats(nx, seed + 100, 1.0f);
    for (int p = 0; p < np; p++)
        par[p] = uniform_floats(Lp.params[p].elems, seed + 1 + (unsigned)p, p == 0 ? 1.5f : 0.5f);
    run_layer(ctx, &gp, B, x, par, dout, 77, 4, &rp);
    run_layer(ctx, &gf, B, x, par, dout, 77, 4, &rf);
    {
        double d[6] = {rel_diff(rf.out, rp.out, nx), rel_diff(rf.din, rp.din, nx), 0, 0, 0, 0};
        for (int p = 0; p < np; p++)
            d[2 + p] = rel_diff(rf.grad[p], rp.grad[p], Lp.params[p].elems);
        for (int i = 0; i < 2 + np; i++)
            worst = d[i] > worst ? d[i] : worst;
        if (np == 4)
            printf("memory_efficient vs plain B=%lld T=%lld D=%lld heads=%d kv_heads=%d rope=%g causal=%d "
                   "rate=%g: out %.2e din %.2e dwqkv %.2e dbqkv %.2e dwo %.2e dbo %.2e\n", (long long)B,
                   (long long)T, (long long)D, heads, e.kv, e.theta, causal, rate, d[0], d[1], d[2], d[3], d[4],
                   d[5]);
        else
            printf("memory_efficient vs plain B=%lld T=%lld D=%lld heads=%d kv_heads=%d rope=%g causal=%d "
                   "rate=%g, no biases: out %.2e din %.2e dwqkv %.2e dwo %.2e\n", (long long)B, (long long)T,
                   (long long)D, heads, e.kv, e.theta, causal, rate, d[0], d[1], d[2], d[3]);
    }
    result_free(&rp);
    result_free(&rf);
    free(x);
    free(dout);
    for (int p = 0; p < np; p++)
        free(par[p]);
    return worst;
}

static double compare_modes(clremat_ctx *ctx, int64_t B, int64_t T, int64_t D, int heads, int causal, double rate,
                            unsigned seed)
{
    attn_ext e = {0, 0, 0.0};
    return compare_modes_ext(ctx, B, T, D, heads, causal, rate, seed, e);
}

START_TEST(test_flash_vs_plain)
{
    static const struct { int64_t B, T, D; int heads, causal; double rate; } cfg[] = {
        {2, 7, 6, 3, 0, 0.0}, {2, 7, 6, 3, 1, 0.0}, {1, 1, 4, 1, 1, 0.0}, {2, 65, 32, 4, 1, 0.0},
        {1, 130, 64, 2, 0, 0.0}, {1, 257, 64, 4, 1, 0.0}, {2, 33, 16, 2, 1, 0.2},
    };
    clremat_ctx *ctx;
    double worst = 0.0;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        double w;
        if (test_reduced() && cfg[i].T > 40) /* slow implementations, oclgrind: the short sequences */
            continue;
        w = compare_modes(ctx, cfg[i].B, cfg[i].T, cfg[i].D, cfg[i].heads, cfg[i].causal, cfg[i].rate,
                                 200 + (unsigned)i * 10);
        ck_assert_msg(w <= PLAIN_TOL, "configuration %zu: memory_efficient differs from plain by %.3e of scale "
                      "(tolerance %.1e)", i, w, PLAIN_TOL);
        worst = w > worst ? w : worst;
    }
    printf("memory_efficient vs plain on %s: largest difference %.3e of each tensor's scale\n", ctx->info.name,
           worst);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Two runs from the same state give the same bits (what a recomputation
 * under a remat mode relies on), with and without dropout. */
START_TEST(test_flash_deterministic)
{
    clremat_layer L;
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int drop = 0; drop < 2; drop++) {
        enum { B = 2, T = 45, D = 12, H = 3 };
        make_attention(&L, T, D, H, 1, drop ? 0.3 : 0.0, CLREMAT_ATTN_MEMORY_EFFICIENT);
        assert_repeatable(ctx, &L, B, 5, 0.7f, 2);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* The issue-13 fields against the plain layer on the same inputs: within
 * float32 rounding (PLAIN_TOL), and bitwise deterministic (the dk/dv kernel
 * sums the query heads of a kv head in a fixed order). */
START_TEST(test_flash_llm_fields_vs_plain)
{
    static const struct { int64_t B, T, D; int heads, causal; double rate; attn_ext e; } cfg[] = {
        {2, 37, 32, 4, 1, 0.0, {2, 0, 0.0}},     {1, 41, 24, 3, 1, 0.0, {1, 0, 0.0}},
        {2, 33, 16, 2, 0, 0.0, {0, 1, 0.0}},     {1, 35, 32, 4, 1, 0.0, {0, 0, 10000.0}},
        {2, 65, 32, 4, 1, 0.0, {2, 1, 10000.0}}, {1, 67, 48, 3, 1, 0.0, {1, 1, 10000.0}},
        {1, 130, 64, 4, 0, 0.0, {2, 1, 10000.0}}, {2, 33, 32, 4, 1, 0.2, {2, 1, 10000.0}},
    };
    clremat_ctx *ctx;
    double worst = 0.0;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        double w;
        if (test_reduced() && cfg[i].T > 40)
            continue;
        w = compare_modes_ext(ctx, cfg[i].B, cfg[i].T, cfg[i].D, cfg[i].heads, cfg[i].causal, cfg[i].rate,
                              400 + (unsigned)i * 10, cfg[i].e);
        ck_assert_msg(w <= PLAIN_TOL, "configuration %zu: memory_efficient differs from plain by %.3e of scale "
                      "(tolerance %.1e)", i, w, PLAIN_TOL);
        worst = w > worst ? w : worst;
    }
    printf("memory_efficient vs plain (kv_heads, use_bias false, rope) on %s: largest difference %.3e of each "
           "tensor's scale\n", ctx->info.name, worst);
    {   /* determinism: multi-query and grouped-query, RoPE, no biases, dropout */
        static const attn_ext es[2] = {{1, 1, 10000.0}, {2, 1, 10000.0}};
        for (int k = 0; k < 2; k++) {
            clremat_layer L;
            enum { B = 2, T = 45, D = 16, H = 4 };
            make_attention_ext(&L, T, D, H, 1, k ? 0.3 : 0.0, CLREMAT_ATTN_MEMORY_EFFICIENT, es[k]);
            ck_assert_int_eq(L.n_params, 2);
            assert_repeatable(ctx, &L, B, 15, 0.7f, 2);
        }
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* The tiles do not depend on what ran before: a head width whose 64-row
 * tiles take about 80% of the device's local memory, run in a fresh
 * context and again after it, gives the same bits. (CL_KERNEL_LOCAL_MEM_SIZE
 * of a kernel whose __local arguments were set by a launch counts them:
 * the tiles were once sized from the cached kernels after their first
 * launch, so on an NVIDIA H200's 48 KiB every later layer call took smaller
 * tiles than the first, and llama_tiny under full differed from none.) */
START_TEST(test_flash_tiles_stable)
{
    clremat_ctx *ctx;
    cl_ulong local_mem = 0;
    clremat_layer L;
    const attn_ext e = {1, 1, 0.0};
    int64_t dh, T = 80;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clGetDeviceInfo(ctx->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL),
                     CL_SUCCESS);
    /* the dk/dv kernel's 6 t dh + 3 t floats at t = 64, 80% of local memory */
    dh = ((int64_t)(local_mem / 5 * 4 / sizeof(float)) - 3 * 64) / (6 * 64);
    ck_assert_int_ge(dh, 1);
    fprintf(stderr, "tiles_stable on %s: %llu bytes of local memory, head width %lld\n", ctx->info.name,
            (unsigned long long)local_mem, (long long)dh);
    make_attention_ext(&L, T, dh, 1, 1, 0.0, CLREMAT_ATTN_MEMORY_EFFICIENT, e);
    assert_repeatable(ctx, &L, 1, 21, 1.0f / sqrtf((float)dh), 3); /* fresh, again, again */
    clremat_ctx_destroy(ctx);
}
END_TEST

/* ------------------------------------------- llama_tiny, memory-efficient */

#define LLAMA_STEPS 3
#define LLAMA_BATCH 2

typedef struct llama_run {
    float loss[LLAMA_STEPS];
    float *params;
    size_t param_bytes;
    uint64_t predicted, measured;
} llama_run;

/* LLAMA_STEPS Adam steps of g under remat mode mode from seed 7. */
static void llama_train(clremat_ctx *ctx, clremat_graph *g, const clremat_dataset *d, const char *mode,
                        llama_run *out)
{
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t;
    float *x = malloc(sizeof(float) * (size_t)(LLAMA_BATCH * d->train.x_elems));
    float *y = malloc(sizeof(float) * (size_t)(LLAMA_BATCH * d->train.y_elems));
    ck_assert_int_eq(clremat_policy_parse(mode, &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults("adam", &opt), 0);
    ck_assert_msg(clremat_trainer_new_costs(ctx, g, LLAMA_BATCH, &pol, &opt, 7, NULL, 0, &t) == CLREMAT_OK,
                  "%s: %s", mode, clremat_ctx_last_error(ctx));
    clremat_pool_reset_peaks(ctx->pool);
    for (int s = 0; s < LLAMA_STEPS; s++) {
        float correct;
        clremat_data_batch(&d->train, 7, s, LLAMA_BATCH, x, y);
        ck_assert_msg(clremat_trainer_step(t, x, y, &out->loss[s], &correct) == CLREMAT_OK, "%s step %d: %s",
                      mode, s, clremat_ctx_last_error(ctx));
        ck_assert(isfinite(out->loss[s]));
    }
    out->predicted = t->plan.peak_bytes;
    out->measured = clremat_pool_get_stats(ctx->pool).live_peak;
    out->param_bytes = t->plan.param_bytes;
    out->params = malloc(out->param_bytes);
    ck_assert_int_eq(clremat_trainer_get_params(t, out->params), CLREMAT_OK);
    clremat_trainer_free(t);
    free(x);
    free(y);
}

/* models/llama_tiny.json (grouped-query, RoPE, no biases) with its attention
 * layers switched to memory_efficient trains: predicted == measured peak
 * under none and full, losses and parameters bitwise across the two remat
 * modes, and losses within float32 rounding of the plain model's. */
START_TEST(test_flash_llama_tiny)
{
    char path[1024];
    const char *dir = getenv("CLREMAT_MODELS");
    clremat_graph *g = NULL;
    clremat_ctx *ctx;
    clremat_dataset d;
    llama_run plain, mem, memf;
    int n_attn = 0;
    double worst = 0.0;
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "models", "llama_tiny.json");
    ck_assert_msg(clremat_graph_load(path, &g) == CLREMAT_OK, "%s", clremat_last_error());
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_msg(clremat_data_synthetic(g, "language", 1, 64, 16, &d) == CLREMAT_OK, "%s", clremat_last_error());
    llama_train(ctx, g, &d, "none", &plain);
    for (int l = 0; l < g->n_layers; l++)
        if (g->layers[l].type == CLREMAT_ATTENTION) {
            ck_assert(g->layers[l].kv_heads < g->layers[l].heads && !g->layers[l].use_bias &&
                      g->layers[l].rope_theta > 0.0);
            g->layers[l].attn_mode = CLREMAT_ATTN_MEMORY_EFFICIENT;
            n_attn++;
        }
    ck_assert_int_eq(n_attn, 4);
    llama_train(ctx, g, &d, "none", &mem);
    llama_train(ctx, g, &d, "full", &memf);
    fprintf(stderr, "llama_tiny batch %d: plain none peak %llu (measured %llu); memory_efficient none %llu "
            "(measured %llu), full %llu (measured %llu)\n", LLAMA_BATCH, (unsigned long long)plain.predicted,
            (unsigned long long)plain.measured, (unsigned long long)mem.predicted, (unsigned long long)mem.measured,
            (unsigned long long)memf.predicted, (unsigned long long)memf.measured);
    ck_assert_uint_eq(plain.measured, plain.predicted);
    ck_assert_uint_eq(mem.measured, mem.predicted);
    ck_assert_uint_eq(memf.measured, memf.predicted);
    ck_assert(mem.predicted < plain.predicted);
    ck_assert_int_eq(memcmp(memf.loss, mem.loss, sizeof mem.loss), 0);
    ck_assert_uint_eq(memf.param_bytes, mem.param_bytes);
    ck_assert_int_eq(memcmp(memf.params, mem.params, mem.param_bytes), 0);
    for (int s = 0; s < LLAMA_STEPS; s++) {
        double r = fabs((double)mem.loss[s] - (double)plain.loss[s]) / fabs((double)plain.loss[s]);
        fprintf(stderr, "llama_tiny step %d: plain loss %.9g, memory_efficient %.9g (relative %.2e)\n", s,
                (double)plain.loss[s], (double)mem.loss[s], r);
        ck_assert_msg(r <= 1e-5, "step %d: plain %.9g, memory_efficient %.9g", s, (double)plain.loss[s],
                      (double)mem.loss[s]);
        worst = r > worst ? r : worst;
    }
    fprintf(stderr, "llama_tiny memory_efficient vs plain on %s: largest loss difference %.2e relative\n",
            ctx->info.name, worst);
    free(plain.params);
    free(mem.params);
    free(memf.params);
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* ------------------------------------------------ device-free: cost, file */

START_TEST(test_flash_cost)
{
    static const int64_t Ts[] = {512, 1024, 2048, 4096};
    clremat_layer Lp, Lf;
    clremat_graph gp, gf;
    for (int i = 0; i < 4; i++) {
        int64_t T = Ts[i], D = 128, H = 4, B = 2, rows = B * T;
        clremat_layer_cost cp, cf;
        make_attention(&Lp, T, D, (int)H, 1, 0.0, CLREMAT_ATTN_DEFAULT);
        make_attention(&Lf, T, D, (int)H, 1, 0.0, CLREMAT_ATTN_MEMORY_EFFICIENT);
        lc_graph_of_layer(&gp, &Lp);
        lc_graph_of_layer(&gf, &Lf);
        ck_assert_int_eq(clremat_layer_cost_of(&gp, 0, B, &cp), CLREMAT_OK);
        ck_assert_int_eq(clremat_layer_cost_of(&gf, 0, B, &cf), CLREMAT_OK);
        ck_assert_str_eq(cp.slot_name[2], "probs");
        ck_assert_str_eq(cf.slot_name[2], "stats");
        ck_assert_uint_eq(cp.slot_bytes[2], (size_t)(B * H * T * T) * 4);
        ck_assert_uint_eq(cf.slot_bytes[2], (size_t)(2 * B * H * T) * 4);     /* m and l per row */
        for (int s = 0; s < 4; s++)
            if (s != 2)
                ck_assert_uint_eq(cf.slot_bytes[s], cp.slot_bytes[s]);
        ck_assert_uint_eq(cf.fwd_temp_bytes, 0);
        ck_assert_uint_eq(cf.bwd_temp_bytes, (size_t)(B * H * T + rows * D + rows * 3 * D) * 4);
        ck_assert_uint_eq(cf.bwd_needs_slots, cp.bwd_needs_slots);
        /* causal: only the unmasked half of the scores is computed */
        ck_assert(cf.fwd_flops < cp.fwd_flops);
        ck_assert(cf.fwd_flops > 0.5 * cp.fwd_flops);
    }
    for (int i = 0; i < 4; i++) {  /* without the mask: the same forward, a dearer backward */
        int64_t T = Ts[i], D = 64, B = 1;
        clremat_layer_cost cp, cf;
        make_attention(&Lp, T, D, 2, 0, 0.0, CLREMAT_ATTN_PLAIN);
        make_attention(&Lf, T, D, 2, 0, 0.0, CLREMAT_ATTN_MEMORY_EFFICIENT);
        lc_graph_of_layer(&gp, &Lp);
        lc_graph_of_layer(&gf, &Lf);
        ck_assert_int_eq(clremat_layer_cost_of(&gp, 0, B, &cp), CLREMAT_OK);
        ck_assert_int_eq(clremat_layer_cost_of(&gf, 0, B, &cf), CLREMAT_OK);
        ck_assert(cf.fwd_flops == cp.fwd_flops);
        ck_assert(cf.bwd_flops > cp.bwd_flops);   /* the scores are recomputed, twice */
    }
}
END_TEST

START_TEST(test_flash_model_field)
{
    static const char *const fmt =
        "{\"name\": \"m\", \"input\": {\"shape\": [8, 16]}, \"layers\": [\n"
        "  {\"name\": \"attn\", \"type\": \"attention\", \"heads\": 2%s},\n"
        "  {\"name\": \"loss\", \"type\": \"mse\"}]}";
    static const struct { const char *field; int mode; } ok[] = {
        {"", CLREMAT_ATTN_DEFAULT}, {", \"attention\": \"plain\"", CLREMAT_ATTN_PLAIN},
        {", \"attention\": \"memory_efficient\"", CLREMAT_ATTN_MEMORY_EFFICIENT},
    };
    char text[512];
    clremat_graph *g = NULL;
    for (int i = 0; i < 3; i++) {
        snprintf(text, sizeof text, fmt, ok[i].field);
        ck_assert_msg(clremat_graph_load_string(text, "m.json", &g) == CLREMAT_OK, "%s", clremat_last_error());
        ck_assert_int_eq(g->layers[0].attn_mode, ok[i].mode);
        clremat_graph_free(g);
        g = NULL;
    }
    /* the plain layer's issue-13 fields combine with both modes that may run memory-efficient */
    for (int i = 0; i < 2; i++) {
        snprintf(text, sizeof text, fmt, i ? ", \"kv_heads\": 1, \"use_bias\": false, \"rope\": {\"theta\": 10000}, "
                 "\"attention\": \"auto\"" : ", \"kv_heads\": 1, \"use_bias\": false, \"rope\": {\"theta\": 10000}, "
                 "\"attention\": \"memory_efficient\"");
        ck_assert_msg(clremat_graph_load_string(text, "m.json", &g) == CLREMAT_OK, "%s", clremat_last_error());
        ck_assert_int_eq(g->layers[0].attn_mode, i ? CLREMAT_ATTN_AUTO : CLREMAT_ATTN_MEMORY_EFFICIENT);
        ck_assert_int_eq(g->layers[0].kv_heads, 1);
        ck_assert_int_eq(g->layers[0].n_params, 2);
        ck_assert(g->layers[0].rope_theta == 10000.0);
        clremat_graph_free(g);
        g = NULL;
    }
    snprintf(text, sizeof text, fmt, ", \"attention\": \"flash\"");
    ck_assert_int_ne(clremat_graph_load_string(text, "m.json", &g), CLREMAT_OK);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "m.json:2:"));
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "'flash'"));
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "memory_efficient"));
    snprintf(text, sizeof text, fmt, ", \"attention\": 1");
    ck_assert_int_ne(clremat_graph_load_string(text, "m.json", &g), CLREMAT_OK);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "attention"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attention_flash");
    TCase *tc = tcase_create("host");
    tcase_add_test(tc, test_flash_cost);
    tcase_add_test(tc, test_flash_model_field);
    suite_add_tcase(s, tc);
    if (!test_have_device()) {
        int rc = test_run_suite(s);
        return rc != EXIT_SUCCESS ? rc : TEST_SKIP;
    }
    tc = tcase_create("device");
    tcase_set_timeout(tc, TIMEOUT);
    tcase_add_test(tc, test_flash_check);
    tcase_add_test(tc, test_flash_small_tiles);
    tcase_add_test(tc, test_flash_dropout_check);
    tcase_add_test(tc, test_flash_vs_plain);
    tcase_add_test(tc, test_flash_deterministic);
    tcase_add_test(tc, test_flash_tiles_stable);
    tcase_add_test(tc, test_flash_llm_fields_check);
    tcase_add_test(tc, test_flash_llm_fields_vs_plain);
    if (!test_reduced()) /* llama_tiny: too slow on slow implementations */
        tcase_add_test(tc, test_flash_llama_tiny);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
