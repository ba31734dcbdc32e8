/* colsum.c: the column-sum launches (clremat_colsum8, clremat_colsum8_16 of
 * kernels.cl) and the work-item width they, and the fused bias update, run
 * at on each device. */
#include "colsum.h"
#include "kernel_run.h"
#include <string.h>

int clremat_colsum_blocks(const clremat_ctx *ctx, int64_t cols)
{
    int64_t nblocks = (cols + 7) / 8, cus = ctx->info.compute_units > 0 ? ctx->info.compute_units : 1, rounds;
    if (strcmp(ctx->info.type, "cpu") != 0 || nblocks <= 1)
        return 1;
    /* the fewest rounds of one item per compute unit at <= 8 blocks an
     * item, then the blocks that spread the columns evenly over them */
    rounds = (nblocks + 8 * cus - 1) / (8 * cus);
    return (int)((nblocks + rounds * cus - 1) / (rounds * cus));
}

int64_t clremat_colsum_items(const clremat_ctx *ctx, int64_t cols)
{
    const int64_t per = 8 * (int64_t)clremat_colsum_blocks(ctx, cols);
    return (cols + per - 1) / per;
}

int clremat_colsum(clremat_ctx *ctx, const char *who, int64_t rows, int64_t cols, int64_t ld, int64_t off,
                   const clremat_buf *x, int fmt, clremat_buf *y)
{
    cl_int ir = (cl_int)rows, ic = (cl_int)cols, ild = (cl_int)ld, ioff = (cl_int)off;
    cl_int ib = clremat_colsum_blocks(ctx, cols), ifmt = fmt;
    cl_mem mx, my;
    int st;
    const int64_t span = rows > 0 ? off + (rows - 1) * ld + cols : 0; /* elements of x read */
    if (cols < 1)
        return CLREMAT_OK;
    if (rows < 0 || off < 0 || ld < cols)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "%s: column sums of %lld x %lld (leading dimension %lld, offset %lld)", who,
                            (long long)rows, (long long)cols, (long long)ld, (long long)off);
    if (rows > 2147483647 || cols > 2147483647 || ld > 2147483647 || off > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE,
                            "%s: column sums of %lld x %lld (leading dimension %lld, offset %lld)", who,
                            (long long)rows, (long long)cols, (long long)ld, (long long)off);
    /* rows == 0: the kernel writes every sum as 0 */
    if ((st = clremat_check_buf_fmt(ctx, who, "column-sum input", x, span, fmt)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, who, "column sums", y, cols)) != CLREMAT_OK)
        return st;
    mx = clremat_mem(x);
    my = clremat_mem(y);
    if (fmt)
        return clremat_run1d(ctx, "clremat_colsum8_16", clremat_colsum_items(ctx, cols), sizeof ir, &ir, sizeof ic,
                             &ic, sizeof ild, &ild, sizeof ioff, &ioff, sizeof ib, &ib, sizeof ifmt, &ifmt, sizeof mx,
                             &mx, sizeof my, &my, (size_t)0);
    return clremat_run1d(ctx, "clremat_colsum8", clremat_colsum_items(ctx, cols), sizeof ir, &ir, sizeof ic, &ic,
                         sizeof ild, &ild, sizeof ioff, &ioff, sizeof ib, &ib, sizeof mx, &mx, sizeof my, &my,
                         (size_t)0);
}
