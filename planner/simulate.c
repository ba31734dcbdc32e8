/* simulate.c: the memory simulator on its own. Takes a bare action list
 * (kind, layer, slot), checks that the executor can follow it literally,
 * and derives everything else a plan holds (allocations per action, live
 * bytes and peaks, kept tensors, recompute counts and FLOPs) from the
 * executor's fixed allocation rules (docs/ARCHITECTURE.md, "The memory
 * contract"). Independent of schedule.c: the budget planner's schedules go
 * through it, and tests replay schedule.c's own lists through it. */
#include "plan.h"
#include "error.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS

typedef struct simstate {
    const clremat_plan_input *in;
    const clremat_graph *g;
    const clremat_layer_cost *c;
    clremat_plan *p;
    unsigned char *live, *grad, *ran, *bwd_done;
    unsigned char *on_host;         /* offloaded tensors (layer * S + slot) */
    int *full_recomputes;
    uint64_t bytes, host;
    int n, loss, next_bwd, updated, idx;
} simstate;

/* Fails the simulation naming the action. */
static int bad(const simstate *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const simstate *st, const char *fmt, ...)
{
    const clremat_action *x = &st->p->actions[st->idx];
    const char *lname = x->layer >= 0 && x->layer < st->n ? st->g->layers[x->layer].name : "-";
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return clremat_set_error(CLREMAT_ERR_PLAN, "action %d (%s of layer '%s'): %s", st->idx,
                             clremat_action_name(x->kind), lname, what);
}

static void peak(simstate *st, clremat_action *a, uint64_t during)
{
    a->peak_during = during;
    a->live_after = st->bytes;
    a->host_after = st->host;
    if (during > st->p->peak_bytes)
        st->p->peak_bytes = during;
}

static int sim_forward(simstate *st, clremat_action *a)
{
    int L = a->layer;
    const clremat_layer *l = &st->g->layers[L];
    const clremat_layer_cost *c = &st->c[L];
    uint64_t add = 0;
    if (st->updated)
        return bad(st, "forward after the update");
    if (a->kind == CLREMAT_ACT_FORWARD && st->ran[L])
        return bad(st, "the layer already ran; a second run must be a RECOMPUTE");
    if (a->kind == CLREMAT_ACT_RECOMPUTE && !st->ran[L])
        return bad(st, "RECOMPUTE before the layer's first FORWARD");
    if (st->bwd_done[L])
        return bad(st, "the layer's backward already ran");
    for (int i = 0; i < l->n_inputs; i++) {
        int P = l->inputs[i];
        if (P >= 0 && !st->live[P * S])
            return bad(st, "input '%s' (slot 0) is not live", st->g->layers[P].name);
    }
    for (int s = 0; s < c->n_slots; s++)
        if (!st->live[L * S + s]) {
            a->alloc_slots |= 1u << s;
            add += c->slot_bytes[s];
            st->live[L * S + s] = 1;
        }
    st->bytes += add;
    peak(st, a, st->bytes + c->fwd_temp_bytes);
    st->ran[L] = 1;
    if (a->kind == CLREMAT_ACT_RECOMPUTE) {
        st->p->recomputes[L]++;
        st->full_recomputes[L]++;
        st->p->recompute_flops += c->fwd_flops;
        st->p->n_recompute_actions++;
    }
    return CLREMAT_OK;
}

static int sim_recompute_act(simstate *st, clremat_action *a)
{
    int L = a->layer;
    const clremat_layer_cost *c = &st->c[L];
    const clremat_layer *l = &st->g->layers[L];
    if (st->updated)
        return bad(st, "activation recompute after the update");
    if (c->act_source < 0)
        return bad(st, "the layer has no activation output to recompute alone");
    if (!st->ran[L])
        return bad(st, "before the layer's first FORWARD");
    if (c->act_from_input) {
        int P = c->act_source < l->n_inputs ? l->inputs[c->act_source] : -1;
        if (P >= 0 && !st->live[P * S])
            return bad(st, "its source, the output of '%s', is not live", st->g->layers[P].name);
    } else if (!st->live[L * S + c->act_source]) {
        return bad(st, "its source slot (%s) is not live",
                   c->slot_name[c->act_source] ? c->slot_name[c->act_source] : "internal");
    }
    if (st->live[L * S])
        return bad(st, "the output is already live");
    a->alloc_slots = 1;
    st->live[L * S] = 1;
    st->bytes += c->slot_bytes[0];
    peak(st, a, st->bytes);
    st->p->recomputes[L]++;
    st->p->act_discard[L] = 1;
    st->p->recompute_flops += (double)(c->slot_bytes[0] / sizeof(float));
    st->p->n_recompute_actions++;
    return CLREMAT_OK;
}

