/* layer_dense.c: the dense layer, y = act(x W + b) over the last dimension.
 * Slots: {out} without activation, {out, preact} with one. The forward's
 * activation and its recomputation share clremat_act_apply (kernels.cl), so
 * a recomputed output has the same bits. Backward: dZ = dout * act'(preact)
 * in place in dout, dW = x^T dZ, db = column sums of dZ, dx = dZ W^T.
 * With the fused update (c->fuse_update), dx is computed first (it reads
 * the old W), then the kernel's update runs in the dW GEMM's epilogue and
 * the bias's in the column-sum kernel: neither gradient is stored.
 * Where the layer feeding x is a dense layer with an activation and this
 * is its only consumer (the executor sets din_act), dx comes out already
 * multiplied by that activation's derivative, and that layer's backward
 * skips its own pass (dout_is_dz). Where x itself was discarded (in_act:
 * in[0] holds that layer's pre-activation), the same epilogue writes x =
 * act(pre) over pre, the last read of pre, and dW reads x as it is. */
#include "layer_impl.h"
#include "colsum.h"
#include "kernel_run.h"
#include "gemm.h"
#include "fused_update.h"
#include "mixed_precision.h"

/* Sizes of a dense layer at a batch: rows of x, input features, units. */
static int dense_dims(clremat_ctx *ctx, const clremat_layer *L, int64_t batch, int64_t *rows, int64_t *in,
                      int64_t *units)
{
    *in = clremat_last_dim(&L->in_shape[0]);
    *units = L->units > 0 ? L->units : clremat_last_dim(&L->out_shape);
    *rows = *in > 0 ? batch * (clremat_elems_of(&L->in_shape[0]) / *in) : 0;
    if (*in <= 0 || *units <= 0 || L->n_params < (L->use_bias ? 2 : 1) || L->params[0].elems != *in * *units ||
        (L->use_bias && L->params[1].elems != *units) || clremat_last_dim(&L->out_shape) != *units)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE,
                            "dense layer %s: input features %lld, units %lld and its parameters do not fit",
                            L->name, (long long)*in, (long long)*units);
    return CLREMAT_OK;
}

static int dense_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const clremat_layer *L = &g->layers[l];
    int64_t rows, in, units;
    int st = dense_dims(NULL, L, batch, &rows, &in, &units);
    const double mm = 2.0 * (double)rows * (double)in * (double)units, ew = (double)rows * (double)units;
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = L->act != CLREMAT_ACT_NONE ? 2 : 1;
    c->slot_bytes[0] = (size_t)(rows * units) * sizeof(float);
    c->slot_name[0] = "out";
    c->bwd_needs_inputs = 1u;
    if (L->act != CLREMAT_ACT_NONE) {
        c->slot_bytes[1] = c->slot_bytes[0];
        c->slot_name[1] = "preact";
        c->bwd_needs_slots = 1u << 1;
        c->act_source = 1;
        c->act_from_input = 0;
    } else {
        c->act_source = -1;
        c->act_from_input = 0;
    }
    c->fwd_flops = mm + (L->use_bias ? ew : 0) + (L->act != CLREMAT_ACT_NONE ? ew : 0);
    c->bwd_flops = 2.0 * mm + (L->use_bias ? ew : 0) + (L->act != CLREMAT_ACT_NONE ? ew : 0);
    c->param_bytes = (size_t)(in * units + (L->use_bias ? units : 0)) * sizeof(float);
    c->bwd_act_fusable_inputs = 1u; /* x is read only by dW = x^T dZ (native path: the executor clears it on CLBlast) */
    c->bwd_act_fuse_in_gemm = 1;
    return CLREMAT_OK;
}

