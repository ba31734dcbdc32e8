/* fit.c: the `clremat fit` advisor (host/fit.h): configurations, the
 * per-device step-time calibration and its prediction, the plan of each
 * configuration at each memory size, and the largest-batch search. */
#include "fit.h"
#include "clock.h"
#include "compare.h"
#include "data.h"
#include "error.h"
#include "executor.h"
#include "svg_plot.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- configurations */

static int add_config(clremat_fit_config **v, int *n, const char *mode)
{
    clremat_fit_config *nv = realloc(*v, sizeof **v * (size_t)(*n + 1));
    int st;
    if (!nv)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
    *v = nv;
    memset(&nv[*n], 0, sizeof nv[*n]);
    if ((st = clremat_policy_parse(mode, &nv[*n].policy)))
        return st;
    snprintf(nv[*n].label, sizeof nv[*n].label, "%s", mode);
    (*n)++;
    return CLREMAT_OK;
}

/* Checks that every name of a list_of_layers configuration exists in g
 * (planning at batch 1 names the unknown one and lists those there are). */
static int check_names(const clremat_graph *g, const clremat_policy *p)
{
    clremat_plan plan;
    int st;
    if (p->kind != CLREMAT_POLICY_LIST)
        return CLREMAT_OK;
    if ((st = clremat_plan_for(g, 1, p, 0, 0, NULL, &plan, NULL)) == CLREMAT_OK)
        clremat_plan_free(&plan);
    return st;
}

int clremat_fit_default_configs(const clremat_graph *g, clremat_fit_config **out, int *n)
{
    static const char *fixed[] = {"none", "full", "activations", "save_dots", "larger_than"};
    clremat_fit_config *v = NULL;
    int k = 0, st = CLREMAT_OK;
    char mode[96];
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && st == CLREMAT_OK; i++)
        st = add_config(&v, &k, fixed[i]);
    for (int b = 0; b < g->n_blocks && st == CLREMAT_OK; b++) {
        if (g->blocks[b].parent >= 0)
            continue;
        snprintf(mode, sizeof mode, "list_of_layers:%s", g->blocks[b].name);
        st = add_config(&v, &k, mode);
    }
    if (st == CLREMAT_OK)
        st = add_config(&v, &k, "auto");
    if (st != CLREMAT_OK) {
        free(v);
        return st;
    }
    *out = v;
    *n = k;
    return CLREMAT_OK;
}

int clremat_fit_parse_configs(const clremat_graph *g, const char *list, clremat_fit_config **out, int *n)
{
    char **modes = NULL;
    clremat_fit_config *v = NULL;
    int nm = 0, k = 0, st;
    *out = NULL;
    *n = 0;
    if ((st = clremat_split_modes(list, &modes, &nm)))
        return st;
    for (int i = 0; i < nm && st == CLREMAT_OK; i++) {
        if (!modes[i][0]) {
            st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--remat: an empty mode in '%s'", list);
            break;
        }
        if ((st = add_config(&v, &k, modes[i])) == CLREMAT_OK)
            st = check_names(g, &v[k - 1].policy);
    }
    for (int i = 0; i < nm; i++)
        free(modes[i]);
    free(modes);
    if (st != CLREMAT_OK) {
        free(v);
        return st;
    }
    *out = v;
    *n = k;
    return CLREMAT_OK;
}

int clremat_fit_with_accumulate(const clremat_fit_config *in, int n_in, const int64_t *ks, int nk,
                                clremat_fit_config **out, int *n)
{
    clremat_fit_config *v = calloc((size_t)(n_in * nk) + 1, sizeof *v);
    int k = 0;
    *out = NULL;
    *n = 0;
    if (!v)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
    for (int a = 0; a < nk; a++) {
        if (ks[a] < 1 || ks[a] > CLREMAT_MAX_ACCUMULATE) {
            free(v);
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--accumulate %lld is outside [1, %d]",
                                     (long long)ks[a], CLREMAT_MAX_ACCUMULATE);
        }
        for (int i = 0; i < n_in; i++, k++) {
            v[k] = in[i];
            v[k].accumulate = (int)ks[a];
            if (ks[a] > 1)
                snprintf(v[k].label, sizeof v[k].label, "%.70s, accumulate %d", in[i].label, (int)(ks[a] % 100000));
        }
    }
    *out = v;
    *n = k;
    return CLREMAT_OK;
}

