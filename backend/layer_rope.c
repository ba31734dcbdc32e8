/* layer_rope.c: rotary position embedding as its own layer over x [T, D]:
 * every chunk of head_dim columns (default D) is rotated pairwise, columns
 * i and i + head_dim/2 by the angle t * theta^(-2i/head_dim) at position t
 * (Llama's half-split rotate_half convention). No parameters and nothing
 * saved: the backward rotates dout back by the same angles. Also holds the
 * launcher attention uses for RoPE on q and k (layer_rope.h). */
#include "layer_seq.h"
#include "layer_rope.h"

int clremat_rope_run(clremat_ctx *ctx, int64_t rows, int64_t T, int64_t nh, int64_t dh, double theta, int inverse,
                     int acc, const clremat_buf *src, int64_t off_src, int64_t ld_src, clremat_buf *dst,
                     int64_t off_dst, int64_t ld_dst)
{
    int64_t n = rows * nh * (dh / 2);
    return clremat_run1d(ctx, "rope_apply", n, SEQ_I(n), SEQ_I(T), SEQ_I(nh), SEQ_I(dh), SEQ_F(theta),
                         SEQ_F(inverse ? -1.0 : 1.0), SEQ_I(acc != 0), SEQ_I(ld_src), SEQ_I(off_src), SEQ_M(src),
                         SEQ_I(ld_dst), SEQ_I(off_dst), SEQ_M(dst), SEQ_END);
}

/* Rows, positions, width and chunk width of rope layer l. */
static int rope_dims(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, int64_t *rows, int64_t *T,
                     int64_t *D, int64_t *hd)
{
    const clremat_layer *L = &g->layers[l];
    const clremat_shape *s = &L->in_shape[0];
    if (s->rank != 2 || s->dims[0] < 1 || s->dims[1] < 1)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "rope %s: needs an input [T, D]", L->name);
    *T = s->dims[0];
    *D = s->dims[1];
    *hd = L->head_dim > 0 ? L->head_dim : *D;
    if (*hd % 2 || *D % *hd || !(L->rope_theta > 0.0))
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "rope %s: width %lld is not a multiple of an even head_dim "
                            "%lld, or theta %g is not positive", L->name, (long long)*D, (long long)*hd,
                            L->rope_theta);
    *rows = seq_rows(s, batch);
    return seq_check_int(ctx, L->name, "input", *rows * *D);
}

static int rope_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    int64_t rows, T, D, hd;
    int st = rope_dims(NULL, g, l, batch, &rows, &T, &D, &hd);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 1;
    c->slot_bytes[0] = seq_fbytes(rows * D);
    c->slot_name[0] = "out";
    /* per pair: angle (pow, multiply), cos, sin, 4 multiplies, 2 adds */
    c->fwd_flops = 5.0 * (double)rows * (double)D;
    c->bwd_flops = 5.0 * (double)rows * (double)D;
    return CLREMAT_OK;
}

static int rope_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, T, D, hd;
    int st = rope_dims(c->ctx, c->g, c->layer, c->batch, &rows, &T, &D, &hd);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], rows * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], rows * D);
    if (st != CLREMAT_OK)
        return st;
    return clremat_rope_run(c->ctx, rows, T, D / hd, hd, L->rope_theta, 0, 0, c->in[0], 0, D, c->slot[0], 0, D);
}

static int rope_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, T, D, hd;
    int st = rope_dims(c->ctx, c->g, c->layer, c->batch, &rows, &T, &D, &hd);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, rows * D);
    if (st != CLREMAT_OK || !c->din[0])
        return st;
    if ((st = clremat_check_buf(c->ctx, L->name, "din", c->din[0], rows * D)) != CLREMAT_OK)
        return st;
    return clremat_rope_run(c->ctx, rows, T, D / hd, hd, L->rope_theta, 1, c->din_accumulate[0], c->dout, 0, D,
                            c->din[0], 0, D);
}

const clremat_layer_impl clremat_impl_rope = {rope_cost, rope_forward, rope_backward, NULL, NULL};
