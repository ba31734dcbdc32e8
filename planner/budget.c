/* budget.c: budget:BYTES and auto. The optimal persistent checkpointing
 * schedule for heterogeneous chains (Beaumont, Eyraud-Dubois, Herrmann,
 * Joly, Shilova, "Optimal checkpointing for heterogeneous chains", the rotor
 * algorithm) over the graph's stages (stages.c), Chen et al.'s sqrt(n)
 * baseline over the same stages, and the choice among those and the Keras
 * modes. Memory model, discretization and fallbacks: docs/ARCHITECTURE.md.
 *
 * Solve(s, t, k) runs the backward of stages s..t given their input a[s-1]
 * and the gradient of their output live; it leaves the input gradient (and
 * keeps a[s-1] when k, else frees it after its last use). Its options:
 *  - s == t: forward keeping what the backward reads, then the backward;
 *  - chain: forward stage s keeping everything, Solve(s+1, t), backward s;
 *  - leaf j (s < j <= t): forward s keeping its input, forward s+1..j-1
 *    dropping each input, Solve(j, t, 0), then Solve(s, j-1, k).
 * Peaks compose exactly from the operations' profiles (stages.h). */
#include "budget_solver.h"
#include "error.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STAGES 96           /* beyond: adjacent stages merged (stages.c) */
#define MIN_SLOTS 512           /* memory units of the table, at least */
#ifndef CLREMAT_MAX_SLOTS_TABLE
#define MAX_SLOTS 32768
#else
#define MAX_SLOTS CLREMAT_MAX_SLOTS_TABLE
#endif
#ifndef CLREMAT_TABLE_WORK
#define CLREMAT_TABLE_WORK 8e7  /* inner-loop steps of the table (~0.1-0.2 s); -D for experiments */
#endif
#define CAND_MAX_LAYERS 400     /* schedule.c candidates (quadratic) only up to this size */
#define RETRIES 30

enum { CAND_NONE = 0, CAND_FULL, CAND_ACT, CAND_SQRT };
static const char *const cand_name[4] = {"none", "full", "activations", "sqrt"};

static int64_t cdiv(int64_t x, int64_t u)
{
    return x >= 0 ? (x + u - 1) / u : -((-x) / u);
}

static int64_t max3(int64_t a, int64_t b, int64_t c)
{
    int64_t m = a > b ? a : b;
    return m > c ? m : c;
}

static size_t tri(int s, int t)
{
    return (size_t)t * (size_t)(t + 1) / 2 + (size_t)s;
}

static size_t seg(const clremat_bsolver *b, int k, int s, int t)
{
    return (size_t)k * ((size_t)b->K * (size_t)(b->K + 1) / 2) + tri(s, t);
}

static int64_t net(const clremat_bsolver *b, int s, int t, int k)
{
    return clremat_stages_net(&b->st, s, t, k);
}

/* ------------------------------------------------------------ min peak */

static int64_t base_peak(const clremat_stages *st, int s, int k)
{
    const clremat_prof *f = &st->fal[2 * s + k], *bw = &st->bwd[2 * s + k];
    return f->peak > f->net + bw->peak ? f->peak : f->net + bw->peak;
}

static int min_peak_dp(clremat_bsolver *b)
{
    const clremat_stages *st = &b->st;
    size_t n = (size_t)b->nk * (size_t)b->K * (size_t)(b->K + 1) / 2;
    b->mp = malloc(n * sizeof *b->mp);
    b->mc = malloc(n * sizeof *b->mc);
    b->mw = malloc(n * sizeof *b->mw);
    if (!b->mp || !b->mc || !b->mw)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
    for (int d = 0; d < b->K; d++)
        for (int s = 0; s + d < b->K; s++)
            for (int k = 0; k < b->nk; k++) {
                int t = s + d, o = st->outneed[s] && b->nk > 1;
                size_t at = seg(b, k, s, t);
                int64_t bp, p, pf, offf;
                double bc, c, fsum;
                short bw = 0;
                if (d == 0) {
                    b->mp[at] = base_peak(st, s, k);
                    b->mc[at] = st->fcleaf[2 * s + k];
                    b->mw[at] = 0;
                    continue;
                }
                { /* chain */
                    const clremat_prof *fa = &st->fac[2 * s + k];
                    size_t sub = seg(b, o, s + 1, t);
                    bp = max3(fa->peak, fa->net + b->mp[sub], fa->net + net(b, s + 1, t, o) + st->bwd[2 * s + k].peak);
                    bc = st->fcost[s] + b->mc[sub];
                }
                pf = st->fk[s].peak;
                offf = st->fk[s].net;
                fsum = st->fcost[s];
                for (int j = s + 1; j <= t; j++) {
                    size_t s1 = seg(b, 0, j, t), s2 = seg(b, k, s, j - 1);
                    if (j > s + 1) {
                        int64_t q = offf + st->fn[j - 1].peak;
                        pf = pf > q ? pf : q;
                        offf += st->fn[j - 1].net;
                        fsum += st->fcost[j - 1];
                    }
                    p = max3(pf, offf + b->mp[s1], offf + net(b, j, t, 0) + b->mp[s2]);
                    c = fsum + b->mc[s1] + b->mc[s2];
                    if (p < bp || (p == bp && c < bc)) {
                        bp = p;
                        bc = c;
                        bw = (short)j;
                    }
                }
                b->mp[at] = bp;
                b->mc[at] = bc;
                b->mw[at] = bw;
            }
    return CLREMAT_OK;
}