int clremat_fit_with_offload(const clremat_fit_config *in, int n_in, clremat_fit_config **out, int *n)
{
    clremat_fit_config *v = calloc((size_t)(2 * n_in) + 1, sizeof *v);
    *out = NULL;
    *n = 0;
    if (!v)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
    for (int i = 0; i < n_in; i++) {
        v[i] = in[i];
        v[n_in + i] = in[i];
        v[n_in + i].offload = 1;
        snprintf(v[n_in + i].label, sizeof v[n_in + i].label, "%.80s, offload", in[i].label);
    }
    *out = v;
    *n = 2 * n_in;
    return CLREMAT_OK;
}

/* ---------------------------------------------------------- calibration */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void clremat_fit_calibration_free(clremat_fit_calibration *c)
{
    if (!c)
        return;
    free(c->fwd_ms);
    free(c->bwd_ms);
    free(c->fwd_flops);
    free(c->bwd_flops);
    c->fwd_ms = c->bwd_ms = c->fwd_flops = c->bwd_flops = NULL;
}

int clremat_fit_calibrate(clremat_ctx *ctx, clremat_graph *g, int64_t batch, const clremat_opt_config *opt,
                          uint64_t seed, int steps, clremat_fit_calibration *out)
{
    clremat_dataset data;
    clremat_trainer *t = NULL;
    clremat_policy pol;
    float *x = NULL, *y = NULL, loss, correct;
    double *times = NULL, device_ms = 0;
    int st, n = g->n_layers;

    memset(out, 0, sizeof *out);
    memset(&data, 0, sizeof data);
    if (steps < 1 || batch < 1)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "calibration needs steps >= 1 and batch >= 1");
    if ((st = clremat_data_synthetic(g, NULL, seed, batch, 0, &data)))
        return st;
    out->fwd_ms = calloc((size_t)n, sizeof(double));
    out->bwd_ms = calloc((size_t)n, sizeof(double));
    out->fwd_flops = calloc((size_t)n, sizeof(double));
    out->bwd_flops = calloc((size_t)n, sizeof(double));
    times = calloc((size_t)steps, sizeof(double));
    x = malloc(sizeof(float) * (size_t)(batch * data.train.x_elems));
    y = malloc(sizeof(float) * (size_t)(batch * data.train.y_elems));
    if (!out->fwd_ms || !out->bwd_ms || !out->fwd_flops || !out->bwd_flops || !times || !x || !y) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
        goto fail;
    }
    clremat_data_batch(&data.train, seed, 0, batch, x, y);
    clremat_policy_parse("none", &pol);
    st = clremat_trainer_new(ctx, g, batch, &pol, opt, seed, &t);
    if (st == CLREMAT_ERR_OUT_OF_MEMORY) { /* none does not fit the device: whatever does */
        clremat_policy_parse("auto", &pol);
        st = clremat_trainer_new(ctx, g, batch, &pol, opt, seed, &t);
    }
    if (st != CLREMAT_OK) {
        clremat_set_error(st, "calibration: %s", clremat_ctx_last_error(ctx));
        goto fail;
    }
    snprintf(out->remat, sizeof out->remat, "%.95s", pol.text);
    snprintf(out->device, sizeof out->device, "%.255s", clremat_ctx_device(ctx)->name);
    out->batch = batch;
    out->n_layers = n;
    /* a warm-up step (kernels built, buffers cached), then a profiled one */
    for (int s = 0; s < 2 && st == CLREMAT_OK; s++) {
        clremat_trainer_set_profiling(t, s == 1);
        st = clremat_trainer_step(t, x, y, &loss, &correct);
    }
    clremat_trainer_set_profiling(t, 0);
    for (int s = 0; s < steps && st == CLREMAT_OK; s++) {
        double a = 1e3 * clremat_now_s();
        st = clremat_trainer_step(t, x, y, &loss, &correct);
        times[s] = 1e3 * clremat_now_s() - a;
    }
    if (st != CLREMAT_OK) {
        clremat_set_error(st, "calibration step: %s", clremat_ctx_last_error(ctx));
        goto fail;
    }
    qsort(times, (size_t)steps, sizeof *times, cmp_double);
    out->step_ms = steps % 2 ? times[steps / 2] : (times[steps / 2 - 1] + times[steps / 2]) / 2;
    for (int l = 0; l <= n; l++) { /* profile[n] holds what belongs to no layer (the update) */
        const clremat_layer_profile *p = &t->profile[l];
        if (l == n) {
            for (int ph = 0; ph < CLREMAT_PHASE_COUNT; ph++)
                out->update_ms += p->ns[ph] / 1e6;
            continue;
        }
        out->fwd_ms[l] = p->ns[CLREMAT_PHASE_FORWARD] / 1e6;
        out->bwd_ms[l] = p->ns[CLREMAT_PHASE_BACKWARD] / 1e6;
        out->update_ms += (p->ns[CLREMAT_PHASE_UPDATE] + p->ns[CLREMAT_PHASE_OTHER]) / 1e6;
        out->fwd_flops[l] = t->costs[l].fwd_flops;
        out->bwd_flops[l] = t->costs[l].bwd_flops;
    }
    /* The profiled step's device times add up to more than an unprofiled
     * step's wall time where the device overlaps kernels or profiling slows
     * them (PoCL); scaled down to the wall time, the prediction at the
     * calibration's own plan and batch is the measured step time. */
    if (!clremat_trainer_profile_usable(t)) {
        /* no kernel times to scale: the measured step split by FLOPs */
        double flops = 0;
        for (int l = 0; l < n; l++)
            flops += out->fwd_flops[l] + out->bwd_flops[l];
        for (int l = 0; l < n; l++) {
            out->fwd_ms[l] = flops > 0 ? out->step_ms * out->fwd_flops[l] / flops : 0;
            out->bwd_ms[l] = flops > 0 ? out->step_ms * out->bwd_flops[l] / flops : 0;
        }
        out->update_ms = flops > 0 ? 0 : out->step_ms;
        out->overhead_ms = 0;
        out->device_scale = 1.0;
        out->times_from_flops = 1;
        st = CLREMAT_OK;
        goto done;
    }
    device_ms = t->profile_device_ns / 1e6; /* every layer's and phase's kernels */
    out->device_scale = device_ms > out->step_ms && device_ms > 0 ? out->step_ms / device_ms : 1.0;
    for (int l = 0; l < n; l++) {
        out->fwd_ms[l] *= out->device_scale;
        out->bwd_ms[l] *= out->device_scale;
    }
    out->update_ms *= out->device_scale;
    out->overhead_ms = out->step_ms > device_ms * out->device_scale ? out->step_ms - device_ms * out->device_scale : 0;
    st = CLREMAT_OK;
    goto done;
