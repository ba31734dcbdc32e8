/* layer_pool.c: the window and padding layers of convolutional networks
 * (NHWC): max_pool2d and avg_pool2d (Keras "valid"/"same"; average pooling
 * divides by the real inputs of each window, max pooling ignores the
 * padding), global_avg_pool2d ([H, W, C] -> [C]) and zero_pad2d. One slot
 * each, no workspace, no parameters. Max pooling's backward routes each
 * window's gradient to its first maximum in scan order and so reads the
 * saved input; the others need nothing saved. */
#include "layer_seq.h"
#include "conv_geom.h"
#include <string.h>

/* Sizes: input and output elements at the batch; geometry for the pools. */
static int pool_dims(clremat_ctx *ctx, const clremat_layer *L, int64_t batch, clremat_conv_geom *geo, int64_t *nin,
                     int64_t *nout)
{
    char why[256];
    int st;
    memset(geo, 0, sizeof *geo);
    if (L->in_shape[0].rank != 3)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "%s layer %s: input has rank %d, needs [H, W, C]",
                            clremat_layer_type_name(L->type), L->name, L->in_shape[0].rank);
    if ((L->type == CLREMAT_MAX_POOL2D || L->type == CLREMAT_AVG_POOL2D) &&
        clremat_conv_geom_of(L, geo, why, sizeof why))
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "%s layer %s: %s", clremat_layer_type_name(L->type), L->name,
                            why);
    *nin = batch * clremat_elems_of(&L->in_shape[0]);
    *nout = batch * clremat_elems_of(&L->out_shape);
    if ((st = seq_check_int(ctx, L->name, "input", *nin)) != CLREMAT_OK ||
        (st = seq_check_int(ctx, L->name, "output", *nout)) != CLREMAT_OK)
        return st;
    return CLREMAT_OK;
}

static int pool_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const clremat_layer *L = &g->layers[l];
    clremat_conv_geom geo;
    int64_t nin, nout;
    int st = pool_dims(NULL, L, batch, &geo, &nin, &nout);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 1;
    c->slot_bytes[0] = seq_fbytes(nout);
    c->slot_name[0] = "out";
    c->act_source = -1;
    c->bwd_needs_inputs = L->type == CLREMAT_MAX_POOL2D ? 1u : 0u;
    switch (L->type) {
    case CLREMAT_MAX_POOL2D:
    case CLREMAT_AVG_POOL2D:
        c->fwd_flops = (double)nout * L->ksize[0] * L->ksize[1];
        c->bwd_flops = (double)nin * L->ksize[0] * L->ksize[1] *
                       (L->type == CLREMAT_MAX_POOL2D ? L->ksize[0] * L->ksize[1] : 1);
        break;
    case CLREMAT_GLOBAL_AVG_POOL2D:
        c->fwd_flops = (double)nin;
        c->bwd_flops = (double)nin;
        break;
    default:
        c->fwd_flops = (double)nout;
        c->bwd_flops = (double)nin;
        break;
    }
    return CLREMAT_OK;
}

static int pool_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const clremat_shape *is = &L->in_shape[0], *os = &L->out_shape;
    clremat_conv_geom geo;
    int64_t nin, nout;
    int st = pool_dims(c->ctx, L, c->batch, &geo, &nin, &nout);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], nin);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], nout);
    if (st != CLREMAT_OK)
        return st;
    switch (L->type) {
    case CLREMAT_MAX_POOL2D:
    case CLREMAT_AVG_POOL2D:
        return clremat_run1d(c->ctx, "pool2d_fwd", nout, SEQ_I(nout), SEQ_I(L->type == CLREMAT_AVG_POOL2D),
                             SEQ_I(geo.h.in), SEQ_I(geo.w.in), SEQ_I(geo.cin), SEQ_I(geo.h.out), SEQ_I(geo.w.out),
                             SEQ_I(L->ksize[0]), SEQ_I(L->ksize[1]), SEQ_I(geo.h.stride), SEQ_I(geo.w.stride),
                             SEQ_I(geo.h.pad_before), SEQ_I(geo.w.pad_before), SEQ_M(c->in[0]), SEQ_M(c->slot[0]),
                             SEQ_END);
    case CLREMAT_GLOBAL_AVG_POOL2D:
        return clremat_run1d(c->ctx, "gap_fwd", nout, SEQ_I(nout), SEQ_I(is->dims[0] * is->dims[1]),
                             SEQ_I(is->dims[2]), SEQ_M(c->in[0]), SEQ_M(c->slot[0]), SEQ_END);
    default:
        return clremat_run1d(c->ctx, "zpad_fwd", nout, SEQ_I(nout), SEQ_I(is->dims[0]), SEQ_I(is->dims[1]),
                             SEQ_I(is->dims[2]), SEQ_I(os->dims[0]), SEQ_I(os->dims[1]), SEQ_I(L->zpad[0]),
                             SEQ_I(L->zpad[2]), SEQ_M(c->in[0]), SEQ_M(c->slot[0]), SEQ_END);
    }
}

static int pool_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const clremat_shape *is = &L->in_shape[0], *os = &L->out_shape;
    clremat_conv_geom geo;
    int64_t nin, nout;
    const int acc = c->din_accumulate[0] != 0;
    int st = pool_dims(c->ctx, L, c->batch, &geo, &nin, &nout);
    if (st != CLREMAT_OK || !c->din[0])
        return st;
    if ((st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, nout)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "input grad", c->din[0], nin)) != CLREMAT_OK ||
        (L->type == CLREMAT_MAX_POOL2D && (st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], nin))))
        return st;
    switch (L->type) {
    case CLREMAT_MAX_POOL2D:
    case CLREMAT_AVG_POOL2D:
        return clremat_run1d(c->ctx, "pool2d_bwd", nin, SEQ_I(nin), SEQ_I(L->type == CLREMAT_AVG_POOL2D), SEQ_I(acc),
                             SEQ_I(geo.h.in), SEQ_I(geo.w.in), SEQ_I(geo.cin), SEQ_I(geo.h.out), SEQ_I(geo.w.out),
                             SEQ_I(L->ksize[0]), SEQ_I(L->ksize[1]), SEQ_I(geo.h.stride), SEQ_I(geo.w.stride),
                             SEQ_I(geo.h.pad_before), SEQ_I(geo.w.pad_before),
                             SEQ_M(L->type == CLREMAT_MAX_POOL2D ? c->in[0] : c->dout), SEQ_M(c->dout),
                             SEQ_M(c->din[0]), SEQ_END);
    case CLREMAT_GLOBAL_AVG_POOL2D:
        return clremat_run1d(c->ctx, "gap_bwd", nin, SEQ_I(nin), SEQ_I(acc), SEQ_I(is->dims[0] * is->dims[1]),
                             SEQ_I(is->dims[2]), SEQ_M(c->dout), SEQ_M(c->din[0]), SEQ_END);
    default:
        return clremat_run1d(c->ctx, "zpad_bwd", nin, SEQ_I(nin), SEQ_I(acc), SEQ_I(is->dims[0]), SEQ_I(is->dims[1]),
                             SEQ_I(is->dims[2]), SEQ_I(os->dims[0]), SEQ_I(os->dims[1]), SEQ_I(L->zpad[0]),
                             SEQ_I(L->zpad[2]), SEQ_M(c->dout), SEQ_M(c->din[0]), SEQ_END);
    }
}

const clremat_layer_impl clremat_impl_pool = {pool_cost, pool_forward, pool_backward, NULL, NULL};
