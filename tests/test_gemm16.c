/* test_gemm16.c: the native GEMM's 16-bit entry points (gemm16.h) against
 * the float32 native GEMM on the widened operands, bit for bit:
 * clremat_gemm_fmt (binary16 and bfloat16 A and / or B, all four transpose
 * combinations, odd sizes, K over two k-blocks, offsets, padded leading
 * dimensions, batches with strides, alpha and beta) and
 * clremat_gemm_round_copy (the float32 C and its 16-bit copy, rounded as
 * the host rounds, nothing written around either); operands outside their
 * buffers are refused with a message. Skips (77) without a device. */
#include "testutil.h"
#include "layers.h"
#include "gemm.h"
#include "gemm16.h"
#include "mixed_precision.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg_state = 777u;
static float frand(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)((lcg_state >> 8) & 0xffff) / 16384.0f - 2.0f;
}

static uint16_t to16(int fmt, float v)
{
    return fmt == CLREMAT_FMT_F16 ? clremat_float_to_half(v) : clremat_float_to_bf16(v);
}

static float from16(int fmt, uint16_t h)
{
    return fmt == CLREMAT_FMT_F16 ? clremat_half_to_float(h) : clremat_bf16_to_float(h);
}

static clremat_buf *upload(clremat_ctx *ctx, const void *h, size_t bytes)
{
    clremat_buf *b;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, bytes, "test", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, b, 0, bytes, h), CLREMAT_OK);
    return b;
}

/* Releases the n buffers and destroys the context. */
static void close_ctx(clremat_ctx *ctx, clremat_buf **bufs, int n)
{
    for (int i = 0; i < n; i++)
        clremat_pool_release(ctx->pool, bufs[i]);
    clremat_ctx_destroy(ctx);
}

/* n random values representable in fmt (float32 when fmt is 0) as floats,
 * and their 16-bit patterns in *bits (NULL for float32). */
static float *operand(int fmt, size_t n, uint16_t **bits)
{
    float *f = malloc(n * sizeof *f);
    uint16_t *b = fmt ? malloc(n * sizeof *b) : NULL;
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < n; i++) {
        f[i] = frand();
        if (fmt) {
            b[i] = to16(fmt, f[i]);
            f[i] = from16(fmt, b[i]);
        }
    }
    *bits = b;
    return f;
}

typedef struct gcase {
    int tA, tB;
    int64_t M, N, K, offA, offB, offC, pad, batch;
    float alpha, beta;
} gcase;

static const gcase cases[] = {
    {0, 0, 37, 29, 19, 0, 0, 0, 0, 1, 1.0f, 0.0f},   {1, 0, 25, 41, 300, 3, 5, 7, 2, 1, 1.0f, 0.0f},
    {0, 1, 13, 17, 33, 1, 0, 2, 3, 3, 0.5f, 1.0f},   {1, 1, 31, 9, 27, 0, 4, 0, 1, 2, 1.0f, -0.75f},
    {0, 0, 16, 16, 16, 8, 8, 8, 0, 4, 1.0f, 1.0f},   {1, 0, 64, 48, 260, 0, 0, 0, 5, 1, 1.0f, 0.0f},
    {0, 1, 20, 48, 300, 2, 3, 1, 4, 2, 1.0f, 0.5f},  {1, 0, 19, 40, 70, 0, 6, 0, 3, 2, 1.0f, 1.0f},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct layout {
    int64_t lda, ldb, ldc, sa, sb, sc;
    size_t na, nb, nc;
} layout;

static layout layout_of(const gcase *c)
{
    layout l;
    const int64_t ar = c->tA ? c->K : c->M, ac = c->tA ? c->M : c->K;
    const int64_t br = c->tB ? c->N : c->K, bc = c->tB ? c->K : c->N;
    l.lda = ac + c->pad, l.ldb = bc + c->pad, l.ldc = c->N + c->pad;
    l.sa = ar * l.lda + 3, l.sb = br * l.ldb + 1, l.sc = c->M * l.ldc + 2;
    l.na = (size_t)(c->offA + c->batch * l.sa), l.nb = (size_t)(c->offB + c->batch * l.sb);
    l.nc = (size_t)(c->offC + c->batch * l.sc);
    return l;
}

/* The float32 native GEMM of case c on float32 A and B into C, read back
 * into out (l.nc floats). */
static void reference(clremat_ctx *ctx, const gcase *c, const layout *l, clremat_buf *A, clremat_buf *B,
                      clremat_buf *C, float *out)
{
    ck_assert_int_eq(clremat_gemm_on(ctx, CLREMAT_GEMM_NATIVE, c->tA, c->tB, c->M, c->N, c->K, c->alpha, A, c->offA,
                                     l->lda, l->sa, B, c->offB, l->ldb, l->sb, c->beta, C, c->offC, l->ldc, l->sc,
                                     c->batch),
                     CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, C, 0, l->nc * 4, out), CLREMAT_OK);
}