fail:
    clremat_fit_calibration_free(out);
done:
    clremat_trainer_free(t);
    clremat_data_free(&data);
    free(times);
    free(x);
    free(y);
    return st;
}

/* A measured time scaled from the calibration's FLOPs to flops (by the
 * batch ratio where the calibration counted none). */
static double scaled(double ms, double cal_flops, double flops, double batch_ratio)
{
    return ms * (cal_flops > 0 ? flops / cal_flops : batch_ratio);
}

double clremat_fit_predict_ms(const clremat_fit_calibration *c, const clremat_plan_input *in,
                              const clremat_plan *plan)
{
    double t, ratio, *lc;
    clremat_plan_input rin;
    if (!c || !c->fwd_ms || c->n_layers != in->g->n_layers)
        return NAN;
    lc = malloc(sizeof *lc * (size_t)(c->n_layers + 1));
    if (!lc)
        return NAN;
    ratio = (double)in->batch / (double)c->batch;
    t = c->overhead_ms;
    for (int l = 0; l < c->n_layers; l++) {
        lc[l] = scaled(c->fwd_ms[l], c->fwd_flops[l], in->costs[l].fwd_flops, ratio);
        t += lc[l] + scaled(c->bwd_ms[l], c->bwd_flops[l], in->costs[l].bwd_flops, ratio);
    }
    rin = *in;
    rin.layer_cost = lc;
    t += clremat_plan_recompute_cost(&rin, plan);
    t += (double)plan->offload_bytes * c->offload_ms_per_byte; /* copies out and back, not overlapped */
    free(lc);
    if (plan->accumulate > 1) /* K micro-batches, each with its accumulation pass; one update */
        return (double)plan->accumulate * (t + c->update_ms) + c->update_ms;
    return t + c->update_ms;
}

