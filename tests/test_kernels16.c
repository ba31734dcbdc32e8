/* test_kernels16.c: the 16-bit kernels that take blocks of eight (vector
 * widenings and roundings where the kernel once went element by element)
 * against the float32 kernel on the widened operands followed by one
 * conversion (clremat_op_convert), bit for bit, in binary16 and bfloat16,
 * on sizes that are and are not multiples of eight: clremat_add16 (every
 * operand 16-bit, where its formats become constants, and a float32
 * operand among them), emb_forward16 and emb_backward_table16 (fresh and
 * accumulated), attn_softmax_fwd16 (causal or not). And the wide
 * elementwise kernels (clremat_act_fwdw, clremat_act_bwdw, clremat_cvt16w,
 * clremat_act_bwd16w, clremat_dropout16w: sixteen elements per work-item on
 * 16-lane devices)
 * against the eight-wide ones they stand for, bit for bit, on the
 * activations the host gives them (none, ReLU, GELU tanh), with special values (NaN, infinities, huge, tiny, -0) among
 * the operands. */
#include "testutil.h"
#include "kernel_run.h"
#include "mixed_precision.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int fmts[] = {CLREMAT_FMT_F16, CLREMAT_FMT_BF16};

static void fill(float *h, int n, int salt)
{
    for (int i = 0; i < n; i++)
        h[i] = (float)(((i + salt) * 7919 % 1999) - 999) / 137.0f;
}

static clremat_buf *upload(clremat_ctx *ctx, const float *h, size_t n)
{
    clremat_buf *b = NULL;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, n * sizeof(float), "test", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, b, 0, n * sizeof(float), h), CLREMAT_OK);
    return b;
}

/* A new buffer of n elements of format fmt holding src (format sfmt) converted. */
static clremat_buf *converted(clremat_ctx *ctx, const clremat_buf *src, int sfmt, int fmt, int64_t n)
{
    clremat_buf *b = NULL;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (size_t)n * (fmt ? 2 : 4), "test", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_op_convert(ctx, src, sfmt, b, fmt, n, 0, 1.0f, 0), CLREMAT_OK);
    return b;
}

static void expect_same_bytes(clremat_ctx *ctx, clremat_buf *a, clremat_buf *b, size_t bytes, const char *what,
                              int fmt, int n)
{
    unsigned char *ha = malloc(bytes), *hb = malloc(bytes);
    ck_assert_ptr_nonnull(ha);
    ck_assert_ptr_nonnull(hb);
    ck_assert_int_eq(clremat_read(ctx, a, 0, bytes, ha), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, b, 0, bytes, hb), CLREMAT_OK);
    ck_assert_msg(memcmp(ha, hb, bytes) == 0, "%s, format %d, size %d: bytes differ", what, fmt, n);
    free(ha);
    free(hb);
}

static void release(clremat_ctx *ctx, clremat_buf **b, int count)
{
    for (int i = 0; i < count; i++)
        clremat_pool_release(ctx->pool, b[i]);
}

