/* layer_pending.c: TEMPORARY (h1-core branch only; the lead deletes it at
 * merge). Stand-ins for the layer types helper H2 implements (layernorm,
 * embedding, attention, softmax_ce, mse) so the library links meanwhile.
 * Every entry fails with CLREMAT_ERR_INTERNAL "not implemented yet". */
#include "layer_impl.h"

static int pending_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    (void)batch;
    (void)c;
    return clremat_set_error(CLREMAT_ERR_INTERNAL, "layer %s: type not implemented yet (layer_pending.c)",
                             g->layers[l].name);
}

static int pending_call(clremat_layer_call *c)
{
    return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "layer %s: type not implemented yet (layer_pending.c)",
                        c->g->layers[c->layer].name);
}

const clremat_layer_impl clremat_impl_layernorm = {pending_cost, pending_call, pending_call, NULL};
const clremat_layer_impl clremat_impl_embedding = {pending_cost, pending_call, pending_call, NULL};
const clremat_layer_impl clremat_impl_attention = {pending_cost, pending_call, pending_call, NULL};
const clremat_layer_impl clremat_impl_softmax_ce = {pending_cost, pending_call, pending_call, NULL};
const clremat_layer_impl clremat_impl_mse = {pending_cost, pending_call, pending_call, NULL};