/* ------------------------------------------------------------- planning */

int clremat_fit_plan_one(const clremat_fit_request *rq, const clremat_fit_config *c, uint64_t size, int64_t batch,
                         int *planned, int *fits, clremat_plan *plan_out, clremat_layer_cost **costs_out)
{
    clremat_plan plan;
    clremat_layer_cost *costs = NULL;
    int k = c->accumulate > 1 ? c->accumulate : 1, st;
    *planned = *fits = 0;
    if (costs_out)
        *costs_out = NULL;
    if (batch % k != 0) { /* no micro-batch split: nothing to plan (the reason in the last error) */
        int64_t micro;
        clremat_accumulate_split(batch, k, &micro);
        return CLREMAT_OK;
    }
    /* the fused update does not apply with accumulation (clremat_fused_update_applies) */
    st = clremat_plan_for_offload(rq->ctx, rq->g, batch / k, k, &c->policy,
                                  k > 1 ? rq->opt_states & ~CLREMAT_PLAN_FUSED_UPDATE : rq->opt_states, size, NULL, 0,
                                  c->offload ? "all" : NULL, &plan, &costs, NULL, NULL);
    if (st == CLREMAT_ERR_TOO_LARGE ||
        (st == CLREMAT_ERR_PLAN &&
         (c->policy.kind == CLREMAT_POLICY_AUTO || c->policy.kind == CLREMAT_POLICY_BUDGET)))
        return CLREMAT_OK; /* nothing fits: the message stays in clremat_last_error() */
    if (st != CLREMAT_OK)
        return st;
    *planned = 1;
    *fits = plan.peak_bytes <= size;
    if (plan_out)
        *plan_out = plan;
    else
        clremat_plan_free(&plan);
    if (costs_out)
        *costs_out = costs;
    else
        free(costs);
    return CLREMAT_OK;
}

int clremat_fit_max_batch(const clremat_fit_request *rq, const clremat_fit_config *c, uint64_t size, int64_t cap,
                          int64_t *out, int *capped)
{
    int64_t lo, hi;
    const int64_t k = c->accumulate > 1 ? c->accumulate : 1;
    int planned, fits, st;
    *out = 0;
    *capped = 0;
    if (cap < 1)
        cap = 1;
    cap /= k; /* the search runs over micro-batches m; the batch is m * k */
    if (cap < 1)
        return CLREMAT_OK;
#define PLAN_AT(b) clremat_fit_plan_one(rq, c, size, (b) * k, &planned, &fits, NULL, NULL)
    if ((st = PLAN_AT(1)) || !fits)
        return st;
    /* lo fits; double until a batch does not fit (or the cap is reached) */
    lo = 1;
    for (;;) {
        hi = lo > cap / 2 ? cap : lo * 2;
        if (hi == lo) {
            *out = lo * k;
            *capped = 1;
            return CLREMAT_OK;
        }
        if ((st = PLAN_AT(hi)))
            return st;
        if (!fits)
            break;
        lo = hi;
    }
    /* lo fits, hi does not: binary search between them */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if ((st = PLAN_AT(mid)))
            return st;
        if (fits)
            lo = mid;
        else
            hi = mid;
    }
#undef PLAN_AT
    *out = lo * k;
    return CLREMAT_OK;
}

/* Peak, share and predicted time of configuration c at size and batch into
 * the row's fields (which = 0: the table batch; 1: the largest batch). */
