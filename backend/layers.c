/* layers.c: dispatches cost, forward, backward and activation recompute to
 * the implementation of each layer type. */
#include "layer_impl.h"
#include <string.h>

static const clremat_layer_impl *const impls[CLREMAT_LAYER_TYPE_COUNT] = {
    [CLREMAT_DENSE] = &clremat_impl_dense,
    [CLREMAT_ACTIVATION] = &clremat_impl_activation,
    [CLREMAT_DROPOUT] = &clremat_impl_dropout,
    [CLREMAT_LAYERNORM] = &clremat_impl_layernorm,
    [CLREMAT_ADD] = &clremat_impl_add,
    [CLREMAT_EMBEDDING] = &clremat_impl_embedding,
    [CLREMAT_ATTENTION] = &clremat_impl_attention,
    [CLREMAT_RESHAPE] = &clremat_impl_reshape,
    [CLREMAT_SOFTMAX_CE] = &clremat_impl_softmax_ce,
    [CLREMAT_MSE] = &clremat_impl_mse,
};

static const clremat_layer_impl *impl_of(const clremat_graph *g, int l)
{
    if (!g || l < 0 || l >= g->n_layers || (unsigned)g->layers[l].type >= CLREMAT_LAYER_TYPE_COUNT)
        return NULL;
    return impls[g->layers[l].type];
}

int clremat_layer_cost_of(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *out)
{
    const clremat_layer_impl *im = impl_of(g, l);
    if (!im || batch <= 0)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "cost of layer %d: bad layer or batch %lld",
                                 l, (long long)batch);
    memset(out, 0, sizeof *out);
    out->act_source = -1;
    return im->cost(g, l, batch, out);
}

int clremat_layer_forward(clremat_layer_call *c)
{
    const clremat_layer_impl *im = impl_of(c->g, c->layer);
    if (!im)
        return clremat_fail(c->ctx, CLREMAT_ERR_INVALID_ARGUMENT, "forward: bad layer %d", c->layer);
    return im->forward(c);
}

int clremat_layer_backward(clremat_layer_call *c)
{
    const clremat_layer_impl *im = impl_of(c->g, c->layer);
    if (!im)
        return clremat_fail(c->ctx, CLREMAT_ERR_INVALID_ARGUMENT, "backward: bad layer %d", c->layer);
    return im->backward(c);
}

int clremat_layer_recompute_activation(clremat_layer_call *c)
{
    const clremat_layer_impl *im = impl_of(c->g, c->layer);
    if (!im || !im->recompute_act)
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "layer %s has no separate activation to recompute",
                            c->g->layers[c->layer].name);
    return im->recompute_act(c);
}
