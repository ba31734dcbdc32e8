/* layer_multiply.c: y = a * b elementwise over two inputs of equal shape
 * (the gate of a SwiGLU MLP: down(silu(gate(x)) * up(x))). The backward
 * needs both inputs: da = dout * b, db = dout * a. An input that is a
 * discarded activation output (the activations mode) is read as act of its
 * producer's kept pre-activation inside the backward's kernel
 * (mul_acc_act8; bwd_act_fusable_inputs), never recomputed as a pass. */
#include "layer_seq.h"

/* Elements per sample; checks the two shapes are equal. */
static int mul_dims(clremat_ctx *ctx, const clremat_layer *L, int64_t batch, int64_t *n)
{
    if (L->n_inputs != 2 || !clremat_shape_eq(&L->in_shape[0], &L->in_shape[1]))
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "multiply %s: needs two inputs of equal shape", L->name);
    *n = batch * clremat_elems_of(&L->in_shape[0]);
    return seq_check_int(ctx, L->name, "input", *n);
}

static int mul_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    int64_t n;
    int st = mul_dims(NULL, &g->layers[l], batch, &n);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 1;
    c->slot_bytes[0] = seq_fbytes(n);
    c->slot_name[0] = "out";
    c->bwd_needs_inputs = 3u;
    c->bwd_act_fusable_inputs = 3u; /* either factor may be read as act(pre) (mul_acc_act8), on every GEMM path */
    c->fwd_flops = (double)n;
    c->bwd_flops = 2.0 * (double)n;
    return CLREMAT_OK;
}

static int mul_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t n;
    int st = mul_dims(c->ctx, L, c->batch, &n);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "first input", c->in[0], n);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "second input", c->in[1], n);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], n);
    if (st != CLREMAT_OK)
        return st;
    return clremat_run1d(c->ctx, "mul_acc", n, SEQ_I(n), SEQ_I(0), SEQ_M(c->slot[0]), SEQ_M(c->in[0]),
                         SEQ_M(c->in[1]), SEQ_END);
}

static int mul_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t n;
    int st = mul_dims(c->ctx, L, c->batch, &n);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, n);
    for (int i = 0; i < 2 && st == CLREMAT_OK; i++) {
        if (!c->din[i])
            continue;
        if ((st = clremat_check_buf(c->ctx, L->name, i ? "second input grad" : "first input grad", c->din[i], n)) ||
            (st = clremat_check_buf(c->ctx, L->name, i ? "first input" : "second input", c->in[1 - i], n)))
            return st;
        if (c->in_act[1 - i]) /* in[1 - i] holds the pre-activation of the factor */
            st = clremat_run1d(c->ctx, "mul_acc_act8", (n + 7) / 8, SEQ_I(n), SEQ_I(c->din_accumulate[i] != 0),
                               SEQ_M(c->din[i]), SEQ_M(c->dout), SEQ_M(c->in[1 - i]), SEQ_I(c->in_act[1 - i]),
                               SEQ_END);
        else
            st = clremat_run1d(c->ctx, "mul_acc", n, SEQ_I(n), SEQ_I(c->din_accumulate[i] != 0),
                               SEQ_M(c->din[i]), SEQ_M(c->dout), SEQ_M(c->in[1 - i]), SEQ_END);
    }
    return st;
}

const clremat_layer_impl clremat_impl_multiply = {mul_cost, mul_forward, mul_backward, NULL, NULL};
