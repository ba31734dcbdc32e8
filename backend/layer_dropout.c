/* layer_dropout.c: dropout with a counter-based mask: element i of the batch
 * tensor is kept when clremat_uniform(clremat_hash(seed, step, layer, i)) >=
 * rate (compared in float), and scaled by 1 / (1 - rate). The backward
 * regenerates the same mask from the hash, so nothing is saved and a
 * recomputed forward reproduces the mask exactly. rate 0 is a copy. */
#include "layer_impl.h"
#include "kernel_run.h"

static int64_t drop_elems(const clremat_layer *L, int64_t batch)
{
    return batch * clremat_elems_of(&L->in_shape[0]);
}

static int drop_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const clremat_layer *L = &g->layers[l];
    const int64_t n = drop_elems(L, batch);
    if (!(L->rate >= 0.0 && L->rate < 1.0))
        return clremat_set_error(CLREMAT_ERR_SHAPE, "dropout layer %s: rate %g is not in [0, 1)", L->name, L->rate);
    c->n_slots = 1;
    c->slot_bytes[0] = (size_t)n * sizeof(float);
    c->slot_name[0] = "out";
    c->bwd_needs_inputs = 0;
    c->bwd_needs_slots = 0;
    c->act_source = -1;
    c->fwd_flops = (double)n;
    c->bwd_flops = (double)n;
    return CLREMAT_OK;
}

/* y (=, or += when acc) x masked and scaled: forward on x, backward on dout. */
static int drop_apply(clremat_layer_call *c, const clremat_buf *x, clremat_buf *y, int acc)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int64_t n = drop_elems(L, c->batch);
    cl_int in = (cl_int)n, iacc = acc ? 1 : 0;
    cl_mem mx, my;
    int st;
    if (!(L->rate >= 0.0 && L->rate < 1.0))
        return clremat_fail(c->ctx, CLREMAT_ERR_SHAPE, "dropout layer %s: rate %g is not in [0, 1)", L->name,
                            L->rate);
    if ((st = clremat_check_buf(c->ctx, L->name, "source", x, n)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "destination", y, n)) != CLREMAT_OK)
        return st;
    mx = clremat_mem(x);
    my = clremat_mem(y);
    if (L->rate == 0.0)
        return clremat_run1d(c->ctx, "clremat_copy_acc8", (n + 7) / 8, sizeof in, &in, sizeof iacc, &iacc,
                             sizeof my, &my, sizeof mx, &mx, (size_t)0);
    {
        float rate = (float)L->rate, scale = (float)(1.0 / (1.0 - L->rate));
        cl_uint lo = (cl_uint)c->seed, hi = (cl_uint)(c->seed >> 32), step = (cl_uint)c->step,
                layer = (cl_uint)c->layer, off = (cl_uint)(c->sample0 * clremat_elems_of(&L->in_shape[0]));
        return clremat_run1d(c->ctx, "clremat_dropout8", (n + 7) / 8, sizeof in, &in, sizeof iacc, &iacc,
                             sizeof rate, &rate, sizeof scale, &scale, sizeof lo, &lo, sizeof hi, &hi, sizeof step,
                             &step, sizeof layer, &layer, sizeof mx, &mx, sizeof my, &my, sizeof off, &off,
                             (size_t)0);
    }
}

static int drop_forward(clremat_layer_call *c)
{
    return drop_apply(c, c->in[0], c->slot[0], 0);
}

static int drop_backward(clremat_layer_call *c)
{
    if (!c->din[0])
        return CLREMAT_OK;
    return drop_apply(c, c->dout, c->din[0], c->din_accumulate[0]);
}

const clremat_layer_impl clremat_impl_dropout = {drop_cost, drop_forward, drop_backward, NULL, NULL};
