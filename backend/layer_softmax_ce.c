/* layer_softmax_ce.c: softmax cross-entropy loss over the last dimension of
 * the logits against class ids (one float per row holding an exact integer).
 * Slot 0 = {mean loss over all rows, number of rows whose argmax (lowest index
 * on ties) equals the label}. Per-row losses go to a workspace of 2*rows
 * floats and are summed in row order by one work-item (deterministic).
 * Backward: din = (softmax(logits) - onehot(label)) / rows; dout is ignored.
 * A label outside [0, C) (or NaN) is CLAMPED in the kernels to the nearest
 * class (NaN and negatives to 0): ids are validated by the data layer.
 * Under a mixed policy 16-bit logits are read and the 16-bit din written
 * directly (ce_forward_rows16, ce_backward16: the float32 kernels' floats,
 * din times the loss scale rounded once, as the staged conversion does). */
#include "layer_seq.h"
#include "mixed_precision.h"

static int ce_dims(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, int64_t *rows, int64_t *C)
{
    const clremat_layer *L = &g->layers[l];
    if (L->in_shape[0].rank < 1 || clremat_last_dim(&L->in_shape[0]) < 1)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "softmax_ce %s: logits need a last dimension of classes",
                            L->name);
    *C = clremat_last_dim(&L->in_shape[0]);
    *rows = seq_rows(&L->in_shape[0], batch);
    if (seq_check_int(ctx, L->name, "logits", *rows * *C) != CLREMAT_OK)
        return CLREMAT_ERR_TOO_LARGE;
    return seq_check_int(ctx, L->name, "loss workspace", *rows * 2);
}

/* The loss's divisor: the rows, or those of the step's batch when this call
 * is a micro-batch of gradient accumulation. */
static float ce_divisor(const clremat_layer_call *c, int64_t rows)
{
    if (c->loss_batch_div > 0)
        return (float)(rows / c->batch * c->loss_batch_div);
    return (float)rows;
}

static int ce_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    int64_t rows, C;
    int st = ce_dims(NULL, g, l, batch, &rows, &C);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 1;
    c->slot_bytes[0] = 2 * sizeof(float);
    c->slot_name[0] = "out";
    c->bwd_needs_inputs = 1u;
    c->bwd_needs_slots = 0;
    c->fwd_temp_bytes = seq_fbytes(2 * rows);
    c->bwd_temp_bytes = 0;
    /* max, exp, sum, log per class; then the row sums */
    c->fwd_flops = 4.0 * (double)rows * (double)C + 2.0 * (double)rows;
    c->bwd_flops = 5.0 * (double)rows * (double)C;
    c->param_bytes = 0;
    return CLREMAT_OK;
}

/* The forward on logits of format fmt. */
static int ce_forward_fmt(clremat_layer_call *c, int fmt)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, C;
    int st = ce_dims(c->ctx, c->g, c->layer, c->batch, &rows, &C);
    if (st == CLREMAT_OK)
        st = clremat_check_buf_fmt(c->ctx, L->name, "logits", c->in[0], rows * C, fmt);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "labels", c->labels, rows);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], 2);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "forward workspace", c->temp, 2 * rows);
    if (st == CLREMAT_OK && fmt)
        st = clremat_run1d(c->ctx, "ce_forward_rows16", rows, SEQ_I(rows), SEQ_I(C), SEQ_I(fmt), SEQ_M(c->in[0]),
                           SEQ_M(c->labels), SEQ_M(c->temp), SEQ_END);
    else if (st == CLREMAT_OK)
        st = clremat_run1d(c->ctx, "ce_forward_rows", rows, SEQ_I(rows), SEQ_I(C), SEQ_M(c->in[0]),
                           SEQ_M(c->labels), SEQ_M(c->temp), SEQ_END);
    if (st == CLREMAT_OK)
        st = seq_loss_finish(c->ctx, rows, 1, ce_divisor(c, rows), c->temp, c->slot[0]);
    return st;
}

static int ce_forward(clremat_layer_call *c) { return ce_forward_fmt(c, CLREMAT_FMT_F32); }

/* The backward on logits and din of format fmt, din times scale. */
static int ce_backward_fmt(clremat_layer_call *c, int fmt, float scale)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, C;
    int st = ce_dims(c->ctx, c->g, c->layer, c->batch, &rows, &C);
    if (st != CLREMAT_OK || !c->din[0])
        return st;
    if ((st = clremat_check_buf_fmt(c->ctx, L->name, "logits", c->in[0], rows * C, fmt)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "labels", c->labels, rows)) != CLREMAT_OK ||
        (st = clremat_check_buf_fmt(c->ctx, L->name, "din", c->din[0], rows * C, fmt)) != CLREMAT_OK)
        return st;
    if (fmt)
        return clremat_run1d(c->ctx, "ce_backward16", rows, SEQ_I(rows), SEQ_I(C), SEQ_I(c->din_accumulate[0] != 0),
                             SEQ_I(fmt), SEQ_M(c->in[0]), SEQ_M(c->labels), SEQ_M(c->din[0]),
                             SEQ_F(ce_divisor(c, rows)), SEQ_F(scale), SEQ_END);
    return clremat_run1d(c->ctx, "ce_backward", rows, SEQ_I(rows), SEQ_I(C), SEQ_I(c->din_accumulate[0] != 0),
                         SEQ_M(c->in[0]), SEQ_M(c->labels), SEQ_M(c->din[0]), SEQ_F(ce_divisor(c, rows)), SEQ_END);
}

static int ce_backward(clremat_layer_call *c) { return ce_backward_fmt(c, CLREMAT_FMT_F32, 1.0f); }

const clremat_layer_impl clremat_impl_softmax_ce = {ce_cost, ce_forward, ce_backward, NULL, NULL};

/* ---- under a mixed policy: 16-bit logits and din (the input's format:
 * a layer's output, 16-bit; the loss's own slot stays float32) */

static int ce16_fuses(const clremat_graph *g, int l)
{
    return clremat_mixed_input16(g, l, 0);
}

static int ce16_check(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    if (!(cost->in16 & 1u) || cost->slot16)
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "softmax_ce %s: the 16-bit launch expects 16-bit logits "
                            "and a float32 loss", c->g->layers[c->layer].name);
    return CLREMAT_OK;
}

static int ce16_forward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    const int st = ce16_check(c, cost);
    return st == CLREMAT_OK ? ce_forward_fmt(c, clremat_mixed_fmt(c->g)) : st;
}

static int ce16_backward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    const int st = ce16_check(c, cost);
    return st == CLREMAT_OK ? ce_backward_fmt(c, clremat_mixed_fmt(c->g), c->loss_scale > 0.0f ? c->loss_scale : 1.0f)
                            : st;
}

const clremat_layer_impl16 clremat_impl16_softmax_ce = {ce16_fuses, clremat_mixed_no_buffers, ce16_forward,
                                                        ce16_backward};