/* ------------------------------------------------------------ least cost */

/* The hot loop: C[m] = min(C[m], fsum + s1[m - sh1] + s2[m - sh2]) for m in
 * [from, smax], indices above smax clamped to smax (more memory than the
 * table holds buys nothing more). Unclamped part first, without branches. */
static void leaf_row(double *restrict C, short *restrict W, short j, double fsum, const double *s1, int64_t sh1,
                     const double *s2, int64_t sh2, int64_t from, int64_t smax)
{
    int64_t end = smax, m;
    if (smax + sh1 < end)
        end = smax + sh1;
    if (smax + sh2 < end)
        end = smax + sh2;
    for (m = from; m <= end; m++) {
        double v = fsum + s1[m - sh1] + s2[m - sh2];
        int take = v < C[m];
        C[m] = take ? v : C[m];
        W[m] = take ? j : W[m];
    }
    for (m = end + 1 > from ? end + 1 : from; m <= smax; m++) {
        int64_t m1 = m - sh1, m2 = m - sh2;
        double v = fsum + s1[m1 > smax ? smax : m1] + s2[m2 > smax ? smax : m2];
        if (v < C[m]) {
            C[m] = v;
            W[m] = j;
        }
    }
}

int clremat_bsolver_table(clremat_bsolver *b, uint64_t max_budget)
{
    const clremat_stages *st = &b->st;
    int K = b->K;
    int64_t avail = max_budget > b->fixed ? (int64_t)(max_budget - b->fixed) : 0;
    double work = (double)b->nk * (double)K * K * K / 6.0 + (double)K * K + 1.0;
    int64_t scap = (int64_t)(CLREMAT_TABLE_WORK / work);
    size_t rows, row;
    free(b->C);
    free(b->W);
    b->C = NULL;
    b->W = NULL;
    if (scap < MIN_SLOTS)
        scap = MIN_SLOTS;
    if (scap > MAX_SLOTS)
        scap = MAX_SLOTS;
    if (avail / st->unit_gcd <= scap) {
        b->unit = st->unit_gcd;
        b->smax = (int)(avail / st->unit_gcd);
        b->exact = 1;
    } else {
        b->unit = cdiv(avail, scap);
        b->smax = (int)(scap + scap / 8); /* headroom for slack recovery */
        b->exact = 0;
    }
    row = (size_t)b->smax + 1;
    rows = (size_t)b->nk * (size_t)K * (size_t)(K + 1) / 2;
    b->C = malloc(rows * row * sizeof *b->C);
    b->W = malloc(rows * row * sizeof *b->W);
    if (!b->C || !b->W)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning (%zu x %zu table)", rows, row);

    for (int d = 0; d < K; d++)
        for (int s = 0; s + d < K; s++)
            for (int k = 0; k < b->nk; k++) {
                int t = s + d, o = st->outneed[s] && b->nk > 1, smax = b->smax;
                int64_t u = b->unit;
                double *C = b->C + seg(b, k, s, t) * row;
                short *W = b->W + seg(b, k, s, t) * row;
                for (int m = 0; m < (int)row; m++) {
                    C[m] = HUGE_VAL;
                    W[m] = -1;
                }
                if (d == 0) {
                    for (int64_t m = cdiv(base_peak(st, s, k), u); m <= smax; m++) {
                        C[m] = st->fcleaf[2 * s + k];
                        W[m] = 0;
                    }
                    continue;
                }
                { /* chain */
                    const clremat_prof *fa = &st->fac[2 * s + k];
                    const double *sub = b->C + seg(b, o, s + 1, t) * row;
                    int64_t lim = cdiv(fa->peak, u), sh = cdiv(fa->net, u);
                    int64_t l2 = cdiv(fa->net + net(b, s + 1, t, o) + st->bwd[2 * s + k].peak, u);
                    if (l2 > lim)
                        lim = l2;
                    if (sh > lim)
                        lim = sh;
                    for (int64_t m = lim < 0 ? 0 : lim; m <= smax; m++) {
                        int64_t mm = m - sh;
                        double v = st->fcost[s] + sub[mm > smax ? smax : mm];
                        if (v < C[m]) {
                            C[m] = v;
                            W[m] = 0;
                        }
                    }
                }
                {
                    int64_t pf = st->fk[s].peak, offf = st->fk[s].net;
                    double fsum = st->fcost[s];
                    for (int j = s + 1; j <= t; j++) {
                        const double *s1 = b->C + seg(b, 0, j, t) * row, *s2 = b->C + seg(b, k, s, j - 1) * row;
                        int64_t lim, sh1, sh2;
                        if (j > s + 1) {
                            int64_t q = offf + st->fn[j - 1].peak;
                            pf = pf > q ? pf : q;
                            offf += st->fn[j - 1].net;
                            fsum += st->fcost[j - 1];
                        }
                        lim = cdiv(pf, u);
                        sh1 = cdiv(offf, u);
                        sh2 = cdiv(offf + net(b, j, t, 0), u);
                        if (sh1 > lim)
                            lim = sh1;
                        if (sh2 > lim)
                            lim = sh2;
                        leaf_row(C, W, (short)j, fsum, s1, sh1, s2, sh2, lim < 0 ? 0 : lim, smax);
                    }
                }
            }
    return CLREMAT_OK;
}

