/* prune.c: removes dead recomputation from an action list: a RECOMPUTE or
 * RECOMPUTE_ACT none of whose newly allocated slots is read before it is
 * freed (with the FREEs of those slots). Stage schedules need it where a
 * stage rerun feeds only layers the next rerun skips. */
#include "stages.h"
#include <string.h>

#define S CLREMAT_MAX_SLOTS

int clremat_action_reads(const clremat_plan_input *in, const clremat_action *a, int L, int s)
{
    const clremat_layer *l;
    const clremat_layer_cost *c;
    if (a->layer < 0)
        return 0;
    l = &in->g->layers[a->layer];
    c = &in->costs[a->layer];
    switch (a->kind) {
    case CLREMAT_ACT_FORWARD:
    case CLREMAT_ACT_RECOMPUTE:
        for (int k = 0; k < l->n_inputs; k++)
            if (s == 0 && l->inputs[k] == L)
                return 1;
        return 0;
    case CLREMAT_ACT_RECOMPUTE_ACT:
        if (c->act_from_input)
            return s == 0 && c->act_source >= 0 && l->inputs[c->act_source] == L;
        return a->layer == L && s == c->act_source;
    case CLREMAT_ACT_BACKWARD:
        if (a->layer == L && (c->bwd_needs_slots >> s & 1u))
            return 1;
        for (int k = 0; k < l->n_inputs; k++)
            if (s == 0 && l->inputs[k] == L && (c->bwd_needs_inputs >> k & 1u))
                return 1;
        return 0;
    default:
        return 0;
    }
}

int clremat_actions_drop_dead(const clremat_plan_input *in, clremat_action *acts, int n)
{
    for (int i = 0; i < n; i++) {
        clremat_action *a = &acts[i];
        int L = a->layer, used = 0, k = i;
        if (a->kind != CLREMAT_ACT_RECOMPUTE && a->kind != CLREMAT_ACT_RECOMPUTE_ACT)
            continue;
        if (L == in->g->n_layers - 1)
            continue; /* the loss value is read at the end of the step */
        for (int s = 0; s < S && !used; s++) {
            if (!(a->alloc_slots >> s & 1u))
                continue;
            for (int j = i + 1; j < n && !used; j++) {
                if (acts[j].kind == CLREMAT_ACT_FREE && acts[j].layer == L && acts[j].slot == s)
                    break;
                used = clremat_action_reads(in, &acts[j], L, s);
            }
        }
        if (used)
            continue;
        /* drop it and the first FREE after it of each slot it allocated */
        {
            unsigned pending = a->alloc_slots;
            for (int j = i + 1; j < n; j++) {
                if (pending && acts[j].kind == CLREMAT_ACT_FREE && acts[j].layer == L &&
                    (pending >> acts[j].slot & 1u)) {
                    pending &= ~(1u << acts[j].slot);
                    continue;
                }
                acts[k++] = acts[j];
            }
        }
        return k; /* one at a time: the caller simulates again (alloc_slots change) */
    }
    return n;
}
