/* gemm.c: clremat_gemm, clremat_gemm_dense, clremat_gemm_dact and clremat_gemm_fmt, the entry points every
 * matrix layer calls: they resolve the context's GEMM path (gemm_select.c)
 * and run the call on it (gemm_paths.c). */
#include "gemm.h"
#include "kernel_run.h"
#include "layers.h"
#include "gemm16.h"

int clremat_gemm(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                 const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa,
                 const clremat_buf *B, int64_t offB, int64_t ldb, int64_t sb, float beta,
                 clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch)
{
    return clremat_gemm_on(ctx, clremat_gemm_resolve(ctx), tA, tB, M, N, K, alpha, A, offA, lda, sa, B, offB, ldb, sb,
                           beta, C, offC, ldc, sc, batch);
}

size_t clremat_gemm_workspace(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K,
                              int64_t offA, int64_t lda, int64_t sa, int64_t offB, int64_t ldb, int64_t sb,
                              int64_t offC, int64_t ldc, int64_t sc, int64_t batch)
{
    return clremat_gemm_workspace_on(ctx, clremat_gemm_resolve(ctx), tA, tB, M, N, K, offA, lda, sa, offB, ldb, sb,
                                     offC, ldc, sc, batch);
}

int clremat_gemm_dense(clremat_ctx *ctx, int64_t rows, int64_t in, int64_t units, const clremat_buf *x,
                       const clremat_buf *W, const clremat_buf *bias, int act, clremat_buf *pre, clremat_buf *out)
{
    return clremat_gemm_dense_on(ctx, clremat_gemm_resolve(ctx), rows, in, units, x, W, bias, act, pre, out);
}

int clremat_gemm_update_fits(clremat_ctx *ctx, int64_t K)
{
    /* without a device: the native path with the largest blocks
     * (backend/program.c), those of CPU devices such as PoCL */
    if (!ctx)
        return K >= 1 && K <= 256;
    if (clremat_gemm_resolve(ctx) != CLREMAT_GEMM_NATIVE)
        return 0;
    return K >= 1 && K <= ctx->gemm_kc;
}

int clremat_gemm_update(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, const clremat_buf *A,
                        int64_t lda, const clremat_buf *B, int64_t ldb, clremat_buf *param, clremat_buf *s0,
                        clremat_buf *s1, int okind, const float hp[8], int actA)
{
    if (!clremat_gemm_update_fits(ctx, K))
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL,
                            "fused update GEMM %lldx%lldx%lld: needs the native path and K within one k-block",
                            (long long)M, (long long)N, (long long)K);
    return clremat_gemm_update_native(ctx, tA, tB, M, N, K, A, lda, B, ldb, param, s0, s1, okind, hp, actA);
}

int clremat_gemm_acta(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, int actA,
                      const clremat_buf *A, int64_t lda, const clremat_buf *B, int64_t ldb, clremat_buf *C)
{
    if (ctx && clremat_gemm_resolve(ctx) != CLREMAT_GEMM_NATIVE)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "GEMM with an activation on A needs the native path");
    return clremat_gemm_acta_native(ctx, tA, tB, M, N, K, actA, A, lda, B, ldb, C);
}

int clremat_gemm_dact(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, const clremat_buf *A,
                      int64_t lda, const clremat_buf *B, int64_t ldb, clremat_buf *C, int act, clremat_buf *X,
                      int store_act)
{
    int st;
    if (clremat_gemm_resolve(ctx) == CLREMAT_GEMM_NATIVE)
        return clremat_gemm_dact_native(ctx, tA, tB, M, N, K, A, lda, B, ldb, C, act, X, store_act);
    if ((st = clremat_gemm(ctx, tA, tB, M, N, K, 1.0f, A, 0, lda, 0, B, 0, ldb, 0, 0.0f, C, 0, N, 0, 1)) !=
            CLREMAT_OK ||
        (st = clremat_check_buf(ctx, "gemm dact", "pre-activation", X, M * N)) != CLREMAT_OK ||
        (st = clremat_op_act_backward(ctx, act, M * N, X, C, C, 0)) != CLREMAT_OK)
        return st;
    return store_act ? clremat_op_act_forward(ctx, act, M * N, X, X) : CLREMAT_OK;
}

int clremat_gemm_fmt(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                     const clremat_buf *A, int fA, int64_t offA, int64_t lda, int64_t sa,
                     const clremat_buf *B, int fB, int64_t offB, int64_t ldb, int64_t sb, float beta,
                     clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch)
{
    if (!fA && !fB)
        return clremat_gemm(ctx, tA, tB, M, N, K, alpha, A, offA, lda, sa, B, offB, ldb, sb, beta, C, offC, ldc, sc,
                            batch);
    return clremat_gemm_fmt_native(ctx, tA, tB, M, N, K, alpha, A, fA, offA, lda, sa, B, fB, offB, ldb, sb, beta, C,
                                   offC, ldc, sc, batch);
}
