/* fused_update.c: the optimizer's hyperparameters for the kernels that
 * update inside the backward, and the bias gradient's reduction fused with
 * the update (clremat_colsum8_upd of kernels.cl, at colsum.c's width). */
#include "fused_update.h"
#include "colsum.h"
#include "kernel_run.h"
#include <math.h>

int clremat_fused_opt_make(clremat_ctx *ctx, const clremat_opt_config *cfg, int64_t t, clremat_fused_opt *out)
{
    if (!cfg || !out)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "fused update: no optimizer config");
    for (int i = 0; i < 8; i++)
        out->hp[i] = 0.0f;
    out->hp[0] = cfg->lr;
    out->hp[4] = cfg->weight_decay;
    switch (cfg->kind) {
    case CLREMAT_OPT_SGD:
        out->kind = 0;
        out->hp[1] = cfg->momentum;
        out->hp[5] = out->hp[6] = 1.0f;
        return CLREMAT_OK;
    case CLREMAT_OPT_ADAM:
    case CLREMAT_OPT_ADAMW:
        if (t < 1)
            return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "adam step count %lld: must be >= 1",
                                (long long)t);
        out->kind = cfg->kind == CLREMAT_OPT_ADAMW ? 2 : 1;
        out->hp[1] = cfg->beta1;
        out->hp[2] = cfg->beta2;
        out->hp[3] = cfg->eps;
        /* as clremat_opt_step computes them */
        out->hp[5] = (float)(1.0 - pow((double)cfg->beta1, (double)t));
        out->hp[6] = (float)(1.0 - pow((double)cfg->beta2, (double)t));
        return CLREMAT_OK;
    }
    return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "unknown optimizer kind %d", (int)cfg->kind);
}

int clremat_colsum_update(clremat_ctx *ctx, int64_t rows, int64_t cols, const clremat_buf *x, int fmt,
                          clremat_buf *p, clremat_buf *s0, clremat_buf *s1, const clremat_fused_opt *opt)
{
    cl_int ir = (cl_int)rows, ic = (cl_int)cols, ib = clremat_colsum_blocks(ctx, cols), kind = opt->kind, ifmt = fmt;
    cl_mem mx, mp, m0, m1;
    cl_float8 hp;
    int st;
    if (rows > 2147483647 || cols > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "fused bias update: %lld x %lld", (long long)rows,
                            (long long)cols);
    if ((st = clremat_check_buf_fmt(ctx, "fused update", "input", x, rows * cols, fmt)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, "fused update", "param", p, cols)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, "fused update", "state 0", s0, cols)) != CLREMAT_OK ||
        (kind && (st = clremat_check_buf(ctx, "fused update", "state 1", s1, cols)) != CLREMAT_OK))
        return st;
    for (int i = 0; i < 8; i++)
        hp.s[i] = opt->hp[i];
    mx = clremat_mem(x);
    mp = clremat_mem(p);
    m0 = clremat_mem(s0);
    m1 = clremat_mem(kind ? s1 : s0);
    if (fmt)
        return clremat_run1d(ctx, "clremat_colsum8_upd16", clremat_colsum_items(ctx, cols), sizeof ir, &ir,
                             sizeof ic, &ic, sizeof ib, &ib, sizeof ifmt, &ifmt, sizeof mx, &mx, sizeof mp, &mp,
                             sizeof m0, &m0, sizeof m1, &m1, sizeof hp, &hp, sizeof kind, &kind, (size_t)0);
    return clremat_run1d(ctx, "clremat_colsum8_upd", clremat_colsum_items(ctx, cols), sizeof ir, &ir, sizeof ic, &ic,
                         sizeof ib, &ib, sizeof mx, &mx, sizeof mp, &mp, sizeof m0, &m0, sizeof m1, &m1, sizeof hp,
                         &hp, sizeof kind, &kind, (size_t)0);
}
