/* flagsearch.c: the budget planner's search over flag plans (flagsearch.h):
 * seeds from the Keras-style modes, every wrap-flag subset of small graphs,
 * then a bounded Pareto local search over single-flag changes; the
 * simulator judges every plan and a Pareto archive keeps the front. */
#include "flagsearch.h"
#include "error.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* simulator work allowed to the local search: plans x layers^3 (one
 * simulation costs about layers^2 x consumers; measured, not exact) */
#define PLS_WORK 3e9
#define PLS_MAX 20000
/* each top-level block alone as a seed, up to this many blocks */
#define SEED_BLOCKS 24

typedef struct var {
    int at;                     /* byte index in a flag vector */
    unsigned char on;           /* value when set */
} var;

static unsigned char *wl_of(const clremat_fsearch *fs, unsigned char *f) { (void)fs; return f; }
static unsigned char *wb_of(const clremat_fsearch *fs, unsigned char *f) { return f + fs->nl; }
static unsigned char *ad_of(const clremat_fsearch *fs, unsigned char *f) { return f + fs->nl + fs->nb; }
static unsigned char *pin_of(const clremat_fsearch *fs, unsigned char *f) { return f + 2 * fs->nl + fs->nb; }

/* The mode text of a flag vector: list_of_layers for wrap flags alone (when
 * the whole list fits; else "wrap N units: ..." so it is not taken for a
 * mode), "wrap ...; keeping ..." when discards or pins are set too. */
static void label_of(const clremat_fsearch *fs, const unsigned char *f, char *out, size_t len)
{
    const clremat_graph *g = fs->in->g;
    char buf[1024];
    size_t off = 0;
    int units = 0, mixed = 0;
    for (int l = 0; l < fs->nl; l++)
        mixed |= f[fs->nl + fs->nb + l] | f[2 * fs->nl + fs->nb + l];
    buf[0] = 0;
    for (int b = 0; b < fs->nb && off < sizeof buf; b++)
        if (f[fs->nl + b])
            off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", units++ ? "," : "", g->blocks[b].name);
    for (int l = 0; l < fs->nl && off < sizeof buf; l++)
        if (f[l])
            off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", units++ ? "," : "", g->layers[l].name);
    if (!units && !mixed)
        snprintf(out, len, "none");
    else if (!mixed && off < sizeof buf && strlen("list_of_layers:") + off < len)
        snprintf(out, len, "list_of_layers:%s", buf);
    else if (mixed)
        snprintf(out, len, "wrap %s; keeping products/recomputing activations of some layers",
                 units ? buf : "nothing");
    else
        snprintf(out, len, "wrap %d layers and blocks: %s", units, buf);
    if (strlen(out) + 1 >= len && len > 4)
        memcpy(out + len - 4, "...", 4);
}

/* Adds a plan to the archive unless an archived plan is at least as good in
 * both peak and cost (earlier plans keep their label on ties). */
static int insert(clremat_fsearch *fs, uint64_t peak, double cost, const unsigned char *f, const char *label)
{
    int at = 0, k = 0;
    unsigned char *copy;
    for (int i = 0; i < fs->n; i++)
        if (fs->pts[i].peak <= peak && fs->pts[i].cost <= cost)
            return 0;
    copy = malloc((size_t)fs->width);
    if (!copy)
        return -1;
    memcpy(copy, f, (size_t)fs->width);
    for (int i = 0; i < fs->n; i++) {
        if (fs->pts[i].peak >= peak && fs->pts[i].cost >= cost) {
            free(fs->pts[i].flags);
            continue;
        }
        fs->pts[k++] = fs->pts[i];
    }
    fs->n = k;
    if (fs->n == fs->cap) {
        int cap = fs->cap ? 2 * fs->cap : 32;
        clremat_fpoint *np = realloc(fs->pts, sizeof *np * (size_t)cap);
        if (!np) {
            free(copy);
            return -1;
        }
        fs->pts = np;
        fs->cap = cap;
    }
    while (at < fs->n && fs->pts[at].peak < peak)
        at++;
    memmove(&fs->pts[at + 1], &fs->pts[at], sizeof *fs->pts * (size_t)(fs->n - at));
    fs->n++;
    fs->pts[at].peak = peak;
    fs->pts[at].cost = cost;
    fs->pts[at].flags = copy;
    if (label)
        snprintf(fs->pts[at].label, sizeof fs->pts[at].label, "%s", label);
    else
        label_of(fs, f, fs->pts[at].label, sizeof fs->pts[at].label);
    return 1;
}

static int plan_flags(const clremat_fsearch *fs, const unsigned char *f, clremat_plan *out)
{
    unsigned char *m = (unsigned char *)f; /* the accessors do not write */
    clremat_flagset set = {wl_of(fs, m), wb_of(fs, m), ad_of(fs, m), pin_of(fs, m)};
    memset(out, 0, sizeof *out);
    return clremat_plan_from_flagset(fs->in, &set, out);
}