/* ------------------------------------------------------------ schedules */

enum { BY_TABLE, BY_MIN_PEAK, BY_SQRT };

typedef struct recon {
    const clremat_bsolver *b;
    clremat_sx x;
    int mode, seglen;
} recon;

static int choose(const recon *r, int s, int t, int k, int64_t m)
{
    const clremat_bsolver *b = r->b;
    switch (r->mode) {
    case BY_TABLE:
        if (m < 0)
            return -1;
        if (m > b->smax)
            m = b->smax;
        return b->W[seg(b, k, s, t) * ((size_t)b->smax + 1) + (size_t)m];
    case BY_MIN_PEAK:
        return b->mw[seg(b, k, s, t)];
    default:
        for (int j = s + 1; j <= t; j++)
            if (j % r->seglen == 0 || j == b->K - 1)
                return j;
        return 0;
    }
}

static int emit(recon *r, int s, int t, int k, int64_t m)
{
    const clremat_stages *st = &r->b->st;
    int64_t u = r->b->unit > 0 ? r->b->unit : 1;
    int ch = choose(r, s, t, k, m), rc;
    if (ch < 0 || (ch > 0 && (ch <= s || ch > t)))
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "budget planner: no choice for stages %d..%d", s, t);
    if (s == t) {
        clremat_sx_forward(&r->x, s, 1, k, st->outneed[s]);
        clremat_sx_backward(&r->x, s, k);
    } else if (ch == 0) {
        int o = st->outneed[s] && r->b->nk > 1;
        clremat_sx_forward(&r->x, s, 1, k, 1);
        if ((rc = emit(r, s + 1, t, o, m - cdiv(st->fac[2 * s + k].net, u))) != CLREMAT_OK)
            return rc;
        clremat_sx_backward(&r->x, s, k);
    } else {
        int64_t offf = st->fk[s].net;
        clremat_sx_forward(&r->x, s, 0, 1, 1);
        for (int i = s + 1; i < ch; i++) {
            clremat_sx_forward(&r->x, i, 0, 0, 1);
            offf += st->fn[i].net;
        }
        if ((rc = emit(r, ch, t, 0, m - cdiv(offf, u))) != CLREMAT_OK)
            return rc;
        if ((rc = emit(r, s, ch - 1, k, m - cdiv(offf + net(r->b, ch, t, 0), u))) != CLREMAT_OK)
            return rc;
    }
    return r->x.err;
}

