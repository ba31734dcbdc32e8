/* schedule.c: turns wrap decisions into the step's action list and predicts
 * live bytes after every action (the memory simulator).
 *
 * The rule, following Keras's remat: a wrapped unit (layer or block) keeps
 * only its inputs after its forward; just before its backward its forward is
 * rerun from those inputs, and wrapped units nested inside it are wrapped
 * again within that recomputation. Concretely, with a stack of scopes (the
 * root, then each wrapped unit being recomputed), a tensor stays live while
 *  - the current forward sweep still has a consumer for it, or
 *  - some layer N whose backward has not run reads it in backward, and the
 *    outermost wrapped unit W strictly inside N's scope that contains N (if
 *    any) does not contain the tensor's producer (else W recomputes it), or
 *  - some such N consumes it in forward and W exists and does not contain
 *    its producer (it is an input of a unit that will be recomputed).
 * Activations mode adds: an activation output is not kept for backward; it
 * is recomputed by one elementwise pass right before a backward reads it.
 * A pinned slot (save_dots, the budget search's partial keeps) is kept like
 * a tensor of an unwrapped layer even inside a wrapped unit, so that unit's
 * recomputation skips what it already holds. */
#include "plan.h"
#include "error.h"
#include <stdlib.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS
#define NO_UNIT (-2)
#define ROOT (-1)
#define MAX_DEPTH 128

typedef struct gen {
    const clremat_plan_input *in;
    const clremat_graph *g;
    const clremat_layer_cost *c;
    const unsigned char *wrap_layer, *wrap_block, *act_discard, *pin;
    clremat_plan *p;
    int n, loss;
    int **consumers;            /* per layer: consumer layer indices */
    int *n_consumers;
    unsigned char *live, *recomputed_act, *grad_live, *bwd_done;
    int scope[MAX_DEPTH];
    int depth;
    int sweep_lo, sweep_hi, sweep_pos; /* sweep_lo < 0: no sweep */
    uint64_t live_bytes;
    int err;
} gen;

static int unit_contains(const gen *G, int unit, int layer)
{
    if (unit < 0)
        return unit == ROOT;
    if (unit < G->n)
        return unit == layer;
    return clremat_block_contains(G->g, unit - G->n, layer);
}

/* Innermost scope on the stack containing layer l. */
static int scope_of(const gen *G, int l)
{
    for (int i = G->depth - 1; i >= 0; i--)
        if (unit_contains(G, G->scope[i], l))
            return G->scope[i];
    return ROOT;
}

/* Outermost wrapped unit strictly inside scope s that contains layer l. */
static int wrap_unit(const gen *G, int s, int l)
{
    int chain[64], k = 0;
    if (s >= 0 && s < G->n)
        return NO_UNIT; /* a wrapped layer is not wrapped again inside itself */
    for (int b = G->g->layers[l].block; b >= 0 && k < 64; b = G->g->blocks[b].parent)
        chain[k++] = b;
    /* chain is innermost..outermost; walk outermost first, strictly below s */
    for (int i = k - 1, below = (s == ROOT); i >= 0; i--) {
        if (!below) {
            below = (G->n + chain[i] == s);
            continue;
        }
        if (G->wrap_block[chain[i]])
            return G->n + chain[i];
    }
    if (G->wrap_layer[l])
        return l;
    return NO_UNIT;
}

static int bwd_reads(const gen *G, int N, int P, int s)
{
    const clremat_layer *L = &G->g->layers[N];
    if (N == P && (G->c[N].bwd_needs_slots >> s & 1u))
        return 1;
    if (s != 0)
        return 0;
    for (int i = 0; i < L->n_inputs; i++)
        if (L->inputs[i] == P && (G->c[N].bwd_needs_inputs >> i & 1u))
            return 1;
    return 0;
}

static int fwd_consumes(const gen *G, int N, int P, int s)
{
    const clremat_layer *L = &G->g->layers[N];
    if (s != 0)
        return 0;
    for (int i = 0; i < L->n_inputs; i++)
        if (L->inputs[i] == P)
            return 1;
    return 0;
}

static int check_needer(const gen *G, int N, int P, int s, int discard_act)
{
    int W, pinned = G->pin && (G->pin[P] >> s & 1u);
    if (G->bwd_done[N])
        return 0;
    W = wrap_unit(G, scope_of(G, N), N);
    if (bwd_reads(G, N, P, s) && !discard_act && (pinned || W == NO_UNIT || !unit_contains(G, W, P)))
        return 1;
    if (fwd_consumes(G, N, P, s) && W != NO_UNIT && (pinned || !unit_contains(G, W, P)))
        return 1;
    return 0;
}