/* Case i with A in format fA and B in fB (not both float32): the 16-bit
 * entry equals the float32 native GEMM on the widened values, every float
 * of C (including those around the product) the same bits. */
static void check_fmt(int i, int fA, int fB)
{
    const gcase *c = &cases[i % N_CASES];
    const layout l = layout_of(c);
    clremat_ctx *ctx;
    uint16_t *a16, *b16;
    float *fa, *fb, *c0 = malloc(l.nc * sizeof(float)), *r1 = malloc(l.nc * sizeof(float)),
                    *r2 = malloc(l.nc * sizeof(float));
    clremat_buf *A, *B, *Af, *Bf, *C1, *C2;
    TEST_OPEN_CTX(ctx, 0);
    fa = operand(fA, l.na, &a16);
    fb = operand(fB, l.nb, &b16);
    for (size_t k = 0; k < l.nc; k++)
        c0[k] = frand();
    A = fA ? upload(ctx, a16, l.na * 2) : upload(ctx, fa, l.na * 4);
    B = fB ? upload(ctx, b16, l.nb * 2) : upload(ctx, fb, l.nb * 4);
    Af = upload(ctx, fa, l.na * 4);
    Bf = upload(ctx, fb, l.nb * 4);
    C1 = upload(ctx, c0, l.nc * 4);
    C2 = upload(ctx, c0, l.nc * 4);
    ck_assert_msg(clremat_gemm_fmt(ctx, c->tA, c->tB, c->M, c->N, c->K, c->alpha, A, fA, c->offA, l.lda, l.sa, B, fB,
                                   c->offB, l.ldb, l.sb, c->beta, C1, c->offC, l.ldc, l.sc, c->batch) == CLREMAT_OK,
                  "%s", clremat_last_error());
    reference(ctx, c, &l, Af, Bf, C2, r2);
    ck_assert_int_eq(clremat_read(ctx, C1, 0, l.nc * 4, r1), CLREMAT_OK);
    for (size_t k = 0; k < l.nc; k++)
        ck_assert_msg(memcmp(&r1[k], &r2[k], 4) == 0, "case %d fA %d fB %d: C[%zu] %.9g, float32 GEMM %.9g", i, fA,
                      fB, k, (double)r1[k], (double)r2[k]);
    /* an operand that does not fit its buffer as 16-bit elements */
    if (fA) {
        ck_assert_int_ne(clremat_gemm_fmt(ctx, c->tA, c->tB, c->M, c->N, c->K, 1.0f, A, fA, (int64_t)l.na, l.lda, l.sa,
                                          B, fB, c->offB, l.ldb, l.sb, 0.0f, C1, c->offC, l.ldc, l.sc, c->batch),
                         CLREMAT_OK);
        ck_assert_msg(strstr(clremat_last_error(), "16-bit elements") != NULL, "%s", clremat_last_error());
    }
    {
        clremat_buf *all[] = {A, B, Af, Bf, C1, C2};
        close_ctx(ctx, all, 6);
    }
    free(fa), free(fb), free(a16), free(b16), free(c0), free(r1), free(r2);
}

START_TEST(fmt_a16) { check_fmt(_i % N_CASES, _i < N_CASES ? CLREMAT_FMT_F16 : CLREMAT_FMT_BF16, 0); }
END_TEST
START_TEST(fmt_b16) { check_fmt(_i % N_CASES, 0, _i < N_CASES ? CLREMAT_FMT_F16 : CLREMAT_FMT_BF16); }
END_TEST
START_TEST(fmt_ab16) { check_fmt(_i % N_CASES, CLREMAT_FMT_BF16, _i < N_CASES ? CLREMAT_FMT_F16 : CLREMAT_FMT_BF16); }
END_TEST

