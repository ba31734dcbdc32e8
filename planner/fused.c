/* fused.c: when the optimizer update runs inside the backward (the fused
 * update, no parameter gradients in fixed memory): the one predicate every
 * caller asks, the per-parameter condition, and the gradient bytes a plan
 * still holds; and the rule for reading a discarded activation output
 * through a backward's GEMM (clremat_plan_act_fusable); and the fixed bytes
 * of a step built from them (clremat_plan_fixed_bytes, the one count the
 * scheduler and the simulator use). Pure C. */
#include "plan.h"

int clremat_fused_update_applies(const clremat_fused_query *q)
{
    if (!q || q->disabled)
        return 0;
    /* the optimizers whose update is elementwise in one parameter's own
     * gradient and state (include/clremat.h): SGD with momentum, Adam, AdamW */
    if (q->opt_kind != CLREMAT_OPT_SGD && q->opt_kind != CLREMAT_OPT_ADAM && q->opt_kind != CLREMAT_OPT_ADAMW)
        return 0;
    /* the update needs the step's whole gradient as soon as it is known:
     * not when gradients accumulate over micro-batches or are reduced
     * across replicas before the update */
    if (q->accumulate > 1 || q->replicas > 1)
        return 0;
    /* mixed_float16 skips the update of a step whose gradients are not all
     * finite, which is known only after the last backward */
    if (q->loss_scaling)
        return 0;
    return 1;
}

int clremat_param_uses(const clremat_graph *g, int l, int p)
{
    /* Every parameter belongs to one layer and is read by that layer's
     * backward, except a frozen one (no gradient at all: 0) and an embedding
     * table tied to a later dense layer ("tie"), whose gradient has both
     * layers' contributions (2): it is complete only after both backwards. */
    if (!g || l < 0 || l >= g->n_layers || p < 0 || p >= g->layers[l].n_params)
        return 0;
    if (g->layers[l].params[p].frozen)
        return 0;
    return g->layers[l].type == CLREMAT_EMBEDDING && p == 0 && clremat_graph_tied_user(g, l) >= 0 ? 2 : 1;
}

int clremat_fused_update_param(const clremat_plan_input *in, int l, int p)
{
    return in && in->fused_update && clremat_param_uses(in->g, l, p) == 1;
}

uint64_t clremat_plan_grad_bytes(const clremat_plan_input *in)
{
    const clremat_graph *g = in->g;
    uint64_t bytes = 0;
    for (int l = 0; l < g->n_layers; l++)
        for (int p = 0; p < g->layers[l].n_params; p++)
            if (!g->layers[l].params[p].frozen && !clremat_fused_update_param(in, l, p))
                bytes += (uint64_t)g->layers[l].params[p].elems * sizeof(float);
    return bytes;
}

int clremat_plan_act_fusable(const clremat_layer_cost *costs, const clremat_graph *g, int N, int i)
{
    int P;
    if (!costs || !g || N < 0 || N >= g->n_layers || i < 0 || i >= g->layers[N].n_inputs)
        return 0;
    P = g->layers[N].inputs[i];
    return P >= 0 && (costs[N].bwd_act_fusable_inputs >> i & 1u) && costs[P].act_source >= 0 &&
           !costs[P].act_from_input && costs[P].act_source < costs[P].n_slots;
}

uint64_t clremat_plan_fixed_bytes(const clremat_plan_input *in, uint64_t *param_bytes)
{
    const clremat_graph *g = in->g;
    uint64_t params = (uint64_t)clremat_graph_param_elems(g) * sizeof(float);
    uint64_t x = (uint64_t)(in->batch * clremat_shape_elems(&g->io.input)) * sizeof(float);
    uint64_t y = (uint64_t)(in->batch * clremat_shape_elems(&g->io.labels)) * sizeof(float);
    if (param_bytes)
        *param_bytes = params;
    /* every parameter; the optimizer state of each trained one; the
     * gradients the plan keeps (clremat_plan_grad_bytes) */
    return params + (uint64_t)clremat_graph_trainable_elems(g) * sizeof(float) * (uint64_t)in->opt_states +
           clremat_plan_grad_bytes(in) + x + y + in->scratch_bytes + clremat_accum_bytes(in);
}
