/* layer_pending3.c: TEMPORARY stand-ins for the ten layer implementations of
 * backend/layer_impl.h so that branch h3-graph links on its own. Every entry
 * returns CLREMAT_ERR_INTERNAL. The lead deletes this file (and its line in
 * Makefile.am) when the real backend/layer_<type>.c files are merged. */
#include "layer_impl.h"

static int pending_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *out)
{
    (void)g; (void)l; (void)batch; (void)out;
    return clremat_set_error(CLREMAT_ERR_INTERNAL, "layer implementations are not merged yet");
}

static int pending_call(clremat_layer_call *c)
{
    (void)c;
    return clremat_set_error(CLREMAT_ERR_INTERNAL, "layer implementations are not merged yet");
}

#define PENDING(name) const clremat_layer_impl name = {pending_cost, pending_call, pending_call, NULL}
PENDING(clremat_impl_dense);
PENDING(clremat_impl_activation);
PENDING(clremat_impl_dropout);
PENDING(clremat_impl_layernorm);
PENDING(clremat_impl_add);
PENDING(clremat_impl_embedding);
PENDING(clremat_impl_attention);
PENDING(clremat_impl_reshape);
PENDING(clremat_impl_softmax_ce);
PENDING(clremat_impl_mse);
