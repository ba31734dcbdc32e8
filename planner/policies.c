/* policies.c: turns a fixed remat policy (Keras RematScope modes) into wrap
 * flags per layer and block, and plans with them (clremat_plan_fixed).
 * Blocks marked "remat": true are wrapped whatever the mode (the analogue of
 * keras.remat(f)). The loss layer is never wrapped: its value is read at the
 * end of the step. The searched policies (budget:BYTES, auto) are not here:
 * plan_build.c sends them to the budget planner, which calls this file for
 * the fixed plans it compares against. */
#include "plan.h"
#include "error.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lists every layer and block name into buf for an unknown-name error. */
static void list_names(const clremat_graph *g, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = 0;
    for (int b = 0; b < g->n_blocks && off < len; b++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s (block)", off ? ", " : "", g->blocks[b].name);
    for (int l = 0; l < g->n_layers && off < len; l++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? ", " : "", g->layers[l].name);
}

int clremat_plan_fixed(const clremat_plan_input *in, const clremat_policy *p, clremat_plan *out)
{
    const clremat_graph *g = in->g;
    int n = g->n_layers, st;
    unsigned char *wl = calloc((size_t)n + 1, 1), *wb = calloc((size_t)g->n_blocks + 1, 1);
    unsigned char *ad = calloc((size_t)n + 1, 1);

    if (!wl || !wb || !ad) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        goto done;
    }
    switch (p->kind) {
    case CLREMAT_POLICY_NONE:
        break;
    case CLREMAT_POLICY_FULL:
        memset(wl, 1, (size_t)n);
        memset(wb, 1, (size_t)g->n_blocks);
        break;
    case CLREMAT_POLICY_ACTIVATIONS:
        for (int l = 0; l < n; l++)
            ad[l] = in->costs[l].act_source >= 0;
        break;
    case CLREMAT_POLICY_LARGER_THAN:
        for (int l = 0; l < n; l++)
            wl[l] = in->batch * clremat_shape_elems(&g->layers[l].out_shape) > p->threshold;
        break;
    case CLREMAT_POLICY_LIST:
        for (int i = 0; i < p->n_names; i++) {
            int l = clremat_graph_find_layer(g, p->names[i]);
            int nb = l >= 0 ? 0 : clremat_graph_blocks_named(g, p->names[i], NULL, 0);
            if (l >= 0)
                wl[l] = 1;
            else if (nb > 0) {
                int *bs = malloc(sizeof(int) * (size_t)nb);
                if (!bs) {
                    st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
                    goto done;
                }
                clremat_graph_blocks_named(g, p->names[i], bs, nb);
                for (int k = 0; k < nb; k++)
                    wb[bs[k]] = 1;
                free(bs);
            } else {
                char names[3000];
                list_names(g, names, sizeof names);
                st = clremat_set_error(CLREMAT_ERR_PLAN,
                    "list_of_layers: no layer or block named '%s' in model '%s'; names are: %s",
                    p->names[i], g->name, names);
                goto done;
            }
        }
        break;
    default:
        st = clremat_set_error(CLREMAT_ERR_PLAN,
                               "remat mode '%s' is searched, not fixed: plan it with clremat_plan_build "
                               "(budget) or clremat_plan_auto", p->text);
        goto done;
    }
    for (int b = 0; b < g->n_blocks; b++)
        if (g->blocks[b].remat)
            wb[b] = 1;
    if (n > 0)
        wl[n - 1] = 0; /* the loss */
    /* inside a wrapped unit, recomputation already covers activation outputs,
     * and their sources are discarded with the unit: keep the unit's rule */
    for (int l = 0; l < n; l++) {
        int wrapped = wl[l];
        for (int b = g->layers[l].block; b >= 0 && !wrapped; b = g->blocks[b].parent)
            wrapped = wb[b];
        if (wrapped)
            ad[l] = 0;
    }
    out->policy = *p;
    st = clremat_plan_from_flags(in, wl, wb, ad, out);
    if (st == CLREMAT_OK)
        out->policy = *p;
done:
    free(wl);
    free(wb);
    free(ad);
    return st;
}