/* Simulates a flag vector and archives it: 1 archived, 0 not (dominated, or
 * a combination the executor cannot follow), -1 out of host memory. */
static int eval(clremat_fsearch *fs, const unsigned char *f, const char *label)
{
    clremat_plan p;
    int rc;
    fs->evaluated++;
    rc = plan_flags(fs, f, &p);
    if (rc != CLREMAT_OK) /* e.g. an activation discarded inside a wrapped unit, its source not kept */
        return 0;
    rc = insert(fs, p.peak_bytes, clremat_plan_recompute_cost(fs->in, &p), f, label);
    clremat_plan_free(&p);
    return rc;
}

static int seeds(clremat_fsearch *fs, unsigned char *f)
{
    const clremat_plan_input *in = fs->in;
    const clremat_graph *g = in->g;
    int nl = fs->nl, rc;
    memset(f, 0, (size_t)fs->width);
    if ((rc = eval(fs, f, "none")) < 0)
        return rc;
    memset(f, 1, (size_t)(nl - 1));
    memset(wb_of(fs, f), 1, (size_t)fs->nb);
    if ((rc = eval(fs, f, "full")) < 0)
        return rc;
    memset(f, 0, (size_t)fs->width);
    for (int l = 0; l + 1 < nl; l++)
        ad_of(fs, f)[l] = in->costs[l].act_source >= 0;
    if ((rc = eval(fs, f, "activations")) < 0)
        return rc;
    memset(f, 0, (size_t)fs->width);
    for (int l = 0; l + 1 < nl; l++)
        f[l] = in->batch * clremat_shape_elems(&g->layers[l].out_shape) > 1024;
    if ((rc = eval(fs, f, "larger_than")) < 0)
        return rc;
    /* larger_than at every threshold that makes a difference: each distinct
     * output size (elements, batch included) */
    for (int t = 0; t + 1 < nl && nl <= 4 * SEED_BLOCKS; t++) {
        int64_t th = in->batch * clremat_shape_elems(&g->layers[t].out_shape), seen = 0;
        char label[128];
        for (int u = 0; u < t && !seen; u++)
            seen = in->batch * clremat_shape_elems(&g->layers[u].out_shape) == th;
        if (seen)
            continue;
        memset(f, 0, (size_t)fs->width);
        for (int l = 0; l + 1 < nl; l++)
            f[l] = in->batch * clremat_shape_elems(&g->layers[l].out_shape) > th;
        snprintf(label, sizeof label, "larger_than:%lld", (long long)th);
        if ((rc = eval(fs, f, label)) < 0)
            return rc;
    }
    clremat_save_dots_flags(in, wl_of(fs, f), wb_of(fs, f), ad_of(fs, f), pin_of(fs, f));
    if ((rc = eval(fs, f, "save_dots")) < 0)
        return rc;
    for (int b = 0; b < fs->nb && fs->nb <= SEED_BLOCKS; b++) {
        char label[128];
        memset(f, 0, (size_t)fs->width);
        wb_of(fs, f)[b] = 1;
        snprintf(label, sizeof label, "list_of_layers:%s", g->blocks[b].name);
        if ((rc = eval(fs, f, label)) < 0)
            return rc;
    }
    return 0;
}

/* The pin a layer can take: its matrix products (save_dots's rule). */
static unsigned char product_pin(const clremat_plan_input *in, int l)
{
    const clremat_layer_cost *c = &in->costs[l];
    unsigned all = (1u << c->n_slots) - 1u;
    if (in->g->layers[l].type == CLREMAT_ATTENTION)
        return (unsigned char)all;
    if (in->g->layers[l].type != CLREMAT_DENSE && in->g->layers[l].type != CLREMAT_CONV2D)
        return 0;
    return (unsigned char)(c->act_source >= 0 && !c->act_from_input ? all & ~1u : all);
}