static int sim_backward(simstate *st, clremat_action *a)
{
    int N = a->layer;
    const clremat_layer *l = &st->g->layers[N];
    const clremat_layer_cost *c = &st->c[N];
    uint64_t add = 0;
    if (st->updated)
        return bad(st, "backward after the update");
    if (st->next_bwd < 0 || N != st->next_bwd) {
        if (st->bwd_done[N])
            return bad(st, "the layer's backward already ran");
        return bad(st, "backwards must run in reverse layer order; next is '%s'",
                   st->next_bwd >= 0 ? st->g->layers[st->next_bwd].name : "(none)");
    }
    if (!st->ran[N])
        return bad(st, "the layer never ran forward");
    for (int s = 0; s < c->n_slots; s++)
        if ((c->bwd_needs_slots >> s & 1u) && !st->live[N * S + s])
            return bad(st, "saved slot %s of the layer is not live",
                       c->slot_name[s] ? c->slot_name[s] : "(internal)");
    a->fuse_act_in = 0;
    for (int i = 0; i < l->n_inputs; i++) {
        int P = l->inputs[i];
        if (P < 0 || !(c->bwd_needs_inputs >> i & 1u) || st->live[P * S])
            continue;
        /* read as act(pre-activation) inside the backward's GEMM */
        if (clremat_plan_act_fusable(st->c, st->g, N, i) && st->live[P * S + st->c[P].act_source]) {
            a->fuse_act_in |= 1u << i;
            st->p->n_fused_act_reads++;
            st->p->act_discard[P] = 1;
            st->p->recompute_flops += (double)(st->c[P].slot_bytes[0] / sizeof(float));
            continue;
        }
        return bad(st, "saved input '%s' is not live", st->g->layers[P].name);
    }
    if (N != st->loss && !st->grad[N])
        return bad(st, "the gradient of the layer's output is not live");
    for (int i = 0; i < l->n_inputs; i++) {
        int P = l->inputs[i];
        if (P < 0)
            continue;
        a->want_din |= 1u << i;
        if (!st->grad[P]) {
            a->alloc_din |= 1u << i;
            st->grad[P] = 1;
            add += st->c[P].slot_bytes[0];
        }
    }
    st->bytes += add;
    peak(st, a, st->bytes + c->bwd_temp_bytes);
    st->bwd_done[N] = 1;
    st->next_bwd--;
    return CLREMAT_OK;
}

static int sim_free(simstate *st, clremat_action *a)
{
    int L = a->layer, s = a->slot;
    if (s < 0 || s >= st->c[L].n_slots)
        return bad(st, "slot %d out of range [0, %d)", s, st->c[L].n_slots);
    if (!st->live[L * S + s])
        return bad(st, "slot %s is not live", st->c[L].slot_name[s] ? st->c[L].slot_name[s] : "(unnamed)");
    if (L == st->loss && s == 0 && !st->updated)
        return bad(st, "the loss value is read by the update; free it after");
    st->live[L * S + s] = 0;
    st->bytes -= st->c[L].slot_bytes[s];
    peak(st, a, st->bytes);
    return CLREMAT_OK;
}

/* OFFLOAD: the tensor leaves the device for a host buffer; FETCH brings it
 * back (a device allocation) and frees the host buffer. */
static int sim_offload(simstate *st, clremat_action *a)
{
    int L = a->layer, s = a->slot;
    size_t b;
    if (s < 0 || s >= st->c[L].n_slots)
        return bad(st, "slot %d out of range [0, %d)", s, st->c[L].n_slots);
    b = st->c[L].slot_bytes[s];
    if (a->kind == CLREMAT_ACT_OFFLOAD) {
        if (!st->live[L * S + s])
            return bad(st, "offload of a tensor that is not live on the device");
        if (L == st->loss && s == 0)
            return bad(st, "the loss value stays on the device");
        st->live[L * S + s] = 0;
        st->on_host[L * S + s] = 1;
        st->bytes -= b;
        st->host += b;
        if (st->host > st->p->host_peak_bytes)
            st->p->host_peak_bytes = st->host;
        st->p->n_offloads++;
        st->p->offload_bytes += b;
        peak(st, a, st->bytes + b); /* the device copy is read until the action ends */
    } else {
        if (!st->on_host[L * S + s])
            return bad(st, "fetch of a tensor that is not offloaded");
        st->on_host[L * S + s] = 0;
        st->live[L * S + s] = 1;
        st->bytes += b;
        peak(st, a, st->bytes);
        st->host -= b;
        a->host_after = st->host;
    }
    return CLREMAT_OK;
}