static int kept(const gen *G, int P, int s)
{
    int discard_act = s == 0 && G->act_discard && G->act_discard[P] && !G->recomputed_act[P];
    if (P == G->loss && s == 0)
        return 1; /* the loss value is read at the end of the step */
    if (check_needer(G, P, P, s, discard_act))
        return 1;
    for (int k = 0; k < G->n_consumers[P]; k++)
        if (check_needer(G, G->consumers[P][k], P, s, discard_act))
            return 1;
    return 0;
}

static int pending_forward(const gen *G, int P, int s)
{
    if (G->sweep_lo < 0 || s != 0)
        return 0;
    for (int k = 0; k < G->n_consumers[P]; k++) {
        int C = G->consumers[P][k];
        if (C > G->sweep_pos && C <= G->sweep_hi)
            return 1;
    }
    return 0;
}

static clremat_action *push(gen *G, clremat_action_kind kind, int layer)
{
    clremat_plan *p = G->p;
    clremat_action *a;
    if (G->err)
        return NULL;
    if (p->n_actions == p->cap_actions) {
        int cap = p->cap_actions ? 2 * p->cap_actions : 256;
        clremat_action *n = realloc(p->actions, (size_t)cap * sizeof *n);
        if (!n) {
            G->err = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
            return NULL;
        }
        p->actions = n;
        p->cap_actions = cap;
    }
    a = &p->actions[p->n_actions++];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->layer = layer;
    return a;
}

static void note_peak(gen *G, clremat_action *a, uint64_t transient)
{
    a->peak_during = G->live_bytes + transient;
    if (a->peak_during > G->p->peak_bytes)
        G->p->peak_bytes = a->peak_during;
}

static void free_unneeded(gen *G)
{
    for (int P = 0; P < G->n && !G->err; P++)
        for (int s = 0; s < G->c[P].n_slots; s++) {
            clremat_action *a;
            if (!G->live[P * S + s] || kept(G, P, s) || pending_forward(G, P, s))
                continue;
            a = push(G, CLREMAT_ACT_FREE, P);
            if (!a)
                return;
            a->slot = s;
            G->live[P * S + s] = 0;
            if (s == 0)
                G->recomputed_act[P] = 0;
            G->live_bytes -= G->c[P].slot_bytes[s];
            a->peak_during = a->live_after = G->live_bytes;
        }
}

static void need_live(gen *G, int P, int s, int for_layer, const char *why)
{
    if (!G->err && !G->live[P * S + s])
        G->err = clremat_set_error(CLREMAT_ERR_INTERNAL,
            "planner: %s of layer '%s' needs slot %d of '%s', which is not live",
            why, G->g->layers[for_layer].name, s, G->g->layers[P].name);
}

static void emit_forward(gen *G, int L, int recompute)
{
    const clremat_layer *l = &G->g->layers[L];
    const clremat_layer_cost *c = &G->c[L];
    clremat_action *a;
    uint64_t add = 0;
    for (int i = 0; i < l->n_inputs; i++)
        if (l->inputs[i] >= 0)
            need_live(G, l->inputs[i], 0, L, "forward");
    a = push(G, recompute ? CLREMAT_ACT_RECOMPUTE : CLREMAT_ACT_FORWARD, L);
    if (!a)
        return;
    for (int s = 0; s < c->n_slots; s++)
        if (!G->live[L * S + s]) {
            a->alloc_slots |= 1u << s;
            add += c->slot_bytes[s];
            G->live[L * S + s] = 1;
        }
    note_peak(G, a, add + c->fwd_temp_bytes);
    G->live_bytes += add;
    a->live_after = G->live_bytes;
    if (recompute) {
        G->p->recomputes[L]++;
        G->p->recompute_flops += c->fwd_flops;
        G->p->n_recompute_actions++;
    }
}

/* For a recompute sweep over [lo, hi]: whether layer L must run, i.e. it
 * produces a tensor that is not live and is kept afterwards or feeds a layer
 * of the sweep that must run (dead recomputation is skipped). */
static void sweep_needed(gen *G, int lo, int hi, unsigned char *needed)
{
    for (int L = hi; L >= lo; L--) {
        needed[L - lo] = 0;
        for (int s = 0; s < G->c[L].n_slots && !needed[L - lo]; s++) {
            if (G->live[L * S + s])
                continue;
            if (kept(G, L, s))
                needed[L - lo] = 1;
            for (int k = 0; s == 0 && k < G->n_consumers[L] && !needed[L - lo]; k++) {
                int C = G->consumers[L][k];
                if (C <= hi && needed[C - lo])
                    needed[L - lo] = 1;
            }
        }
    }
}

