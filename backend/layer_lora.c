/* layer_lora.c: a dense layer with a LoRA adapter (Hu et al. 2021),
 * y = act(x W + b + s (x A) B) with s = alpha / r, A [in, r], B [r, units].
 * Parameters {kernel, bias (with use_bias), lora_a, lora_b}; the graph
 * marks kernel and bias frozen, so the executor gives them no gradient
 * (their gradients are still written when a caller passes buffers, as the
 * layer checks do). Slots {out, xa = x A} and, with an activation,
 * preact (the backward turns dout into dZ = dout act'(preact) in place, as
 * the dense layer does). Backward, with dxa = s dZ B^T in the workspace
 * [rows, r]: grad B = s xa^T dZ, grad A = x^T dxa, din = dZ W^T + dxa A^T. */
#include "layer_seq.h"
#include "colsum.h"
#include "gemm.h"

typedef struct lora_dims {
    int64_t rows, in, units, r;
    int ia, ib;             /* indices of lora_a and lora_b */
    float s;                /* alpha / r */
} lora_dims;

static int lora_get(clremat_ctx *ctx, const clremat_layer *L, int64_t batch, lora_dims *d)
{
    d->in = clremat_last_dim(&L->in_shape[0]);
    d->units = L->units;
    d->r = L->lora_rank;
    d->rows = d->in > 0 ? batch * (clremat_elems_of(&L->in_shape[0]) / d->in) : 0;
    d->ia = L->use_bias ? 2 : 1;
    d->ib = d->ia + 1;
    d->s = (float)(L->lora_alpha / (double)L->lora_rank);
    if (d->in < 1 || d->r < 1 || L->n_params != d->ib + 1 || L->params[0].elems != d->in * d->units ||
        (L->use_bias && L->params[1].elems != d->units) || L->params[d->ia].elems != d->in * d->r ||
        L->params[d->ib].elems != d->r * d->units)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "dense layer %s: LoRA rank %lld, input features %lld, units "
                            "%lld and its parameters do not fit", L->name, (long long)d->r, (long long)d->in,
                            (long long)d->units);
    return seq_check_int(ctx, L->name, "output", d->rows * (d->units > d->in ? d->units : d->in));
}

static int lora_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const clremat_layer *L = &g->layers[l];
    lora_dims d;
    double rows, in, units, r;
    int st = lora_get(NULL, L, batch, &d);
    if (st != CLREMAT_OK)
        return st;
    rows = (double)d.rows, in = (double)d.in, units = (double)d.units, r = (double)d.r;
    c->n_slots = L->act != CLREMAT_ACT_NONE ? 3 : 2;
    c->slot_bytes[0] = seq_fbytes(d.rows * d.units);
    c->slot_name[0] = "out";
    c->slot_bytes[1] = seq_fbytes(d.rows * d.r);
    c->slot_name[1] = "xa";
    c->bwd_needs_inputs = 1u;
    c->bwd_needs_slots = 1u << 1;
    if (L->act != CLREMAT_ACT_NONE) {
        c->slot_bytes[2] = c->slot_bytes[0];
        c->slot_name[2] = "preact";
        c->bwd_needs_slots |= 1u << 2;
    }
    c->act_source = -1;
    c->bwd_temp_bytes = seq_fbytes(d.rows * d.r);
    c->fwd_flops = 2.0 * rows * in * units + 2.0 * rows * in * r + 2.0 * rows * r * units +
                   (L->use_bias ? rows * units : 0.0) + (L->act != CLREMAT_ACT_NONE ? rows * units : 0.0);
    /* din through W and A, grad A and B (the frozen kernel's gradient is not computed in training) */
    c->bwd_flops = 2.0 * rows * in * units + 2.0 * rows * units * r * 2.0 + 2.0 * rows * in * r * 2.0 +
                   (L->act != CLREMAT_ACT_NONE ? rows * units : 0.0);
    c->param_bytes = seq_param_bytes(L);
    return CLREMAT_OK;
}

