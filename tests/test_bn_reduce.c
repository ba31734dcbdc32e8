/* test_bn_reduce.c: batchnorm's blocked reductions (kernels.cl's
 * bn_stats_part / bn_stats_finish and bn_bwd_part / bn_bwd_finish) and its
 * vectorized elementwise kernels (bn_apply, bn_bwd_dx) through the layer's
 * launches, on [R, C] inputs whose shapes reach every path: C = 1, 3 (the
 * scalar tail alone), 8, 16 (8-wide groups alone), 17, 24 (groups and a
 * tail); R = 1, below one block, not a multiple of the block, and large
 * (more than 1024 blocks' worth, so blocks grow past their minimum). Each
 * against a double-precision host reference (two-pass mean and variance,
 * the input gradient, dgamma, dbeta, the moving statistics' one step), on
 * data with a mean far from zero (where a naive sum of squares would lose
 * the variance); the input gradient also accumulated into an existing one;
 * evaluation on the moving statistics; two runs bitwise identical (outputs
 * poisoned in between). Skips (77) without a device; under Oclgrind
 * (tests/run-oclgrind.sh tests/test_bn_reduce) the small shapes only. */
#include "testutil.h"
#include "layercheck.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A batchnorm with gamma and beta on a per-sample [C]. */
static void make_bn(clremat_layer *L, int64_t C)
{
    memset(L, 0, sizeof *L);
    snprintf(L->name, sizeof L->name, "bn_c%lld", (long long)C);
    L->type = CLREMAT_BATCHNORM;
    L->n_inputs = 1;
    L->in_shape[0] = lc_shape(1, &C);
    L->out_shape = L->in_shape[0];
    L->eps = 1e-3;
    L->momentum = 0.9;
    L->center = L->scale = 1;
    lc_set_param(L, 0, "gamma", 1, &C);
    lc_set_param(L, 1, "beta", 1, &C);
    lc_set_param(L, 2, "moving_mean", 1, &C);
    L->params[2].frozen = 1;
    lc_set_param(L, 3, "moving_variance", 1, &C);
    L->params[3].frozen = 1;
    L->n_params = 4;
}

/* Deterministic values in [-1, 1). */
static float noise(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

/* What a forward and a backward produced, read back. */
typedef struct bn_out {
    float *y, *stats, *dx, *p[4], *g[2];
} bn_out;

static void out_free(bn_out *o)
{
    free(o->y);
    free(o->stats);
    free(o->dx);
    for (int k = 0; k < 4; k++)
        free(o->p[k]);
    free(o->g[0]);
    free(o->g[1]);
}

/* Buffers of one [R, C] case on the device. */
typedef struct bn_case {
    int64_t R, C;
    clremat_ctx *ctx;
    clremat_layer L;
    clremat_graph g;
    clremat_layer_cost cost;
    float *x, *dy, *dx0, *p[4];
    clremat_buf *bx, *by, *bst, *bdy, *bdx, *bp[4], *bg[4], *fws, *bws;
} bn_case;

static clremat_buf *dev(bn_case *k, size_t bytes, const char *tag)
{
    clremat_buf *b = NULL;
    ck_assert_int_eq(clremat_pool_alloc(k->ctx->pool, bytes ? bytes : 4, tag, &b), CLREMAT_OK);
    return b;
}

static void case_open(bn_case *k, clremat_ctx *ctx, int64_t R, int64_t C)
{
    const size_t n = (size_t)(R * C);
    uint32_t s = (uint32_t)(R * 131 + C);
    memset(k, 0, sizeof *k);
    k->R = R;
    k->C = C;
    k->ctx = ctx;
    make_bn(&k->L, C);
    lc_graph_of_layer(&k->g, &k->L);
    ck_assert_int_eq(clremat_layer_cost_of(&k->g, 0, R, &k->cost), CLREMAT_OK);
    k->x = malloc(n * sizeof(float));
    k->dy = malloc(n * sizeof(float));
    k->dx0 = malloc(n * sizeof(float));
    ck_assert(k->x && k->dy && k->dx0);
    for (size_t i = 0; i < n; i++) { /* channel c centred on 50 + c, spread 0.5 + c / 8 */
        const int64_t c = (int64_t)(i % (size_t)C);
        k->x[i] = 50.0f + (float)c + (0.5f + (float)c / 8.0f) * noise(&s);
        k->dy[i] = noise(&s) + 0.25f;
        k->dx0[i] = noise(&s);
    }
    for (int p = 0; p < 4; p++) {
        k->p[p] = malloc((size_t)C * sizeof(float));
        ck_assert(k->p[p] != NULL);
        for (int64_t c = 0; c < C; c++)
            k->p[p][c] = p == 0 ? 1.0f + 0.1f * noise(&s) : p == 1 ? 0.2f * noise(&s) : p == 2 ? 49.0f + (float)c
                                                                                       : 0.5f + 0.01f * (float)c;
    }
    k->bx = dev(k, n * 4, "x");
    k->by = dev(k, n * 4, "y");
    k->bdy = dev(k, n * 4, "dy");
    k->bdx = dev(k, n * 4, "dx");
    k->bst = dev(k, (size_t)(3 * C) * 4, "stats");
    for (int p = 0; p < 4; p++) {
        k->bp[p] = dev(k, (size_t)C * 4, "param");
        k->bg[p] = dev(k, (size_t)C * 4, "grad");
    }
    k->fws = dev(k, k->cost.fwd_temp_bytes, "fwd workspace");
    k->bws = dev(k, k->cost.bwd_temp_bytes, "bwd workspace");
    ck_assert_int_eq(clremat_write(ctx, k->bx, 0, n * 4, k->x), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, k->bdy, 0, n * 4, k->dy), CLREMAT_OK);
}