static void sweep(gen *G, int lo, int hi, int recompute)
{
    int save_lo = G->sweep_lo, save_hi = G->sweep_hi, save_pos = G->sweep_pos;
    unsigned char *needed = recompute ? malloc((size_t)(hi - lo + 1)) : NULL;
    if (recompute && !needed) {
        G->err = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        return;
    }
    if (needed)
        sweep_needed(G, lo, hi, needed);
    G->sweep_lo = lo;
    G->sweep_hi = hi;
    for (int L = lo; L <= hi && !G->err; L++) {
        G->sweep_pos = L;
        if (needed && !needed[L - lo])
            continue;
        emit_forward(G, L, recompute);
        free_unneeded(G);
    }
    G->sweep_lo = save_lo;
    G->sweep_hi = save_hi;
    G->sweep_pos = save_pos;
    free(needed);
    free_unneeded(G);
}

static void recompute_act(gen *G, int P)
{
    const clremat_layer_cost *c = &G->c[P];
    clremat_action *a;
    if (c->act_from_input) {
        int in = G->g->layers[P].inputs[c->act_source];
        if (in >= 0) { /* the model input (-1) is fixed memory, always live */
            /* an activation of an activation: recompute the source first */
            if (!G->live[in * S] && G->act_discard && G->act_discard[in])
                recompute_act(G, in);
            need_live(G, in, 0, P, "activation recompute");
        }
    } else
        need_live(G, P, c->act_source, P, "activation recompute");
    a = push(G, CLREMAT_ACT_RECOMPUTE_ACT, P);
    if (!a)
        return;
    a->alloc_slots = 1;
    note_peak(G, a, c->slot_bytes[0]);
    G->live_bytes += c->slot_bytes[0];
    a->live_after = G->live_bytes;
    G->live[P * S] = 1;
    G->recomputed_act[P] = 1;
    G->p->recomputes[P]++;
    G->p->recompute_flops += (double)(c->slot_bytes[0] / sizeof(float));
    G->p->n_recompute_actions++;
}

/* 1 when N's backward can read input i, the activation output of P that
 * is not live, as act(P's pre-activation) inside its GEMM
 * (clremat_plan_act_fusable; simulate.c applies the same rule). */
static int fused_read(const gen *G, int N, int i, int P)
{
    return clremat_plan_act_fusable(G->c, G->g, N, i) && G->live[P * S + G->c[P].act_source];
}

static void emit_backward(gen *G, int N)
{
    const clremat_layer *l = &G->g->layers[N];
    const clremat_layer_cost *c = &G->c[N];
    clremat_action *a;
    uint64_t add = 0;
    unsigned fuse = 0;

    /* what the backward reads must be live: recompute activation outputs,
     * or read them through the GEMM from the pre-activation */
    for (int i = 0; i < l->n_inputs; i++) {
        int P = l->inputs[i];
        if (P < 0 || !(c->bwd_needs_inputs >> i & 1u) || G->live[P * S])
            continue;
        if (fused_read(G, N, i, P)) {
            fuse |= 1u << i;
            continue;
        }
        if (G->act_discard && G->act_discard[P])
            recompute_act(G, P);
        need_live(G, P, 0, N, "backward");
    }
    for (int s = 0; s < c->n_slots; s++) {
        if (!(c->bwd_needs_slots >> s & 1u) || G->live[N * S + s])
            continue;
        if (s == 0 && G->act_discard && G->act_discard[N])
            recompute_act(G, N);
        need_live(G, N, s, N, "backward");
    }
    if (N != G->loss && !G->grad_live[N] && !G->err)
        G->err = clremat_set_error(CLREMAT_ERR_INTERNAL, "planner: gradient of '%s' missing", l->name);
    a = push(G, CLREMAT_ACT_BACKWARD, N);
    if (!a)
        return;
    a->fuse_act_in = fuse;
    for (int i = 0; i < l->n_inputs; i++) {
        int P = l->inputs[i];
        if (fuse >> i & 1u) {
            G->p->n_fused_act_reads++;
            G->p->recompute_flops += (double)(G->c[P].slot_bytes[0] / sizeof(float));
        }
        if (P < 0)
            continue;
        a->want_din |= 1u << i;
        if (!G->grad_live[P]) {
            a->alloc_din |= 1u << i;
            G->grad_live[P] = 1;
            add += G->c[P].slot_bytes[0];
        }
    }
    note_peak(G, a, add + c->bwd_temp_bytes);
    G->live_bytes += add;
    a->live_after = G->live_bytes;
    G->bwd_done[N] = 1;
    if (N != G->loss) {
        a = push(G, CLREMAT_ACT_FREE_GRAD, N);
        if (!a)
            return;
        G->grad_live[N] = 0;
        G->live_bytes -= c->slot_bytes[0];
        a->peak_during = a->live_after = G->live_bytes;
    }
    free_unneeded(G);
}

