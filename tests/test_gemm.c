/* test_gemm.c: clremat_gemm against a double-precision host GEMM: all four
 * transpose combinations, odd sizes, offsets, padded leading dimensions,
 * batches, alpha/beta (beta 0 ignores NaN in C), untouched memory around C,
 * bitwise determinism, and rejection of operands outside their buffers.
 * Skips (77) without a device. */
#include "testutil.h"
#include "layers.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Small deterministic generator for test data. */
static uint32_t lcg_state = 12345u;
static float frand(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)((lcg_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

typedef struct gcase {
    int tA, tB;
    int64_t M, N, K;
    int64_t offA, offB, offC, pad;   /* pad: extra leading-dim floats */
    int64_t batch;
    float alpha, beta;
} gcase;

static clremat_buf *upload(clremat_ctx *ctx, const float *h, size_t n)
{
    clremat_buf *b;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, n * sizeof(float), "test", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, b, 0, n * sizeof(float), h), CLREMAT_OK);
    return b;
}

/* Runs one case and compares with the host reference; returns C as computed. */
static void run_case(clremat_ctx *ctx, const gcase *c)
{
    const int64_t ar = c->tA ? c->K : c->M, ac = c->tA ? c->M : c->K;
    const int64_t br = c->tB ? c->N : c->K, bc = c->tB ? c->K : c->N;
    const int64_t lda = ac + c->pad, ldb = bc + c->pad, ldc = c->N + c->pad;
    const int64_t sa = ar * lda + 3, sb = br * ldb + 1, sc = c->M * ldc + 2;
    const size_t na = (size_t)(c->offA + c->batch * sa), nb = (size_t)(c->offB + c->batch * sb);
    const size_t nc = (size_t)(c->offC + c->batch * sc);
    float *ha = malloc(na * sizeof(float)), *hb = malloc(nb * sizeof(float));
    float *hc = malloc(nc * sizeof(float)), *out = malloc(nc * sizeof(float)), *out2 = malloc(nc * sizeof(float));
    clremat_buf *A, *B, *C;
    char what[160];
    snprintf(what, sizeof what, "tA=%d tB=%d M=%lld N=%lld K=%lld batch=%lld alpha=%g beta=%g", c->tA, c->tB,
             (long long)c->M, (long long)c->N, (long long)c->K, (long long)c->batch, c->alpha, c->beta);
    for (size_t i = 0; i < na; i++)
        ha[i] = frand();
    for (size_t i = 0; i < nb; i++)
        hb[i] = frand();
    for (size_t i = 0; i < nc; i++)
        hc[i] = c->beta == 0.0f ? NAN : frand();
    A = upload(ctx, ha, na);
    B = upload(ctx, hb, nb);
    C = upload(ctx, hc, nc);
    ck_assert_int_eq(clremat_gemm(ctx, c->tA, c->tB, c->M, c->N, c->K, c->alpha, A, c->offA, lda, sa, B, c->offB,
                                  ldb, sb, c->beta, C, c->offC, ldc, sc, c->batch), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, C, 0, nc * sizeof(float), out), CLREMAT_OK);
    /* every float not inside a C matrix is untouched */
    {
        char *inside = calloc(nc, 1);
        for (int64_t z = 0; z < c->batch; z++)
            for (int64_t m = 0; m < c->M; m++)
                for (int64_t n = 0; n < c->N; n++)
                    inside[c->offC + z * sc + m * ldc + n] = 1;
        for (size_t i = 0; i < nc; i++)
            if (!inside[i])
                ck_assert_msg(memcmp(&out[i], &hc[i], sizeof(float)) == 0, "%s: float %zu outside C changed",
                              what, i);
        free(inside);
    }
    for (int64_t z = 0; z < c->batch; z++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t n = 0; n < c->N; n++) {
                double acc = 0, mag = 0, ref, got;
                for (int64_t k = 0; k < c->K; k++) {
                    double a = c->tA ? ha[c->offA + z * sa + k * lda + m] : ha[c->offA + z * sa + m * lda + k];
                    double b = c->tB ? hb[c->offB + z * sb + n * ldb + k] : hb[c->offB + z * sb + k * ldb + n];
                    acc += a * b;
                    mag += fabs(a * b);
                }
                ref = c->alpha * acc;
                if (c->beta != 0.0f)
                    ref += (double)c->beta * hc[c->offC + z * sc + m * ldc + n];
                got = out[c->offC + z * sc + m * ldc + n];
                ck_assert_msg(isfinite(got) && fabs(got - ref) <= 1e-5 * (1.0 + fabs(c->alpha) * mag + 2.0),
                              "%s: C[%lld][%lld][%lld] = %.9g, reference %.9g", what, (long long)z, (long long)m,
                              (long long)n, got, ref);
            }
    /* same inputs, same bits */
    ck_assert_int_eq(clremat_write(ctx, C, 0, nc * sizeof(float), hc), CLREMAT_OK);
    ck_assert_int_eq(clremat_gemm(ctx, c->tA, c->tB, c->M, c->N, c->K, c->alpha, A, c->offA, lda, sa, B, c->offB,
                                  ldb, sb, c->beta, C, c->offC, ldc, sc, c->batch), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, C, 0, nc * sizeof(float), out2), CLREMAT_OK);
    ck_assert_msg(memcmp(out, out2, nc * sizeof(float)) == 0, "%s: not deterministic", what);
    clremat_pool_release(ctx->pool, A);
    clremat_pool_release(ctx->pool, B);
    clremat_pool_release(ctx->pool, C);
    free(ha);
    free(hb);
    free(hc);
    free(out);
    free(out2);
}

