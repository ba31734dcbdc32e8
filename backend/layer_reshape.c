/* layer_reshape.c: reshape (and flatten): the same floats under a new
 * per-sample shape. Forward copies x into the output slot; backward copies
 * (or adds) dout into din. */
#include "layer_impl.h"
#include "kernel_run.h"

static int64_t reshape_elems(const clremat_layer *L, int64_t batch)
{
    return batch * clremat_elems_of(&L->in_shape[0]);
}

static int reshape_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const clremat_layer *L = &g->layers[l];
    const int64_t n = reshape_elems(L, batch);
    if (clremat_elems_of(&L->out_shape) != clremat_elems_of(&L->in_shape[0]))
        return clremat_set_error(CLREMAT_ERR_SHAPE, "reshape layer %s: %lld elements in, %lld out", L->name,
                                 (long long)clremat_elems_of(&L->in_shape[0]),
                                 (long long)clremat_elems_of(&L->out_shape));
    c->n_slots = 1;
    c->slot_bytes[0] = (size_t)n * sizeof(float);
    c->slot_name[0] = "out";
    c->act_source = -1;
    c->fwd_flops = (double)n;
    c->bwd_flops = (double)n;
    return CLREMAT_OK;
}

/* dst (=, or += when acc) src over the layer's n floats. */
static int reshape_copy(clremat_layer_call *c, const clremat_buf *src, clremat_buf *dst, int acc)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int64_t n = reshape_elems(L, c->batch);
    cl_int in = (cl_int)n, iacc = acc ? 1 : 0;
    cl_mem ms, md;
    int st;
    if ((st = clremat_check_buf(c->ctx, L->name, "source", src, n)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "destination", dst, n)) != CLREMAT_OK)
        return st;
    ms = clremat_mem(src);
    md = clremat_mem(dst);
    return clremat_run1d(c->ctx, "clremat_copy_acc", n, sizeof in, &in, sizeof iacc, &iacc, sizeof md, &md,
                         sizeof ms, &ms, (size_t)0);
}

static int reshape_forward(clremat_layer_call *c)
{
    return reshape_copy(c, c->in[0], c->slot[0], 0);
}

static int reshape_backward(clremat_layer_call *c)
{
    if (!c->din[0])
        return CLREMAT_OK;
    return reshape_copy(c, c->dout, c->din[0], c->din_accumulate[0]);
}

const clremat_layer_impl clremat_impl_reshape = {reshape_cost, reshape_forward, reshape_backward, NULL, NULL};
