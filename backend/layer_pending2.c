/* layer_pending2.c: TEMPORARY (branch h2-seq only) stubs for the layer types
 * helper H1 implements (dense, activation, dropout, add, reshape) so that the
 * library links while h1-core does not provide them yet. Every entry fails
 * with CLREMAT_ERR_INTERNAL. Delete this file once h1-core has them. */
#include "layer_impl.h"

static int pending_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *out)
{
    (void)batch;
    (void)out;
    return clremat_set_error(CLREMAT_ERR_INTERNAL, "layer %s: type not implemented yet (pending h1-core)",
                             g->layers[l].name);
}

static int pending_run(clremat_layer_call *c)
{
    return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "layer %s: type not implemented yet (pending h1-core)",
                        c->g->layers[c->layer].name);
}

const clremat_layer_impl clremat_impl_dense = {pending_cost, pending_run, pending_run, NULL};
const clremat_layer_impl clremat_impl_activation = {pending_cost, pending_run, pending_run, NULL};
const clremat_layer_impl clremat_impl_dropout = {pending_cost, pending_run, pending_run, NULL};
const clremat_layer_impl clremat_impl_add = {pending_cost, pending_run, pending_run, NULL};
const clremat_layer_impl clremat_impl_reshape = {pending_cost, pending_run, pending_run, NULL};