/* Direct child units of a scope, in layer order: layer l -> l, block b -> n + b. */
static int children(const gen *G, int scope, int *out)
{
    int k = 0, lo = 0, hi = G->n - 1, parent = -1;
    if (scope >= 0 && scope < G->n) {
        out[0] = scope;
        return 1;
    }
    if (scope >= G->n) {
        parent = scope - G->n;
        lo = G->g->blocks[parent].first;
        hi = G->g->blocks[parent].last;
    }
    for (int L = lo; L <= hi; L++) {
        int b = G->g->layers[L].block;
        if (b == parent) {
            out[k++] = L;
            continue;
        }
        while (G->g->blocks[b].parent != parent)
            b = G->g->blocks[b].parent;
        out[k++] = G->n + b;
        L = G->g->blocks[b].last;
    }
    return k;
}

static void backward_units(gen *G, int scope)
{
    int *kids = malloc(sizeof(int) * (size_t)(G->n + 1));
    int k;
    if (!kids) {
        G->err = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        return;
    }
    k = children(G, scope, kids);
    for (int i = k - 1; i >= 0 && !G->err; i--) {
        int u = kids[i];
        int is_layer = u < G->n;
        int wrapped = is_layer ? (u != scope && G->wrap_layer[u]) : G->wrap_block[u - G->n];
        if (!wrapped) {
            if (is_layer)
                emit_backward(G, u);
            else
                backward_units(G, u);
            continue;
        }
        if (G->depth == MAX_DEPTH) {
            G->err = clremat_set_error(CLREMAT_ERR_PLAN, "blocks nested deeper than %d", MAX_DEPTH);
            break;
        }
        G->scope[G->depth++] = u;
        if (is_layer)
            sweep(G, u, u, 1);
        else
            sweep(G, G->g->blocks[u - G->n].first, G->g->blocks[u - G->n].last, 1);
        backward_units(G, u);
        G->depth--;
    }
    free(kids);
}

int clremat_plan_from_flags(const clremat_plan_input *in, const unsigned char *wrap_layer,
                            const unsigned char *wrap_block, const unsigned char *act_discard,
                            clremat_plan *out)
{
    clremat_flagset f = {wrap_layer, wrap_block, act_discard, NULL};
    return clremat_plan_from_flagset(in, &f, out);
}

