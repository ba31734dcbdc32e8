/* policies.c: turns a fixed remat policy (Keras RematScope modes) into wrap
 * flags per layer and block, and plans with them (clremat_plan_fixed).
 * Blocks marked "remat": true are wrapped whatever the mode (the analogue of
 * keras.remat(f)). The loss layer is never wrapped: its value is read at the
 * end of the step. The searched policies (budget:BYTES, auto) are not here:
 * plan_build.c sends them to the budget planner, which calls this file for
 * the fixed plans it compares against. save_dots keeps the outputs of
 * matrix products (dense pre-activations and outputs, attention's saved
 * tensors), wraps every top-level block so its elementwise and
 * normalization work is rerun from the block input and the kept products,
 * and recomputes dense activation outputs from the kept pre-activation. */
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

void clremat_save_dots_flags(const clremat_plan_input *in, unsigned char *wl, unsigned char *wb, unsigned char *ad,
                             unsigned char *pin)
{
    const clremat_graph *g = in->g;
    int n = g->n_layers;
    memset(wl, 0, (size_t)n);
    memset(wb, 0, (size_t)g->n_blocks);
    memset(ad, 0, (size_t)n);
    memset(pin, 0, (size_t)n);
    for (int b = 0; b < g->n_blocks; b++)
        wb[b] = g->blocks[b].parent < 0 || g->blocks[b].remat;
    for (int l = 0; l + 1 < n; l++) {
        const clremat_layer_cost *c = &in->costs[l];
        int in_block = g->layers[l].block >= 0;
        unsigned all = (1u << c->n_slots) - 1u;
        if (g->layers[l].type == CLREMAT_ATTENTION) {
            pin[l] = (unsigned char)all;
        } else if (g->layers[l].type == CLREMAT_DENSE || g->layers[l].type == CLREMAT_CONV2D) {
            /* the product is the pre-activation when there is an activation */
            if (c->act_source >= 0 && !c->act_from_input) {
                pin[l] = (unsigned char)(all & ~1u);
                ad[l] = 1;
            } else {
                pin[l] = (unsigned char)all;
            }
        } else if (!in_block && c->act_source >= 0) {
            ad[l] = 1; /* outside blocks: as activations mode */
        }
    }
}

/* Clears the wrap flag of every wrapped layer and block of plan p none of
 * whose layers p recomputes; returns 1 when it cleared any. */
static int unwrap_idle(const clremat_graph *g, const clremat_plan *p, unsigned char *wl, unsigned char *wb)
{
    int changed = 0;
    for (int l = 0; l < g->n_layers; l++)
        if (wl[l] && p->recomputes[l] == 0) {
            wl[l] = 0;
            changed = 1;
        }
    for (int b = 0; b < g->n_blocks; b++) {
        int busy = 0;
        if (!wb[b])
            continue;
        for (int l = g->blocks[b].first; l <= g->blocks[b].last && !busy; l++)
            busy = p->recomputes[l] > 0;
        if (!busy) {
            wb[b] = 0;
            changed = 1;
        }
    }
    return changed;
}

int clremat_plan_fixed(const clremat_plan_input *in, const clremat_policy *p, clremat_plan *out)
{
    const clremat_graph *g = in->g;
    int n = g->n_layers, st;
    unsigned char *wl = calloc((size_t)n + 1, 1), *wb = calloc((size_t)g->n_blocks + 1, 1);
    unsigned char *ad = calloc((size_t)n + 1, 1), *pin = NULL;

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
    case CLREMAT_POLICY_SAVE_DOTS: {
        clremat_flagset f;
        pin = calloc((size_t)n + 1, 1);
        if (!pin) {
            st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
            goto done;
        }
        clremat_save_dots_flags(in, wl, wb, ad, pin);
        f.wrap_layer = wl;
        f.wrap_block = wb;
        f.act_discard = ad;
        f.pin = pin;
        out->policy = *p;
        st = clremat_plan_from_flagset(in, &f, out);
        if (st == CLREMAT_OK)
            out->policy = *p;
        goto done;
    }
    case CLREMAT_POLICY_LIST:
        for (int i = 0; i < p->n_names; i++) {
            int l = clremat_graph_find_layer(g, p->names[i]);
            int nb = l >= 0 ? 0 : clremat_graph_blocks_named(g, p->names[i], NULL, 0);
            if (l >= 0 && l == n - 1) {
                st = clremat_set_error(CLREMAT_ERR_PLAN,
                    "list_of_layers: '%s' is the loss layer of model '%s' and cannot be wrapped: its value is "
                    "read at the end of the step and its backward starts the backward pass, so there is "
                    "nothing to discard or recompute",
                    p->names[i], g->name);
                goto done;
            }
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
    /* A wrapped unit none of whose layers is ever recomputed only holds its
     * inputs: its outputs are kept anyway (an add or concat whose output is
     * the kept input of the next wrapped layer, and whose backward reads
     * nothing), so wrapping it keeps more than none. Such units are unwrapped
     * and the plan made again (each round removes flags, so it ends), which
     * keeps larger_than and list_of_layers never worse than none. */
    for (;;) {
        out->policy = *p;
        st = clremat_plan_from_flags(in, wl, wb, ad, out);
        if (st != CLREMAT_OK || !unwrap_idle(g, out, wl, wb))
            break;
        clremat_plan_free(out);
    }
    if (st == CLREMAT_OK)
        out->policy = *p;
done:
    free(wl);
    free(wb);
    free(ad);
    free(pin);
    return st;
}
