/* colsum.h: column sums of a rows x cols matrix (the bias gradient
 * db = sum over the rows of dZ), the work-item geometry chosen per device
 * and shape. The sums consumed at once by the optimizer update are
 * clremat_colsum_update (fused_update.h). kernels.cl, "Column sums". */
#ifndef CLREMAT_COLSUM_H
#define CLREMAT_COLSUM_H

#include "backend.h"
#include "mixed_precision.h"

/** Blocks of eight columns (1 to 8) one work-item of the column-sum kernels
 * sums over cols columns: on CPU devices as many as leave every compute
 * unit the same number of items (up to 8: one walk over the rows for 64
 * columns), elsewhere 1 (neighbouring work-items read neighbouring bytes).
 * The sums are the same bits whatever it is. */
int clremat_colsum_blocks(const clremat_ctx *ctx, int64_t cols);

/** Work-items of a column-sum launch over cols columns. */
int64_t clremat_colsum_items(const clremat_ctx *ctx, int64_t cols);

/** y[c] = sum over r in order of x[off + r * ld + c], c < cols (x of format
 * fmt, CLREMAT_FMT_*, a 16-bit x widened as it is read; y: cols float32);
 * `who` (a layer name) goes into errors. */
int clremat_colsum(clremat_ctx *ctx, const char *who, int64_t rows, int64_t cols, int64_t ld, int64_t off,
                   const clremat_buf *x, int fmt, clremat_buf *y);

/** Rows one column-sum launch over cols columns takes: all rows, or on a
 * device with a loop budget (loop_budget.h) as many as keep a work-item
 * within it; clremat_colsum splits longer sums into such launches, and a
 * fused bias update (clremat_colsum_update) runs only where this is rows. */
int64_t clremat_colsum_rows_per_launch(const clremat_ctx *ctx, int64_t rows, int64_t cols);

#endif