static int sim_free_grad(simstate *st, clremat_action *a)
{
    int L = a->layer;
    if (!st->grad[L])
        return bad(st, "the gradient is not live");
    if (!st->bwd_done[L])
        return bad(st, "the gradient is freed before the layer's backward read it");
    st->grad[L] = 0;
    st->bytes -= st->c[L].slot_bytes[0];
    peak(st, a, st->bytes);
    return CLREMAT_OK;
}

static int sim_update(simstate *st, clremat_action *a)
{
    if (st->updated)
        return bad(st, "second update");
    if (st->next_bwd >= 0)
        return bad(st, "update before the backward of '%s'", st->g->layers[st->next_bwd].name);
    if (!st->live[st->loss * S])
        return bad(st, "the loss value is not live");
    st->updated = 1;
    a->layer = -1;
    peak(st, a, st->bytes);
    return CLREMAT_OK;
}

/* Index after which the live set is the "kept" set: the last FORWARD and
 * the frees right after it; -1 when there is no FORWARD. */
static int kept_index(const clremat_action *acts, int n)
{
    int k = -1;
    for (int i = 0; i < n; i++)
        if (acts[i].kind == CLREMAT_ACT_FORWARD)
            k = i;
    if (k < 0)
        return -1;
    while (k + 1 < n && (acts[k + 1].kind == CLREMAT_ACT_FREE || acts[k + 1].kind == CLREMAT_ACT_FREE_GRAD))
        k++;
    return k;
}

static int check_end(simstate *st)
{
    const clremat_graph *g = st->g;
    if (!st->updated)
        return clremat_set_error(CLREMAT_ERR_PLAN, "action list of %d actions has no UPDATE", st->p->n_actions);
    for (int L = 0; L < st->n; L++) {
        for (int s = 0; s < st->c[L].n_slots; s++)
            if (st->live[L * S + s])
                return clremat_set_error(CLREMAT_ERR_PLAN,
                                         "action list ends with slot %d of layer '%s' still live (%zu bytes)", s,
                                         g->layers[L].name, st->c[L].slot_bytes[s]);
        if (st->grad[L])
            return clremat_set_error(CLREMAT_ERR_PLAN, "action list ends with the gradient of layer '%s' still live",
                                     g->layers[L].name);
        for (int s = 0; s < S; s++)
            if (st->on_host[L * S + s])
                return clremat_set_error(CLREMAT_ERR_PLAN,
                                         "action list ends with slot %d of layer '%s' still offloaded to the host", s,
                                         g->layers[L].name);
    }
    if (st->bytes != st->p->fixed_bytes)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "simulator: %llu bytes live at the end, fixed is %llu",
                                 (unsigned long long)st->bytes, (unsigned long long)st->p->fixed_bytes);
    return CLREMAT_OK;
}