static int dense_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int has_act = L->act != CLREMAT_ACT_NONE;
    int64_t rows, in, units;
    clremat_buf *pre;
    int st = dense_dims(c->ctx, L, c->batch, &rows, &in, &units);
    if (st != CLREMAT_OK)
        return st;
    if ((st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], rows * in)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "kernel", c->param[0], in * units)) != CLREMAT_OK ||
        (L->use_bias && (st = clremat_check_buf(c->ctx, L->name, "bias", c->param[1], units)) != CLREMAT_OK) ||
        (st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], rows * units)) != CLREMAT_OK ||
        (has_act && (st = clremat_check_buf(c->ctx, L->name, "preact", c->slot[1], rows * units)) != CLREMAT_OK))
        return st;
    pre = has_act ? c->slot[1] : c->slot[0];
    /* GEMM, bias and activation in one call (fused on the native path) */
    return clremat_gemm_dense(c->ctx, rows, in, units, c->in[0], c->param[0], L->use_bias ? c->param[1] : NULL,
                              (int)L->act, pre, has_act ? c->slot[0] : NULL);
}

static int dense_recompute(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, in, units;
    int st = dense_dims(c->ctx, L, c->batch, &rows, &in, &units);
    if (st != CLREMAT_OK)
        return st;
    if (L->act == CLREMAT_ACT_NONE)
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "dense layer %s has no activation to recompute", L->name);
    if ((st = clremat_check_buf(c->ctx, L->name, "preact", c->slot[1], rows * units)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], rows * units)) != CLREMAT_OK)
        return st;
    return clremat_op_act_forward(c->ctx, (int)L->act, rows * units, c->slot[1], c->slot[0]);
}

/* Whether x's activation is recomputed in the input gradient's epilogue:
 * x is act(pre) of the layer before, discarded after the forward (in_act:
 * in[0] holds pre), and this backward applies that activation's backward
 * (din_act) on the same pre, its last reader: the epilogue that reads pre
 * for act'(pre) writes act(pre) over it, and dW = x^T dZ then reads x as
 * it is (one evaluation sharing the derivative's loads, instead of another
 * while packing dW's operand). */
static int dense_act_in_dx(const clremat_layer_call *c)
{
    return c->din[0] && c->din_act[0] && c->in_act[0] == c->din_act[0] && c->in[0] == c->din_pre[0];
}

/* dx = dZ W^T; with din_act, times act'(din_pre) of the dense layer
 * feeding x (its activation's backward, fused: clremat_gemm_dact), and
 * with act_in_dx (dense_act_in_dx), in[0] = act(in[0]) too. */
static int dense_input_grad(clremat_layer_call *c, int64_t rows, int64_t in, int64_t units, int act_in_dx)
{
    if (c->din_act[0]) {
        if (c->din_accumulate[0])
            return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "dense layer %s: a fused activation gradient into "
                                "an accumulated input gradient", c->g->layers[c->layer].name);
        return clremat_gemm_dact(c->ctx, 0, 1, rows, in, units, c->dout, units, c->param[0], units, c->din[0],
                                 c->din_act[0], c->din_pre[0], act_in_dx);
    }
    return clremat_gemm(c->ctx, 0, 1, rows, in, units, 1.0f, c->dout, 0, units, 0, c->param[0], 0, units, 0,
                        c->din_accumulate[0] ? 1.0f : 0.0f, c->din[0], 0, in, 0, 1);
}

