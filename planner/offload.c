/* offload.c: offload to host memory as a plan transformation. A chosen
 * layer's output, kept from the forward pass to the backward pass, is
 * copied to a host buffer after its last forward-pass use (OFFLOAD: it
 * stops counting on the device) and brought back before its first
 * backward-pass use (FETCH). The new action list is judged by the simulator
 * like every other plan, which predicts device and host bytes. Pure C. */
#include "plan.h"
#include "error.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS

int clremat_offload_parse(const clremat_graph *g, const char *names, unsigned char *want)
{
    const char *p = names;
    memset(want, 0, (size_t)g->n_layers);
    if (!names || !*names)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--offload takes 'all' or layer names, got ''");
    if (!strcmp(names, "all")) {
        memset(want, 1, (size_t)g->n_layers);
        return CLREMAT_OK;
    }
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (int l = 0; l < g->n_layers; l++)
            if (strlen(g->layers[l].name) == len && !strncmp(g->layers[l].name, p, len)) {
                want[l] = 1;
                found = 1;
            }
        if (!found) {
            char list[1024];
            size_t off = 0;
            list[0] = 0;
            for (int l = 0; l < g->n_layers && off < sizeof list; l++)
                off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", l ? ", " : "", g->layers[l].name);
            return clremat_set_error(CLREMAT_ERR_PLAN, "--offload: model '%s' has no layer '%.*s'; its layers: %s",
                                     g->name, (int)len, p, list);
        }
        if (!e)
            return CLREMAT_OK;
        p = e + 1;
    }
}

/* 1 when action a touches layer L's output: L's own actions, and the runs
 * and backwards of a layer that reads it (conservative: a reader's backward
 * that does not need its input still counts). */
static int touches(const clremat_graph *g, const clremat_action *a, int L)
{
    const clremat_layer *r;
    if (a->layer == L)
        return 1;
    if (a->layer < 0 || a->kind == CLREMAT_ACT_FREE || a->kind == CLREMAT_ACT_FREE_GRAD ||
        a->kind == CLREMAT_ACT_OFFLOAD || a->kind == CLREMAT_ACT_FETCH)
        return 0;
    r = &g->layers[a->layer];
    for (int i = 0; i < r->n_inputs; i++)
        if (r->inputs[i] == L)
            return 1;
    return 0;
}

int clremat_plan_offload(const clremat_plan_input *in, clremat_plan *plan, const unsigned char *want)
{
    const clremat_graph *g = in->g;
    int n = plan->n_actions, nl = g->n_layers, split = -1, k = 0, st;
    int *out_after = NULL, *in_before = NULL; /* per layer: insertion points (-1: none) */
    clremat_action *acts = NULL;
    clremat_plan np;
    if (plan->overlap)
        return clremat_set_error(CLREMAT_ERR_PLAN, "offload does not go with an overlapped plan (--overlap)");
    for (int i = 0; i < n && split < 0; i++)
        if (plan->actions[i].kind == CLREMAT_ACT_BACKWARD)
            split = i;
    out_after = malloc(sizeof *out_after * (size_t)nl);
    in_before = malloc(sizeof *in_before * (size_t)nl);
    acts = calloc((size_t)(n + 2 * nl), sizeof *acts);
    if (!out_after || !in_before || !acts) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
        goto done;
    }
    for (int L = 0; L < nl; L++) {
        out_after[L] = in_before[L] = -1;
        if (!want[L] || L == nl - 1 || split < 0 || !plan->kept[L * S])
            continue;
        for (int i = split - 1; i >= 0 && out_after[L] < 0; i--)
            if (touches(g, &plan->actions[i], L))
                out_after[L] = i;
        for (int i = split; i < n && in_before[L] < 0; i++)
            if (touches(g, &plan->actions[i], L))
                in_before[L] = i;
        /* not read in the backward pass (the next touch frees it): nothing to gain */
        if (out_after[L] < 0 || in_before[L] < 0 ||
            (plan->actions[in_before[L]].kind == CLREMAT_ACT_FREE && plan->actions[in_before[L]].slot == 0 &&
             plan->actions[in_before[L]].layer == L))
            out_after[L] = in_before[L] = -1;
    }
    for (int i = 0; i < n; i++) {
        for (int L = 0; L < nl; L++)
            if (in_before[L] == i) {
                acts[k].kind = CLREMAT_ACT_FETCH;
                acts[k].layer = L;
                acts[k++].slot = 0;
            }
        acts[k].kind = plan->actions[i].kind;
        acts[k].layer = plan->actions[i].layer;
        acts[k++].slot = plan->actions[i].slot;
        for (int L = 0; L < nl; L++)
            if (out_after[L] == i) {
                acts[k].kind = CLREMAT_ACT_OFFLOAD;
                acts[k].layer = L;
                acts[k++].slot = 0;
            }
    }
    if ((st = clremat_plan_from_actions(in, acts, k, &plan->policy, &np)) == CLREMAT_OK) {
        clremat_plan_free(plan);
        *plan = np;
    }
