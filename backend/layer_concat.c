/* layer_concat.c: concatenation of 2 .. CLREMAT_MAX_INPUTS inputs along
 * the last dimension (Keras Concatenate(axis=-1), DenseNet's dense
 * connections). Every input has the same per-sample shape but for the last
 * dimension. One slot, no workspace, nothing saved for the backward: each
 * input's gradient is its columns of dout (copied or added). */
#include "layer_seq.h"

static int concat_dims(clremat_ctx *ctx, const clremat_layer *L, int64_t batch, int64_t *rows, int64_t *Ct)
{
    const clremat_shape *a = &L->in_shape[0];
    int st;
    *Ct = 0;
    *rows = seq_rows(a, batch);
    if (L->n_inputs < 2 || L->n_inputs > CLREMAT_MAX_INPUTS || a->rank < 1)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "concat layer %s: needs 2 to %d inputs of rank >= 1", L->name,
                            CLREMAT_MAX_INPUTS);
    for (int i = 0; i < L->n_inputs; i++) {
        const clremat_shape *b = &L->in_shape[i];
        int ok = b->rank == a->rank;
        for (int k = 0; ok && k + 1 < a->rank; k++)
            ok = b->dims[k] == a->dims[k];
        if (!ok)
            return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "concat layer %s: input %d differs from input 0 in more "
                                "than the last dimension", L->name, i);
        *Ct += clremat_last_dim(b);
    }
    if (clremat_last_dim(&L->out_shape) != *Ct)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "concat layer %s: output last dimension %lld, inputs sum to %lld",
                            L->name, (long long)clremat_last_dim(&L->out_shape), (long long)*Ct);
    if ((st = seq_check_int(ctx, L->name, "output", *rows * *Ct)) != CLREMAT_OK)
        return st;
    return CLREMAT_OK;
}

static int concat_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    int64_t rows, Ct;
    int st = concat_dims(NULL, &g->layers[l], batch, &rows, &Ct);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 1;
    c->slot_bytes[0] = seq_fbytes(rows * Ct);
    c->slot_name[0] = "out";
    c->act_source = -1;
    c->fwd_flops = (double)(rows * Ct);
    c->bwd_flops = (double)(rows * Ct);
    return CLREMAT_OK;
}

static int concat_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, Ct, off = 0;
    int st = concat_dims(c->ctx, L, c->batch, &rows, &Ct);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], rows * Ct);
    for (int i = 0; i < L->n_inputs && st == CLREMAT_OK; i++) {
        const int64_t Ci = clremat_last_dim(&L->in_shape[i]);
        if ((st = clremat_check_buf(c->ctx, L->name, "input", c->in[i], rows * Ci)) == CLREMAT_OK)
            st = clremat_run1d(c->ctx, "concat_fwd", rows * Ci, SEQ_I(rows * Ci), SEQ_I(Ci), SEQ_I(Ct), SEQ_I(off),
                               SEQ_M(c->in[i]), SEQ_M(c->slot[0]), SEQ_END);
        off += Ci;
    }
    return st;
}

static int concat_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, Ct, off = 0;
    int st = concat_dims(c->ctx, L, c->batch, &rows, &Ct);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, rows * Ct);
    for (int i = 0; i < L->n_inputs && st == CLREMAT_OK; i++) {
        const int64_t Ci = clremat_last_dim(&L->in_shape[i]);
        if (c->din[i] && (st = clremat_check_buf(c->ctx, L->name, "input grad", c->din[i], rows * Ci)) == CLREMAT_OK)
            st = clremat_run1d(c->ctx, "concat_bwd", rows * Ci, SEQ_I(rows * Ci), SEQ_I(c->din_accumulate[i] != 0),
                               SEQ_I(Ci), SEQ_I(Ct), SEQ_I(off), SEQ_M(c->dout), SEQ_M(c->din[i]), SEQ_END);
        off += Ci;
    }
    return st;
}

const clremat_layer_impl clremat_impl_concat = {concat_cost, concat_forward, concat_backward, NULL, NULL};