static void case_close(bn_case *k)
{
    clremat_buf *bs[] = {k->bx, k->by, k->bst, k->bdy, k->bdx, k->fws, k->bws};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        clremat_pool_release(k->ctx->pool, bs[i]);
    for (int p = 0; p < 4; p++) {
        clremat_pool_release(k->ctx->pool, k->bp[p]);
        clremat_pool_release(k->ctx->pool, k->bg[p]);
        free(k->p[p]);
    }
    free(k->x);
    free(k->dy);
    free(k->dx0);
}

static float *readf(bn_case *k, clremat_buf *b, size_t n)
{
    float *h = malloc(n * sizeof(float));
    ck_assert(h != NULL);
    ck_assert_int_eq(clremat_read(k->ctx, b, 0, n * sizeof(float), h), CLREMAT_OK);
    return h;
}

/* One training forward and backward from fresh parameters (dx accumulated
 * into dx0 when acc); every output buffer poisoned first (NaN bytes). */
static void case_run(bn_case *k, int acc, bn_out *o)
{
    const size_t n = (size_t)(k->R * k->C), C = (size_t)k->C;
    /* the poison covers the largest write below (once n floats: with one
     * row, the 3 x C statistics read past it; ASan) */
    size_t poison = n * sizeof(float);
    if (poison < 3 * C * 4)
        poison = 3 * C * 4;
    if (poison < (size_t)k->cost.fwd_temp_bytes)
        poison = (size_t)k->cost.fwd_temp_bytes;
    if (poison < (size_t)k->cost.bwd_temp_bytes)
        poison = (size_t)k->cost.bwd_temp_bytes;
    float *nan = malloc(poison);
    clremat_layer_call c;
    ck_assert(nan != NULL);
    memset(nan, 0xff, poison);
    ck_assert_int_eq(clremat_write(k->ctx, k->by, 0, n * 4, nan), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(k->ctx, k->bst, 0, 3 * C * 4, nan), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(k->ctx, k->bdx, 0, n * 4, acc ? k->dx0 : nan), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(k->ctx, k->fws, 0, k->cost.fwd_temp_bytes, nan), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(k->ctx, k->bws, 0, k->cost.bwd_temp_bytes, nan), CLREMAT_OK);
    for (int p = 0; p < 4; p++) {
        ck_assert_int_eq(clremat_write(k->ctx, k->bp[p], 0, C * 4, k->p[p]), CLREMAT_OK);
        ck_assert_int_eq(clremat_write(k->ctx, k->bg[p], 0, C * 4, nan), CLREMAT_OK);
    }
    free(nan);
    memset(&c, 0, sizeof c);
    c.ctx = k->ctx;
    c.g = &k->g;
    c.batch = k->R;
    c.in[0] = k->bx;
    c.slot[0] = k->by;
    c.slot[1] = k->bst;
    for (int p = 0; p < 4; p++) {
        c.param[p] = k->bp[p];
        c.grad[p] = k->bg[p];
    }
    c.temp = k->fws;
    ck_assert_msg(clremat_layer_forward(&c) == CLREMAT_OK, "%s", clremat_last_error());
    c.temp = k->bws;
    c.dout = k->bdy;
    c.din[0] = k->bdx;
    c.din_accumulate[0] = acc;
    ck_assert_msg(clremat_layer_backward(&c) == CLREMAT_OK, "%s", clremat_last_error());
    o->y = readf(k, k->by, n);
    o->stats = readf(k, k->bst, 3 * C);
    o->dx = readf(k, k->bdx, n);
    for (int p = 0; p < 4; p++)
        o->p[p] = readf(k, k->bp[p], C);
    o->g[0] = readf(k, k->bg[0], C);
    o->g[1] = readf(k, k->bg[1], C);
}

