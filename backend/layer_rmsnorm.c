/* layer_rmsnorm.c: RMS normalization over the last dimension (Llama's
 * RMSNorm), y = scale * x * rstd with rstd = 1 / sqrt(mean(x^2) + eps).
 * Slots {out, rstd}: rstd holds one float per row so the backward needs only
 * the input and rstd. The scale gradient is a column reduction in fixed row
 * order (deterministic, no atomics). */
#include "layer_seq.h"
#include "loop_budget.h"

/* Rows and width of layer l; checks the scale matches the last dim. */
static int rms_dims(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, int64_t *rows, int64_t *D)
{
    const clremat_layer *L = &g->layers[l];
    int st;
    if (L->in_shape[0].rank < 1 || L->n_params < 1 || !(L->eps > 0.0))
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "rmsnorm %s: needs a rank >= 1 input, eps > 0 and a scale",
                            L->name);
    *D = clremat_last_dim(&L->in_shape[0]);
    if (*D < 1)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "rmsnorm %s: empty last dimension", L->name);
    *rows = seq_rows(&L->in_shape[0], batch);
    if (L->params[0].elems != *D)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "rmsnorm %s: scale has %lld elements, last dim is %lld",
                            L->name, (long long)L->params[0].elems, (long long)*D);
    if ((st = seq_check_int(ctx, L->name, "input", *rows * *D)) != CLREMAT_OK)
        return st;
    return seq_check_int(ctx, L->name, "rstd", *rows);
}

static int rms_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    int64_t rows, D;
    int st = rms_dims(NULL, g, l, batch, &rows, &D);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 2;
    c->slot_bytes[0] = seq_fbytes(rows * D);
    c->slot_name[0] = "out";
    c->slot_bytes[1] = seq_fbytes(rows);
    c->slot_name[1] = "rstd";
    c->bwd_needs_inputs = 1u;
    c->bwd_needs_slots = 1u << 1;
    /* square sum, normalize + scale */
    c->fwd_flops = 4.0 * (double)rows * (double)D;
    /* one row dot product and dx, plus the scale column sums */
    c->bwd_flops = 9.0 * (double)rows * (double)D;
    c->param_bytes = seq_param_bytes(&g->layers[l]);
    return CLREMAT_OK;
}

static int rms_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, D;
    int st = rms_dims(c->ctx, c->g, c->layer, c->batch, &rows, &D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], rows * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "scale", c->param[0], D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], rows * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "rstd", c->slot[1], rows);
    if (st != CLREMAT_OK)
        return st;
    return clremat_run1d(c->ctx, "rms_forward", rows, SEQ_I(rows), SEQ_I(D), SEQ_F(L->eps), SEQ_M(c->in[0]),
                         SEQ_M(c->param[0]), SEQ_M(c->slot[0]), SEQ_M(c->slot[1]), SEQ_END);
}

static int rms_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, D;
    int st = rms_dims(c->ctx, c->g, c->layer, c->batch, &rows, &D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], rows * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "rstd", c->slot[1], rows);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, rows * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "scale", c->param[0], D);
    if (st == CLREMAT_OK && c->din[0])
        st = clremat_check_buf(c->ctx, L->name, "din", c->din[0], rows * D);
    if (st == CLREMAT_OK && c->grad[0])
        st = clremat_check_buf(c->ctx, L->name, "grad scale", c->grad[0], D);
    if (st != CLREMAT_OK)
        return st;
    if (c->grad[0]) { /* rows [r0, r1) a launch: all, or as many as a loop budget allows, each continuing */
        const int64_t chunk = clremat_loop_chunk(c->ctx, 1, 1, rows);
        for (int64_t r0 = 0, r1 = -1; clremat_loop_next(rows, chunk, &r0, &r1);) {
            if ((st = clremat_run1d(c->ctx, "rms_backward_scale", D, SEQ_I(r1), SEQ_I(D), SEQ_M(c->in[0]),
                                    SEQ_M(c->slot[1]), SEQ_M(c->dout), SEQ_M(c->grad[0]), SEQ_I(r0), SEQ_END)))
                return st;
        }
    }
    if (!c->din[0])
        return CLREMAT_OK;
    return clremat_run1d(c->ctx, "rms_backward_dx", rows, SEQ_I(rows), SEQ_I(D), SEQ_I(c->din_accumulate[0] != 0),
                         SEQ_M(c->in[0]), SEQ_M(c->slot[1]), SEQ_M(c->param[0]), SEQ_M(c->dout),
                         SEQ_M(c->din[0]), SEQ_END);
}

const clremat_layer_impl clremat_impl_rmsnorm = {rms_cost, rms_forward, rms_backward, NULL, NULL};
