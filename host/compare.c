/* compare.c: runs the acceptance protocol over devices x remat modes and
 * derives the cross-run checks (overhead against none, bitwise equality to
 * none on the same device, largest loss difference across devices). */
#include "model_load.h"
#include "compare.h"
#include "atomic_file.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const mode_names[] = {"none", "full", "activations", "larger_than", "list_of_layers:",
                                         "budget:", "auto"};

/* 1 when s starts with a remat mode's name: where a list of layers ends. */
static int starts_mode(const char *s)
{
    for (size_t i = 0; i < sizeof mode_names / sizeof mode_names[0]; i++)
        if (!strncmp(s, mode_names[i], strlen(mode_names[i])))
            return 1;
    return 0;
}

int clremat_split_modes(const char *text, char ***modes, int *n)
{
    char **v = NULL;
    int k = 0;
    const char *s = text, *start = text;
    *modes = NULL;
    *n = 0;
    if (!text || !*text)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--remat: no modes given");
    /* every comma separates modes, except inside list_of_layers:A,B,...,
     * whose names run until a comma followed by a mode's name */
    for (;; s++) {
        int in_list = !strncmp(start, "list_of_layers:", 15);
        if (*s == 0 || (*s == ',' && (!in_list || starts_mode(s + 1)))) {
            char **nv = realloc(v, sizeof *v * (size_t)(k + 1));
            if (!nv)
                goto oom;
            v = nv;
            v[k] = strndup(start, (size_t)(s - start));
            if (!v[k])
                goto oom;
            k++;
            if (*s == 0)
                break;
            start = s + 1;
        }
    }
    *modes = v;
    *n = k;
    return CLREMAT_OK;
oom:
    for (int i = 0; i < k; i++)
        free(v[i]);
    free(v);
    return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
}

/* Device list: every device for "all", else each comma-separated selection. */
static int resolve_devices(const char *spec, clremat_device_info **out, int *n)
{
    clremat_device_info *all = NULL;
    size_t cnt = 0;
    int st;
    if (!spec || !*spec || !strcmp(spec, "all")) {
        st = clremat_list_devices(&all, &cnt);
        if (st == CLREMAT_OK && cnt == 0) {
            free(all);
            return clremat_set_error(CLREMAT_ERR_NO_DEVICE, "no OpenCL device found");
        }
        *out = all;
        *n = (int)cnt;
        return st;
    }
    {
        /* SEL,SEL...: every item non-empty, each device once */
        clremat_device_info *v = NULL;
        int k = 0;
        for (const char *p = spec;; p++) {
            const char *end = strchr(p, ',');
            const size_t len = end ? (size_t)(end - p) : strlen(p);
            char tok[256], from[64];
            clremat_device_info *nv;
            if (len == 0 || len >= sizeof tok) {
                free(v);
                return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--devices '%s': item %d is %s", spec, k + 1,
                                         len ? "too long" : "empty");
            }
            if (!(nv = realloc(v, sizeof *v * (size_t)(k + 1)))) {
                free(v);
                return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
            }
            v = nv;
            memcpy(tok, p, len);
            tok[len] = 0;
            snprintf(from, sizeof from, "--devices item %d", k + 1);
            if ((st = clremat_select_device_as(tok, from, &v[k])) != CLREMAT_OK) {
                free(v);
                return st;
            }
            for (int j = 0; j < k; j++)
                if (v[j].platform_index == v[k].platform_index && v[j].device_index == v[k].device_index) {
                    st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--devices '%s': items %d and %d are the "
                                           "same device, %u:%u (%s)", spec, j + 1, k + 1, v[k].platform_index,
                                           v[k].device_index, v[k].name);
                    free(v);
                    return st;
                }
            k++;
            if (!end)
                break;
            p = end;
        }
        *out = v;
        *n = k;
        return CLREMAT_OK;
    }
}