/* clremat_gemm_round_copy: C as the float32 GEMM computes it, and C16 at
 * the same places the host's rounding of it; elsewhere C16 keeps its
 * sentinel. */
static void check_round_copy(int i, int fC)
{
    const gcase *c = &cases[i];
    const layout l = layout_of(c);
    clremat_ctx *ctx;
    uint16_t *u16, *s16 = malloc(l.nc * 2), *r16 = malloc(l.nc * 2);
    float *fa = operand(0, l.na, &u16), *fb = operand(0, l.nb, &u16), *c0 = malloc(l.nc * sizeof(float));
    float *r1 = malloc(l.nc * sizeof(float)), *r2 = malloc(l.nc * sizeof(float));
    clremat_buf *A, *B, *C1, *C2, *C16;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t k = 0; k < l.nc; k++) {
        c0[k] = frand();
        s16[k] = 0x7e01; /* neither rounding gives it for these values (binary16 NaN, bfloat16 4.3e37) */
    }
    A = upload(ctx, fa, l.na * 4);
    B = upload(ctx, fb, l.nb * 4);
    C1 = upload(ctx, c0, l.nc * 4);
    C2 = upload(ctx, c0, l.nc * 4);
    C16 = upload(ctx, s16, l.nc * 2);
    ck_assert_msg(clremat_gemm_round_copy(ctx, c->tA, c->tB, c->M, c->N, c->K, c->alpha, A, c->offA, l.lda, l.sa, B,
                                          c->offB, l.ldb, l.sb, c->beta, C1, c->offC, l.ldc, l.sc, c->batch, C16,
                                          fC) == CLREMAT_OK,
                  "%s", clremat_last_error());
    reference(ctx, c, &l, A, B, C2, r2);
    ck_assert_int_eq(clremat_read(ctx, C1, 0, l.nc * 4, r1), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, C16, 0, l.nc * 2, r16), CLREMAT_OK);
    for (size_t k = 0; k < l.nc; k++)
        ck_assert_msg(memcmp(&r1[k], &r2[k], 4) == 0, "case %d: C[%zu] %.9g, float32 GEMM %.9g", i, k, (double)r1[k],
                      (double)r2[k]);
    for (int64_t z = 0; z < c->batch; z++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t n = 0; n < c->N; n++) {
                const size_t k = (size_t)(c->offC + z * l.sc + m * l.ldc + n);
                ck_assert_msg(r16[k] == to16(fC, r2[k]), "case %d fmt %d: C16[%zu] 0x%04x, rounding of %.9g is 0x%04x",
                              i, fC, k, r16[k], (double)r2[k], to16(fC, r2[k]));
                r16[k] = s16[k];
            }
    ck_assert_msg(memcmp(r16, s16, l.nc * 2) == 0, "case %d: C16 written outside the product", i);
    ck_assert_int_ne(clremat_gemm_round_copy(ctx, c->tA, c->tB, c->M, c->N, c->K, 1.0f, A, c->offA, l.lda, l.sa, B,
                                             c->offB, l.ldb, l.sb, 0.0f, C1, c->offC, l.ldc, l.sc, c->batch, C16, 0),
                     CLREMAT_OK);
    {
        clremat_buf *all[] = {A, B, C1, C2, C16};
        close_ctx(ctx, all, 5);
    }
    free(fa), free(fb), free(c0), free(r1), free(r2), free(s16), free(r16);
}

START_TEST(round_copy_f16) { check_round_copy(_i, CLREMAT_FMT_F16); }
END_TEST
START_TEST(round_copy_bf16) { check_round_copy(_i, CLREMAT_FMT_BF16); }
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("gemm16", 600, &tc);
    tcase_add_loop_test(tc, fmt_a16, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, fmt_b16, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, fmt_ab16, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, round_copy_f16, 0, N_CASES);
    tcase_add_loop_test(tc, round_copy_bf16, 0, N_CASES);
    return test_run_device_suite(s);
}