int clremat_plan_from_flagset(const clremat_plan_input *in, const clremat_flagset *f, clremat_plan *out)
{
    const unsigned char *wrap_layer = f->wrap_layer, *wrap_block = f->wrap_block, *act_discard = f->act_discard;
    gen G;
    const clremat_graph *g = in->g;
    int n = g->n_layers, st = CLREMAT_OK;
    clremat_policy keep_policy = out->policy;

    memset(&G, 0, sizeof G);
    memset(out, 0, sizeof *out);
    out->policy = keep_policy;
    G.in = in;
    G.g = g;
    G.c = in->costs;
    G.wrap_layer = wrap_layer;
    G.wrap_block = wrap_block;
    G.act_discard = act_discard;
    G.pin = f->pin;
    G.p = out;
    G.n = n;
    G.loss = n - 1;
    G.sweep_lo = -1;
    G.scope[G.depth++] = ROOT;
    out->n_layers = n;
    out->wrapped_layer = calloc((size_t)n, 1);
    out->wrapped_block = calloc((size_t)g->n_blocks + 1, 1);
    out->kept = calloc((size_t)n * S, 1);
    out->act_discard = calloc((size_t)n, 1);
    out->recomputes = calloc((size_t)n, sizeof(int));
    G.consumers = calloc((size_t)n, sizeof(int *));
    G.n_consumers = calloc((size_t)n, sizeof(int));
    G.live = calloc((size_t)n * S, 1);
    G.recomputed_act = calloc((size_t)n, 1);
    G.grad_live = calloc((size_t)n, 1);
    G.bwd_done = calloc((size_t)n, 1);
    if (!out->wrapped_layer || !out->wrapped_block || !out->kept || !out->act_discard || !out->recomputes ||
        !G.consumers || !G.n_consumers || !G.live || !G.recomputed_act || !G.grad_live || !G.bwd_done) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        goto fail;
    }
    for (int L = 0; L < n; L++)
        for (int i = 0; i < g->layers[L].n_inputs; i++)
            if (g->layers[L].inputs[i] >= 0)
                G.n_consumers[g->layers[L].inputs[i]]++;
    for (int L = 0; L < n; L++) {
        G.consumers[L] = calloc((size_t)G.n_consumers[L] + 1, sizeof(int));
        if (!G.consumers[L]) {
            st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
            goto fail;
        }
        G.n_consumers[L] = 0;
    }
    for (int L = 0; L < n; L++)
        for (int i = 0; i < g->layers[L].n_inputs; i++) {
            int P = g->layers[L].inputs[i];
            if (P >= 0 && (G.n_consumers[P] == 0 || G.consumers[P][G.n_consumers[P] - 1] != L))
                G.consumers[P][G.n_consumers[P]++] = L;
        }
    for (int b = 0; b < g->n_blocks; b++)
        out->wrapped_block[b] = wrap_block[b] != 0;
    for (int L = 0; L < n; L++) {
        out->act_discard[L] = act_discard ? act_discard[L] : 0;
        out->wrapped_layer[L] = wrap_layer[L] != 0;
        for (int b = g->layers[L].block; b >= 0; b = g->blocks[b].parent)
            if (wrap_block[b])
                out->wrapped_layer[L] = 1;
        out->step_flops += in->costs[L].fwd_flops + in->costs[L].bwd_flops;
    }

    out->fixed_bytes = clremat_plan_fixed_bytes(in, &out->param_bytes);
    clremat_plan_set_accumulate(in, out);
    G.live_bytes = out->fixed_bytes;
    out->peak_bytes = out->fixed_bytes;

    sweep(&G, 0, n - 1, 0);
    for (int t = 0; t < n * S; t++)
        out->kept[t] = G.live[t];
    out->kept_act_bytes = G.live_bytes - out->fixed_bytes;
    backward_units(&G, ROOT);
    if (!G.err) {
        clremat_action *a = push(&G, CLREMAT_ACT_UPDATE, -1);
        if (a)
            a->peak_during = a->live_after = G.live_bytes;
    }
    if (!G.err) { /* release the loss value: the end of the step */
        clremat_action *a = push(&G, CLREMAT_ACT_FREE, G.loss);
        if (a) {
            G.live[G.loss * S] = 0;
            G.live_bytes -= in->costs[G.loss].slot_bytes[0];
            a->peak_during = a->live_after = G.live_bytes;
        }
    }
    if (G.err) {
        st = G.err;
        goto fail;
    }
    if (G.live_bytes != out->fixed_bytes) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "planner: %llu bytes still live at the end of the step",
                               (unsigned long long)(G.live_bytes - out->fixed_bytes));
        goto fail;
    }
    out->step_flops += out->recompute_flops;
fail:
    if (G.consumers)
        for (int L = 0; L < n; L++)
            free(G.consumers[L]);
    free(G.consumers);
    free(G.n_consumers);
    free(G.live);
    free(G.recomputed_act);
    free(G.grad_live);
    free(G.bwd_done);
    if (st != CLREMAT_OK)
        clremat_plan_free(out);
    return st;
}

void clremat_plan_free(clremat_plan *p)
{
    free(p->wrapped_layer);
    free(p->wrapped_block);
    free(p->kept);
    free(p->act_discard);
    free(p->recomputes);
    free(p->actions);
    free(p->variant);
    p->variant = NULL;
    p->wrapped_layer = p->wrapped_block = p->kept = p->act_discard = NULL;
    p->recomputes = NULL;
    p->actions = NULL;
    p->n_actions = p->cap_actions = 0;
}

const char *clremat_action_name(clremat_action_kind k)
{
    switch (k) {
    case CLREMAT_ACT_FORWARD: return "forward";
    case CLREMAT_ACT_RECOMPUTE: return "recompute";
    case CLREMAT_ACT_RECOMPUTE_ACT: return "recompute_activation";
    case CLREMAT_ACT_BACKWARD: return "backward";
    case CLREMAT_ACT_FREE: return "free";
    case CLREMAT_ACT_FREE_GRAD: return "free_grad";
    case CLREMAT_ACT_UPDATE: return "update";
    case CLREMAT_ACT_OFFLOAD: return "offload";
    case CLREMAT_ACT_FETCH: return "fetch";
    }
    return "?";
}
