/* kernel_run.c: one-call kernel launches for the layer launchers and
 * optimizers, and the buffer-size check they share. */
#include "kernel_run.h"
#include "loop_budget.h"
#include <string.h>

/* Sets the (size, value) argument pairs of ap on k. */
static int set_args_v(clremat_ctx *ctx, cl_kernel k, const char *kname, va_list ap)
{
    for (cl_uint idx = 0;; idx++) {
        size_t size = va_arg(ap, size_t);
        const void *val;
        cl_int err;
        if (size == 0)
            return CLREMAT_OK;
        val = va_arg(ap, const void *);
        err = clSetKernelArg(k, idx, size, val);
        if (err != CL_SUCCESS)
            return clremat_fail(ctx, err, "setting argument %u of kernel %s failed: %s", idx, kname,
                                clremat_status_str(err));
    }
}

/* The loop budget's check (loop_budget.h) of a launch of kname with the
 * (size, value) argument pairs of ap: its integer
 * arguments are read as such, the others as 0. Runs in a dry run too, so
 * that the layers' dry run (gemm_workspace.c) refuses a shape before any
 * step. */
static int check_loops_v(clremat_ctx *ctx, const char *kname, va_list ap)
{
    int64_t arg[CLREMAT_LOOP_MAX_ARGS];
    int n = 0;
    if (ctx->loop_budget <= 0)
        return CLREMAT_OK;
    for (;;) {
        size_t size = va_arg(ap, size_t);
        const void *val;
        if (size == 0 || n == CLREMAT_LOOP_MAX_ARGS)
            break;
        val = va_arg(ap, const void *);
        arg[n] = 0;
        if (val && size == sizeof(int32_t)) { /* (val NULL: local memory) */
            int32_t v;
            memcpy(&v, val, sizeof v);
            arg[n] = v;
        } else if (val && size == sizeof(int64_t)) {
            int64_t v;
            memcpy(&v, val, sizeof v);
            arg[n] = v;
        }
        n++;
    }
    return clremat_loop_check(ctx, kname, arg, n);
}

int clremat_run(clremat_ctx *ctx, const char *kname, cl_uint dims, const size_t *global,
                const size_t *local, ...)
{
    cl_kernel k;
    va_list ap;
    int st;
    va_start(ap, local);
    st = check_loops_v(ctx, kname, ap);
    va_end(ap);
    if (st != CLREMAT_OK || ctx->dry_run) /* a workspace dry run enqueues nothing */
        return st;
    st = clremat_kernel(ctx, kname, &k);
    if (st != CLREMAT_OK)
        return st;
    va_start(ap, local);
    st = set_args_v(ctx, k, kname, ap);
    va_end(ap);
    if (st != CLREMAT_OK)
        return st;
    return clremat_launch(ctx, k, kname, dims, global, local);
}

int clremat_run1d(clremat_ctx *ctx, const char *kname, int64_t n, ...)
{
    cl_kernel k;
    va_list ap;
    size_t global = (size_t)n;
    int st;
    if (n <= 0)
        return CLREMAT_OK;
    va_start(ap, n);
    st = check_loops_v(ctx, kname, ap);
    va_end(ap);
    if (st != CLREMAT_OK || ctx->dry_run)
        return st;
    if (n > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "kernel %s: %lld elements exceed the 2^31 limit",
                            kname, (long long)n);
    st = clremat_kernel(ctx, kname, &k);
    if (st != CLREMAT_OK)
        return st;
    va_start(ap, n);
    st = set_args_v(ctx, k, kname, ap);
    va_end(ap);
    if (st != CLREMAT_OK)
        return st;
    return clremat_launch(ctx, k, kname, 1, &global, NULL);
}

int clremat_check_buf(clremat_ctx *ctx, const char *layer, const char *role, const clremat_buf *buf,
                      int64_t floats)
{
    if (!buf)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "layer %s: %s buffer missing", layer, role);
    if (floats < 0 || buf->bytes < (uint64_t)floats * sizeof(float))
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "layer %s: %s buffer holds %zu bytes, %lld needed", layer, role, buf->bytes,
                            (long long)floats * (long long)sizeof(float));
    return CLREMAT_OK;
}

int clremat_check_buf_fmt(clremat_ctx *ctx, const char *layer, const char *role, const clremat_buf *buf, int64_t n,
                          int fmt)
{
    if (!fmt)
        return clremat_check_buf(ctx, layer, role, buf, n);
    if (!buf)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "layer %s: %s buffer missing", layer, role);
    if (n < 0 || buf->bytes / 2 < (uint64_t)n)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "layer %s: 16-bit %s buffer holds %zu bytes, %lld needed", layer, role, buf->bytes,
                            (long long)n * 2);
    return CLREMAT_OK;
}
