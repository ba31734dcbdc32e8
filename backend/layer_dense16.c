/* layer_dense16.c: the dense layer's launches under a mixed policy with the
 * conversion fused into its kernels (issue 16): the native GEMM widens the
 * 16-bit x while packing and rounds pre / out (dx) in its epilogue
 * (gemm16.h), the activation's derivative reads the 16-bit dout and pre.
 * Float32 remains only where the float32 path's value must exist before
 * its rounding: the GEMM's partial sums across k-blocks (a scratch of the
 * output's float32 size) and dZ = dout * act'(pre), which three kernels
 * read (without an activation they read the 16-bit dout: GEMM packing and
 * the bias gradient's column sums). Bit for bit the staged launch (mixed_precision.c around
 * layer_dense.c). The buffers are taken from the pool for the launch and
 * planned in the layer's cost (dense16_cost). */
#include "layer_impl.h"
#include "colsum.h"
#include "kernel_run.h"
#include "gemm16.h"
#include "fused_update.h"
#include "mixed_precision.h"
#include "act_table.h"

static void dims(const clremat_layer *L, int64_t batch, int64_t *rows, int64_t *in, int64_t *units)
{
    *in = clremat_last_dim(&L->in_shape[0]);
    *units = L->units > 0 ? L->units : clremat_last_dim(&L->out_shape);
    *rows = *in > 0 ? batch * (clremat_elems_of(&L->in_shape[0]) / *in) : 0;
}

static void dense16_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const clremat_layer *L = &g->layers[l];
    int64_t rows, in, units;
    dims(L, batch, &rows, &in, &units);
    /* forward: the partial sums of pre; backward: dZ (with an activation;
     * without one the 16-bit dout is dZ) and, when x is 16-bit (it then
     * has a gradient), the partial sums of dx, and for a large GELU the
     * table of its derivative (act_table.h) */
    c->fwd_stage_bytes = (size_t)(rows * units) * sizeof(float);
    c->bwd_stage_bytes = (L->act != CLREMAT_ACT_NONE ? (size_t)(rows * units) * sizeof(float) : 0) +
                         ((c->in16 & 1u) ? (size_t)(rows * in) * sizeof(float) : 0) +
                         clremat_act_table_bytes((int)L->act, clremat_mixed_fmt(g), rows * units);
}

/* Rows at the batch the layer's buffers (and its plan) were sized for. */
static int64_t ab_rows(const clremat_layer_call *c, const clremat_layer *L)
{
    int64_t rows, in, units;
    dims(L, c->alloc_batch > 0 ? c->alloc_batch : c->batch, &rows, &in, &units);
    return rows;
}

static int dense16_forward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int has_act = L->act != CLREMAT_ACT_NONE, fmt = clremat_mixed_fmt(c->g);
    int64_t rows, in, units;
    clremat_buf *scr = NULL;
    clremat_gemm16_call g = {0};
    int st;
    dims(L, c->batch, &rows, &in, &units);
    if ((st = clremat_mixed_take(c, ab_rows(c, L) * units, &scr)) != CLREMAT_OK)
        return st;
    g.M = rows, g.N = units, g.K = in;
    g.A = c->in[0], g.fA = (cost->in16 & 1u) ? fmt : CLREMAT_FMT_F32;
    g.B = c->param[0], g.fB = CLREMAT_FMT_F32;
    g.C = has_act ? c->slot[1] : c->slot[0], g.fC = fmt;
    g.scratch = scr;
    g.bias = L->use_bias ? c->param[1] : NULL;
    g.act = (int)L->act;
    g.out = has_act ? c->slot[0] : NULL;
    st = clremat_gemm16(c->ctx, &g);
    clremat_pool_release(c->ctx->pool, scr);
    return st;
}

static int dense16_backward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int has_act = L->act != CLREMAT_ACT_NONE, fmt = clremat_mixed_fmt(c->g);
    const int fx = (cost->in16 & 1u) ? fmt : CLREMAT_FMT_F32;
    const clremat_fused_call *f = c->fused;
    int64_t rows, in, units;
    clremat_buf *dz = NULL, *scr = NULL;
    const clremat_buf *g_z; /* dZ: float32 dz with an activation, else the 16-bit dout itself */
    int fz, st = CLREMAT_OK;
    dims(L, c->batch, &rows, &in, &units);
    if (c->in_act[0] || (c->fuse_update && (!f || (c->fuse_update & ~(L->use_bias ? 3u : 1u)))))
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "dense layer %s: a fused read or update the 16-bit path "
                            "was not planned for", L->name);
    if (has_act && (st = clremat_mixed_take(c, ab_rows(c, L) * units, &dz)) != CLREMAT_OK)
        return st;
    if (fx && (st = clremat_mixed_take(c, ab_rows(c, L) * in, &scr)) != CLREMAT_OK)
        goto done;
    /* dZ = dout * act'(pre) in float32; without an activation dout is dZ */
    if (has_act)
        st = clremat_act16_backward(c, rows * units, ab_rows(c, L) * units, (int)L->act, c->slot[1], fmt, c->dout,
                                    fmt, dz, CLREMAT_FMT_F32, 0);
    g_z = has_act ? dz : c->dout;
    fz = has_act ? CLREMAT_FMT_F32 : fmt;
    if (st != CLREMAT_OK)
        goto done;
    /* dx = dZ W^T first (the fused update then changes W) */
    if (c->din[0]) {
        if (fx) {
            clremat_gemm16_call g = {0};
            g.tB = 1, g.M = rows, g.N = in, g.K = units;
            g.A = g_z, g.fA = fz, g.B = c->param[0], g.C = c->din[0], g.fC = fmt, g.acc = c->din_accumulate[0];
            g.scratch = scr;
            st = clremat_gemm16(c->ctx, &g);
        } else {
            st = clremat_gemm_fmt(c->ctx, 0, 1, rows, in, units, 1.0f, g_z, fz, 0, units, 0, c->param[0], 0, 0,
                                  units, 0, c->din_accumulate[0] ? 1.0f : 0.0f, c->din[0], 0, in, 0, 1);
        }
        if (st != CLREMAT_OK)
            goto done;
    }
    /* dW = x^T dZ, x widened while packing; stored or updating W */
    if ((c->fuse_update & 1u) || c->grad[0]) {
        clremat_gemm16_call g = {0};
        g.tA = 1, g.M = in, g.N = units, g.K = rows;
        g.A = c->in[0], g.fA = fx, g.B = g_z, g.fB = fz;
        if (c->fuse_update & 1u) {
            g.C = c->param[0], g.s0 = f->state[0], g.s1 = f->state[1], g.okind = f->opt.kind, g.hp = f->opt.hp;
        } else {
            g.C = c->grad[0];
        }
        if ((st = clremat_gemm16(c->ctx, &g)) != CLREMAT_OK)
            goto done;
    }
    /* db = column sums of dZ */
    if (c->fuse_update & 2u) {
        st = clremat_colsum_update(c->ctx, rows, units, g_z, fz, c->param[1], f->state[2], f->state[3], &f->opt);
    } else if (L->use_bias && c->grad[1]) {
        st = clremat_colsum(c->ctx, L->name, rows, units, units, 0, g_z, fz, c->grad[1]);
    }
done:
    if (scr)
        clremat_pool_release(c->ctx->pool, scr);
    if (dz)
        clremat_pool_release(c->ctx->pool, dz);
    return st;
}

const clremat_layer_impl16 clremat_impl16_dense = {NULL, dense16_cost, dense16_forward, dense16_backward};
