/* act_table.c: GELU (tanh form) of 16-bit operands by table lookup (see
 * act_table.h): the table's size rule, its filling, the two lookup
 * launches and the mixed layers' entry points that choose between the
 * table and the computing kernels. */
#include "act_table.h"
#include "kernel_run.h"
#include "mixed_precision.h"

size_t clremat_act_table_bytes(int act, int fmt, int64_t n)
{
    if (act != CLREMAT_ACT_GELU_TANH || (fmt != CLREMAT_FMT_F16 && fmt != CLREMAT_FMT_BF16) ||
        n < CLREMAT_ACT_TABLE_MIN_ELEMS)
        return 0;
    return (size_t)CLREMAT_ACT_TABLE_ENTRIES * sizeof(float);
}

static int table_fits(clremat_ctx *ctx, const clremat_buf *table)
{
    if (!table || table->bytes < (size_t)CLREMAT_ACT_TABLE_ENTRIES * sizeof(float))
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "activation table: %zu bytes, %zu needed",
                            table ? table->bytes : (size_t)0, (size_t)CLREMAT_ACT_TABLE_ENTRIES * sizeof(float));
    return CLREMAT_OK;
}

int clremat_act_table_fill(clremat_ctx *ctx, clremat_buf *table, int act, int fmt, int deriv)
{
    cl_int iact = act, ider = deriv ? 1 : 0, ifmt = fmt;
    cl_mem mt;
    int st;
    if ((st = table_fits(ctx, table)) != CLREMAT_OK)
        return st;
    if (fmt != CLREMAT_FMT_F16 && fmt != CLREMAT_FMT_BF16)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "activation table: format %d is not 16-bit", fmt);
    mt = clremat_mem(table);
    return clremat_run1d(ctx, "clremat_act_table16", CLREMAT_ACT_TABLE_ENTRIES / 8, sizeof iact, &iact,
                         sizeof ider, &ider, sizeof ifmt, &ifmt, sizeof mt, &mt, (size_t)0);
}

int clremat_op_convert_table(clremat_ctx *ctx, const clremat_buf *src, clremat_buf *dst, int dfmt, int64_t n,
                             const clremat_buf *table, float scale, int acc)
{
    cl_int in = (cl_int)n, iacc = acc ? 1 : 0, idf = dfmt;
    cl_float fs = scale;
    cl_mem ms, md, mt;
    int st;
    if (n <= 0)
        return CLREMAT_OK;
    if ((st = table_fits(ctx, table)) != CLREMAT_OK)
        return st;
    if (n > 2147483647 || !clremat_buf_holds(src, n, 1) || !clremat_buf_holds(dst, n, dfmt))
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "activation by table: %lld elements do not fit the buffers", (long long)n);
    ms = clremat_mem(src);
    md = clremat_mem(dst);
    mt = clremat_mem(table);
    return clremat_run1d(ctx, "clremat_cvt16_table", clremat_ew_items(ctx, CLREMAT_ACT_GELU_TANH, n), sizeof in, &in,
                         sizeof fs, &fs, sizeof iacc, &iacc, sizeof ms, &ms, sizeof idf, &idf, sizeof md, &md,
                         sizeof mt, &mt, (size_t)0);
}

int clremat_op_mul_dact_table(clremat_ctx *ctx, int64_t n, const clremat_buf *table, const clremat_buf *x,
                              const clremat_buf *dy, int fdy, clremat_buf *z, int fz, int acc)
{
    cl_int in = (cl_int)n, iacc = acc ? 1 : 0, ifdy = fdy, ifz = fz;
    cl_mem mx, mdy, mz, mt;
    int st;
    if (n <= 0)
        return CLREMAT_OK;
    if ((st = table_fits(ctx, table)) != CLREMAT_OK)
        return st;
    if (n > 2147483647 || !clremat_buf_holds(x, n, 1) || !clremat_buf_holds(dy, n, fdy) ||
        !clremat_buf_holds(z, n, fz))
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "activation gradient by table: %lld elements do not fit the buffers", (long long)n);
    mx = clremat_mem(x);
    mdy = clremat_mem(dy);
    mz = clremat_mem(z);
    mt = clremat_mem(table);
    return clremat_run1d(ctx, "clremat_act_bwd16_table", clremat_ew_items(ctx, CLREMAT_ACT_GELU_TANH, n), sizeof in,
                         &in, sizeof iacc, &iacc, sizeof mx, &mx, sizeof ifdy, &ifdy, sizeof mdy, &mdy, sizeof ifz,
                         &ifz, sizeof mz, &mz, sizeof mt, &mt, (size_t)0);
}

/* A table of act (deriv: act') over fmt, taken from the pool for the call. */
static int take_table(clremat_layer_call *c, int act, int fmt, int deriv, clremat_buf **table)
{
    int st = clremat_mixed_take(c, CLREMAT_ACT_TABLE_ENTRIES, table);
    if (st == CLREMAT_OK && (st = clremat_act_table_fill(c->ctx, *table, act, fmt, deriv)) != CLREMAT_OK) {
        clremat_pool_release(c->ctx->pool, *table);
        *table = NULL;
    }
    return st;
}

int clremat_act16_forward(clremat_layer_call *c, int64_t n, int64_t planned, int act, const clremat_buf *src,
                          int sfmt, clremat_buf *dst, int dfmt)
{
    clremat_buf *table = NULL;
    int st;
    if (!clremat_act_table_bytes(act, sfmt, planned))
        return clremat_op_convert(c->ctx, src, sfmt, dst, dfmt, n, act, 1.0f, 0);
    if ((st = take_table(c, act, sfmt, 0, &table)) != CLREMAT_OK)
        return st;
    st = clremat_op_convert_table(c->ctx, src, dst, dfmt, n, table, 1.0f, 0);
    clremat_pool_release(c->ctx->pool, table);
    return st;
}

int clremat_act16_backward(clremat_layer_call *c, int64_t n, int64_t planned, int act, const clremat_buf *x,
                           int fx, const clremat_buf *dy, int fdy, clremat_buf *z, int fz, int acc)
{
    clremat_buf *table = NULL;
    int st;
    if (!clremat_act_table_bytes(act, fx, planned))
        return clremat_op_mul_dact(c->ctx, n, act, x, fx, dy, fdy, z, fz, acc);
    if ((st = take_table(c, act, fx, 1, &table)) != CLREMAT_OK)
        return st;
    st = clremat_op_mul_dact_table(c->ctx, n, table, x, dy, fdy, z, fz, acc);
    clremat_pool_release(c->ctx->pool, table);
    return st;
}
