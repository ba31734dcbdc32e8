/* layer_embedding.c: token embedding, out[tok] = table[id[tok]] (+
 * pos_table[t] with t the token's position along the last input dimension
 * when the layer has positions). Ids arrive as floats holding exact
 * integers; an id outside [0, vocab) (or NaN) is CLAMPED in the kernels to
 * the nearest valid row (NaN and negatives to 0), never read out of bounds:
 * the data layer is what validates ids. Ids have no gradient: din[0] is
 * ignored except that a non-NULL overwrite din is zeroed. The table gradient
 * is deterministic: one work-item per vocabulary row scans every token in
 * order (no atomics).
 * Under a mixed policy the output and its gradient are 16-bit and the
 * kernels' 16-bit forms store and load them directly (emb_forward16,
 * emb_backward_*16: the same float32 sums, rounded once), no staging. */
#include "layer_seq.h"
#include "layer_impl.h"
#include "mixed_precision.h"
#include "loop_budget.h"

/* Tokens, width, vocabulary and positions (T) of layer l. */
static int emb_dims(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, int64_t *ntok,
                    int64_t *dim, int64_t *vocab, int64_t *T)
{
    const clremat_layer *L = &g->layers[l];
    int st;
    if (L->in_shape[0].rank < 1 || L->n_params < (L->positions ? 2 : 1) || L->vocab <= 0 || L->dim <= 0)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "embedding %s: needs ids of rank >= 1, vocab, dim and "
                            "its table%s", L->name, L->positions ? " and pos_table" : "");
    *ntok = batch * clremat_elems_of(&L->in_shape[0]);
    *dim = L->dim;
    *vocab = L->vocab;
    *T = clremat_last_dim(&L->in_shape[0]);
    if (*T < 1)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "embedding %s: empty id sequence", L->name);
    if (L->params[0].elems != L->vocab * L->dim)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "embedding %s: table has %lld elements, vocab x dim = %lld",
                            L->name, (long long)L->params[0].elems, (long long)(L->vocab * L->dim));
    if (L->positions && L->params[1].elems != *T * L->dim)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "embedding %s: pos_table has %lld elements, T x dim = %lld",
                            L->name, (long long)L->params[1].elems, (long long)(*T * L->dim));
    if ((st = seq_check_int(ctx, L->name, "output", *ntok * *dim)) != CLREMAT_OK)
        return st;
    return seq_check_int(ctx, L->name, "table", *vocab * *dim);
}

static int emb_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    int64_t ntok, dim, vocab, T;
    int st = emb_dims(NULL, g, l, batch, &ntok, &dim, &vocab, &T);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 1;
    c->slot_bytes[0] = seq_fbytes(ntok * dim);
    c->slot_name[0] = "out";
    c->bwd_needs_inputs = 1u;
    c->bwd_needs_slots = 0;
    c->fwd_flops = g->layers[l].positions ? (double)ntok * (double)dim : 0.0;
    /* table: one add per token element (plus a compare per (row, token));
     * positions: one add per token element */
    c->bwd_flops = (double)ntok * (double)dim * (g->layers[l].positions ? 2.0 : 1.0) +
                   (double)vocab * (double)ntok;
    c->param_bytes = seq_param_bytes(&g->layers[l]);
    return CLREMAT_OK;
}

/* The forward with the output in format fmt. */
static int emb_forward_fmt(clremat_layer_call *c, int fmt)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t ntok, dim, vocab, T;
    int st = emb_dims(c->ctx, c->g, c->layer, c->batch, &ntok, &dim, &vocab, &T);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "ids", c->in[0], ntok);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "table", c->param[0], vocab * dim);
    if (st == CLREMAT_OK && L->positions)
        st = clremat_check_buf(c->ctx, L->name, "pos_table", c->param[1], T * dim);
    if (st == CLREMAT_OK)
        st = clremat_check_buf_fmt(c->ctx, L->name, "out", c->slot[0], ntok * dim, fmt);
    if (st != CLREMAT_OK)
        return st;
    if (fmt)
        return clremat_run1d(c->ctx, "emb_forward16", (ntok * dim + 7) / 8, SEQ_I(ntok), SEQ_I(dim), SEQ_I(vocab),
                             SEQ_I(T), SEQ_I(L->positions != 0), SEQ_M(c->in[0]), SEQ_M(c->param[0]),
                             SEQ_M(L->positions ? c->param[1] : c->param[0]), SEQ_I(fmt), SEQ_M(c->slot[0]), SEQ_END);
    return clremat_run1d(c->ctx, "emb_forward", ntok * dim, SEQ_I(ntok), SEQ_I(dim), SEQ_I(vocab), SEQ_I(T),
                         SEQ_I(L->positions != 0), SEQ_M(c->in[0]), SEQ_M(c->param[0]),
                         SEQ_M(L->positions ? c->param[1] : c->param[0]), SEQ_M(c->slot[0]), SEQ_END);
}

static int emb_forward(clremat_layer_call *c) { return emb_forward_fmt(c, CLREMAT_FMT_F32); }