done:
    free(out_after);
    free(in_before);
    free(acts);
    return st;
}

/* The cheapest plan within budget among base and base with its largest
 * kept outputs offloaded (one more at a time until the peak fits); *cost
 * and *out set when one is cheaper than *cost. */
static int try_offload(const clremat_plan_input *in, const clremat_plan *base, uint64_t budget, double *cost,
                       clremat_plan *out, int *have)
{
    const clremat_graph *g = in->g;
    int nl = g->n_layers, st = CLREMAT_OK;
    unsigned char *want = calloc((size_t)nl, 1), *tried = calloc((size_t)nl, 1);
    double base_cost = clremat_plan_recompute_cost(in, base);
    if (!want || !tried) {
        free(want);
        free(tried);
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
    }
    for (;;) {
        int pick = -1;
        clremat_plan p;
        for (int L = 0; L < nl - 1; L++) /* the largest kept output not tried yet */
            if (!tried[L] && base->kept[L * S] &&
                (pick < 0 || in->costs[L].slot_bytes[0] > in->costs[pick].slot_bytes[0]))
                pick = L;
        if (pick < 0)
            break;
        tried[pick] = want[pick] = 1;
        if ((st = clremat_plan_from_actions(in, base->actions, base->n_actions, &base->policy, &p)) != CLREMAT_OK)
            break;
        if ((st = clremat_plan_offload(in, &p, want)) != CLREMAT_OK) {
            clremat_plan_free(&p);
            break;
        }
        if (p.peak_bytes <= budget) {
            double c = base_cost + (double)p.offload_bytes * in->offload_cost_per_byte;
            if (c < *cost) {
                if (*have)
                    clremat_plan_free(out);
                *out = p;
                *cost = c;
                *have = 1;
            } else {
                clremat_plan_free(&p);
            }
            break; /* more offload only costs more */
        }
        clremat_plan_free(&p);
    }
    free(want);
    free(tried);
    return st;
}

int clremat_plan_budget_offload(const clremat_plan_input *in, uint64_t budget, clremat_plan *out)
{
    clremat_plan best, none, cand;
    clremat_policy np, bp;
    double cost = 1e300;
    int st, have_best, have = 0;
    memset(&bp, 0, sizeof bp);
    bp.kind = CLREMAT_POLICY_BUDGET;
    bp.budget = budget;
    snprintf(bp.text, sizeof bp.text, "budget:%llu", (unsigned long long)budget);
    st = clremat_plan_budget(in, budget, &best);
    if (in->offload_cost_per_byte <= 0) {
        if (st == CLREMAT_OK)
            *out = best;
        return st;
    }
    have_best = st == CLREMAT_OK;
    if (have_best)
        cost = clremat_plan_recompute_cost(in, &best);
    clremat_policy_parse("none", &np);
    if ((st = clremat_plan_fixed(in, &np, &none)) != CLREMAT_OK)
        goto done;
    none.policy = bp;
    st = try_offload(in, &none, budget, &cost, &cand, &have);
    if (st == CLREMAT_OK && have_best)
        st = try_offload(in, &best, budget, &cost, &cand, &have);
    clremat_plan_free(&none);
done:
    if (st != CLREMAT_OK || (!have && !have_best)) {
        if (have)
            clremat_plan_free(&cand);
        if (have_best)
            clremat_plan_free(&best);
        return st != CLREMAT_OK ? st : clremat_plan_budget(in, budget, out); /* its message: nothing fits */
    }
    if (have) { /* offload is cheaper */
        if (have_best)
            clremat_plan_free(&best);
        cand.policy = bp;
        *out = cand;
    } else {
        *out = best;
    }
    return CLREMAT_OK;
}
