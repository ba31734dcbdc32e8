/* loop_budget.c: upper bounds on the loop iterations of one work-item of
 * each kernel of kernels.cl whose loops grow with its arguments, and the
 * launch check against the device's budget (loop_budget.h). Each bound
 * counts every iteration of every loop the work-item can run (llvmpipe runs
 * eight work-items as one vector, so a loop runs while any of them is in
 * it: the bounds take the longest lane, tails of whole vectors included).
 * Loops of constant length (unrolled) and the elementwise kernels are not
 * listed; a kernel added to kernels.cl with a loop over a size must be. */
#include "loop_budget.h"
#include <string.h>

#define A(i) (i < nargs ? arg[i] : 0)

static int64_t cdiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }
static int64_t max0(int64_t a) { return a > 0 ? a : 0; }

/* The column sums (kernels.cl, "Column sums"): one walk over the rows for
 * the whole blocks of eight columns, then one per tail column (cols % 8,
 * the last work-item's), then the stores. */
static int64_t colsum_iters(int64_t rows, int64_t cols)
{
    const int64_t tail = cols % 8;
    return 16 + tail + max0(rows) * (1 + tail);
}

/* The direct convolution's tiles of q pixels over n pixels, each summing
 * KH x KW taps over K channels (cd_tile_tap, at most 16 tested pixels a
 * side), then the tile's rolled store (up to 32 vectors). */
static int64_t conv_tiles_iters(int64_t n, int64_t q, int64_t KH, int64_t KW, int64_t K)
{
    return 1 + cdiv(max0(n), q) * (48 + KH * (2 + KW * (max0(K) + 2 * 16 + 2)));
}

/* The memory-efficient attention's kernels: T keys or queries in tiles of
 * BR x BC rows, dh columns a head (kernels.cl, flash_attn_*). */
static int64_t flash_iters(int kind, int64_t T, int64_t G, int64_t dh, int64_t BR, int64_t BC)
{
    if (kind == 0) /* forward: per key tile a load, then two passes over its keys */
        return 2 * dh + cdiv(T, BC) * (cdiv(BC * dh, BR) + dh + 2) + 2 * T * (dh + 1) + 1;
    if (kind == 1) /* dk, dv: per query head of the group, per query tile a load, then its rows */
        return 2 * dh + G * (cdiv(T, BR) * (cdiv(BR * dh, BC) + cdiv(BR, BC) + 2) + T * (2 * dh + 1)) + 1;
    return 3 * dh + cdiv(T, BC) * (cdiv(BC * dh, BR) + 2) + T * (2 * dh + 2) + 1; /* dq */
}