/* The table's gradient from the ntok tokens' rows of dout (format fmt),
 * in token order: one launch, or on a device with a loop budget as many
 * launches over consecutive token ranges as keep each work-item within it
 * (each later range adds to the same floats in the same order: the same
 * bits as one launch). */
static int emb_backward_table(clremat_layer_call *c, int64_t ntok, int64_t dim, int64_t vocab, int fmt)
{
    const int64_t per = fmt ? dim / 8 + dim % 8 + 1 : dim + 1;
    const int64_t chunk = clremat_loop_chunk(c->ctx, dim + 2, per, ntok);
    int st = CLREMAT_OK;
    for (int64_t t0 = 0, t1 = -1; st == CLREMAT_OK && clremat_loop_next(ntok, chunk, &t0, &t1);) {
        const int acc = t0 > 0 || c->grad_accumulate[0] != 0;
        if (fmt)
            st = clremat_run1d(c->ctx, "emb_backward_table16", vocab, SEQ_I(t1), SEQ_I(dim), SEQ_I(vocab),
                               SEQ_I(acc), SEQ_M(c->in[0]), SEQ_I(fmt), SEQ_M(c->dout), SEQ_M(c->grad[0]),
                               SEQ_I(t0), SEQ_END);
        else
            st = clremat_run1d(c->ctx, acc ? "emb_backward_table_acc" : "emb_backward_table", vocab, SEQ_I(t1),
                               SEQ_I(dim), SEQ_I(vocab), SEQ_M(c->in[0]), SEQ_M(c->dout), SEQ_M(c->grad[0]),
                               SEQ_I(t0), SEQ_END);
    }
    return st;
}

/* The backward with dout in format fmt. */
static int emb_backward_fmt(clremat_layer_call *c, int fmt)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t ntok, dim, vocab, T;
    int st = emb_dims(c->ctx, c->g, c->layer, c->batch, &ntok, &dim, &vocab, &T);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "ids", c->in[0], ntok);
    if (st == CLREMAT_OK)
        st = clremat_check_buf_fmt(c->ctx, L->name, "dout", c->dout, ntok * dim, fmt);
    if (st != CLREMAT_OK)
        return st;
    if (c->grad[0]) {
        if ((st = clremat_check_buf(c->ctx, L->name, "grad table", c->grad[0], vocab * dim)) != CLREMAT_OK)
            return st;
        /* grad_accumulate: a tied output projection wrote its part first */
        if ((st = emb_backward_table(c, ntok, dim, vocab, fmt)) != CLREMAT_OK)
            return st;
    }
    if (L->positions && c->grad[1]) {
        if ((st = clremat_check_buf(c->ctx, L->name, "grad pos_table", c->grad[1], T * dim)) != CLREMAT_OK)
            return st;
        if (fmt)
            st = clremat_run1d(c->ctx, "emb_backward_pos16", T * dim, SEQ_I(ntok / T), SEQ_I(T), SEQ_I(dim),
                               SEQ_I(fmt), SEQ_M(c->dout), SEQ_M(c->grad[1]), SEQ_END);
        else
            st = clremat_run1d(c->ctx, "emb_backward_pos", T * dim, SEQ_I(ntok / T), SEQ_I(T), SEQ_I(dim),
                               SEQ_M(c->dout), SEQ_M(c->grad[1]), SEQ_END);
        if (st != CLREMAT_OK)
            return st;
    }
    /* token ids have no gradient */
    if (c->din[0] && !c->din_accumulate[0])
        return clremat_zero(c->ctx, c->din[0]);
    return CLREMAT_OK;
}

static int emb_backward(clremat_layer_call *c) { return emb_backward_fmt(c, CLREMAT_FMT_F32); }

const clremat_layer_impl clremat_impl_embedding = {emb_cost, emb_forward, emb_backward, NULL, NULL};

/* ---- under a mixed policy: the 16-bit output and gradient, no float32 buffers */

/* Fused when the ids are float32 (the model's input; ids from another
 * layer arrive 16-bit and stage). */
static int emb16_fuses(const clremat_graph *g, int l)
{
    return !clremat_mixed_input16(g, l, 0);
}

/* The output is 16-bit (every non-loss layer's is under a mixed policy)
 * and the ids float32 (emb16_fuses). */
static int emb16_check(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    if (cost->slot16 != 1u || cost->in16)
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "embedding %s: the 16-bit launch expects a 16-bit output "
                            "and float32 ids", c->g->layers[c->layer].name);
    return CLREMAT_OK;
}

static int emb16_forward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    int st = emb16_check(c, cost);
    return st == CLREMAT_OK ? emb_forward_fmt(c, clremat_mixed_fmt(c->g)) : st;
}

static int emb16_backward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    int st = emb16_check(c, cost);
    return st == CLREMAT_OK ? emb_backward_fmt(c, clremat_mixed_fmt(c->g)) : st;
}

const clremat_layer_impl16 clremat_impl16_embedding = {emb16_fuses, clremat_mixed_no_buffers, emb16_forward, emb16_backward};