/* Emits the schedule and runs it through the simulator. */
static int schedule(const clremat_bsolver *b, int mode, int64_t m, const char *text, clremat_plan *out)
{
    recon r;
    clremat_policy pol;
    int rc;
    memset(&r, 0, sizeof r);
    r.b = b;
    r.mode = mode;
    r.seglen = (int)ceil(sqrt((double)(b->K > 1 ? b->K - 1 : 1)));
    if (r.seglen < 1)
        r.seglen = 1;
    if ((rc = clremat_sx_init(&r.x, &b->st, 1)) != CLREMAT_OK)
        return rc;
    rc = emit(&r, 0, b->K - 1, 0, m);
    clremat_sx_finish(&r.x);
    if (rc == CLREMAT_OK)
        rc = r.x.err;
    memset(&pol, 0, sizeof pol);
    pol.kind = CLREMAT_POLICY_BUDGET;
    snprintf(pol.text, sizeof pol.text, "%s", text);
    if (rc == CLREMAT_OK)
        rc = clremat_plan_from_actions(b->in, r.x.acts, r.x.n_acts, &pol, out);
    /* a stage rerun may feed only layers the next rerun skips: drop such
     * dead recomputation, simulating again after each removal */
    while (rc == CLREMAT_OK) {
        int n = clremat_actions_drop_dead(b->in, out->actions, out->n_actions);
        if (n == out->n_actions)
            break;
        memcpy(r.x.acts, out->actions, sizeof *r.x.acts * (size_t)n);
        clremat_plan_free(out);
        rc = clremat_plan_from_actions(b->in, r.x.acts, n, &pol, out);
    }
    clremat_sx_free(&r.x);
    return rc;
}

/* ------------------------------------------------------------ the solver */

static int candidate(clremat_bsolver *b, int which)
{
    clremat_policy p;
    int rc;
    if (which == CAND_SQRT) {
        rc = schedule(b, BY_SQRT, 0, "sqrt", &b->cand[which]);
    } else if (which == CAND_NONE) {
        /* keep everything: the planner chooses, so "remat": true blocks are not forced here */
        const clremat_graph *g = b->in->g;
        unsigned char *wl = calloc((size_t)g->n_layers + 1, 1), *wb = calloc((size_t)g->n_blocks + 1, 1);
        if (!wl || !wb)
            rc = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        else if ((rc = clremat_policy_parse("none", &p)) == CLREMAT_OK)
            b->cand[which].policy = p;
        if (rc == CLREMAT_OK)
            rc = clremat_plan_from_flags(b->in, wl, wb, NULL, &b->cand[which]);
        free(wl);
        free(wb);
    } else if (which < 4) {
        if ((rc = clremat_policy_parse(cand_name[which], &p)) != CLREMAT_OK)
            return rc;
        rc = clremat_plan_fixed(b->in, &p, &b->cand[which]);
    } else {
        /* the other Keras-style modes: larger_than, then each top-level block
         * (the stage costs of the table rerun whole stages; wrapping a block
         * skips dead recomputation, which can be cheaper) */
        const clremat_graph *g = b->in->g;
        char text[256];
        int k = which - 4, seen = 0;
        if (k == 0)
            snprintf(text, sizeof text, "larger_than");
        else {
            text[0] = 0;
            for (int bl = 0; bl < g->n_blocks; bl++)
                if (g->blocks[bl].parent < 0 && ++seen == k)
                    snprintf(text, sizeof text, "list_of_layers:%s", g->blocks[bl].name);
            if (!text[0])
                return CLREMAT_ERR_INTERNAL;
        }
        if ((rc = clremat_policy_parse(text, &p)) != CLREMAT_OK)
            return rc;
        rc = clremat_plan_fixed(b->in, &p, &b->cand[which]);
    }
    if (rc == CLREMAT_OK)
        b->cand_cost[which] = clremat_plan_recompute_cost(b->in, &b->cand[which]);
    return rc;
}

static const char *cand_label(const clremat_bsolver *b, int c)
{
    return c < 4 ? cand_name[c] : b->cand[c].policy.text;
}

static void note_min(clremat_bsolver *b, uint64_t peak, double cost, const char *label)
{
    if (peak < b->min_peak || (peak == b->min_peak && cost < b->min_peak_cost)) {
        b->min_peak = peak;
        b->min_peak_cost = cost;
        snprintf(b->min_peak_by, sizeof b->min_peak_by, "%s", label);
    }
}

