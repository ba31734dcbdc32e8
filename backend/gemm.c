/* gemm.c: clremat_gemm, the batched row-major single-precision GEMM every
 * matrix layer uses, on the local-memory tiled kernel of kernels.cl
 * (clremat_gemm_tiled). Checks sizes, leading dimensions and that every
 * matrix of the batch lies inside its buffer before launching. */
#include "layers.h"
#include "kernel_run.h"

#define GEMM_TILE 32    /* C tile of one work-group (kernels.cl GEMM_TM/GEMM_TN) */
#define GEMM_LOCAL 8    /* work-group is GEMM_LOCAL x GEMM_LOCAL items */

/* Checks one operand stored rows x cols with leading dim ld, batch stride s,
 * starting at off: inside buf for every matrix of the batch. */
static int check_operand(clremat_ctx *ctx, const char *what, const clremat_buf *buf, int64_t off,
                         int64_t rows, int64_t cols, int64_t ld, int64_t s, int64_t batch)
{
    int64_t last, cap;
    if (!buf)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "gemm: %s buffer is NULL", what);
    if (rows == 0 || cols == 0)
        return CLREMAT_OK;
    if (off < 0 || ld < cols || (batch > 1 && s < 0))
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "gemm: %s is %lldx%lld with offset %lld, leading dim %lld, stride %lld: invalid",
                            what, (long long)rows, (long long)cols, (long long)off, (long long)ld, (long long)s);
    cap = (int64_t)(buf->bytes / sizeof(float));
    last = off + (batch - 1) * s + (rows - 1) * ld + cols;
    if (last > cap)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "gemm: %s (%lldx%lld, ld %lld, offset %lld, %lld matrices, stride %lld) needs %lld "
                            "floats, buffer holds %lld", what, (long long)rows, (long long)cols, (long long)ld,
                            (long long)off, (long long)batch, (long long)s, (long long)last, (long long)cap);
    return CLREMAT_OK;
}

int clremat_gemm(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                 const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa,
                 const clremat_buf *B, int64_t offB, int64_t ldb, int64_t sb, float beta,
                 clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch)
{
    int st;
    cl_int itA = tA ? 1 : 0, itB = tB ? 1 : 0, iM, iN, iK;
    cl_long loA = offA, llda = lda, lsa = sa, loB = offB, lldb = ldb, lsb = sb, loC = offC, lldc = ldc,
            lsc = sc;
    cl_mem mA, mB, mC;
    size_t global[3], local[3] = {GEMM_LOCAL, GEMM_LOCAL, 1};

    if (M < 0 || N < 0 || K < 0 || batch < 0 || M > 2147483647 || N > 2147483647 || K > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "gemm: bad sizes M=%lld N=%lld K=%lld batch=%lld",
                            (long long)M, (long long)N, (long long)K, (long long)batch);
    if (M == 0 || N == 0 || batch == 0)
        return CLREMAT_OK;
    if ((st = check_operand(ctx, "A", A, offA, tA ? K : M, tA ? M : K, lda, sa, batch)) != CLREMAT_OK ||
        (st = check_operand(ctx, "B", B, offB, tB ? N : K, tB ? K : N, ldb, sb, batch)) != CLREMAT_OK ||
        (st = check_operand(ctx, "C", C, offC, M, N, ldc, sc, batch)) != CLREMAT_OK)
        return st;
    iM = (cl_int)M;
    iN = (cl_int)N;
    iK = (cl_int)K;
    mA = clremat_mem(A);
    mB = clremat_mem(B);
    mC = clremat_mem(C);
    global[0] = (size_t)((N + GEMM_TILE - 1) / GEMM_TILE) * GEMM_LOCAL;
    global[1] = (size_t)((M + GEMM_TILE - 1) / GEMM_TILE) * GEMM_LOCAL;
    global[2] = (size_t)batch;
    return clremat_run(ctx, "clremat_gemm_tiled", 3, global, local,
                       sizeof itA, &itA, sizeof itB, &itB, sizeof iM, &iM, sizeof iN, &iN, sizeof iK, &iK,
                       sizeof alpha, &alpha, sizeof mA, &mA, sizeof loA, &loA, sizeof llda, &llda,
                       sizeof lsa, &lsa, sizeof mB, &mB, sizeof loB, &loB, sizeof lldb, &lldb, sizeof lsb, &lsb,
                       sizeof beta, &beta, sizeof mC, &mC, sizeof loC, &loC, sizeof lldc, &lldc,
                       sizeof lsc, &lsc, (size_t)0);
}