static void run_one(clremat_ctx *ctx, const clremat_compare_config *cfg, const char *mode, clremat_compare_run *r)
{
    clremat_train_config tc;
    clremat_train_result res;
    int st;
    memset(&tc, 0, sizeof tc);
    tc.model_path = cfg->model_path;
    tc.batch = cfg->batch;
    tc.steps = cfg->steps;
    tc.warmup = cfg->warmup;
    tc.seed = cfg->seed;
    tc.data = cfg->data;
    tc.optimizer = cfg->optimizer;
    tc.lr = cfg->lr;
    tc.opt_set = cfg->opt_set;
    tc.momentum = cfg->momentum;
    tc.beta1 = cfg->beta1;
    tc.beta2 = cfg->beta2;
    tc.epsilon = cfg->epsilon;
    tc.weight_decay = cfg->weight_decay;
    tc.remat = mode;
    tc.memory_limit = 0; /* runs use the device; fit is judged against r->limit */
    tc.auto_budget = r->limit;
    tc.timeline = 1;
    tc.costs_measured = cfg->costs_measured;
    tc.accumulate = cfg->accumulate;
    tc.precision = cfg->precision;
    st = clremat_train_run_ctx(ctx, &tc, &res);
    r->status = st;
    r->median_ms = res.median_ms;
    r->p10_ms = res.p10_ms;
    r->p90_ms = res.p90_ms;
    r->measured_peak = res.measured_peak;
    r->final_loss = res.final_loss;
    r->val_loss = res.val_loss;
    r->val_accuracy = res.val_accuracy;
    r->step_flops = res.step_flops;
    r->recompute_flops = res.recompute_flops;
    r->fixed_bytes = res.fixed_bytes;
    if (res.predicted_peak)
        r->predicted_peak = res.predicted_peak;
    if (st != CLREMAT_OK) {
        snprintf(r->error, sizeof r->error, "%s", clremat_last_error());
        r->median_ms = r->p10_ms = r->p90_ms = NAN;
    }
    r->n_losses = res.steps_run;
    r->losses = res.losses;
    res.losses = NULL;
    r->params = res.final_params;
    res.final_params = NULL;
    r->param_bytes = res.param_bytes;
    r->timeline = res.timeline;
    r->n_timeline = res.n_timeline;
    res.timeline = NULL;
    r->finite = st == CLREMAT_OK;
    for (int64_t i = 0; i < r->n_losses; i++)
        if (!isfinite(r->losses[i]))
            r->finite = 0;
    clremat_train_result_free(&res);
}

/* Predicted peak of mode without running (for runs that do not fit). */
static void predict(const clremat_compare_config *cfg, const char *mode, clremat_compare_run *r)
{
    clremat_graph *g = NULL;
    clremat_policy p;
    clremat_plan plan;
    clremat_opt_config opt;
    if (clremat_model_load(cfg->model_path, &g, NULL) != CLREMAT_OK)
        return;
    if (clremat_model_set_precision(g, cfg->precision) != CLREMAT_OK) {
        clremat_graph_free(g);
        return;
    }
    if (clremat_policy_parse(mode, &p) == CLREMAT_OK &&
        clremat_opt_defaults(cfg->optimizer ? cfg->optimizer : "adam", &opt) == 0 &&
        cfg->batch % (cfg->accumulate > 1 ? cfg->accumulate : 1) == 0 &&
        clremat_plan_for_accum(NULL, g, cfg->batch / (cfg->accumulate > 1 ? cfg->accumulate : 1),
                               cfg->accumulate > 1 ? (int)cfg->accumulate : 1, &p,
                               clremat_opt_state_count(opt.kind) |
                                   (clremat_trainer_fused(&opt, cfg->accumulate > 1 ? (int)cfg->accumulate : 1, g)
                                        ? CLREMAT_PLAN_FUSED_UPDATE
                                        : 0),
                               r->limit, NULL, 0, &plan, NULL, NULL, NULL) == CLREMAT_OK) {
        r->predicted_peak = plan.peak_bytes;
        r->step_flops = plan.step_flops;
        r->recompute_flops = plan.recompute_flops;
        clremat_plan_free(&plan);
    }
    clremat_graph_free(g);
}

static double max_abs_diff(const clremat_compare_run *a, const clremat_compare_run *b)
{
    double m = 0;
    int64_t n = a->n_losses < b->n_losses ? a->n_losses : b->n_losses;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a->losses[i] - (double)b->losses[i]);
        if (d > m || isnan(d))
            m = d;
    }
    return m;
}

