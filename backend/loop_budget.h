/* loop_budget.h: the per-work-item loop budget of OpenCL implementations
 * that leave a kernel's loops silently after a fixed number of iterations
 * (Mesa's llvmpipe: 65535 iterations in all, every loop of a work-item
 * counted against one budget), and the launch check that keeps every
 * kernel of kernels.cl within it: a launch whose work-items could run past
 * the budget is refused with its numbers instead of computing a wrong
 * value. Launchers whose loops can be split (row reductions summed in
 * order, the embedding's tokens, CLBlast's K) split them instead, with
 * clremat_loop_chunk, into launches that continue the same sums. */
#ifndef CLREMAT_LOOP_BUDGET_H
#define CLREMAT_LOOP_BUDGET_H

#include "backend.h"

/** Mesa llvmpipe's budget (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS). */
#define CLREMAT_LLVMPIPE_LOOP_BUDGET 65535

/** The most arguments of a launch the check reads. */
#define CLREMAT_LOOP_MAX_ARGS 32

/** An upper bound on the loop iterations one work-item of kernel kname
 * runs with these arguments (arg[i]: argument i's value where it is a
 * 4-byte or 8-byte integer, else 0; nargs of them); -1 when the kernel has no loop whose length depends on its
 * arguments (or is not listed: the native GEMM keeps its own budget,
 * clremat_gemm_split_choose). *what is set to a few words saying which
 * loop it is (for messages). */
int64_t clremat_loop_iterations(const char *kname, const int64_t *arg, int nargs, const char **what);

/** Refuses (CLREMAT_ERR_TOO_LARGE, naming the kernel, its loop, the
 * iterations and the budget) a launch of kname that could run past
 * ctx->loop_budget; CLREMAT_OK when there is no budget or it keeps within. */
int clremat_loop_check(clremat_ctx *ctx, const char *kname, const int64_t *arg, int nargs);

/** How many of `total` items (rows, tokens) one launch may take when a
 * work-item runs fixed + per * items iterations: total with no budget,
 * else the most that keep within it (at least 1; a launch of 1 that still
 * exceeds it is refused by the check). */
int64_t clremat_loop_chunk(const clremat_ctx *ctx, int64_t fixed, int64_t per, int64_t total);

/** Walks [0, total) in ranges of at most chunk items: start with *r1 = -1;
 * each call sets the next range [*r0, *r1) and returns 1, then 0 when none
 * is left. There is always a first range, empty when total is 0 (a launch
 * over no rows still writes its zero sums). */
static inline int clremat_loop_next(int64_t total, int64_t chunk, int64_t *r0, int64_t *r1)
{
    if (*r1 >= 0 && *r1 >= total)
        return 0;
    *r0 = *r1 < 0 ? 0 : *r1;
    *r1 = total - *r0 < chunk ? total : *r0 + chunk;
    return 1;
}

#endif
