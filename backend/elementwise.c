/* elementwise.c: the elementwise operations the executor uses directly:
 * in-place add (gradient accumulation) and counting non-finite values
 * (NaN/Inf detection on losses, activations and gradients); and the
 * activation forward and backward passes layers launch on their own. */
#include "layers.h"
#include "kernel_run.h"

/* An elementwise launch's count n as a kernel's int: CLREMAT_ERR_TOO_LARGE
 * naming what past 2^31 - 1 elements. */
static int ew_count(clremat_ctx *ctx, const char *what, int64_t n, cl_int *in)
{
    if (n > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "%s: %lld elements exceed the 2^31 limit", what,
                            (long long)n);
    *in = (cl_int)n;
    return CLREMAT_OK;
}

int clremat_op_act_backward(clremat_ctx *ctx, int act, int64_t n, const clremat_buf *x, const clremat_buf *dy,
                            clremat_buf *dx, int acc)
{
    cl_int in, iact = act, iacc = acc ? 1 : 0;
    cl_mem mx, mdy, mdx;
    int st;
    if (n <= 0)
        return CLREMAT_OK;
    if ((st = ew_count(ctx, "activation backward", n, &in)) != CLREMAT_OK)
        return st;
    mx = clremat_mem(x);
    mdy = clremat_mem(dy);
    mdx = clremat_mem(dx);
    return clremat_run1d(ctx, clremat_ew_name(ctx, act, "clremat_act_bwdw", "clremat_act_bwd8"),
                         clremat_ew_items(ctx, act, n), sizeof in, &in, sizeof iact, &iact, sizeof iacc, &iacc,
                         sizeof mx, &mx, sizeof mdy, &mdy, sizeof mdx, &mdx, (size_t)0);
}

int clremat_op_act_forward(clremat_ctx *ctx, int act, int64_t n, const clremat_buf *x, clremat_buf *y)
{
    cl_int in, iact = act;
    cl_mem mx, my;
    int st;
    if (n <= 0)
        return CLREMAT_OK;
    if ((st = ew_count(ctx, "activation", n, &in)) != CLREMAT_OK)
        return st;
    mx = clremat_mem(x);
    my = clremat_mem(y);
    return clremat_run1d(ctx, clremat_ew_name(ctx, act, "clremat_act_fwdw", "clremat_act_fwd8"),
                         clremat_ew_items(ctx, act, n), sizeof in, &in, sizeof iact, &iact, sizeof mx, &mx,
                         sizeof my, &my, (size_t)0);
}

int clremat_op_add_inplace(clremat_ctx *ctx, clremat_buf *dst, const clremat_buf *src, int64_t n)
{
    cl_int in = (cl_int)n;
    cl_mem md, ms;
    int st;
    if (n <= 0)
        return CLREMAT_OK;
    if ((st = clremat_check_buf(ctx, "add_inplace", "dst", dst, n)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, "add_inplace", "src", src, n)) != CLREMAT_OK)
        return st;
    md = clremat_mem(dst);
    ms = clremat_mem(src);
    {   /* dst += src, eight floats per work-item (clremat_copy_acc8 with acc) */
        cl_int one = 1;
        return clremat_run1d(ctx, "clremat_copy_acc8", (n + 7) / 8, sizeof in, &in, sizeof one, &one, sizeof md, &md,
                             sizeof ms, &ms, (size_t)0);
    }
}

/* The count lives in a 4-byte pool buffer (tag "nonfinite_count") from
 * clremat_counter_new to clremat_counter_take: every device byte goes
 * through the pool. */
int clremat_counter_new(clremat_ctx *ctx, clremat_buf **cnt)
{
    cl_int zero = 0;
    int st;
    *cnt = NULL;
    if ((st = clremat_pool_alloc(ctx->pool, sizeof(cl_int), "nonfinite_count", cnt)) != CLREMAT_OK)
        return clremat_fail(ctx, st, "count_nonfinite: %s", clremat_pool_last_error(ctx->pool));
    if ((st = clremat_write(ctx, *cnt, 0, sizeof zero, &zero)) != CLREMAT_OK) {
        clremat_pool_release(ctx->pool, *cnt);
        *cnt = NULL;
    }
    return st;
}

int clremat_counter_take(clremat_ctx *ctx, clremat_buf *cnt, int64_t *count)
{
    cl_int host = 0;
    int st = clremat_read(ctx, cnt, 0, sizeof host, &host);
    *count = st == CLREMAT_OK ? host : 0;
    clremat_pool_release(ctx->pool, cnt);
    return st;
}

size_t clremat_count_global(int64_t n)
{
    size_t global = (size_t)(n + 255) / 256 * 256;
    return global > 256 * 1024 ? 256 * 1024 : global;
}

int clremat_op_count_nonfinite_add(clremat_ctx *ctx, const clremat_buf *buf, int64_t n, clremat_buf *cnt)
{
    cl_int in = (cl_int)n;
    cl_mem mx, mc;
    size_t local = 256, global;
    int st;
    if (n <= 0)
        return CLREMAT_OK;
    if (n > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "count_nonfinite: %lld floats exceed 2^31",
                            (long long)n);
    if ((st = clremat_check_buf(ctx, "count_nonfinite", "input", buf, n)) != CLREMAT_OK)
        return st;
    global = clremat_count_global(n);
    mx = clremat_mem(buf);
    mc = clremat_mem(cnt);
    return clremat_run(ctx, "clremat_count_nonfinite", 1, &global, &local, sizeof in, &in, sizeof mx, &mx,
                       sizeof mc, &mc, (size_t)0);
}

int clremat_op_count_nonfinite(clremat_ctx *ctx, const clremat_buf *buf, int64_t n, int64_t *count)
{
    clremat_buf *cnt;
    int st;
    *count = 0;
    if (n <= 0)
        return CLREMAT_OK;
    if ((st = clremat_counter_new(ctx, &cnt)) != CLREMAT_OK)
        return st;
    if ((st = clremat_op_count_nonfinite_add(ctx, buf, n, cnt)) != CLREMAT_OK) {
        clremat_pool_release(ctx->pool, cnt);
        return st;
    }
    return clremat_counter_take(ctx, cnt, count);
}

/* Gradient accumulation: dst = src (acc 0) or dst += src (acc != 0). */
int clremat_op_copy_acc(clremat_ctx *ctx, clremat_buf *dst, const clremat_buf *src, int64_t n, int acc)
{
    cl_int in = (cl_int)n, iacc = acc ? 1 : 0;
    cl_mem md, ms;
    int st;
    if (n <= 0)
        return CLREMAT_OK;
    if ((st = clremat_check_buf(ctx, "copy_acc", "dst", dst, n)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, "copy_acc", "src", src, n)) != CLREMAT_OK)
        return st;
    md = clremat_mem(dst);
    ms = clremat_mem(src);
    return clremat_run1d(ctx, "clremat_copy_acc8", (n + 7) / 8, sizeof in, &in, sizeof iacc, &iacc, sizeof md,
                         &md, sizeof ms, &ms, (size_t)0);
}