int clremat_bsolver_init(clremat_bsolver *b, const clremat_plan_input *in)
{
    int rc;
    memset(b, 0, sizeof *b);
    b->in = in;
    b->limit_name = "budget";
    b->fixed = clremat_plan_fixed_bytes(in, NULL);
    if ((rc = clremat_stages_build(in, MAX_STAGES, &b->st)) != CLREMAT_OK)
        return rc;
    b->K = b->st.K;
    b->nk = 1;
    for (int i = 0; i < b->K; i++)
        if (b->st.outneed[i])
            b->nk = 2;
    b->unit = 1;
    if ((rc = min_peak_dp(b)) != CLREMAT_OK)
        goto fail;
    b->n_cand = 5;
    for (int bl = 0; bl < in->g->n_blocks && b->n_cand < CLREMAT_BSOLVER_CANDS; bl++)
        if (in->g->blocks[bl].parent < 0)
            b->n_cand++;
    for (int c = 0; c < b->n_cand; c++) {
        if ((c == CAND_FULL || c == CAND_ACT || c >= 4) && in->g->n_layers > CAND_MAX_LAYERS)
            continue;
        /* only none is required; a Keras mode schedule.c cannot plan is skipped */
        if ((rc = candidate(b, c)) != CLREMAT_OK && (c == CAND_NONE || rc != CLREMAT_ERR_INTERNAL))
            goto fail;
        rc = CLREMAT_OK;
    }
    if ((rc = clremat_fsearch_run(&b->fs, in)) != CLREMAT_OK)
        goto fail;
    /* the least peak over every plan the solver makes, credited to the
     * cheapest plan reaching it: the Keras modes first (ties keep them) */
    b->min_peak = UINT64_MAX;
    for (int c = 0; c < b->n_cand; c++)
        if (b->cand[c].actions)
            note_min(b, b->cand[c].peak_bytes, b->cand_cost[c], cand_label(b, c));
    for (int i = 0; i < b->fs.n; i++)
        note_min(b, b->fs.pts[i].peak, b->fs.pts[i].cost, b->fs.pts[i].label);
    {
        clremat_plan p;
        if ((rc = schedule(b, BY_MIN_PEAK, 0, "budget", &p)) != CLREMAT_OK)
            goto fail;
        note_min(b, p.peak_bytes, clremat_plan_recompute_cost(in, &p), "the rotor schedule over stages");
        clremat_plan_free(&p);
    }
    return CLREMAT_OK;
fail:
    clremat_bsolver_free(b);
    return rc;
}

void clremat_bsolver_free(clremat_bsolver *b)
{
    clremat_stages_free(&b->st);
    free(b->mp);
    free(b->mc);
    free(b->mw);
    free(b->C);
    free(b->W);
    for (int c = 0; c < CLREMAT_BSOLVER_CANDS; c++)
        clremat_plan_free(&b->cand[c]);
    clremat_fsearch_free(&b->fs);
    memset(b, 0, sizeof *b);
}

static int better(double cost, uint64_t peak, double best_cost, uint64_t best_peak)
{
    return cost < best_cost || (cost == best_cost && peak < best_peak);
}

static void take_plan(clremat_plan *dst, clremat_plan *src)
{
    clremat_plan_free(dst);
    *dst = *src;
    memset(src, 0, sizeof *src);
}

static int copy_plan(const clremat_plan *src, int n_layers, int n_blocks, clremat_plan *dst)
{
    *dst = *src;
    dst->wrapped_layer = malloc((size_t)n_layers);
    dst->wrapped_block = malloc((size_t)n_blocks + 1);
    dst->kept = malloc((size_t)n_layers * CLREMAT_MAX_SLOTS);
    dst->act_discard = malloc((size_t)n_layers);
    dst->recomputes = malloc(sizeof(int) * (size_t)n_layers);
    dst->actions = malloc(sizeof *dst->actions * (size_t)(src->n_actions + 1));
    if (!dst->wrapped_layer || !dst->wrapped_block || !dst->kept || !dst->act_discard || !dst->recomputes ||
        !dst->actions) {
        clremat_plan_free(dst);
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
    }
    memcpy(dst->wrapped_layer, src->wrapped_layer, (size_t)n_layers);
    memcpy(dst->wrapped_block, src->wrapped_block, (size_t)n_blocks + 1);
    memcpy(dst->kept, src->kept, (size_t)n_layers * CLREMAT_MAX_SLOTS);
    memcpy(dst->act_discard, src->act_discard, (size_t)n_layers);
    memcpy(dst->recomputes, src->recomputes, sizeof(int) * (size_t)n_layers);
    memcpy(dst->actions, src->actions, sizeof *dst->actions * (size_t)src->n_actions);
    dst->cap_actions = src->n_actions + 1;
    return CLREMAT_OK;
}

