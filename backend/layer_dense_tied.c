/* layer_dense_tied.c: a dense layer whose kernel is an earlier embedding
 * layer's table, transposed (tied embeddings: "tie"): logits = x table^T,
 * with x [rows, D] and table [V, D]; no bias, no activation, no parameters
 * of its own. The executor passes the table as param[0] and its gradient
 * as grad[0]: this backward overwrites it with dout^T x, and the
 * embedding's backward, which always runs later, adds its part (the sum of
 * both uses' gradients, in a fixed order). */
#include "layer_impl.h"
#include "kernel_run.h"

/* Rows, width D and vocabulary V of tied layer l. */
static int tied_dims(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, int64_t *rows, int64_t *D,
                     int64_t *V)
{
    const clremat_layer *L = &g->layers[l];
    const clremat_layer *E = L->tie >= 1 && L->tie <= g->n_layers ? &g->layers[L->tie - 1] : NULL;
    *D = clremat_last_dim(&L->in_shape[0]);
    *V = L->units;
    *rows = *D > 0 ? batch * (clremat_elems_of(&L->in_shape[0]) / *D) : 0;
    if (!E || E->type != CLREMAT_EMBEDDING || E->vocab != *V || E->dim != *D || *D < 1 || L->n_params != 0)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "dense layer %s: tied to a layer that is not an embedding of "
                            "vocab %lld and dim %lld", L->name, (long long)*V, (long long)*D);
    return CLREMAT_OK;
}

static int tied_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    int64_t rows, D, V;
    int st = tied_dims(NULL, g, l, batch, &rows, &D, &V);
    const double mm = 2.0 * (double)rows * (double)D * (double)V;
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 1;
    c->slot_bytes[0] = (size_t)(rows * V) * sizeof(float);
    c->slot_name[0] = "out";
    c->bwd_needs_inputs = 1u;
    c->act_source = -1;
    c->fwd_flops = mm;
    c->bwd_flops = 2.0 * mm;
    c->param_bytes = 0; /* the table is the embedding's */
    return CLREMAT_OK;
}

static int tied_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, D, V;
    int st = tied_dims(c->ctx, c->g, c->layer, c->batch, &rows, &D, &V);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], rows * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "tied table", c->param[0], V * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], rows * V);
    if (st != CLREMAT_OK)
        return st;
    return clremat_gemm(c->ctx, 0, 1, rows, V, D, 1.0f, c->in[0], 0, D, 0, c->param[0], 0, D, 0, 0.0f, c->slot[0], 0,
                        V, 0, 1);
}

static int tied_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, D, V;
    int st = tied_dims(c->ctx, c->g, c->layer, c->batch, &rows, &D, &V);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, rows * V);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "tied table", c->param[0], V * D);
    if (st == CLREMAT_OK && c->grad[0])
        st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], rows * D);
    if (st == CLREMAT_OK && c->grad[0])
        st = clremat_check_buf(c->ctx, L->name, "tied table grad", c->grad[0], V * D);
    if (st == CLREMAT_OK && c->din[0])
        st = clremat_check_buf(c->ctx, L->name, "input grad", c->din[0], rows * D);
    if (st != CLREMAT_OK)
        return st;
    /* d table [V, D] = dout^T x (overwrites; the embedding adds later) */
    if (c->grad[0] && (st = clremat_gemm(c->ctx, 1, 0, V, D, rows, 1.0f, c->dout, 0, V, 0, c->in[0], 0, D, 0, 0.0f,
                                         c->grad[0], 0, D, 0, 1)) != CLREMAT_OK)
        return st;
    if (c->din[0])
        st = clremat_gemm(c->ctx, 0, 0, rows, D, V, 1.0f, c->dout, 0, V, 0, c->param[0], 0, D, 0,
                          c->din_accumulate[0] ? 1.0f : 0.0f, c->din[0], 0, D, 0, 1);
    return st;
}

const clremat_layer_impl clremat_impl_dense_tied = {tied_cost, tied_forward, tied_backward, NULL, NULL};