/* |got - want| <= tol * scale, with a message naming the case. */
#define NEAR(what, idx, got, want, tol, scale)                                                                    \
    ck_assert_msg(fabs((double)(got) - (want)) <= (tol) * (scale), "R %lld C %lld %s[%lld]: %.9g, want %.9g "    \
                  "(tolerance %.3g)", (long long)k->R, (long long)k->C, what, (long long)(idx), (double)(got),     \
                  (double)(want), (tol) * (scale))

/* The double reference of every output. */
static void case_check(bn_case *k, int acc, const bn_out *o)
{
    const int64_t R = k->R, C = k->C;
    const double eps = 1e-3, mom = 0.9;
    for (int64_t c = 0; c < C; c++) {
        double mean = 0, var = 0, sdy = 0, sdyx = 0;
        for (int64_t r = 0; r < R; r++)
            mean += k->x[r * C + c];
        mean /= (double)R;
        for (int64_t r = 0; r < R; r++)
            var += ((double)k->x[r * C + c] - mean) * ((double)k->x[r * C + c] - mean);
        var /= (double)R;
        const double rstd = 1.0 / sqrt(var + eps), sd = sqrt(var) + 1e-3;
        NEAR("mean", c, o->stats[c], mean, 1e-6, fabs(mean) + sd);
        NEAR("rstd", c, o->stats[C + c], rstd, 1e-5, rstd);
        NEAR("var", c, o->stats[2 * C + c], var, 1e-5, var + 1e-6);
        for (int64_t r = 0; r < R; r++) {
            const double xh = ((double)k->x[r * C + c] - mean) * rstd;
            sdy += k->dy[r * C + c];
            sdyx += k->dy[r * C + c] * xh;
            NEAR("y", r * C + c, o->y[r * C + c], xh * k->p[0][c] + k->p[1][c], 1e-4, 1.0 + fabs(xh));
        }
        /* sums of R terms of unit size grow like sqrt(R) at most here; dgamma
         * also carries the float mean's own rounding (checked above) times sum dy */
        const double gabs = sqrt((double)R), dmean = fabs((double)o->stats[c] - mean);
        NEAR("dgamma", c, o->g[0][c], sdyx, 2e-5, gabs + fabs(sdyx) + 1.01 * dmean * fabs(sdy) * rstd / 2e-5);
        NEAR("dbeta", c, o->g[1][c], sdy, 2e-5, gabs + fabs(sdy));
        NEAR("moving mean", c, o->p[2][c], mom * k->p[2][c] + (1 - mom) * mean, 1e-6, fabs(mean));
        NEAR("moving var", c, o->p[3][c], mom * k->p[3][c] + (1 - mom) * var, 1e-5, var + k->p[3][c]);
        for (int64_t r = 0; r < R; r++) {
            const double xh = ((double)k->x[r * C + c] - mean) * rstd;
            const double d = k->p[0][c] * rstd * (k->dy[r * C + c] - (sdy + xh * sdyx) / (double)R);
            const double want = (acc ? k->dx0[r * C + c] : 0.0) + d;
            NEAR("dx", r * C + c, o->dx[r * C + c], want, 1e-4, rstd * (1.0 + fabs(xh)) + fabs(want));
        }
    }
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void case_test(clremat_ctx *ctx, int64_t R, int64_t C)
{
    bn_case k;
    bn_out a, b;
    const size_t n = (size_t)(R * C), Cz = (size_t)C;
    case_open(&k, ctx, R, C);
    case_run(&k, 0, &a);
    case_check(&k, 0, &a);
    /* the same input again: the same bits (the reductions' order is fixed) */
    case_run(&k, 0, &b);
    ck_assert_msg(same_bits(a.y, b.y, n) && same_bits(a.stats, b.stats, 3 * Cz) && same_bits(a.dx, b.dx, n),
                  "R %lld C %lld: two runs differ", (long long)R, (long long)C);
    for (int p = 0; p < 4; p++)
        ck_assert_msg(same_bits(a.p[p], b.p[p], Cz), "R %lld C %lld: parameter %d differs between runs",
                      (long long)R, (long long)C, p);
    ck_assert(same_bits(a.g[0], b.g[0], Cz) && same_bits(a.g[1], b.g[1], Cz));
    out_free(&b);
    /* the input gradient added to an existing one */
    case_run(&k, 1, &b);
    case_check(&k, 1, &b);
    out_free(&a);
    out_free(&b);
    case_close(&k);
}

/* Under Oclgrind (tests/run-oclgrind.sh) the simulation is slow: the
 * shapes up to 20000 elements only. */
static int simulated(void) { return getenv("CLREMAT_TEST_OCLGRIND") != NULL; }

/* Small and odd shapes: every channel path, one block and several. */
START_TEST(test_bn_reduce_shapes)
{
    static const int64_t cases[][2] = {{1, 3},   {7, 1},    {1000, 1}, {1001, 3},  {129, 17}, {257, 16},
                                       {4097, 17}, {640, 8}, {3001, 24}, {131073, 3}};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!simulated() || cases[i][0] * cases[i][1] <= 20000)
            case_test(ctx, cases[i][0], cases[i][1]);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Large R: more rows than 1024 minimum blocks hold, so the blocks grow
 * (and the last one is short). */
START_TEST(test_bn_reduce_large)
{
    clremat_ctx *ctx;
    if (simulated()) {
        fprintf(stderr, "test_bn_reduce_large: left out under Oclgrind (millions of elements)\n");
        return;
    }
    TEST_OPEN_CTX(ctx, 0);
    case_test(ctx, 300001, 3);
    case_test(ctx, test_reduced() ? 140001 : 250007, 17);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Evaluation normalizes with the moving statistics (vector and tail
 * channels), needs no workspace and leaves the statistics alone. */
START_TEST(test_bn_eval_vector)
{
    enum { R = 37, C = 19 };
    clremat_ctx *ctx;
    bn_case k;
    clremat_layer_call c;
    float *y;
    TEST_OPEN_CTX(ctx, 0);
    case_open(&k, ctx, R, C);
    k.L.bn_eval = 1;
    ck_assert_int_eq(clremat_layer_cost_of(&k.g, 0, R, &k.cost), CLREMAT_OK);
    ck_assert_uint_eq(k.cost.fwd_temp_bytes, 0);
    for (int p = 0; p < 4; p++)
        ck_assert_int_eq(clremat_write(ctx, k.bp[p], 0, C * 4, k.p[p]), CLREMAT_OK);
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.g = &k.g;
    c.batch = R;
    c.in[0] = k.bx;
    c.slot[0] = k.by;
    c.slot[1] = k.bst;
    for (int p = 0; p < 4; p++)
        c.param[p] = k.bp[p];
    ck_assert_msg(clremat_layer_forward(&c) == CLREMAT_OK, "%s", clremat_last_error());
    y = readf(&k, k.by, R * C);
    for (int i = 0; i < R * C; i++) {
        const int ch = i % C;
        const double want =
            ((double)k.x[i] - k.p[2][ch]) / sqrt((double)k.p[3][ch] + 1e-3) * k.p[0][ch] + k.p[1][ch];
        ck_assert_msg(fabs(y[i] - want) <= 1e-5 * (1 + fabs(want)), "eval %d: %g, want %g", i, (double)y[i], want);
    }
    free(y);
    case_close(&k);
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("bn_reduce", 600, &tc);
    tcase_add_test(tc, test_bn_reduce_shapes);
    tcase_add_test(tc, test_bn_reduce_large);
    tcase_add_test(tc, test_bn_eval_vector);
    return test_run_device_suite(s);
}