static const int64_t sizes[][3] = {
    {1, 1, 1}, {7, 13, 5}, {65, 33, 129}, {32, 32, 32}, {33, 1, 17}, {1, 40, 3}, {16, 48, 0},
};

START_TEST(test_transposes_and_sizes)
{
    clremat_ctx *ctx;
    const int t = _i; /* loop index: transpose combination */
    TEST_OPEN_CTX(ctx, 0);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        gcase c = {t & 1, (t >> 1) & 1, sizes[s][0], sizes[s][1], sizes[s][2], 0, 0, 0, 0, 1, 1.0f, 0.0f};
        run_case(ctx, &c);
        c.beta = 1.0f;
        c.alpha = -0.5f;
        run_case(ctx, &c);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_offsets_batches)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int t = 0; t < 4; t++) {
        gcase c = {t & 1, t >> 1, 9, 37, 21, 5, 3, 7, 2, 3, 1.5f, 0.0f};
        run_case(ctx, &c);
        c.beta = 1.0f;
        run_case(ctx, &c);
        c.beta = 0.25f;
        c.M = 40;
        c.N = 3;
        c.K = 70;
        c.batch = 2;
        run_case(ctx, &c);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_rejects_out_of_bounds)
{
    clremat_ctx *ctx;
    clremat_buf *a, *b, *c;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, 4 * 4 * sizeof(float), "a", &a), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, 4 * 4 * sizeof(float), "b", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, 4 * 4 * sizeof(float), "c", &c), CLREMAT_OK);
    ck_assert_int_eq(clremat_gemm(ctx, 0, 0, 4, 4, 4, 1, a, 0, 4, 0, b, 0, 4, 0, 0, c, 0, 4, 0, 1), CLREMAT_OK);
    ck_assert_int_eq(clremat_gemm(ctx, 0, 0, 4, 4, 4, 1, a, 1, 4, 0, b, 0, 4, 0, 0, c, 0, 4, 0, 1),
                     CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_ctx_last_error(ctx), "gemm: A"));
    ck_assert_int_eq(clremat_gemm(ctx, 0, 0, 4, 4, 4, 1, a, 0, 4, 0, b, 0, 3, 0, 0, c, 0, 4, 0, 1),
                     CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_gemm(ctx, 0, 0, 4, 4, 4, 1, a, 0, 4, 0, b, 0, 4, 0, 0, c, 0, 4, 16, 2),
                     CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_ctx_last_error(ctx), "gemm: C"));
    ck_assert_int_eq(clremat_finish(ctx), CLREMAT_OK);
    clremat_pool_release(ctx->pool, a);
    clremat_pool_release(ctx->pool, b);
    clremat_pool_release(ctx->pool, c);
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("gemm");
    if (!test_have_device())
        return TEST_SKIP;
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_transposes_and_sizes, 0, 4);
    tcase_add_test(tc, test_offsets_batches);
    tcase_add_test(tc, test_rejects_out_of_bounds);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