static int dense_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int has_act = L->act != CLREMAT_ACT_NONE;
    /* dx first where its epilogue recomputes x for dW (dense_act_in_dx) or
     * where the fused update then changes W; x's activation in dW's
     * packing unless dx's epilogue computed x */
    const int act_in_dx = dense_act_in_dx(c);
    const int dx_first = c->fuse_update || act_in_dx;
    const int actA = act_in_dx ? 0 : c->in_act[0];
    int64_t rows, in, units;
    int st = dense_dims(c->ctx, L, c->batch, &rows, &in, &units);
    if (st != CLREMAT_OK)
        return st;
    if ((st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, rows * units)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "kernel", c->param[0], in * units)) != CLREMAT_OK ||
        (has_act && (st = clremat_check_buf(c->ctx, L->name, "preact", c->slot[1], rows * units)) != CLREMAT_OK) ||
        (c->grad[0] && (st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], rows * in)) != CLREMAT_OK) ||
        (c->grad[0] &&
         (st = clremat_check_buf(c->ctx, L->name, "kernel grad", c->grad[0], in * units)) != CLREMAT_OK) ||
        (L->use_bias && c->grad[1] &&
         (st = clremat_check_buf(c->ctx, L->name, "bias grad", c->grad[1], units)) != CLREMAT_OK) ||
        (c->din[0] && (st = clremat_check_buf(c->ctx, L->name, "input grad", c->din[0], rows * in)) != CLREMAT_OK))
        return st;
    /* dZ = dout * act'(preact), in place (unless the consumer's backward did) */
    if (has_act && !c->dout_is_dz &&
        (st = clremat_op_act_backward(c->ctx, (int)L->act, rows * units, c->slot[1], c->dout, c->dout, 0)) !=
            CLREMAT_OK)
        return st;
    if (dx_first && c->din[0] && (st = dense_input_grad(c, rows, in, units, act_in_dx)) != CLREMAT_OK)
        return st;
    if (c->fuse_update) {
        const clremat_fused_call *f = c->fused;
        if (!f || (c->fuse_update & ~(L->use_bias ? 3u : 1u)))
            return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "dense layer %s: fused update without its states",
                                L->name);
        if ((c->fuse_update & 1u) &&
            (st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], rows * in)) == CLREMAT_OK)
            st = clremat_gemm_update(c->ctx, 1, 0, in, units, rows, c->in[0], in, c->dout, units, c->param[0],
                                     f->state[0], f->state[1], f->opt.kind, f->opt.hp, actA);
        if (st != CLREMAT_OK)
            return st;
        if (c->fuse_update & 2u)
            st = clremat_colsum_update(c->ctx, rows, units, c->dout, CLREMAT_FMT_F32, c->param[1], f->state[2], f->state[3], &f->opt);
        if (st != CLREMAT_OK)
            return st;
    }
    if (c->grad[0] && actA && /* x = act(pre) of the layer before, applied while packing */
        (st = clremat_gemm_acta(c->ctx, 1, 0, in, units, rows, actA, c->in[0], in, c->dout, units, c->grad[0])) !=
            CLREMAT_OK)
        return st;
    if (c->grad[0] && !actA &&
        (st = clremat_gemm(c->ctx, 1, 0, in, units, rows, 1.0f, c->in[0], 0, in, 0, c->dout, 0, units, 0, 0.0f,
                           c->grad[0], 0, units, 0, 1)) != CLREMAT_OK)
        return st;
    if (L->use_bias && c->grad[1] &&
        (st = clremat_colsum(c->ctx, L->name, rows, units, units, 0, c->dout, CLREMAT_FMT_F32, c->grad[1])) !=
            CLREMAT_OK)
        return st;
    if (c->din[0] && !dx_first)
        st = dense_input_grad(c, rows, in, units, 0);
    return st;
}

int clremat_dense_fuses_update(clremat_ctx *ctx, const clremat_graph *g, int l, int p, int64_t batch)
{
    const clremat_layer *L = &g->layers[l];
    int64_t rows, in, units;
    if (dense_dims(NULL, L, batch, &rows, &in, &units) != CLREMAT_OK)
        return 0;
    if (p == 0) /* dW = x^T dZ: K = rows, within one k-block of the native kernel */
        return clremat_gemm_update_fits(ctx, rows);
    /* db = colsum(dZ) consumed by the update: one launch over the rows (a
     * device's loop budget may split a longer sum into launches that
     * continue it, which needs the stored gradient) */
    return p == 1 && L->use_bias && (!ctx || clremat_colsum_rows_per_launch(ctx, rows, units) >= rows);
}

const clremat_layer_impl clremat_impl_dense = {dense_cost, dense_forward, dense_backward, dense_recompute, NULL};