int clremat_fsearch_run(clremat_fsearch *fs, const clremat_plan_input *in)
{
    const clremat_graph *g = in->g;
    unsigned char *f = NULL;
    var *vars = NULL;
    int nv = 0, nwrap, rc = CLREMAT_OK;
    unsigned char **queue = NULL;
    int qh = 0, qn = 0, qcap = 0;
    long cap;

    memset(fs, 0, sizeof *fs);
    fs->in = in;
    fs->nl = g->n_layers;
    fs->nb = g->n_blocks;
    fs->width = 3 * fs->nl + fs->nb + 1;
    if (fs->nl < 2 || fs->nl > CLREMAT_FSEARCH_MAX_LAYERS)
        return CLREMAT_OK;
    f = calloc((size_t)fs->width, 1);
    vars = calloc((size_t)(3 * fs->nl + fs->nb), sizeof *vars);
    if (!f || !vars)
        goto oom;
    /* wrap flags first (the exhaustive part), then discards and pins */
    for (int b = 0; b < fs->nb; b++)
        vars[nv++] = (var){fs->nl + b, 1};
    for (int l = 0; l + 1 < fs->nl; l++)
        vars[nv++] = (var){l, 1};
    nwrap = fs->n_vars = nv;
    for (int l = 0; l + 1 < fs->nl; l++)
        if (in->costs[l].act_source >= 0)
            vars[nv++] = (var){fs->nl + fs->nb + l, 1};
    for (int l = 0; l + 1 < fs->nl; l++)
        if (product_pin(in, l))
            vars[nv++] = (var){2 * fs->nl + fs->nb + l, product_pin(in, l)};

    if (seeds(fs, f) < 0)
        goto oom;
    if (nwrap <= CLREMAT_FSEARCH_EXHAUSTIVE) {
        for (long mask = 0; mask < 1L << nwrap; mask++) {
            memset(f, 0, (size_t)fs->width);
            for (int v = 0; v < nwrap; v++)
                f[vars[v].at] = (mask >> v & 1) ? vars[v].on : 0;
            if (eval(fs, f, NULL) < 0)
                goto oom;
        }
        fs->exhaustive = 1;
    } else {
        /* too many: every subset of the top-level units (top-level blocks
         * and layers outside blocks), the list_of_layers plans of top-level
         * names, when there are few enough */
        int top[CLREMAT_FSEARCH_EXHAUSTIVE + 2], nt = 0;
        for (int v = 0; v < nwrap && nt <= CLREMAT_FSEARCH_EXHAUSTIVE; v++) {
            int at = vars[v].at;
            int is_top = at >= fs->nl ? g->blocks[at - fs->nl].parent < 0 : g->layers[at].block < 0;
            if (is_top)
                top[nt++] = v;
        }
        for (long mask = 0; nt <= CLREMAT_FSEARCH_EXHAUSTIVE && mask < 1L << nt; mask++) {
            memset(f, 0, (size_t)fs->width);
            for (int k = 0; k < nt; k++)
                f[vars[top[k]].at] = (mask >> k & 1) ? vars[top[k]].on : 0;
            if (eval(fs, f, NULL) < 0)
                goto oom;
        }
    }

    /* Pareto local search from the front */
    cap = (long)(PLS_WORK / ((double)fs->nl * fs->nl * fs->nl));
    cap = cap > PLS_MAX ? PLS_MAX : cap;
    cap += fs->evaluated;
    for (int i = 0; i < fs->n; i++) {
        unsigned char **nq;
        if (qn == qcap) {
            qcap = qcap ? 2 * qcap : 64;
            if (!(nq = realloc(queue, sizeof *queue * (size_t)qcap)))
                goto oom;
            queue = nq;
        }
        if (!(queue[qn] = malloc((size_t)fs->width)))
            goto oom;
        memcpy(queue[qn++], fs->pts[i].flags, (size_t)fs->width);
    }
    while (qh < qn && fs->evaluated < cap) {
        unsigned char *cur = queue[qh++];
        for (int v = 0; v < nv && fs->evaluated < cap; v++) {
            int r;
            memcpy(f, cur, (size_t)fs->width);
            f[vars[v].at] = f[vars[v].at] ? 0 : vars[v].on;
            if ((r = eval(fs, f, NULL)) < 0)
                goto oom;
            if (r == 1) {
                if (qn == qcap) {
                    unsigned char **nq;
                    qcap = 2 * qcap;
                    if (!(nq = realloc(queue, sizeof *queue * (size_t)qcap)))
                        goto oom;
                    queue = nq;
                }
                if (!(queue[qn] = malloc((size_t)fs->width)))
                    goto oom;
                memcpy(queue[qn++], f, (size_t)fs->width);
            }
        }
    }
    goto done;
oom:
    rc = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
    clremat_fsearch_free(fs);
done:
    for (int i = 0; i < qn; i++)
        free(queue[i]);
    free(queue);
    free(vars);
    free(f);
    return rc;
}

const clremat_fpoint *clremat_fsearch_best(const clremat_fsearch *fs, uint64_t budget)
{
    const clremat_fpoint *best = NULL;
    for (int i = 0; i < fs->n && fs->pts[i].peak <= budget; i++)
        best = &fs->pts[i]; /* cost strictly descends along the front */
    return best;
}

int clremat_fsearch_plan(const clremat_fsearch *fs, const clremat_fpoint *p, clremat_plan *out)
{
    return plan_flags(fs, p->flags, out);
}

void clremat_fsearch_free(clremat_fsearch *fs)
{
    for (int i = 0; i < fs->n; i++)
        free(fs->pts[i].flags);
    free(fs->pts);
    fs->pts = NULL;
    fs->n = fs->cap = 0;
}