int64_t clremat_loop_iterations(const char *k, const int64_t *arg, int nargs, const char **what)
{
    const char *w = "";
    int64_t n = -1;
#define IS(name) (strcmp(k, name) == 0)
    if (IS("clremat_colsum"))
        n = A(0) + 1, w = "column sums over the rows";
    else if (IS("clremat_colsum8") || IS("clremat_colsum8_16") || IS("clremat_colsum8_upd") ||
             IS("clremat_colsum8_upd16"))
        n = colsum_iters(A(0), A(1)), w = "column sums over the rows";
    else if (IS("clremat_sum_bcast"))
        n = (A(2) > 0 ? A(1) / A(2) : 0) + 1, w = "broadcast gradient over the repeats";
    else if (IS("ln_forward") || IS("ln_forward16"))
        n = 3 * A(1) + 3, w = "layernorm over the row's width";
    else if (IS("ln_backward_dx") || IS("ln_backward_dx16") || IS("ln_backward_dx_act") || IS("rms_forward") ||
             IS("rms_backward_dx"))
        n = 2 * A(1) + 2, w = "normalization over the row's width";
    else if (IS("ln_backward_params")) /* rows [A(7), A(0)) */
        n = max0(A(0) - A(7)) + 1, w = "parameter gradient over the rows";
    else if (IS("ln_backward_params_act")) /* rows [A(8), A(0)) */
        n = max0(A(0) - A(8)) + 1, w = "parameter gradient over the rows";
    else if (IS("rms_backward_scale")) /* rows [A(6), A(0)) */
        n = max0(A(0) - A(6)) + 1, w = "parameter gradient over the rows";
    else if (IS("ln_backward_params16")) /* rows [A(9), A(0)), 7 tail columns after the vector */
        n = 8 * (max0(A(0) - A(9)) + 1), w = "parameter gradient over the rows";
    else if (IS("emb_backward_table") || IS("emb_backward_table_acc")) /* tokens [A(6), A(0)) */
        n = A(1) + 2 + max0(A(0) - A(6)) * (A(1) + 1), w = "embedding gradient over the tokens";
    else if (IS("emb_backward_table16")) /* tokens [A(8), A(0)) */
        n = A(1) + 2 + max0(A(0) - A(8)) * (A(1) / 8 + A(1) % 8 + 1), w = "embedding gradient over the tokens";
    else if (IS("emb_backward_pos") || IS("emb_backward_pos16"))
        n = A(0) + 1, w = "position gradient over the sequences";
    else if (IS("attn_softmax_fwd") || IS("attn_softmax_fwd16"))
        n = 4 * A(1) + A(1) / 8 + 16, w = "attention softmax over the keys";
    else if (IS("attn_softmax_bwd") || IS("attn_softmax_bwd16"))
        n = 2 * A(1) + 2, w = "attention softmax gradient over the keys";
    else if (IS("ce_forward_rows") || IS("ce_forward_rows16"))
        n = 2 * A(1) + 2, w = "cross-entropy over the classes";
    else if (IS("ce_backward") || IS("ce_backward16"))
        n = 3 * A(1) + 3, w = "cross-entropy gradient over the classes";
    else if (IS("mse_partial"))
        n = A(1) + 1, w = "squared error over a chunk";
    else if (IS("seq_loss_finish")) /* rows [A(5), A(6)) */
        n = 2 * max0(A(6) - A(5)) + 2, w = "loss over the rows";
    else if (IS("flash_attn_fwd") || IS("flash_attn_bwd_dkdv") || IS("flash_attn_bwd_dq"))
        n = flash_iters(IS("flash_attn_fwd") ? 0 : IS("flash_attn_bwd_dkdv") ? 1 : 2, A(0), A(2) > 0 ? A(1) / A(2) : 1,
                        A(3), A(11), A(12)),
        w = "memory-efficient attention over the sequence";
    else if (IS("flash_attn_bwd_dot"))
        n = A(3) + 1, w = "attention gradient over the head's width";
    else if (IS("conv_col2im") || IS("pool2d_fwd"))
        n = A(7) * (A(8) + 1) + 1, w = "window taps";
    else if (IS("pool2d_bwd")) {
        const int64_t win = A(8) * (A(9) + 1) + 1;
        n = win * win + win, w = "pooling windows over the taps";
    } else if (IS("gap_fwd"))
        n = A(1) + 1, w = "global average pooling over the pixels";
    else if (IS("bn_stats_part") || IS("bn_bwd_part"))
        n = 8 * (2 * A(2) + 2) + 8, w = "batchnorm block of rows";
    else if (IS("bn_stats_finish"))
        n = A(3) + 1, w = "batchnorm blocks";
    else if (IS("bn_bwd_finish"))
        n = A(1) + 1, w = "batchnorm blocks";
    else if (IS("bn_apply") || IS("bn_bwd_dx"))
        n = 8 * (A(2) + 1) + 8, w = "batchnorm rows of a work-item";
    else if (IS("conv_fwd_direct"))
        n = conv_tiles_iters(A(4), A(14) == 1 ? 12 : 4, A(5), A(6), A(2)), w = "direct convolution over the row";
    else if (IS("conv_bwd_data_direct"))
        n = conv_tiles_iters(A(1), A(14) == 1 ? 12 : 4, A(5), A(6), A(13)),
        w = "direct convolution's input gradient over the row";
    else if (IS("conv_wgrad_direct"))
        n = 3 * A(1) + 2 * (cdiv(A(1), A(6)) + 2) + 40, w = "convolution weight gradient over a chunk of rows";
    else if (IS("conv_dw_wgrad"))
        n = A(1) + 1, w = "depthwise weight gradient over a chunk of rows";
    else if (IS("conv_wgrad_reduce"))
        n = A(1) + 1, w = "weight gradient chunks";
    else if (IS("conv_dw_fwd"))
        n = cdiv(A(4), 4) * (2 + A(5) * (1 + A(6))) + 1, w = "depthwise convolution over the row";
    else if (IS("conv_dw_bwd_data"))
        n = cdiv(A(1), 4) * (2 + A(5) * (1 + A(6) * (1 + A(14)))) + 1,
        w = "depthwise convolution's input gradient over the row";
    else if (IS("clremat_gemm_tiled"))
        n = (A(4) / 16 + 1) * 40, w = "tiled GEMM over K";
#undef IS
    if (what)
        *what = w;
    return n;
}

int clremat_loop_check(clremat_ctx *ctx, const char *kname, const int64_t *arg, int nargs)
{
    const char *what = "";
    int64_t n;
    if (ctx->loop_budget <= 0)
        return CLREMAT_OK;
    n = clremat_loop_iterations(kname, arg, nargs, &what);
    if (n <= ctx->loop_budget)
        return CLREMAT_OK;
    if (ctx->loop_budget_env)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE,
                            "kernel %s (%s) would run up to %lld loop iterations in one work-item, over the "
                            "budget of %lld set by CLREMAT_LOOP_BUDGET",
                            kname, what, (long long)n, (long long)ctx->loop_budget);
    return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE,
                        "kernel %s (%s) would run up to %lld loop iterations in one work-item, and this device "
                        "(%s) ends a work-item's loops after %lld without an error, so the result would be wrong: "
                        "run it on another device (PoCL) or with smaller sizes",
                        kname, what, (long long)n, ctx->info.name, (long long)ctx->loop_budget);
}

int64_t clremat_loop_chunk(const clremat_ctx *ctx, int64_t fixed, int64_t per, int64_t total)
{
    int64_t c;
    if (ctx->loop_budget <= 0 || per <= 0)
        return total;
    c = (ctx->loop_budget - fixed) / per;
    if (c < 1)
        c = 1;
    return c < total ? c : total;
}