int clremat_plan_from_actions(const clremat_plan_input *in, const clremat_action *acts, int n,
                              const clremat_policy *p, clremat_plan *out)
{
    const clremat_graph *g = in->g;
    int nl = g->n_layers, st = CLREMAT_OK, kidx;
    simstate s;

    memset(out, 0, sizeof *out);
    memset(&s, 0, sizeof s);
    if (p)
        out->policy = *p;
    if (!acts || n <= 0 || nl <= 0)
        return clremat_set_error(CLREMAT_ERR_PLAN, "empty action list for model '%s'", g->name);
    out->n_layers = nl;
    out->wrapped_layer = calloc((size_t)nl, 1);
    out->wrapped_block = calloc((size_t)g->n_blocks + 1, 1);
    out->kept = calloc((size_t)nl * S, 1);
    out->act_discard = calloc((size_t)nl, 1);
    out->recomputes = calloc((size_t)nl, sizeof(int));
    out->actions = calloc((size_t)n, sizeof *out->actions);
    s.live = calloc((size_t)nl * S, 1);
    s.grad = calloc((size_t)nl, 1);
    s.ran = calloc((size_t)nl, 1);
    s.bwd_done = calloc((size_t)nl, 1);
    s.full_recomputes = calloc((size_t)nl, sizeof(int));
    s.on_host = calloc((size_t)nl * S, 1);
    if (!s.on_host || !out->wrapped_layer || !out->wrapped_block || !out->kept || !out->act_discard || !out->recomputes ||
        !out->actions || !s.live || !s.grad || !s.ran || !s.bwd_done || !s.full_recomputes) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory simulating a plan");
        goto fail;
    }
    out->cap_actions = n;
    s.in = in;
    s.g = g;
    s.c = in->costs;
    s.p = out;
    s.n = nl;
    s.loss = nl - 1;
    s.next_bwd = nl - 1;
    out->fixed_bytes = clremat_plan_fixed_bytes(in, &out->param_bytes);
    clremat_plan_set_accumulate(in, out);
    out->peak_bytes = s.bytes = out->fixed_bytes;
    kidx = kept_index(acts, n);

    for (int i = 0; i < n && st == CLREMAT_OK; i++) {
        clremat_action *a = &out->actions[i];
        memset(a, 0, sizeof *a);
        a->kind = acts[i].kind;
        a->layer = acts[i].layer;
        a->slot = acts[i].slot;
        out->n_actions = i + 1;
        s.idx = i;
        if (a->kind != CLREMAT_ACT_UPDATE && (a->layer < 0 || a->layer >= nl)) {
            st = clremat_set_error(CLREMAT_ERR_PLAN, "action %d (%s): layer index %d out of range [0, %d)", i,
                                   clremat_action_name(a->kind), a->layer, nl);
            break;
        }
        switch (a->kind) {
        case CLREMAT_ACT_FORWARD:
        case CLREMAT_ACT_RECOMPUTE: st = sim_forward(&s, a); break;
        case CLREMAT_ACT_RECOMPUTE_ACT: st = sim_recompute_act(&s, a); break;
        case CLREMAT_ACT_BACKWARD: st = sim_backward(&s, a); break;
        case CLREMAT_ACT_FREE: st = sim_free(&s, a); break;
        case CLREMAT_ACT_FREE_GRAD: st = sim_free_grad(&s, a); break;
        case CLREMAT_ACT_UPDATE: st = sim_update(&s, a); break;
        case CLREMAT_ACT_OFFLOAD:
        case CLREMAT_ACT_FETCH: st = sim_offload(&s, a); break;
        default:
            st = clremat_set_error(CLREMAT_ERR_PLAN, "action %d: unknown kind %d", i, (int)a->kind);
        }
        if (st == CLREMAT_OK && i == kidx) {
            memcpy(out->kept, s.live, (size_t)nl * S);
            out->kept_act_bytes = s.bytes - out->fixed_bytes;
        }
    }
    if (st == CLREMAT_OK)
        st = check_end(&s);
    if (st != CLREMAT_OK)
        goto fail;
    for (int L = 0; L < nl; L++) {
        out->wrapped_layer[L] = s.full_recomputes[L] > 0;
        out->step_flops += in->costs[L].fwd_flops + in->costs[L].bwd_flops;
    }
    out->step_flops += out->recompute_flops;
    for (int b = 0; b < g->n_blocks; b++) {
        int all = 1;
        for (int L = g->blocks[b].first; L <= g->blocks[b].last; L++)
            all &= out->wrapped_layer[L];
        out->wrapped_block[b] = (unsigned char)all;
    }
fail:
    free(s.live);
    free(s.grad);
    free(s.ran);
    free(s.bwd_done);
    free(s.full_recomputes);
    free(s.on_host);
    if (st != CLREMAT_OK)
        clremat_plan_free(out);
    return st;
}

double clremat_plan_recompute_cost(const clremat_plan_input *in, const clremat_plan *plan)
{
    double cost = 0;
    if (!in->layer_cost)
        return plan->recompute_flops;
    for (int i = 0; i < plan->n_actions; i++) {
        const clremat_action *a = &plan->actions[i];
        if (a->kind == CLREMAT_ACT_RECOMPUTE) {
            cost += in->layer_cost[a->layer];
        } else if (a->kind == CLREMAT_ACT_RECOMPUTE_ACT) {
            const clremat_layer_cost *c = &in->costs[a->layer];
            double share = c->fwd_flops > 0 ? (double)(c->slot_bytes[0] / sizeof(float)) / c->fwd_flops : 1.0;
            cost += in->layer_cost[a->layer] * (share < 1.0 ? share : 1.0);
        } else if (a->kind == CLREMAT_ACT_BACKWARD && a->fuse_act_in) {
            /* activations recomputed inside the GEMM: the same elementwise share */
            const clremat_layer *L = &in->g->layers[a->layer];
            for (int k = 0; k < L->n_inputs; k++) {
                const int P = L->inputs[k];
                const clremat_layer_cost *c;
                double share;
                if (!(a->fuse_act_in >> k & 1u) || P < 0)
                    continue;
                c = &in->costs[P];
                share = c->fwd_flops > 0 ? (double)(c->slot_bytes[0] / sizeof(float)) / c->fwd_flops : 1.0;
                cost += in->layer_cost[P] * (share < 1.0 ? share : 1.0);
            }
        }
    }
    return cost;
}