/* The table's plan at budget: from floor((budget - fixed) / unit) down while
 * the simulated peak overshoots (the simulator is the truth), then up into
 * the rounding slack while it still fits. best/best_cost get the cheapest. */
static int table_plan(const clremat_bsolver *b, uint64_t budget, clremat_plan *best, double *best_cost)
{
    int64_t m = (int64_t)((budget - b->fixed) / (uint64_t)b->unit), lo, hi;
    clremat_plan p;
    int rc;
    if (m > b->smax)
        m = b->smax;
    for (int tries = 0; tries < RETRIES; tries++) {
        if (m < 0 || choose(&(recon){.b = b, .mode = BY_TABLE}, 0, b->K - 1, 0, m) < 0)
            return CLREMAT_OK;
        if ((rc = schedule(b, BY_TABLE, m, "budget", &p)) != CLREMAT_OK)
            return rc;
        if (p.peak_bytes <= budget)
            break;
        m -= cdiv((int64_t)(p.peak_bytes - budget), b->unit);
        clremat_plan_free(&p);
        if (tries == RETRIES - 1)
            return CLREMAT_OK;
    }
    {
        double c = clremat_plan_recompute_cost(b->in, &p);
        if (better(c, p.peak_bytes, *best_cost, best->actions ? best->peak_bytes : UINT64_MAX)) {
            take_plan(best, &p);
            *best_cost = c;
        } else {
            clremat_plan_free(&p);
        }
    }
    /* slack recovery: rounding is conservative; larger indices may still fit */
    lo = m;
    hi = b->smax;
    if (b->exact)
        return CLREMAT_OK;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        size_t at = seg(b, 0, 0, b->K - 1) * ((size_t)b->smax + 1);
        if (b->C[at + (size_t)mid] >= b->C[at + (size_t)lo]) { /* nothing cheaper up to mid */
            lo = mid;
            continue;
        }
        if ((rc = schedule(b, BY_TABLE, mid, "budget", &p)) != CLREMAT_OK)
            return rc;
        if (p.peak_bytes <= budget) {
            double c = clremat_plan_recompute_cost(b->in, &p);
            lo = mid;
            if (better(c, p.peak_bytes, *best_cost, best->peak_bytes)) {
                take_plan(best, &p);
                *best_cost = c;
            }
        } else {
            hi = mid - 1;
        }
        clremat_plan_free(&p);
    }
    return CLREMAT_OK;
}