START_TEST(test_add16_bits)
{
    static const int lengths[] = {1, 7, 8, 13, 1000, 4099};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (int fi = 0; fi < 2; fi++)
            for (int mixed = 0; mixed < 2; mixed++) { /* mixed: b float32 (the general expansion) */
                const int n = lengths[li], f = fmts[fi], fb = mixed ? 0 : f;
                float *h = malloc(sizeof(float) * (size_t)n);
                clremat_buf *b[8];
                cl_int in = n, fa = f, ifb = fb, fy = f;
                cl_mem ma, mb, my, wa, wb, yf;
                ck_assert_ptr_nonnull(h);
                fill(h, n, 1);
                b[0] = upload(ctx, h, (size_t)n);
                fill(h, n, 2);
                b[1] = upload(ctx, h, (size_t)n);
                b[2] = converted(ctx, b[0], 0, f, n);  /* a, 16-bit */
                b[3] = converted(ctx, b[1], 0, fb, n); /* b, 16-bit or float32 */
                b[4] = converted(ctx, b[2], f, 0, n);  /* a widened */
                b[5] = converted(ctx, b[3], fb, 0, n); /* b widened */
                b[6] = converted(ctx, b[1], 0, f, n);  /* y16, overwritten */
                b[7] = upload(ctx, h, (size_t)n);      /* yf, overwritten */
                ma = clremat_mem(b[2]), mb = clremat_mem(b[3]), my = clremat_mem(b[6]);
                wa = clremat_mem(b[4]), wb = clremat_mem(b[5]), yf = clremat_mem(b[7]);
                ck_assert_int_eq(clremat_run1d(ctx, "clremat_add16", (n + 7) / 8, sizeof in, &in, sizeof fa, &fa,
                                               sizeof ma, &ma, sizeof ifb, &ifb, sizeof mb, &mb, sizeof fy, &fy,
                                               sizeof my, &my, (size_t)0),
                                 CLREMAT_OK);
                ck_assert_int_eq(clremat_run1d(ctx, "clremat_add8", (n + 7) / 8, sizeof in, &in, sizeof wa, &wa,
                                               sizeof wb, &wb, sizeof yf, &yf, (size_t)0),
                                 CLREMAT_OK);
                {
                    clremat_buf *ref = converted(ctx, b[7], 0, f, n);
                    expect_same_bytes(ctx, b[6], ref, (size_t)n * 2, mixed ? "add16, b float32" : "add16", f, n);
                    clremat_pool_release(ctx->pool, ref);
                }
                release(ctx, b, 8);
                free(h);
            }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Embedding: ntok = nseq * T tokens of dim; dims 8 and 16 give whole blocks
 * only, 13 a partial block in every row and a tail at the end. */
START_TEST(test_embedding16_bits)
{
    static const int dims[] = {8, 13, 16};
    const int vocab = 5, T = 7, nseq = 3, ntok = nseq * T;
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int fi = 0; fi < 2; fi++) {
            const int dim = dims[di], f = fmts[fi], n = ntok * dim;
            float *ids = malloc(sizeof(float) * (size_t)ntok), *h = malloc(sizeof(float) * (size_t)n);
            clremat_buf *b[8];
            cl_int intok = ntok, idim = dim, ivocab = vocab, iT = T, pos = 1, ifmt = f;
            cl_mem mid, mtab, mpos, mout, m16;
            ck_assert_ptr_nonnull(ids);
            ck_assert_ptr_nonnull(h);
            for (int t = 0; t < ntok; t++)
                ids[t] = (float)((t * 3 + 1) % vocab);
            b[0] = upload(ctx, ids, (size_t)ntok);
            fill(h, vocab * dim, 3);
            b[1] = upload(ctx, h, (size_t)(vocab * dim));
            fill(h, T * dim, 4);
            b[2] = upload(ctx, h, (size_t)(T * dim));
            fill(h, n, 5);
            b[3] = upload(ctx, h, (size_t)n);     /* float32 out, overwritten */
            b[4] = converted(ctx, b[3], 0, f, n); /* 16-bit out, overwritten */
            mid = clremat_mem(b[0]), mtab = clremat_mem(b[1]), mpos = clremat_mem(b[2]);
            mout = clremat_mem(b[3]), m16 = clremat_mem(b[4]);
            ck_assert_int_eq(clremat_run1d(ctx, "emb_forward", n, sizeof intok, &intok, sizeof idim, &idim,
                                           sizeof ivocab, &ivocab, sizeof iT, &iT, sizeof pos, &pos, sizeof mid,
                                           &mid, sizeof mtab, &mtab, sizeof mpos, &mpos, sizeof mout, &mout,
                                           (size_t)0),
                             CLREMAT_OK);
            ck_assert_int_eq(clremat_run1d(ctx, "emb_forward16", (n + 7) / 8, sizeof intok, &intok, sizeof idim,
                                           &idim, sizeof ivocab, &ivocab, sizeof iT, &iT, sizeof pos, &pos,
                                           sizeof mid, &mid, sizeof mtab, &mtab, sizeof mpos, &mpos, sizeof ifmt,
                                           &ifmt, sizeof m16, &m16, (size_t)0),
                             CLREMAT_OK);
            {
                clremat_buf *ref = converted(ctx, b[3], 0, f, n);
                expect_same_bytes(ctx, b[4], ref, (size_t)n * 2, "emb_forward16", f, n);
                clremat_pool_release(ctx->pool, ref);
            }
            /* the table's gradient from a 16-bit dout (b[4]) against the float32 kernel on it widened */
            b[5] = converted(ctx, b[4], f, 0, n);
            for (int acc = 0; acc < 2; acc++) {
                cl_int iacc = acc, izero = 0; /* tokens from 0 */
                cl_mem mdout16 = clremat_mem(b[4]), mdout = clremat_mem(b[5]), g1, g2;
                fill(h, vocab * dim, 6);
                b[6] = upload(ctx, h, (size_t)(vocab * dim));
                b[7] = upload(ctx, h, (size_t)(vocab * dim));
                g1 = clremat_mem(b[6]), g2 = clremat_mem(b[7]);
                ck_assert_int_eq(clremat_run1d(ctx, acc ? "emb_backward_table_acc" : "emb_backward_table", vocab,
                                               sizeof intok, &intok, sizeof idim, &idim, sizeof ivocab, &ivocab,
                                               sizeof mid, &mid, sizeof mdout, &mdout, sizeof g1, &g1, sizeof izero,
                                               &izero, (size_t)0),
                                 CLREMAT_OK);
                ck_assert_int_eq(clremat_run1d(ctx, "emb_backward_table16", vocab, sizeof intok, &intok,
                                               sizeof idim, &idim, sizeof ivocab, &ivocab, sizeof iacc, &iacc,
                                               sizeof mid, &mid, sizeof ifmt, &ifmt, sizeof mdout16, &mdout16,
                                               sizeof g2, &g2, sizeof izero, &izero, (size_t)0),
                                 CLREMAT_OK);
                expect_same_bytes(ctx, b[6], b[7], sizeof(float) * (size_t)(vocab * dim),
                                  acc ? "emb_backward_table16, accumulated" : "emb_backward_table16", f, dim);
                release(ctx, b + 6, 2);
            }
            release(ctx, b, 6);
            free(ids);
            free(h);
        }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_softmax16_bits)
{
    static const int Ts[] = {5, 8, 13, 16};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (int fi = 0; fi < 2; fi++)
            for (int causal = 0; causal < 2; causal++) {
                const int T = Ts[ti], f = fmts[fi], nrows = 3 * T, n = nrows * T;
                float *h = malloc(sizeof(float) * (size_t)n);
                clremat_buf *b[3];
                cl_int inr = nrows, iT = T, ic = causal, ifmt = f;
                cl_mem p1, p2, p16;
                ck_assert_ptr_nonnull(h);
                fill(h, n, 7);
                b[0] = upload(ctx, h, (size_t)n);
                b[1] = upload(ctx, h, (size_t)n);
                b[2] = converted(ctx, b[0], 0, f, n); /* overwritten */
                p1 = clremat_mem(b[0]), p2 = clremat_mem(b[1]), p16 = clremat_mem(b[2]);
                ck_assert_int_eq(clremat_run1d(ctx, "attn_softmax_fwd", nrows, sizeof inr, &inr, sizeof iT, &iT,
                                               sizeof ic, &ic, sizeof p1, &p1, (size_t)0),
                                 CLREMAT_OK);
                ck_assert_int_eq(clremat_run1d(ctx, "attn_softmax_fwd16", nrows, sizeof inr, &inr, sizeof iT, &iT,
                                               sizeof ic, &ic, sizeof p2, &p2, sizeof ifmt, &ifmt, sizeof p16, &p16,
                                               (size_t)0),
                                 CLREMAT_OK);
                expect_same_bytes(ctx, b[0], b[1], sizeof(float) * (size_t)n, "attn_softmax_fwd16, float32 P", f, T);
                {
                    clremat_buf *ref = converted(ctx, b[0], 0, f, n);
                    expect_same_bytes(ctx, b[2], ref, (size_t)n * 2, "attn_softmax_fwd16, 16-bit P", f, T);
                    clremat_pool_release(ctx->pool, ref);
                }
                release(ctx, b, 3);
                free(h);
            }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Operand values for the wide kernels: fill()'s, with special values at a
 * few places (the same in every array, so GELU's derivative, the bfloat16
 * rounding and the NaN paths all see them). */
static void fill_special(float *h, int n, int salt)
{
    static const float special[] = {NAN, INFINITY, -INFINITY, 3.0e38f, -1.0e-40f, -0.0f, 88.5f, -90.0f};
    fill(h, n, salt);
    for (int i = 0; i < 8 && 5 * i + 3 < n; i++)
        h[5 * i + 3] = special[i];
}

START_TEST(test_wide_kernels_bits)
{
    static const int lengths[] = {1, 7, 8, 13, 16, 17, 37, 1000, 4099};
    static const int f16[] = {CLREMAT_FMT_F16, CLREMAT_FMT_BF16, CLREMAT_FMT_F32};
    static const int acts[] = {CLREMAT_ACT_NONE, CLREMAT_ACT_RELU, CLREMAT_ACT_GELU_TANH};
    clremat_ctx *ctx;
    int ew;
    TEST_OPEN_CTX(ctx, 0);
    ew = clremat_ew_wide(ctx, CLREMAT_ACT_GELU_TANH) ? 16 : 8; /* kernels.cl's CLREMAT_EW on this device */
    /* the other activations keep the eight-wide kernels everywhere */
    for (int act = CLREMAT_ACT_GELU_EXACT; act < CLREMAT_ACT_COUNT; act++)
        ck_assert_str_eq(clremat_ew_name(ctx, act, "wide", "eight"), "eight");
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (int ai = 0; ai < 3; ai++)
            for (int acc = 0; acc < 2; acc++) {
                const int n = lengths[li], act = acts[ai];
                const int64_t wide = (n + ew - 1) / ew, eight = (n + 7) / 8;
                float *h = malloc(sizeof(float) * (size_t)n);
                clremat_buf *b[4];
                cl_int in = n, iact = act, iacc = acc;
                cl_mem mx, mdy, mw, m8;
                char what[96];
                ck_assert_ptr_nonnull(h);
                fill_special(h, n, 1);
                b[0] = upload(ctx, h, (size_t)n); /* x */
                fill_special(h, n, 2);
                b[1] = upload(ctx, h, (size_t)n); /* dy */
                fill_special(h, n, 3);
                b[2] = upload(ctx, h, (size_t)n); /* wide kernel's output (its old value for acc) */
                b[3] = upload(ctx, h, (size_t)n); /* eight-wide kernel's */
                mx = clremat_mem(b[0]), mdy = clremat_mem(b[1]), mw = clremat_mem(b[2]), m8 = clremat_mem(b[3]);
                /* float32: the forward (no acc argument) and the backward */
                if (!acc && act) {
                    ck_assert_int_eq(clremat_run1d(ctx, "clremat_act_fwdw", wide, sizeof in, &in, sizeof iact, &iact,
                                                   sizeof mx, &mx, sizeof mw, &mw, (size_t)0), CLREMAT_OK);
                    ck_assert_int_eq(clremat_run1d(ctx, "clremat_act_fwd8", eight, sizeof in, &in, sizeof iact,
                                                   &iact, sizeof mx, &mx, sizeof m8, &m8, (size_t)0), CLREMAT_OK);
                    snprintf(what, sizeof what, "clremat_act_fwdw, act %d", act);
                    expect_same_bytes(ctx, b[2], b[3], sizeof(float) * (size_t)n, what, 0, n);
                }
                if (act) {
                    ck_assert_int_eq(clremat_run1d(ctx, "clremat_act_bwdw", wide, sizeof in, &in, sizeof iact, &iact,
                                                   sizeof iacc, &iacc, sizeof mx, &mx, sizeof mdy, &mdy, sizeof mw,
                                                   &mw, (size_t)0), CLREMAT_OK);
                    ck_assert_int_eq(clremat_run1d(ctx, "clremat_act_bwd8", eight, sizeof in, &in, sizeof iact,
                                                   &iact, sizeof iacc, &iacc, sizeof mx, &mx, sizeof mdy, &mdy,
                                                   sizeof m8, &m8, (size_t)0), CLREMAT_OK);
                    snprintf(what, sizeof what, "clremat_act_bwdw, act %d, acc %d", act, acc);
                    expect_same_bytes(ctx, b[2], b[3], sizeof(float) * (size_t)n, what, 0, n);
                }
                /* 16-bit: every pair of a source and a destination format (float32 among them) */
                for (int si = 0; si < 3; si++)
                    for (int di = 0; di < 3; di++) {
                        const int sf = f16[si], df = f16[di];
                        clremat_buf *x16 = converted(ctx, b[0], 0, sf, n), *dy16 = converted(ctx, b[1], 0, sf, n);
                        clremat_buf *zw = converted(ctx, b[2], 0, df, n), *z8 = converted(ctx, b[2], 0, df, n);
                        cl_mem mxs = clremat_mem(x16), mdys = clremat_mem(dy16), mzw = clremat_mem(zw),
                               mz8 = clremat_mem(z8);
                        cl_int isf = sf, idf = df;
                        cl_float scale = acc ? 0.5f : 1.0f;
                        ck_assert_int_eq(clremat_run1d(ctx, "clremat_cvt16w", wide, sizeof in, &in, sizeof iact,
                                                       &iact, sizeof scale, &scale, sizeof iacc, &iacc, sizeof isf,
                                                       &isf, sizeof mxs, &mxs, sizeof idf, &idf, sizeof mzw, &mzw,
                                                       (size_t)0), CLREMAT_OK);
                        ck_assert_int_eq(clremat_run1d(ctx, "clremat_cvt16x8", eight, sizeof in, &in, sizeof iact,
                                                       &iact, sizeof scale, &scale, sizeof iacc, &iacc, sizeof isf,
                                                       &isf, sizeof mxs, &mxs, sizeof idf, &idf, sizeof mz8, &mz8,
                                                       (size_t)0), CLREMAT_OK);
                        snprintf(what, sizeof what, "clremat_cvt16w, act %d, acc %d, from format %d", act, acc, sf);
                        expect_same_bytes(ctx, zw, z8, (size_t)n * (df ? 2 : 4), what, df, n);
                        if (act) {
                            ck_assert_int_eq(clremat_run1d(ctx, "clremat_act_bwd16w", wide, sizeof in, &in,
                                                           sizeof iact, &iact, sizeof iacc, &iacc, sizeof isf, &isf,
                                                           sizeof mxs, &mxs, sizeof isf, &isf, sizeof mdys, &mdys,
                                                           sizeof idf, &idf, sizeof mzw, &mzw, (size_t)0),
                                             CLREMAT_OK);
                            ck_assert_int_eq(clremat_run1d(ctx, "clremat_act_bwd16", eight, sizeof in, &in,
                                                           sizeof iact, &iact, sizeof iacc, &iacc, sizeof isf, &isf,
                                                           sizeof mxs, &mxs, sizeof isf, &isf, sizeof mdys, &mdys,
                                                           sizeof idf, &idf, sizeof mz8, &mz8, (size_t)0),
                                             CLREMAT_OK);
                            snprintf(what, sizeof what, "clremat_act_bwd16w, act %d, acc %d, from format %d", act,
                                     acc, sf);
                            expect_same_bytes(ctx, zw, z8, (size_t)n * (df ? 2 : 4), what, df, n);
                        }
                        if (!act) { /* dropout (no activation): the same mask and products */
                            cl_float rate = 0.25f, dscale = 1.0f / 0.75f;
                            cl_uint lo = 0x9e3779b9u, hi = 7u, step = 3u, layer = 2u, off = 5u;
                            const char *kname[2] = {"clremat_dropout16w", "clremat_dropout16"};
                            const int64_t items[2] = {wide, eight};
                            cl_mem mout[2] = {mzw, mz8};
                            for (int w = 0; w < 2; w++)
                                ck_assert_int_eq(clremat_run1d(ctx, kname[w], items[w], sizeof in, &in, sizeof iacc,
                                                               &iacc, sizeof rate, &rate, sizeof dscale, &dscale,
                                                               sizeof lo, &lo, sizeof hi, &hi, sizeof step, &step,
                                                               sizeof layer, &layer, sizeof isf, &isf, sizeof mxs,
                                                               &mxs, sizeof idf, &idf, sizeof mout[w], &mout[w],
                                                               sizeof off, &off, (size_t)0), CLREMAT_OK);
                            snprintf(what, sizeof what, "clremat_dropout16w, acc %d, from format %d", acc, sf);
                            expect_same_bytes(ctx, zw, z8, (size_t)n * (df ? 2 : 4), what, df, n);
                        }
                        clremat_pool_release(ctx->pool, x16);
                        clremat_pool_release(ctx->pool, dy16);
                        clremat_pool_release(ctx->pool, zw);
                        clremat_pool_release(ctx->pool, z8);
                    }
                release(ctx, b, 4);
                free(h);
            }
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("kernels16", 300, &tc);
    tcase_add_test(tc, test_add16_bits);
    tcase_add_test(tc, test_embedding16_bits);
    tcase_add_test(tc, test_softmax16_bits);
    tcase_add_test(tc, test_wide_kernels_bits);
    return test_run_device_suite(s);
}
