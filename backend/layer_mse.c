/* layer_mse.c: mean squared error between the prediction (input 0) and the
 * targets (labels buffer, same number of elements). Slot 0 = {mean over all
 * elements of (p - y)^2, 0}. Partial sums of fixed 256-element chunks go to a
 * workspace and are summed in chunk order by one work-item (deterministic).
 * Backward: din = 2 (p - y) / elems; dout is ignored. */
#include "layer_seq.h"

#define MSE_CHUNK 256   /* elements per partial sum (fixed: part of the summation order) */

static int mse_dims(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, int64_t *n)
{
    const clremat_layer *L = &g->layers[l];
    *n = batch * clremat_elems_of(&L->in_shape[0]);
    if (*n < 1)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "mse %s: empty prediction", L->name);
    return seq_check_int(ctx, L->name, "prediction", *n);
}

/* The loss's divisor: n elements, or those of the step's batch when this
 * call is a micro-batch of gradient accumulation. */
static float mse_divisor(const clremat_layer_call *c, int64_t n)
{
    if (c->loss_batch_div > 0)
        return (float)(n / c->batch * c->loss_batch_div);
    return (float)n;
}

static int64_t mse_chunks(int64_t n) { return (n + MSE_CHUNK - 1) / MSE_CHUNK; }

static int mse_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    int64_t n;
    int st = mse_dims(NULL, g, l, batch, &n);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 1;
    c->slot_bytes[0] = 2 * sizeof(float);
    c->slot_name[0] = "out";
    c->bwd_needs_inputs = 1u;
    c->bwd_needs_slots = 0;
    c->fwd_temp_bytes = seq_fbytes(mse_chunks(n));
    c->bwd_temp_bytes = 0;
    c->fwd_flops = 3.0 * (double)n;
    c->bwd_flops = 3.0 * (double)n;
    c->param_bytes = 0;
    return CLREMAT_OK;
}

static int mse_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t n, parts;
    int st = mse_dims(c->ctx, c->g, c->layer, c->batch, &n);
    parts = mse_chunks(n);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "prediction", c->in[0], n);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "targets", c->labels, n);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], 2);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "forward workspace", c->temp, parts);
    if (st == CLREMAT_OK)
        st = clremat_run1d(c->ctx, "mse_partial", parts, SEQ_I(n), SEQ_I(MSE_CHUNK), SEQ_M(c->in[0]),
                           SEQ_M(c->labels), SEQ_M(c->temp), SEQ_END);
    if (st == CLREMAT_OK)
        st = seq_loss_finish(c->ctx, parts, 0, mse_divisor(c, n), c->temp, c->slot[0]);
    return st;
}

static int mse_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t n;
    int st = mse_dims(c->ctx, c->g, c->layer, c->batch, &n);
    if (st != CLREMAT_OK || !c->din[0])
        return st;
    if ((st = clremat_check_buf(c->ctx, L->name, "prediction", c->in[0], n)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "targets", c->labels, n)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "din", c->din[0], n)) != CLREMAT_OK)
        return st;
    return clremat_run1d(c->ctx, "mse_backward", n, SEQ_I(n), SEQ_I(c->din_accumulate[0] != 0), SEQ_M(c->in[0]),
                         SEQ_M(c->labels), SEQ_M(c->din[0]), SEQ_F(mse_divisor(c, n)), SEQ_END);
}

const clremat_layer_impl clremat_impl_mse = {mse_cost, mse_forward, mse_backward, NULL, NULL};
