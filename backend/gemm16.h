/* gemm16.h: the native GEMM with 16-bit operands and results (mixed
 * precision, issue 16): 16-bit A and B are widened while packing and a
 * 16-bit C is rounded in the epilogue (with the dense bias / activation
 * and an accumulation old + new), so a layer's launch needs no float32
 * copies of its 16-bit tensors. Bit for bit the float32 GEMM on the
 * widened operands followed by clremat_cvt16's rounding. Native path only:
 * CLBlast has no such packing (layers keep the staging there). */
#ifndef CLREMAT_GEMM16_H
#define CLREMAT_GEMM16_H

#include "layers.h"

/** The storage formats the native kernel takes (run_native of gemm_paths.c):
 * fA, fB, fC as CLREMAT_FMT_* (0 float32); accC: a 16-bit C is added to
 * (old + new); C16 the 16-bit C; keepC: the float32 C (the partial sums'
 * buffer) also receives the unrounded result. */
typedef struct clremat_gemm16_fmt {
    int fA, fB, fC, accC;
    const clremat_buf *C16;
    int keepC;
} clremat_gemm16_fmt;

/** One GEMM C = op(A) op(B), row-major, leading dimensions those of dense
 * matrices (lda = tA ? M : K, ldb = tB ? K : N, ldc = N), alpha 1, batch 1;
 * A and B may start offA / offB elements into their buffers. */
typedef struct clremat_gemm16_call {
    int tA, tB;
    int64_t M, N, K;
    const clremat_buf *A; /**< M x K (K x M when tA), format fA */
    int fA;
    int64_t offA, offB;   /**< elements before A's and B's first element in their buffers */
    const clremat_buf *B; /**< K x N (N x K when tB), format fB */
    int fB;
    clremat_buf *C;       /**< M x N, format fC (float32: written, beta 0) */
    int fC;
    int acc;              /**< fC 16-bit: C = round(old + product) */
    clremat_buf *scratch; /**< fC 16-bit: float32 M x N for the partial sums of the k-blocks (needed when K
                               exceeds one k-block, ctx->gemm_kc, or with keep; may be NULL otherwise) */
    int keep;             /**< fC 16-bit: scratch also receives the float32 result (bias added, before act) */
    const clremat_buf *bias; /**< added in the epilogue (NULL: none); with a float32 C only without s0 and act */
    int act;                 /**< fC 16-bit: out = round(act(the rounded C)) (clremat_act code, 0: none) */
    clremat_buf *out;        /**< 16-bit M x N, with act */
    clremat_buf *s0, *s1;    /**< fC float32 and s0: the optimizer update of C (a parameter) by the product,
                                  as clremat_gemm_update (K within one k-block) */
    int okind;
    const float *hp;
} clremat_gemm16_call;

/** clremat_gemm (gemm.h: alpha, beta, strided and batched operands, a
 * float32 C) with A and B in formats fA and fB (CLREMAT_FMT_*; offsets,
 * leading dimensions and strides count elements of their format), widened
 * while packing. Both float32: clremat_gemm on the context's path; else the
 * native path, whatever the context's. */
int clremat_gemm_fmt(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                     const clremat_buf *A, int fA, int64_t offA, int64_t lda, int64_t sa,
                     const clremat_buf *B, int fB, int64_t offB, int64_t ldb, int64_t sb, float beta,
                     clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch);

/** clremat_gemm_fmt on the native path, whatever the context's (gemm_paths.c;
 * clremat_gemm_fmt, in gemm.c, resolves the path for float32 operands). */
int clremat_gemm_fmt_native(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                            const clremat_buf *A, int fA, int64_t offA, int64_t lda, int64_t sa,
                            const clremat_buf *B, int fB, int64_t offB, int64_t ldb, int64_t sb, float beta,
                            clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch);

/** clremat_gemm with float32 operands (alpha, beta, strided and batched)
 * whose float32 C is also rounded into C16 (format fC, the same offset,
 * leading dimension and stride) in the epilogue: the product kept in both
 * precisions without a conversion launch. The native path, whatever the
 * context's. */
int clremat_gemm_round_copy(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                            const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa,
                            const clremat_buf *B, int64_t offB, int64_t ldb, int64_t sb, float beta,
                            clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch,
                            clremat_buf *C16, int fC);

/** Runs g on the native path (whatever the context's path). Checks every
 * buffer against its format's element size; fails on a product whose
 * 16-bit C needs a scratch it was not given. */
int clremat_gemm16(clremat_ctx *ctx, const clremat_gemm16_call *g);

#endif /* CLREMAT_GEMM16_H */