static int lora_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    clremat_buf *pre;
    lora_dims d;
    int st = lora_get(c->ctx, L, c->batch, &d);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], d.rows * d.in);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "kernel", c->param[0], d.in * d.units);
    if (st == CLREMAT_OK && L->use_bias)
        st = clremat_check_buf(c->ctx, L->name, "bias", c->param[1], d.units);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "lora_a", c->param[d.ia], d.in * d.r);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "lora_b", c->param[d.ib], d.r * d.units);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], d.rows * d.units);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "xa", c->slot[1], d.rows * d.r);
    if (st == CLREMAT_OK && L->act != CLREMAT_ACT_NONE)
        st = clremat_check_buf(c->ctx, L->name, "preact", c->slot[2], d.rows * d.units);
    if (st != CLREMAT_OK)
        return st;
    pre = L->act != CLREMAT_ACT_NONE ? c->slot[2] : c->slot[0];
    st = clremat_gemm_dense(c->ctx, d.rows, d.in, d.units, c->in[0], c->param[0], L->use_bias ? c->param[1] : NULL,
                            0, pre, NULL);
    if (st == CLREMAT_OK)
        st = clremat_gemm(c->ctx, 0, 0, d.rows, d.r, d.in, 1.0f, c->in[0], 0, d.in, 0, c->param[d.ia], 0, d.r, 0,
                          0.0f, c->slot[1], 0, d.r, 0, 1);
    if (st == CLREMAT_OK)
        st = clremat_gemm(c->ctx, 0, 0, d.rows, d.units, d.r, d.s, c->slot[1], 0, d.r, 0, c->param[d.ib], 0,
                          d.units, 0, 1.0f, pre, 0, d.units, 0, 1);
    if (st == CLREMAT_OK && L->act != CLREMAT_ACT_NONE)
        st = clremat_run1d(c->ctx, clremat_ew_name(c->ctx, L->act, "clremat_act_fwdw", "clremat_act_fwd8"),
                           clremat_ew_items(c->ctx, L->act, d.rows * d.units), SEQ_I(d.rows * d.units), SEQ_I(L->act),
                           SEQ_M(pre), SEQ_M(c->slot[0]), SEQ_END);
    return st;
}

static int lora_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    lora_dims d;
    int st = lora_get(c->ctx, L, c->batch, &d);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], d.rows * d.in);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, d.rows * d.units);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "xa", c->slot[1], d.rows * d.r);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "backward workspace", c->temp, d.rows * d.r);
    for (int p = 0; p < L->n_params && st == CLREMAT_OK; p++) {
        st = clremat_check_buf(c->ctx, L->name, L->params[p].name, c->param[p], L->params[p].elems);
        if (st == CLREMAT_OK && c->grad[p])
            st = clremat_check_buf(c->ctx, L->name, "gradient", c->grad[p], L->params[p].elems);
    }
    if (st == CLREMAT_OK && c->din[0])
        st = clremat_check_buf(c->ctx, L->name, "input grad", c->din[0], d.rows * d.in);
    if (st == CLREMAT_OK && L->act != CLREMAT_ACT_NONE)
        st = clremat_check_buf(c->ctx, L->name, "preact", c->slot[2], d.rows * d.units);
    if (st != CLREMAT_OK)
        return st;
    /* dZ = dout * act'(preact), in place */
    if (L->act != CLREMAT_ACT_NONE &&
        (st = clremat_op_act_backward(c->ctx, (int)L->act, d.rows * d.units, c->slot[2], c->dout, c->dout, 0)))
        return st;
    /* the frozen base: only when asked (never in training) */
    if (c->grad[0] && (st = clremat_gemm(c->ctx, 1, 0, d.in, d.units, d.rows, 1.0f, c->in[0], 0, d.in, 0, c->dout,
                                         0, d.units, 0, 0.0f, c->grad[0], 0, d.units, 0, 1)) != CLREMAT_OK)
        return st;
    if (L->use_bias && c->grad[1] &&
        (st = clremat_colsum(c->ctx, L->name, d.rows, d.units, d.units, 0, c->dout, 0, c->grad[1])) != CLREMAT_OK)
        return st;
    /* grad B = s xa^T dout */
    if (c->grad[d.ib] &&
        (st = clremat_gemm(c->ctx, 1, 0, d.r, d.units, d.rows, d.s, c->slot[1], 0, d.r, 0, c->dout, 0, d.units, 0,
                           0.0f, c->grad[d.ib], 0, d.units, 0, 1)) != CLREMAT_OK)
        return st;
    /* dxa = s dout B^T */
    if ((st = clremat_gemm(c->ctx, 0, 1, d.rows, d.r, d.units, d.s, c->dout, 0, d.units, 0, c->param[d.ib], 0,
                           d.units, 0, 0.0f, c->temp, 0, d.r, 0, 1)) != CLREMAT_OK)
        return st;
    /* grad A = x^T dxa */
    if (c->grad[d.ia] &&
        (st = clremat_gemm(c->ctx, 1, 0, d.in, d.r, d.rows, 1.0f, c->in[0], 0, d.in, 0, c->temp, 0, d.r, 0, 0.0f,
                           c->grad[d.ia], 0, d.r, 0, 1)) != CLREMAT_OK)
        return st;
    if (!c->din[0])
        return CLREMAT_OK;
    /* din = dout W^T (+ din) + dxa A^T */
    st = clremat_gemm(c->ctx, 0, 1, d.rows, d.in, d.units, 1.0f, c->dout, 0, d.units, 0, c->param[0], 0, d.units, 0,
                      c->din_accumulate[0] ? 1.0f : 0.0f, c->din[0], 0, d.in, 0, 1);
    if (st == CLREMAT_OK)
        st = clremat_gemm(c->ctx, 0, 1, d.rows, d.in, d.r, 1.0f, c->temp, 0, d.r, 0, c->param[d.ia], 0, d.r, 0, 1.0f,
                          c->din[0], 0, d.in, 0, 1);
    return st;
}

const clremat_layer_impl clremat_impl_lora = {lora_cost, lora_forward, lora_backward, NULL, NULL};
