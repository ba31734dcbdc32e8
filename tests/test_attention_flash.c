/* test_attention_flash.c: the memory-efficient attention mode
 * (backend/attention_flash.c, kernels flash_attn_*). Through the layercheck
 * harness: device forward and backward against the double-precision host
 * reference of the attention layer (ref_seq.c) and finite differences, over
 * odd T, T = 1, T not a multiple of the tile (tiles capped small with
 * CLREMAT_ATTN_TILE so that sequences span many tiles), causal on and off,
 * 1 and 3 heads, dropout. Then against the plain attention on the same
 * inputs (forward, input and parameter gradients; the measured relative
 * differences are printed and must stay within float32 rounding), bitwise
 * determinism of forward and backward, the model-file field, and the cost
 * model (stats slot linear in T, no T x T tensor). Skips (77) without a
 * device, after the device-free checks. */
#include "testutil.h"
#include "backend.h"
#include "layers.h"
#include "layercheck.h"
#include "ref_seq.h"
#include "rng.h"
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
                  L->rate, io->seed, (uint32_t)io->step, (uint32_t)io->layer, 0, 0.0};
    return a;
}

static void attn_fwd(const lc_io *io, double *out)
{
    ref_attn a = attn_cfg(io);
    ref_attention_fwd(&a, io->in[0], io->param[0], io->param[1], io->param[2], io->param[3], out, NULL, NULL, NULL);
}

static void attn_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    ref_attn a = attn_cfg(io);
    ref_attention_bwd(&a, io->in[0], io->param[0], io->param[1], io->param[2], io->param[3], dout, din[0], grad[0],
                      grad[1], grad[2], grad[3]);
}

/* A hand-built attention layer over [T, D] in mode mode. */
static void make_attention(clremat_layer *L, int64_t T, int64_t D, int heads, int causal, double rate, int mode)
{
    int64_t xd[2] = {T, D}, wq[2] = {D, 3 * D}, bq = 3 * D, wo[2] = {D, D};
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
    lc_set_param(L, 0, "wqkv", 2, wq);
    lc_set_param(L, 1, "bqkv", 1, &bq);
    lc_set_param(L, 2, "wo", 2, wo);
    lc_set_param(L, 3, "bo", 1, &D);
}

/* ------------------------------------------------------- harness checks */

static void check_flash(clremat_ctx *ctx, int64_t batch, int64_t T, int64_t D, int heads, int causal, double rate,
                        unsigned rng)
{
    clremat_layer L;
    clremat_graph g;
    lc_spec spec;
    make_attention(&L, T, D, heads, causal, rate, CLREMAT_ATTN_MEMORY_EFFICIENT);
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
    clremat_buf *tf = NULL, *tb = NULL;
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(clremat_layer_cost_of(g, 0, batch, &cost), CLREMAT_OK);
    c.ctx = ctx;
    c.g = g;
    c.batch = batch;
    c.seed = seed;
    c.step = step;
    c.in[0] = upload(ctx, x, nx, "x");
    for (int s = 0; s < cost.n_slots; s++)
        c.slot[s] = upload(ctx, NULL, (int64_t)(cost.slot_bytes[s] / sizeof(float)), "slot");
    for (int p = 0; p < 4; p++) {
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
    for (int p = 0; p < 4; p++)
        res->grad[p] = download(ctx, c.grad[p], L->params[p].elems);
    clremat_pool_release(ctx->pool, c.in[0]);
    clremat_pool_release(ctx->pool, c.din[0]);
    clremat_pool_release(ctx->pool, c.dout);
    for (int s = 0; s < cost.n_slots; s++)
        clremat_pool_release(ctx->pool, c.slot[s]);
    for (int p = 0; p < 4; p++) {
        clremat_pool_release(ctx->pool, c.param[p]);
        clremat_pool_release(ctx->pool, c.grad[p]);
    }
    clremat_pool_release(ctx->pool, tf);
    clremat_pool_release(ctx->pool, tb);
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
static double compare_modes(clremat_ctx *ctx, int64_t B, int64_t T, int64_t D, int heads, int causal, double rate,
                            unsigned seed)
{
    clremat_layer Lp, Lf;
    clremat_graph gp, gf;
    attn_result rp, rf;
    float *x, *par[4], *dout;
    int64_t nx = B * T * D;
    double worst = 0.0;
    make_attention(&Lp, T, D, heads, causal, rate, CLREMAT_ATTN_PLAIN);
    make_attention(&Lf, T, D, heads, causal, rate, CLREMAT_ATTN_MEMORY_EFFICIENT);
    lc_graph_of_layer(&gp, &Lp);
    lc_graph_of_layer(&gf, &Lf);
    x = uniform_floats(nx, seed, 1.0f);
    dout = uniform_floats(nx, seed + 100, 1.0f);
    for (int p = 0; p < 4; p++)
        par[p] = uniform_floats(Lp.params[p].elems, seed + 1 + (unsigned)p, p == 0 ? 1.5f : 0.5f);
    run_layer(ctx, &gp, B, x, par, dout, 77, 4, &rp);
    run_layer(ctx, &gf, B, x, par, dout, 77, 4, &rf);
    {
        double d[6] = {rel_diff(rf.out, rp.out, nx), rel_diff(rf.din, rp.din, nx), 0, 0, 0, 0};
        for (int p = 0; p < 4; p++)
            d[2 + p] = rel_diff(rf.grad[p], rp.grad[p], Lp.params[p].elems);
        for (int i = 0; i < 6; i++)
            worst = d[i] > worst ? d[i] : worst;
        printf("memory_efficient vs plain B=%lld T=%lld D=%lld heads=%d causal=%d rate=%g: out %.2e din %.2e "
               "dwqkv %.2e dbqkv %.2e dwo %.2e dbo %.2e\n", (long long)B, (long long)T, (long long)D, heads, causal,
               rate, d[0], d[1], d[2], d[3], d[4], d[5]);
    }
    result_free(&rp);
    result_free(&rf);
    free(x);
    free(dout);
    for (int p = 0; p < 4; p++)
        free(par[p]);
    return worst;
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
    clremat_graph g;
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int drop = 0; drop < 2; drop++) {
        attn_result r1, r2;
        float *x, *par[4], *dout;
        enum { B = 2, T = 45, D = 12, H = 3 };
        make_attention(&L, T, D, H, 1, drop ? 0.3 : 0.0, CLREMAT_ATTN_MEMORY_EFFICIENT);
        lc_graph_of_layer(&g, &L);
        x = uniform_floats(B * T * D, 5, 1.0f);
        dout = uniform_floats(B * T * D, 6, 1.0f);
        for (int p = 0; p < 4; p++)
            par[p] = uniform_floats(L.params[p].elems, 7 + (unsigned)p, 0.7f);
        run_layer(ctx, &g, B, x, par, dout, 9, 2, &r1);
        run_layer(ctx, &g, B, x, par, dout, 9, 2, &r2);
        ck_assert_int_eq(memcmp(r1.out, r2.out, sizeof(float) * B * T * D), 0);
        ck_assert_int_eq(memcmp(r1.din, r2.din, sizeof(float) * B * T * D), 0);
        for (int p = 0; p < 4; p++)
            ck_assert_int_eq(memcmp(r1.grad[p], r2.grad[p], sizeof(float) * (size_t)L.params[p].elems), 0);
        result_free(&r1);
        result_free(&r2);
        free(x);
        free(dout);
        for (int p = 0; p < 4; p++)
            free(par[p]);
    }
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
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