static void cross_checks(clremat_compare_run *runs, int nd, int nm, char **modes)
{
    int none = -1;
    for (int m = 0; m < nm; m++)
        if (!strcmp(modes[m], "none"))
            none = m;
    for (int d = 0; d < nd; d++)
        for (int m = 0; m < nm; m++) {
            clremat_compare_run *r = &runs[d * nm + m], *b = none >= 0 ? &runs[d * nm + none] : NULL;
            r->overhead = NAN;
            r->bitwise_none = -1;
            r->max_device_diff = NAN;
            if (r->status != CLREMAT_OK)
                continue;
            if (b && b->status == CLREMAT_OK) {
                r->overhead = r->median_ms / b->median_ms;
                r->bitwise_none = r->n_losses == b->n_losses && r->param_bytes == b->param_bytes &&
                                  !memcmp(r->losses, b->losses, sizeof(float) * (size_t)r->n_losses) &&
                                  !memcmp(r->params, b->params, r->param_bytes);
            }
            for (int e = 0; e < nd; e++) {
                const clremat_compare_run *o = &runs[e * nm + m];
                double diff;
                if (e == d || o->status != CLREMAT_OK)
                    continue;
                diff = max_abs_diff(r, o);
                if (isnan(r->max_device_diff) || diff > r->max_device_diff || isnan(diff))
                    r->max_device_diff = diff;
            }
        }
}

int clremat_compare(const clremat_compare_config *cfg, clremat_compare_run **out, int *n_out)
{
    clremat_device_info *devs = NULL;
    char **modes = NULL;
    int nd = 0, nm = 0, st;
    clremat_compare_run *runs = NULL;
    clremat_graph *g = NULL;

    *out = NULL;
    *n_out = 0;
    if ((st = clremat_model_load(cfg->model_path, &g, NULL)))
        return st;
    if ((st = clremat_model_set_precision(g, cfg->precision))) {
        clremat_graph_free(g);
        return st;
    }
    st = clremat_batch_check(g, cfg->batch); /* one clear refusal, not one per run */
    clremat_graph_free(g);
    if (st)
        return st;
    { /* a --data file: a regular file, checked once before any run */
        struct stat sb;
        FILE *f = NULL;
        if (cfg->data && (lstat(cfg->data, &sb) == 0 || strchr(cfg->data, '/'))) {
            if ((st = clremat_open_regular(cfg->data, "--data file", &f, NULL)))
                return st;
            fclose(f);
        }
    }
    if ((st = clremat_split_modes(cfg->modes, &modes, &nm)))
        return st;
    for (int m = 0; m < nm; m++) {
        clremat_policy p;
        if ((st = clremat_policy_parse(modes[m], &p)))
            goto done;
    }
    if ((st = resolve_devices(cfg->devices, &devs, &nd)))
        goto done;
    runs = calloc((size_t)(nd * nm), sizeof *runs);
    if (!runs) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
        goto done;
    }
    for (int d = 0; d < nd; d++) {
        clremat_ctx *ctx = NULL;
        char sel[32];
        snprintf(sel, sizeof sel, "%u:%u", devs[d].platform_index, devs[d].device_index);
        st = clremat_ctx_create(sel, cfg->memory_limit, &ctx);
        for (int m = 0; m < nm; m++) {
            clremat_compare_run *r = &runs[d * nm + m];
            snprintf(r->device, sizeof r->device, "%s", devs[d].name);
            snprintf(r->platform, sizeof r->platform, "%s", devs[d].platform);
            snprintf(r->device_id, sizeof r->device_id, "%s", sel);
            snprintf(r->mode, sizeof r->mode, "%s", modes[m]);
            r->limit = cfg->memory_limit ? cfg->memory_limit : devs[d].global_mem_bytes;
            predict(cfg, modes[m], r);
            r->fits = r->predicted_peak > 0 && r->predicted_peak <= r->limit;
            if (st != CLREMAT_OK) {
                r->status = st;
                snprintf(r->error, sizeof r->error, "%s", clremat_last_error());
                continue;
            }
            if (cfg->progress)
                fprintf(stderr, "compare: %s [%s] --remat %s ...\n", r->device, sel, r->mode);
            run_one(ctx, cfg, modes[m], r);
            if (r->status == CLREMAT_OK)
                r->fits = r->measured_peak <= r->limit;
            else if (r->status == CLREMAT_ERR_OUT_OF_MEMORY)
                r->fits = 0; /* not even the device holds it */
        }
        clremat_ctx_destroy(ctx);
    }
    cross_checks(runs, nd, nm, modes);
    *out = runs;
    *n_out = nd * nm;
    st = CLREMAT_OK;
done:
    for (int m = 0; m < nm; m++)
        free(modes[m]);
    free(modes);
    free(devs);
    return st;
}

void clremat_compare_free(clremat_compare_run *runs, int n)
{
    for (int i = 0; runs && i < n; i++) {
        free(runs[i].losses);
        free(runs[i].params);
        free(runs[i].timeline);
    }
    free(runs);
}