static int measure_row(const clremat_fit_request *rq, const clremat_fit_config *c, uint64_t size, int64_t batch,
                       clremat_fit_row *r, int which)
{
    clremat_plan plan;
    clremat_layer_cost *costs = NULL;
    clremat_plan_input in;
    int planned, fits, st;
    char sz[32];
    if ((st = clremat_fit_plan_one(rq, c, size, batch, &planned, &fits, &plan, &costs)))
        return st;
    if (!planned) {
        if (which == 0 && c->accumulate > 1 && batch % c->accumulate != 0) {
            snprintf(r->note, sizeof r->note, "%.250s", clremat_last_error());
            r->step_ms = NAN;
        } else if (which == 0) {
            svg_format_value((double)size, SVG_UNIT_BYTES, sz, sizeof sz);
            snprintf(r->note, sizeof r->note, "no plan within %s: %.200s", sz, clremat_last_error());
            r->step_ms = NAN;
        }
        return CLREMAT_OK;
    }
    memset(&in, 0, sizeof in);
    in.g = rq->g;
    in.batch = batch / (c->accumulate > 1 ? c->accumulate : 1); /* the plan's (micro-)batch */
    in.accumulate = c->accumulate;
    in.costs = costs;
    in.opt_states = rq->opt_states & ~CLREMAT_PLAN_FUSED_UPDATE;
    in.fused_update = (rq->opt_states & CLREMAT_PLAN_FUSED_UPDATE) != 0 && c->accumulate <= 1;
    in.scratch_bytes = CLREMAT_SCRATCH_BYTES;
    if (which == 0) {
        r->planned = 1;
        r->peak_bytes = plan.peak_bytes;
        r->fits = fits;
        r->recompute_flops = plan.recompute_flops * (plan.accumulate > 1 ? plan.accumulate : 1); /* a step's */
        r->recompute_share = plan.step_flops > 0 ? plan.recompute_flops / plan.step_flops : 0;
        r->step_ms = clremat_fit_predict_ms(rq->cal, &in, &plan);
    } else {
        r->max_batch_peak = plan.peak_bytes;
        r->max_batch_step_ms = clremat_fit_predict_ms(rq->cal, &in, &plan);
    }
    clremat_plan_free(&plan);
    free(costs);
    return CLREMAT_OK;
}

int clremat_fit_run(const clremat_fit_request *rq, clremat_fit_row **rows)
{
    int n = rq->n_sizes * rq->n_configs, st = CLREMAT_OK;
    int64_t cap = rq->max_batch_cap > 0 ? rq->max_batch_cap : (int64_t)1 << 20;
    clremat_fit_row *r;
    *rows = NULL;
    if (rq->batch < 1 || rq->n_sizes < 1 || rq->n_configs < 1)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "fit: needs a batch >= 1, a memory size and a mode");
    for (int s = 0; s < rq->n_sizes; s++)
        if (rq->sizes[s] == 0)
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "fit: a memory size of 0 bytes");
    r = calloc((size_t)n, sizeof *r);
    if (!r)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
    for (int s = 0; s < rq->n_sizes && st == CLREMAT_OK; s++) {
        int best = -1;
        for (int c = 0; c < rq->n_configs && st == CLREMAT_OK; c++) {
            clremat_fit_row *row = &r[s * rq->n_configs + c];
            const clremat_fit_config *cf = &rq->configs[c];
            row->config = c;
            row->size = s;
            row->step_ms = row->max_batch_step_ms = NAN;
            if ((st = measure_row(rq, cf, rq->sizes[s], rq->batch, row, 0)))
                break;
            if ((st = clremat_fit_max_batch(rq, cf, rq->sizes[s], cap, &row->max_batch, &row->max_batch_capped)))
                break;
            if (row->max_batch > 0 && (st = measure_row(rq, cf, rq->sizes[s], row->max_batch, row, 1)))
                break;
            if (row->fits) {
                const clremat_fit_row *b = best >= 0 ? &r[s * rq->n_configs + best] : NULL;
                double key = rq->cal ? row->step_ms : row->recompute_flops;
                double bkey = b ? (rq->cal ? b->step_ms : b->recompute_flops) : 0;
                /* ties: less accumulation, then no offload, then the smaller peak */
                /* (accumulation, then offload: both cost time a step-time-less table does not see) */
                int ka = 2 * (cf->accumulate > 1 ? cf->accumulate : 1) + cf->offload,
                    kb = b ? 2 * (rq->configs[best].accumulate > 1 ? rq->configs[best].accumulate : 1) +
                                 rq->configs[best].offload
                           : 0;
                if (!b || key < bkey || (key == bkey && (ka < kb || (ka == kb && row->peak_bytes < b->peak_bytes))))
                    best = c;
            }
        }
        if (best >= 0)
            r[s * rq->n_configs + best].fastest = 1;
    }
    if (st != CLREMAT_OK) {
        free(r);
        return st;
    }
    *rows = r;
    return CLREMAT_OK;
}
