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
 * (old + new); C16 the 16-bit C. */
typedef struct clremat_gemm16_fmt {
    int fA, fB, fC, accC;
    const clremat_buf *C16;
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
                               exceeds one k-block, ctx->gemm_kc; may be NULL otherwise) */
    const clremat_buf *bias; /**< added in the epilogue (NULL: none); with a float32 C only without s0 and act */
    int act;                 /**< fC 16-bit: out = round(act(the rounded C)) (clremat_act code, 0: none) */
    clremat_buf *out;        /**< 16-bit M x N, with act */
    clremat_buf *s0, *s1;    /**< fC float32 and s0: the optimizer update of C (a parameter) by the product,
                                  as clremat_gemm_update (K within one k-block) */
    int okind;
    const float *hp;
} clremat_gemm16_call;

/** Runs g on the native path (whatever the context's path). Checks every
 * buffer against its format's element size; fails on a product whose
 * 16-bit C needs a scratch it was not given. */
int clremat_gemm16(clremat_ctx *ctx, const clremat_gemm16_call *g);

#endif /* CLREMAT_GEMM16_H */
