/* colsum.c: the column-sum launches (clremat_colsum8, clremat_colsum8_16 of
 * kernels.cl) and the work-item width they, and the fused bias update, run
 * at on each device. */
#include "colsum.h"
#include "kernel_run.h"
#include "loop_budget.h"
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
    cl_int ir, ic = (cl_int)cols, ild = (cl_int)ld, ioff;
    cl_int ib = clremat_colsum_blocks(ctx, cols), ifmt = fmt;
    cl_mem mx, my;
    int st = CLREMAT_OK;
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
    /* rows [r0, r0 + chunk) a launch: all of them, or under a loop budget
     * as many as keep a work-item within it, each launch continuing the
     * sums of the one before (the same bits as one launch) */
    const int64_t chunk = clremat_colsum_rows_per_launch(ctx, rows, cols);
    for (int64_t r0 = 0, r1 = -1; st == CLREMAT_OK && clremat_loop_next(rows, chunk, &r0, &r1);) {
        const int64_t n = r1 - r0, o = off + r0 * ld;
        cl_int resume = r0 > 0;
        if (o > 2147483647)
            return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "%s: column sums of %lld x %lld from offset %lld",
                                who, (long long)rows, (long long)cols, (long long)o);
        ir = (cl_int)n, ioff = (cl_int)o;
        if (fmt)
            st = clremat_run1d(ctx, "clremat_colsum8_16", clremat_colsum_items(ctx, cols), sizeof ir, &ir, sizeof ic,
                               &ic, sizeof ild, &ild, sizeof ioff, &ioff, sizeof ib, &ib, sizeof ifmt, &ifmt,
                               sizeof mx, &mx, sizeof my, &my, sizeof resume, &resume, (size_t)0);
        else
            st = clremat_run1d(ctx, "clremat_colsum8", clremat_colsum_items(ctx, cols), sizeof ir, &ir, sizeof ic,
                               &ic, sizeof ild, &ild, sizeof ioff, &ioff, sizeof ib, &ib, sizeof mx, &mx,
                               sizeof my, &my, sizeof resume, &resume, (size_t)0);
    }
    return st;
}

int64_t clremat_colsum_rows_per_launch(const clremat_ctx *ctx, int64_t rows, int64_t cols)
{
    const int64_t tail = cols % 8; /* the iterations of loop_budget.c's colsum_iters */
    return clremat_loop_chunk(ctx, 16 + tail, 1 + tail, rows);
}
