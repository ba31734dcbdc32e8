/* colsum.c: the column-sum launches (clremat_colsum8, clremat_colsum8_16 of
 * kernels.cl) and the work-item width they run at on each device. */
#include "colsum.h"
#include "kernel_run.h"
#include <string.h>

int clremat_colsum_blocks(const clremat_ctx *ctx)
{
    return strcmp(ctx->info.type, "cpu") == 0 ? 8 : 1;
}

int64_t clremat_colsum_items(const clremat_ctx *ctx, int64_t cols)
{
    const int64_t per = 8 * (int64_t)clremat_colsum_blocks(ctx);
    return (cols + per - 1) / per;
}

int clremat_colsum(clremat_ctx *ctx, const char *who, int64_t rows, int64_t cols, const clremat_buf *x, int fmt,
                   clremat_buf *y)
{
    cl_int ir = (cl_int)rows, ic = (cl_int)cols, ib = clremat_colsum_blocks(ctx), ifmt = fmt;
    cl_mem mx, my;
    int st;
    if (rows > 2147483647 || cols > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "%s: column sums of %lld x %lld", who, (long long)rows,
                            (long long)cols);
    if ((st = clremat_check_buf_fmt(ctx, who, "column-sum input", x, rows * cols, fmt)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, who, "column sums", y, cols)) != CLREMAT_OK)
        return st;
    mx = clremat_mem(x);
    my = clremat_mem(y);
    if (fmt)
        return clremat_run1d(ctx, "clremat_colsum8_16", clremat_colsum_items(ctx, cols), sizeof ir, &ir, sizeof ic,
                             &ic, sizeof ib, &ib, sizeof ifmt, &ifmt, sizeof mx, &mx, sizeof my, &my, (size_t)0);
    return clremat_run1d(ctx, "clremat_colsum8", clremat_colsum_items(ctx, cols), sizeof ir, &ir, sizeof ic, &ic,
                         sizeof ib, &ib, sizeof mx, &mx, sizeof my, &my, (size_t)0);
}
