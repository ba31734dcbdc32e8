/* variants.c: budget:BYTES and auto with a per-layer choice between two
 * ways of running a layer (today: attention with "attention": "auto",
 * plain or memory-efficient). The choice changes the layer's cost (bytes
 * of its slots and workspace, FLOPs), so each candidate set of switched
 * layers is planned by the ordinary budget planner on merged costs, and the
 * cheapest plan that fits wins, counting the alternatives' own extra
 * compute. Candidates: the layers sorted by the bytes they save (most
 * first), switched in growing prefixes (every prefix up to MAX_PREFIXES
 * layers; beyond, MAX_PREFIXES evenly spaced prefix lengths). */
#include "error.h"
#include "plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PREFIXES 8

/* Bytes a layer's cost holds at its high point: every slot plus the larger workspace. */
static uint64_t layer_bytes(const clremat_layer_cost *c)
{
    uint64_t b = c->fwd_temp_bytes > c->bwd_temp_bytes ? c->fwd_temp_bytes : c->bwd_temp_bytes;
    for (int s = 0; s < c->n_slots && s < CLREMAT_MAX_SLOTS; s++)
        b += c->slot_bytes[s];
    return b;
}

/* Extra cost of running layer l's alternative, in the budget planner's units. */
static double extra_cost(const clremat_plan_input *in, const clremat_layer_cost *alt, int l)
{
    const clremat_layer_cost *c = &in->costs[l];
    double d = (alt[l].fwd_flops + alt[l].bwd_flops) - (c->fwd_flops + c->bwd_flops);
    if (in->layer_cost && c->fwd_flops > 0.0)
        d = in->layer_cost[l] * d / c->fwd_flops;
    return d > 0.0 ? d : 0.0;
}

typedef struct cand {
    int l;
    uint64_t saves;
} cand;

static int by_saving(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->saves != y->saves)
        return x->saves > y->saves ? -1 : 1;
    return x->l - y->l;
}

/* Plans in with the first k layers of order switched. */
static int plan_prefix(const clremat_plan_input *in, const clremat_layer_cost *alt, const cand *order, int k,
                       const clremat_policy *p, uint64_t limit, clremat_layer_cost *merged, clremat_plan *out)
{
    clremat_plan_input mi = *in;
    memcpy(merged, in->costs, sizeof *merged * (size_t)in->g->n_layers);
    for (int i = 0; i < k; i++)
        merged[order[i].l] = alt[order[i].l];
    mi.costs = merged;
    if (p->kind == CLREMAT_POLICY_AUTO)
        return clremat_plan_auto(&mi, limit, out);
    return clremat_plan_budget(&mi, p->budget, out);
}

int clremat_plan_variants(const clremat_plan_input *in, const clremat_layer_cost *alt, const clremat_policy *p,
                          uint64_t limit, clremat_plan *out)
{
    const clremat_graph *g = in->g;
    cand *order = NULL;
    clremat_layer_cost *merged = NULL;
    clremat_plan best, cur;
    double best_cost = 0.0;
    int n = 0, best_k = -1, rc = CLREMAT_OK, ks[MAX_PREFIXES + 1], nks = 0;
    char first_err[1024] = "", last_err[1024] = "";

    memset(out, 0, sizeof *out);
    memset(&best, 0, sizeof best);
    if (p->kind != CLREMAT_POLICY_BUDGET && p->kind != CLREMAT_POLICY_AUTO)
        return clremat_plan_build(in, p, out);
    if (p->kind == CLREMAT_POLICY_AUTO && limit == 0)
        return clremat_set_error(CLREMAT_ERR_PLAN, "--remat auto needs a memory limit (a device or --memory-limit)");
    order = malloc(sizeof *order * (size_t)(g->n_layers + 1));
    merged = malloc(sizeof *merged * (size_t)(g->n_layers + 1));
    if (!order || !merged) {
        rc = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        goto done;
    }
    for (int l = 0; alt && l < g->n_layers; l++) {
        uint64_t a, b;
        if (alt[l].n_slots <= 0)
            continue;
        a = layer_bytes(&in->costs[l]);
        b = layer_bytes(&alt[l]);
        if (b < a)
            order[n++] = (cand){l, a - b};
    }
    qsort(order, (size_t)n, sizeof *order, by_saving);
    if (n <= MAX_PREFIXES) {
        for (int k = 0; k <= n; k++)
            ks[nks++] = k;
    } else {
        for (int i = 0; i <= MAX_PREFIXES; i++)
            ks[nks++] = (int)((int64_t)n * i / MAX_PREFIXES);
    }
    for (int i = 0; i < nks; i++) {
        int k = ks[i];
        double cost, extra = 0.0;
        rc = plan_prefix(in, alt, order, k, p, limit, merged, &cur);
        if (rc == CLREMAT_ERR_PLAN) { /* does not fit: more alternatives may */
            snprintf(i == 0 ? first_err : last_err, sizeof first_err, "%s", clremat_last_error());
            continue;
        }
        if (rc != CLREMAT_OK)
            goto done;
        for (int j = 0; j < k; j++)
            extra += extra_cost(in, alt, order[j].l);
        {
            clremat_plan_input mi = *in;
            mi.costs = merged;
            cost = clremat_plan_recompute_cost(&mi, &cur) + extra;
        }
        if (best_k < 0 || cost < best_cost) {
            clremat_plan_free(&best);
            best = cur;
            best_cost = cost;
            best_k = k;
        } else {
            clremat_plan_free(&cur);
        }
        if (best_k == 0 && best_cost == 0.0)
            break; /* the none plan fits with every layer as written */
    }
    if (best_k < 0) {
        rc = clremat_set_error(CLREMAT_ERR_PLAN, "%s%s", last_err[0] ? last_err : first_err,
                               n > 0 ? " (with the memory-efficient mode of every attention layer marked "
                               "\"attention\": \"auto\")" : "");
        goto done;
    }
    rc = CLREMAT_OK;
    if (best_k > 0) {
        best.variant = calloc((size_t)g->n_layers, 1);
        if (!best.variant) {
            rc = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
            goto done;
        }
        for (int j = 0; j < best_k; j++)
            best.variant[order[j].l] = 1;
    }
    best.policy = *p;
    *out = best;
    memset(&best, 0, sizeof best);
done:
    clremat_plan_free(&best);
    free(order);
    free(merged);
    return rc;
}