int clremat_bsolver_plan(clremat_bsolver *b, uint64_t budget, clremat_plan *out)
{
    const clremat_graph *g = b->in->g;
    clremat_plan best;
    double best_cost = HUGE_VAL;
    int rc = CLREMAT_OK;

    memset(out, 0, sizeof *out);
    memset(&best, 0, sizeof best);
    if (budget < b->min_peak)
        return clremat_set_error(CLREMAT_ERR_PLAN,
            "%s of %llu bytes is below the smallest peak the planner reaches for model '%s' at batch %lld: "
            "%llu bytes (%s; fixed bytes %llu)",
            b->limit_name ? b->limit_name : "budget", (unsigned long long)budget, g->name, (long long)b->in->batch,
            (unsigned long long)b->min_peak, b->min_peak_by, (unsigned long long)b->fixed);
    if (b->cand[CAND_NONE].actions && b->cand[CAND_NONE].peak_bytes <= budget) {
        rc = copy_plan(&b->cand[CAND_NONE], g->n_layers, g->n_blocks, out);
        goto done;
    }
    if (b->C && (rc = table_plan(b, budget, &best, &best_cost)) != CLREMAT_OK)
        goto fail;
    if (!best.actions && b->fixed + (uint64_t)b->mp[seg(b, 0, 0, b->K - 1)] <= budget) {
        /* the discretized table found nothing; the exact minimum-peak schedule fits */
        if ((rc = schedule(b, BY_MIN_PEAK, 0, "budget", &best)) != CLREMAT_OK)
            goto fail;
        best_cost = clremat_plan_recompute_cost(b->in, &best);
    }
    for (int c = 0; c < b->n_cand; c++)
        if (b->cand[c].actions && b->cand[c].peak_bytes <= budget &&
            better(b->cand_cost[c], b->cand[c].peak_bytes, best_cost, best.actions ? best.peak_bytes : UINT64_MAX)) {
            clremat_plan_free(&best);
            if ((rc = copy_plan(&b->cand[c], g->n_layers, g->n_blocks, &best)) != CLREMAT_OK)
                goto fail;
            best_cost = b->cand_cost[c];
        }
    { /* the flag search's front */
        const clremat_fpoint *fp = clremat_fsearch_best(&b->fs, budget);
        if (fp && better(fp->cost, fp->peak, best_cost, best.actions ? best.peak_bytes : UINT64_MAX)) {
            clremat_plan_free(&best);
            if ((rc = clremat_fsearch_plan(&b->fs, fp, &best)) != CLREMAT_OK)
                goto fail;
            best_cost = clremat_plan_recompute_cost(b->in, &best);
        }
    }
    if (!best.actions) {
        rc = clremat_set_error(CLREMAT_ERR_INTERNAL, "budget planner: nothing fits %llu bytes though %llu should",
                               (unsigned long long)budget, (unsigned long long)b->min_peak);
        goto fail;
    }
    *out = best;
done:
    if (rc == CLREMAT_OK) {
        memset(&out->policy, 0, sizeof out->policy);
        out->policy.kind = CLREMAT_POLICY_BUDGET;
        out->policy.budget = budget;
        snprintf(out->policy.text, sizeof out->policy.text, "budget:%llu", (unsigned long long)budget);
    }
    return rc;
fail:
    clremat_plan_free(&best);
    return rc;
}

/* ------------------------------------------------------------ public */

static int plan_within(const clremat_plan_input *in, uint64_t budget, const char *limit_name, clremat_plan *out)
{
    clremat_bsolver b;
    int rc;
    memset(out, 0, sizeof *out);
    if ((rc = clremat_bsolver_init(&b, in)) != CLREMAT_OK)
        return rc;
    b.limit_name = limit_name;
    if (budget >= b.min_peak && !(b.cand[CAND_NONE].actions && b.cand[CAND_NONE].peak_bytes <= budget))
        rc = clremat_bsolver_table(&b, budget);
    if (rc == CLREMAT_OK)
        rc = clremat_bsolver_plan(&b, budget, out);
    clremat_bsolver_free(&b);
    return rc;
}

int clremat_plan_budget(const clremat_plan_input *in, uint64_t budget, clremat_plan *out)
{
    return plan_within(in, budget, "budget", out);
}

int clremat_plan_auto(const clremat_plan_input *in, uint64_t limit, clremat_plan *out)
{
    clremat_policy p;
    int rc;
    memset(&p, 0, sizeof p);
    p.kind = CLREMAT_POLICY_NONE;
    snprintf(p.text, sizeof p.text, "none");
    if ((rc = clremat_plan_fixed(in, &p, out)) != CLREMAT_OK)
        return rc;
    if (out->peak_bytes <= limit) {
        out->policy.kind = CLREMAT_POLICY_AUTO;
        snprintf(out->policy.text, sizeof out->policy.text, "auto");
        return CLREMAT_OK;
    }
    clremat_plan_free(out);
    rc = plan_within(in, limit, "memory limit", out);
    if (rc == CLREMAT_OK) {
        out->policy.kind = CLREMAT_POLICY_AUTO;
        snprintf(out->policy.text, sizeof out->policy.text, "auto");
    }
    return rc;
}

int clremat_plan_sqrt(const clremat_plan_input *in, clremat_plan *out)
{
    clremat_stages st;
    clremat_bsolver b;
    int rc;
    memset(out, 0, sizeof *out);
    memset(&b, 0, sizeof b);
    if ((rc = clremat_stages_build(in, 0, &st)) != CLREMAT_OK)
        return rc;
    b.in = in;
    b.st = st;
    b.K = st.K;
    b.nk = 1;
    for (int i = 0; i < b.K; i++)
        if (st.outneed[i])
            b.nk = 2;
    b.unit = 1;
    rc = schedule(&b, BY_SQRT, 0, "sqrt", out);
    clremat_stages_free(&b.st);
    return rc;
}
