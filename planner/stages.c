/* stages.c: cuts a graph into a chain of stages at single-tensor cut points
 * (a residual block becomes one stage), runs the rotor model's stage
 * operations as layer actions, and measures each operation's memory
 * profile with that same code, so the budget DP's memory model and the
 * emitted schedule cannot disagree. */
#include "stages.h"
#include "error.h"
#include <stdlib.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS

static int64_t gcd64(int64_t a, int64_t b)
{
    if (a < 0)
        a = -a;
    if (b < 0)
        b = -b;
    while (b) {
        int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

void clremat_stages_free(clremat_stages *st)
{
    free(st->lo);
    free(st->hi);
    free(st->stage_of);
    free(st->lastfwd);
    free(st->minbwd);
    free(st->in_lastfwd);
    free(st->in_minbwd);
    free(st->outneed);
    free(st->inneed);
    free(st->A);
    free(st->fcost);
    free(st->fcleaf);
    free(st->fn);
    free(st->fk);
    free(st->fac);
    free(st->fal);
    free(st->bwd);
    memset(st, 0, sizeof *st);
}

int64_t clremat_stages_net(const clremat_stages *st, int s, int t, int keep)
{
    int64_t net = 0;
    if (s > 0 && keep)
        net += st->A[s - 1]; /* input gradient next to the kept input (else it replaces it) */
    if (t < st->K - 1)
        net -= st->A[t];     /* output gradient consumed */
    else
        net += st->A[t];     /* the loss value stays */
    return net;
}

/* ------------------------------------------------------------ the executor */

int clremat_sx_init(clremat_sx *x, const clremat_stages *st, int emit)
{
    memset(x, 0, sizeof *x);
    x->st = st;
    x->emit = emit;
    x->live = calloc((size_t)st->n * S, 1);
    x->grad = calloc((size_t)st->n, 1);
    x->ran = calloc((size_t)st->n, 1);
    if (!x->live || !x->grad || !x->ran) {
        clremat_sx_free(x);
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
    }
    return CLREMAT_OK;
}

void clremat_sx_free(clremat_sx *x)
{
    free(x->live);
    free(x->grad);
    free(x->ran);
    free(x->acts);
    memset(x, 0, sizeof *x);
}

static void act(clremat_sx *x, clremat_action_kind kind, int layer, int slot)
{
    clremat_action *a;
    if (!x->emit || x->err)
        return;
    if (x->n_acts == x->cap_acts) {
        int cap = x->cap_acts ? 2 * x->cap_acts : 512;
        clremat_action *n = realloc(x->acts, (size_t)cap * sizeof *n);
        if (!n) {
            x->err = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
            return;
        }
        x->acts = n;
        x->cap_acts = cap;
    }
    a = &x->acts[x->n_acts++];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->layer = layer;
    a->slot = slot;
}

static void note(clremat_sx *x, int64_t during)
{
    if (during > x->peak)
        x->peak = during;
}

static void drop(clremat_sx *x, int P, int s)
{
    if (!x->live[P * S + s])
        return;
    x->live[P * S + s] = 0;
    x->bytes -= (int64_t)x->st->in->costs[P].slot_bytes[s];
    act(x, CLREMAT_ACT_FREE, P, s);
}

void clremat_sx_forward(clremat_sx *x, int i, int all, int keep_in, int keep_out)
{
    const clremat_stages *st = x->st;
    const clremat_graph *g = st->in->g;
    const clremat_layer_cost *c = st->in->costs;
    int lo = st->lo[i], hi = st->hi[i], loss = st->n - 1, inp = i > 0 ? st->hi[i - 1] : -1;
    unsigned char *needed = calloc((size_t)(hi - lo + 1), 1);

    if (!needed) {
        x->err = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        return;
    }
    /* a rerun layer runs only if it produces a tensor, not live yet, that is
     * kept after the operation or read by a later layer that runs (no dead
     * recomputation); a layer's first run always happens */
    for (int L = hi; L >= lo; L--) {
        int need = !x->ran[L];
        for (int s = 0; s < c[L].n_slots && !need; s++)
            if (!x->live[L * S + s])
                need = (L == hi && s == 0 && keep_out) || (L == loss && s == 0) ||
                       (all && st->minbwd[L * S + s] >= 0);
        needed[L - lo] |= (unsigned char)need;
        if (!needed[L - lo])
            continue;
        for (int k = 0; k < g->layers[L].n_inputs; k++) {
            int P = g->layers[L].inputs[k];
            if (P >= lo && !x->live[P * S])
                needed[P - lo] = 1;
        }
    }
    for (int L = lo; L <= hi; L++) {
        const clremat_layer *l = &g->layers[L];
        int64_t add = 0;
        if (!needed[L - lo])
            continue;
        for (int s = 0; s < c[L].n_slots; s++)
            if (!x->live[L * S + s]) {
                x->live[L * S + s] = 1;
                add += (int64_t)c[L].slot_bytes[s];
            }
        act(x, x->ran[L] ? CLREMAT_ACT_RECOMPUTE : CLREMAT_ACT_FORWARD, L, 0);
        x->ran[L] = 1;
        x->ran_cost += st->in->layer_cost ? st->in->layer_cost[L] : c[L].fwd_flops;
        x->bytes += add;
        note(x, x->bytes + (int64_t)c[L].fwd_temp_bytes);
        /* what L produced, then what L read: free what nothing ahead needs */
        for (int s = 0; s < c[L].n_slots; s++) {
            int need = (s == 0 && st->lastfwd[L] > L) || (L == hi && s == 0 && keep_out) ||
                       (L == loss && s == 0) || (all && st->minbwd[L * S + s] >= 0);
            if (!need)
                drop(x, L, s);
        }
        for (int k = 0; k < l->n_inputs; k++) {
            int P = l->inputs[k];
            int need;
            if (P < 0)
                continue;
            if (P == inp)
                need = keep_in || st->in_lastfwd[i] > L || (all && st->in_minbwd[i] >= 0);
            else
                need = st->lastfwd[P] > L || (P == hi && keep_out) || (all && st->minbwd[P * S] >= 0);
            if (!need)
                drop(x, P, 0);
        }
    }
    /* what skipped layers left, or kept for a consumer that was skipped:
     * the same rules, the sweep being over */
    for (int L = lo; L <= hi; L++)
        for (int s = 0; s < c[L].n_slots; s++)
            if (!((L == hi && s == 0 && keep_out) || (L == loss && s == 0) || (all && st->minbwd[L * S + s] >= 0)))
                drop(x, L, s);
    if (inp >= 0 && !(keep_in || (all && st->in_minbwd[i] >= 0)))
        drop(x, inp, 0);
    free(needed);
}

void clremat_sx_backward(clremat_sx *x, int i, int keep_in)
{
    const clremat_stages *st = x->st;
    const clremat_graph *g = st->in->g;
    const clremat_layer_cost *c = st->in->costs;
    int lo = st->lo[i], hi = st->hi[i], loss = st->n - 1, inp = i > 0 ? st->hi[i - 1] : -1;

    for (int N = hi; N >= lo; N--) {
        const clremat_layer *l = &g->layers[N];
        int64_t add = 0;
        for (int k = 0; k < l->n_inputs; k++) {
            int P = l->inputs[k];
            if (P >= 0 && !x->grad[P]) {
                x->grad[P] = 1;
                add += (int64_t)c[P].slot_bytes[0];
            }
        }
        act(x, CLREMAT_ACT_BACKWARD, N, 0);
        x->bytes += add;
        note(x, x->bytes + (int64_t)c[N].bwd_temp_bytes);
        if (N != loss) {
            x->grad[N] = 0;
            x->bytes -= (int64_t)c[N].slot_bytes[0];
            act(x, CLREMAT_ACT_FREE_GRAD, N, 0);
        }
        for (int s = 0; s < c[N].n_slots; s++)
            if (!(N == loss && s == 0) && st->minbwd[N * S + s] <= N)
                drop(x, N, s);
        for (int k = 0; k < l->n_inputs; k++) {
            int P = l->inputs[k];
            if (P < 0)
                continue;
            if (P == inp) {
                if (!keep_in && st->in_minbwd[i] == N)
                    drop(x, P, 0);
            } else if (st->minbwd[P * S] == N) {
                drop(x, P, 0);
            }
        }
    }
}

void clremat_sx_finish(clremat_sx *x)
{
    int loss = x->st->n - 1;
    act(x, CLREMAT_ACT_UPDATE, -1, 0);
    drop(x, loss, 0);
}

/* ------------------------------------------------------------ cutting */

/* Layers k after which exactly one tensor, out(k), is read by later layers.
 * Writes 1 into cut[k]; cut[n-1] = 1 (the end). */
static int find_cuts(const clremat_graph *g, unsigned char *cut)
{
    int n = g->n_layers, crossing = 0, st = CLREMAT_OK;
    int *maxuse = malloc(sizeof(int) * (size_t)n), *ending = calloc((size_t)n + 1, sizeof(int));
    if (!maxuse || !ending) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        goto done;
    }
    for (int L = 0; L < n; L++)
        maxuse[L] = -1;
    for (int L = 0; L < n; L++)
        for (int k = 0; k < g->layers[L].n_inputs; k++) {
            int P = g->layers[L].inputs[k];
            if (P >= 0 && L > maxuse[P])
                maxuse[P] = L;
        }
    for (int L = 0; L < n - 1; L++)
        if (maxuse[L] < 0) {
            st = clremat_set_error(CLREMAT_ERR_PLAN,
                                   "budget planner: the output of layer '%s' is never used (model '%s')",
                                   g->layers[L].name, g->name);
            goto done;
        }
    for (int L = 0; L < n; L++)
        if (maxuse[L] >= 0)
            ending[maxuse[L]]++;
    /* crossing after k: tensors P <= k with maxuse[P] > k */
    for (int k = 0; k < n - 1; k++) {
        crossing += (maxuse[k] > k) - ending[k];
        cut[k] = crossing == 1 && maxuse[k] > k;
    }
    cut[n - 1] = 1;
done:
    free(maxuse);
    free(ending);
    return st;
}

static int alloc_arrays(clremat_stages *st, int K)
{
    int n = st->n;
    st->lo = calloc((size_t)K, sizeof(int));
    st->hi = calloc((size_t)K, sizeof(int));
    st->stage_of = calloc((size_t)n, sizeof(int));
    st->lastfwd = calloc((size_t)n, sizeof(int));
    st->minbwd = calloc((size_t)n * S, sizeof(int));
    st->in_lastfwd = calloc((size_t)K, sizeof(int));
    st->in_minbwd = calloc((size_t)K, sizeof(int));
    st->outneed = calloc((size_t)K, 1);
    st->inneed = calloc((size_t)K, 1);
    st->A = calloc((size_t)K, sizeof(int64_t));
    st->fcost = calloc((size_t)K, sizeof(double));
    st->fcleaf = calloc((size_t)K * 2, sizeof(double));
    st->fn = calloc((size_t)K, sizeof(clremat_prof));
    st->fk = calloc((size_t)K, sizeof(clremat_prof));
    st->fac = calloc((size_t)K * 2, sizeof(clremat_prof));
    st->fal = calloc((size_t)K * 2, sizeof(clremat_prof));
    st->bwd = calloc((size_t)K * 2, sizeof(clremat_prof));
    if (!st->lo || !st->hi || !st->stage_of || !st->lastfwd || !st->minbwd || !st->in_lastfwd ||
        !st->in_minbwd || !st->outneed || !st->inneed || !st->A || !st->fcost || !st->fcleaf || !st->fn || !st->fk ||
        !st->fac || !st->fal || !st->bwd)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
    return CLREMAT_OK;
}

/* Who reads what, per stage. */
static void analyse(clremat_stages *st)
{
    const clremat_graph *g = st->in->g;
    const clremat_layer_cost *c = st->in->costs;
    for (int i = 0; i < st->K; i++)
        for (int L = st->lo[i]; L <= st->hi[i]; L++)
            st->stage_of[L] = i;
    for (int L = 0; L < st->n; L++) {
        st->lastfwd[L] = -1;
        for (int s = 0; s < S; s++)
            st->minbwd[L * S + s] = -1;
    }
    for (int i = 0; i < st->K; i++) {
        st->in_lastfwd[i] = -1;
        st->in_minbwd[i] = -1;
    }
    /* walking down, the last write of a "lowest reader" wins */
    for (int N = st->n - 1; N >= 0; N--) {
        int i = st->stage_of[N];
        const clremat_layer *l = &g->layers[N];
        for (int s = 0; s < c[N].n_slots; s++)
            if (c[N].bwd_needs_slots >> s & 1u)
                st->minbwd[N * S + s] = N;
        for (int k = 0; k < l->n_inputs; k++) {
            int P = l->inputs[k];
            if (P < 0)
                continue;
            if (st->stage_of[P] == i) {
                if (N > st->lastfwd[P])
                    st->lastfwd[P] = N;
                if (c[N].bwd_needs_inputs >> k & 1u)
                    st->minbwd[P * S] = N;
            } else { /* the stage input */
                if (N > st->in_lastfwd[i])
                    st->in_lastfwd[i] = N;
                if (c[N].bwd_needs_inputs >> k & 1u)
                    st->in_minbwd[i] = N;
            }
        }
    }
    st->total_fcost = 0;
    for (int i = 0; i < st->K; i++) {
        st->outneed[i] = st->minbwd[st->hi[i] * S] >= 0;
        st->inneed[i] = st->in_minbwd[i] >= 0;
        st->A[i] = (int64_t)c[st->hi[i]].slot_bytes[0];
        st->fcost[i] = 0;
        for (int L = st->lo[i]; L <= st->hi[i]; L++)
            st->fcost[i] += st->in->layer_cost ? st->in->layer_cost[L] : c[L].fwd_flops;
        st->total_fcost += st->fcost[i];
    }
}

/* Clears what an isolated profile run touched. */
static void reset(clremat_sx *x, int i)
{
    const clremat_stages *st = x->st;
    int from = i > 0 ? st->hi[i - 1] : st->lo[i];
    for (int L = from; L <= st->hi[i]; L++) {
        memset(x->live + (size_t)L * S, 0, S);
        x->grad[L] = 0;
    }
    x->bytes = x->peak = 0;
}

static clremat_prof take(const clremat_sx *x)
{
    clremat_prof p = {x->peak, x->bytes};
    return p;
}

/* Runs every operation of every stage alone from its start state. */
static int profile(clremat_stages *st)
{
    const clremat_layer_cost *c = st->in->costs;
    clremat_sx x;
    int64_t gu = 0;
    int rc = clremat_sx_init(&x, st, 0);
    if (rc != CLREMAT_OK)
        return rc;
    for (int i = 0; i < st->K; i++) {
        int inp = i > 0 ? st->hi[i - 1] : -1;
#define START_FWD() do { reset(&x, i); if (inp >= 0) x.live[inp * S] = 1; } while (0)
        START_FWD();
        clremat_sx_forward(&x, i, 0, 0, 1);
        st->fn[i] = take(&x);
        START_FWD();
        clremat_sx_forward(&x, i, 0, 1, 1);
        st->fk[i] = take(&x);
        for (int k = 0; k < 2; k++) {
            START_FWD();
            clremat_sx_forward(&x, i, 1, k, 1);
            st->fac[2 * i + k] = take(&x);
            START_FWD();
            x.ran_cost = 0;
            clremat_sx_forward(&x, i, 1, k, st->outneed[i]);
            st->fal[2 * i + k] = take(&x);
            st->fcleaf[2 * i + k] = x.ran_cost;
            /* the backward starts where the leaf forward ended */
            reset(&x, i);
            for (int L = st->lo[i]; L <= st->hi[i]; L++)
                for (int s = 0; s < c[L].n_slots; s++)
                    x.live[L * S + s] = st->minbwd[L * S + s] >= 0 || (L == st->n - 1 && s == 0);
            if (inp >= 0)
                x.live[inp * S] = k || st->inneed[i];
            if (st->hi[i] != st->n - 1)
                x.grad[st->hi[i]] = 1;
            clremat_sx_backward(&x, i, k);
            st->bwd[2 * i + k] = take(&x);
        }
#undef START_FWD
        reset(&x, i);
        for (int k = 0; k < 2; k++) {
            /* self-check: leaf forward + backward leave exactly the model's net */
            int64_t net = st->fal[2 * i + k].net + st->bwd[2 * i + k].net;
            if (net != clremat_stages_net(st, i, i, k)) {
                clremat_sx_free(&x);
                return clremat_set_error(CLREMAT_ERR_INTERNAL,
                                         "budget planner: stage %d ('%s'..'%s') nets %lld bytes, model says %lld", i,
                                         st->in->g->layers[st->lo[i]].name, st->in->g->layers[st->hi[i]].name,
                                         (long long)net, (long long)clremat_stages_net(st, i, i, k));
            }
        }
        gu = gcd64(gu, st->A[i]);
        gu = gcd64(gu, gcd64(st->fn[i].peak, st->fn[i].net));
        gu = gcd64(gu, gcd64(st->fk[i].peak, st->fk[i].net));
        for (int k = 0; k < 2; k++) {
            gu = gcd64(gu, gcd64(st->fac[2 * i + k].peak, st->fac[2 * i + k].net));
            gu = gcd64(gu, gcd64(st->fal[2 * i + k].peak, st->fal[2 * i + k].net));
            gu = gcd64(gu, gcd64(st->bwd[2 * i + k].peak, st->bwd[2 * i + k].net));
        }
    }
    clremat_sx_free(&x);
    st->unit_gcd = gu > 0 ? gu : 1;
    return CLREMAT_OK;
}

int clremat_stages_build(const clremat_plan_input *in, int max_stages, clremat_stages *st)
{
    const clremat_graph *g = in->g;
    int n = g->n_layers, K = 0, rc, loss_alone;
    unsigned char *cut = calloc((size_t)n, 1);
    int *ends = NULL;

    memset(st, 0, sizeof *st);
    st->in = in;
    st->n = n;
    if (!cut)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
    if ((rc = find_cuts(g, cut)) != CLREMAT_OK)
        goto done;
    for (int L = 0; L < n; L++)
        K += cut[L];
    ends = malloc(sizeof(int) * (size_t)K);
    if (!ends) {
        rc = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        goto done;
    }
    K = 0;
    for (int L = 0; L < n; L++)
        if (cut[L])
            ends[K++] = L;
    /* too many stages for the DP: merge adjacent non-loss stages evenly */
    loss_alone = K >= 2 && ends[K - 2] == n - 2;
    if (max_stages >= 2 && K > max_stages) {
        int body = loss_alone ? K - 1 : K, groups = loss_alone ? max_stages - 1 : max_stages, m = 0;
        for (int gi = 0; gi < groups; gi++) {
            int last = (int)(((int64_t)(gi + 1) * body) / groups) - 1;
            ends[m++] = ends[last];
        }
        if (loss_alone)
            ends[m++] = n - 1;
        K = m;
    }
    st->K = K;
    if ((rc = alloc_arrays(st, K)) != CLREMAT_OK)
        goto done;
    for (int i = 0; i < K; i++) {
        st->lo[i] = i ? ends[i - 1] + 1 : 0;
        st->hi[i] = ends[i];
    }
    analyse(st);
    rc = profile(st);
done:
    free(cut);
    free(ends);
    if (rc != CLREMAT_OK)
        clremat_stages_free(st);
    return rc;
}
