/* train.c: the training loop: data, steps with warm-up, progress, validation,
 * step-time statistics, memory high-water, and weights load/save. */
#include "train.h"
#include "atomic_file.h"
#include "safetensors.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile q in [0,1] of sorted v (nearest rank, interpolated). */
static double percentile(const double *v, int64_t n, double q)
{
    double pos;
    int64_t i;
    if (n <= 0)
        return NAN;
    pos = q * (double)(n - 1);
    i = (int64_t)pos;
    if (i + 1 >= n)
        return v[n - 1];
    return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

static void timing_stats(clremat_train_result *r, int64_t warmup)
{
    int64_t n = r->steps_run - warmup;
    double *v;
    if (n <= 0) {
        warmup = 0;
        n = r->steps_run;
    }
    if (n <= 0 || !(v = malloc(sizeof(double) * (size_t)n))) {
        r->median_ms = r->p10_ms = r->p90_ms = r->min_ms = r->max_ms = NAN;
        return;
    }
    memcpy(v, r->step_ms + warmup, sizeof(double) * (size_t)n);
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    r->median_ms = percentile(v, n, 0.5);
    r->p10_ms = percentile(v, n, 0.1);
    r->p90_ms = percentile(v, n, 0.9);
    r->min_ms = v[0];
    r->max_ms = v[n - 1];
    free(v);
}

int clremat_weights_save(clremat_trainer *t, const char *path)
{
    const clremat_graph *g = t->g;
    size_t n = 0, k = 0;
    clremat_st_tensor *ts;
    int st = clremat_host_alloc_check(t->plan.param_bytes, "saving the weights");
    float *host = st == CLREMAT_OK ? malloc(t->plan.param_bytes ? t->plan.param_bytes : 1) : NULL;
    size_t off = 0;
    if (st != CLREMAT_OK)
        return st;
    for (int l = 0; l < g->n_layers; l++)
        n += (size_t)g->layers[l].n_params;
    ts = calloc(n + 1, sizeof *ts);
    if (!host || !ts) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
        goto done;
    }
    st = clremat_trainer_get_params(t, host);
    if (st != CLREMAT_OK) {
        clremat_set_error(st, "%s", clremat_ctx_last_error(t->ctx));
        goto done;
    }
    for (int l = 0; l < g->n_layers; l++)
        for (int p = 0; p < g->layers[l].n_params; p++, k++) {
            const clremat_param *pr = &g->layers[l].params[p];
            snprintf(ts[k].name, sizeof ts[k].name, "%s/%s", g->layers[l].name, pr->name);
            ts[k].dtype = CLREMAT_ST_F32;
            ts[k].rank = pr->shape.rank;
            for (int d = 0; d < pr->shape.rank; d++)
                ts[k].dims[d] = pr->shape.dims[d];
            ts[k].elems = pr->elems;
            ts[k].data = host + off;
            off += (size_t)pr->elems;
        }
    st = clremat_st_write(path, ts, n);
done:
    free(ts);
    free(host);
    return st;
}

int clremat_weights_load(clremat_trainer *t, const char *path)
{
    const clremat_graph *g = t->g;
    clremat_st_file f;
    int st = clremat_host_alloc_check(t->plan.param_bytes, "loading the weights");
    float *host = st == CLREMAT_OK ? malloc(t->plan.param_bytes ? t->plan.param_bytes : 1) : NULL;
    size_t off = 0, used = 0;
    if (st == CLREMAT_OK)
        st = host ? clremat_st_read(path, &f) : clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    if (st != CLREMAT_OK) {
        free(host);
        return st;
    }
    for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++)
        for (int p = 0; p < g->layers[l].n_params && st == CLREMAT_OK; p++) {
            const clremat_param *pr = &g->layers[l].params[p];
            char name[160], want[64], got[64];
            const clremat_st_tensor *tt;
            clremat_shape s = {0};
            snprintf(name, sizeof name, "%s/%s", g->layers[l].name, pr->name);
            tt = clremat_st_find(&f, name);
            if (!tt) {
                st = clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: weights file has no tensor '%s' (model '%s')",
                                       path, name, g->name);
                break;
            }
            s.rank = tt->rank > CLREMAT_MAX_RANK ? CLREMAT_MAX_RANK : tt->rank;
            for (int d = 0; d < s.rank; d++)
                s.dims[d] = tt->dims[d];
            if (tt->dtype != CLREMAT_ST_F32 || tt->rank != pr->shape.rank || tt->elems != pr->elems ||
                memcmp(s.dims, pr->shape.dims, sizeof(int64_t) * (size_t)s.rank) != 0) {
                st = clremat_set_error(CLREMAT_ERR_MISMATCH,
                                       "%s: tensor '%s' is %s %s but the model needs F32 %s", path, name,
                                       tt->dtype == CLREMAT_ST_F32 ? "F32" : "non-F32",
                                       clremat_shape_str(&s, got, sizeof got),
                                       clremat_shape_str(&pr->shape, want, sizeof want));
                break;
            }
            memcpy(host + off, tt->data, sizeof(float) * (size_t)pr->elems);
            for (int64_t i = 0; i < pr->elems; i++)
                if (!isfinite(host[off + (size_t)i])) {
                    st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: tensor '%s' element %lld is %g, not a finite float",
                                           path, name, (long long)i, (double)host[off + (size_t)i]);
                    break;
                }
            off += (size_t)pr->elems;
            used++;
        }
    /* every tensor of the file must be one the model has, by its exact
     * name: the names are unique, so a count short of the file's means a
     * stray one; find it to name it */
    if (st == CLREMAT_OK && used != f.n)
        for (size_t i = 0; i < f.n; i++) {
            const char *tn = f.tensors[i].name, *slash = strrchr(tn, '/');
            char lname[sizeof f.tensors[i].name];
            int l = -1, known = 0;
            if (slash) {
                snprintf(lname, sizeof lname, "%.*s", (int)(slash - tn), tn);
                l = clremat_graph_find_layer(g, lname);
            }
            for (int p = 0; l >= 0 && p < g->layers[l].n_params && !known; p++)
                known = strcmp(slash + 1, g->layers[l].params[p].name) == 0;
            if (!known) {
                st = clremat_set_error(CLREMAT_ERR_MISMATCH,
                                       "%s: tensor '%s' is not a parameter of model '%s' (a weights file holds "
                                       "exactly the model's LAYER/PARAM tensors)",
                                       path, tn, g->name);
                break;
            }
        }
    if (st == CLREMAT_OK) {
        st = clremat_trainer_set_params(t, host);
        if (st != CLREMAT_OK)
            clremat_set_error(st, "%s", clremat_ctx_last_error(t->ctx));
    }
    clremat_st_free(&f);
    free(host);
    return st;
}

/* 1 when --data names a file rather than a synthetic task. */
static int data_is_file(const char *task)
{
    struct stat sb;
    return task && (lstat(task, &sb) == 0 || strchr(task, '/'));
}

static int load_data(const clremat_train_config *cfg, const clremat_graph *g, clremat_dataset *d)
{
    const char *task = cfg->data;
    if (data_is_file(task))
        return clremat_data_load(g, task, d);
    return clremat_data_synthetic(g, task, cfg->seed, cfg->train_samples > 0 ? cfg->train_samples : 4096,
                                  cfg->val_samples > 0 ? cfg->val_samples : 512, d);
}

/* Refuses bad paths before any work: the model, --load and a --data file
 * must be regular files (checked without blocking on a FIFO), and --save
 * must be writable by the rules of atomic_file.h, so that a run never
 * trains for minutes and then fails on a path it could have refused. */
static int check_paths(const clremat_train_config *cfg)
{
    FILE *f = NULL;
    int st;
    if (!cfg->model_path)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "no model file given");
    if ((st = clremat_open_regular(cfg->model_path, "model file", &f, NULL)) != CLREMAT_OK)
        return st;
    fclose(f);
    if (cfg->load) {
        if ((st = clremat_open_regular(cfg->load, "--load weights file", &f, NULL)) != CLREMAT_OK)
            return st;
        fclose(f);
    }
    if (data_is_file(cfg->data)) {
        if ((st = clremat_open_regular(cfg->data, "--data file", &f, NULL)) != CLREMAT_OK)
            return st;
        fclose(f);
    }
    if (cfg->save && (st = clremat_output_check(cfg->save, "--save")) != CLREMAT_OK)
        return st;
    if (cfg->save && (clremat_same_file(cfg->save, cfg->model_path) ||
                      (data_is_file(cfg->data) && clremat_same_file(cfg->save, cfg->data))))
        return clremat_set_error(CLREMAT_ERR_IO, "--save %s: is the run's %s; refusing to overwrite an input",
                                 cfg->save, clremat_same_file(cfg->save, cfg->model_path) ? "model file" : "--data file");
    return CLREMAT_OK;
}

/* Keeps the pool's recorded timeline in the result and stops recording. */
static int copy_timeline(clremat_pool *pool, clremat_train_result *res)
{
    size_t n;
    const clremat_pool_event *ev = clremat_pool_timeline(pool, &n);
    clremat_pool_record_timeline(pool, 0);
    res->timeline = malloc(sizeof *ev * (n ? n : 1));
    if (!res->timeline)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
    memcpy(res->timeline, ev, sizeof *ev * n);
    res->n_timeline = n;
    return CLREMAT_OK;
}

static void progress(const clremat_train_config *cfg, int64_t step, float loss, double t0, double *last)
{
    double t = now_ms();
    if (!cfg->progress || (t - *last < 1000.0 && step + 1 != cfg->steps))
        return;
    *last = t;
    fprintf(stderr, "step %lld/%lld  loss %.6f  %.2f steps/s\n", (long long)(step + 1), (long long)cfg->steps,
            (double)loss, (double)(step + 1) / ((t - t0) / 1000.0));
}

static int validate(clremat_trainer *t, const clremat_dataset *d, clremat_train_result *res)
{
    int64_t nb = d->val.n / t->batch, labels_per = d->val.y_elems;
    double loss_sum = 0, correct = 0;
    int st = CLREMAT_OK;
    if (nb == 0) {
        res->val_loss = res->val_accuracy = NAN;
        return CLREMAT_OK;
    }
    for (int64_t b = 0; b < nb && st == CLREMAT_OK; b++) {
        float l, c;
        st = clremat_trainer_eval(t, d->val.x + b * t->batch * d->val.x_elems,
                                  d->val.y + b * t->batch * d->val.y_elems, &l, &c);
        loss_sum += l;
        correct += c;
    }
    res->val_loss = (float)(loss_sum / (double)nb);
    res->val_accuracy = d->y_ids ? (float)(correct / (double)(nb * t->batch * labels_per)) : NAN;
    return st;
}

int clremat_train_run_ctx(clremat_ctx *ctx, const clremat_train_config *cfg, clremat_train_result *res)
{
    clremat_graph *g = NULL;
    clremat_dataset data;
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t = NULL;
    float *x = NULL, *y = NULL;
    double *layer_ms = NULL;
    int64_t steps = cfg->steps > 0 ? cfg->steps : 200, batch = cfg->batch > 0 ? cfg->batch : 32;
    uint64_t created_after_first = 0;
    double t0, last = 0;
    int st;

    memset(&data, 0, sizeof data);
    memset(res, 0, sizeof *res);
    snprintf(res->device, sizeof res->device, "%s", ctx->info.name);
    snprintf(res->platform, sizeof res->platform, "%s", ctx->info.platform);
    res->val_loss = res->val_accuracy = res->final_loss = NAN;
    if ((st = check_paths(cfg)) || (st = clremat_graph_load(cfg->model_path, &g)))
        goto fail;
    res->g = g;
    /* before the data or anything else is sized from the batch */
    if ((st = clremat_batch_check(g, batch)))
        goto fail;
    if ((st = clremat_policy_parse(cfg->remat, &pol)))
        goto fail;
    snprintf(res->remat, sizeof res->remat, "%s", pol.text);
    if (clremat_opt_defaults(cfg->optimizer ? cfg->optimizer : "adam", &opt) != 0) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "unknown optimizer '%s'; valid: sgd, adam, adamw",
                               cfg->optimizer);
        goto fail;
    }
    if (cfg->lr > 0)
        opt.lr = (float)cfg->lr;
    clremat_pool_set_limit(ctx->pool, cfg->memory_limit ? cfg->memory_limit : ctx->info.global_mem_bytes);
    if (pol.kind == CLREMAT_POLICY_AUTO && cfg->auto_budget) { /* reported as auto, planned as a budget */
        pol.kind = CLREMAT_POLICY_BUDGET;
        pol.budget = cfg->auto_budget;
    }
    /* a budget is a promise about device memory: hold the pool to it too, so
     * reserved bytes (cached buffers) stay within it as well as live bytes */
    if (pol.kind == CLREMAT_POLICY_BUDGET && pol.budget < clremat_pool_get_stats(ctx->pool).limit)
        clremat_pool_set_limit(ctx->pool, pol.budget);
    /* the plan is checked (and, without measured costs, the trainer made)
     * before the data is built or the batch allocated, so a step that
     * cannot fit is refused at once; with measured costs, a probe with FLOP
     * costs gives the same check and message as the real trainer's */
    if ((st = clremat_trainer_new_costs(ctx, g, batch, &pol, &opt, cfg->seed, NULL, cfg->overlap, &t))) {
        clremat_set_error(st, "%s", clremat_ctx_last_error(ctx));
        goto fail;
    }
    if (cfg->costs_measured) {
        clremat_trainer_free(t);
        t = NULL;
    }
    if ((st = load_data(cfg, g, &data)))
        goto fail;
    /* the batch check bounds these products below 2^31 elements each */
    if ((st = clremat_host_alloc_check(sizeof(float) * (uint64_t)batch *
                                           (uint64_t)(data.train.x_elems + data.train.y_elems),
                                       "the host copy of one batch")))
        goto fail;
    x = malloc(sizeof(float) * (size_t)(batch * data.train.x_elems));
    y = malloc(sizeof(float) * (size_t)(batch * data.train.y_elems));
    if (!x || !y) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory for a batch of %lld samples",
                               (long long)batch);
        goto fail;
    }
    if (cfg->costs_measured) {
        clremat_data_batch(&data.train, cfg->seed, 0, batch, x, y);
        if ((st = clremat_measure_layer_ms(ctx, g, batch, &opt, cfg->seed, x, y, &layer_ms))) {
            clremat_set_error(st, "measuring layer costs: %s", clremat_ctx_last_error(ctx));
            goto fail;
        }
        if ((st = clremat_trainer_new_costs(ctx, g, batch, &pol, &opt, cfg->seed, layer_ms, cfg->overlap, &t))) {
            clremat_set_error(st, "%s", clremat_ctx_last_error(ctx));
            goto fail;
        }
    }
    if (cfg->load && (st = clremat_weights_load(t, cfg->load)))
        goto fail;
    snprintf(res->gemm, sizeof res->gemm, "%s", clremat_gemm_path_name(clremat_ctx_gemm(ctx)));
    res->predicted_peak = t->plan.peak_bytes;
    res->fixed_bytes = t->plan.fixed_bytes;
    res->param_bytes = t->plan.param_bytes;
    res->kept_act_bytes = t->plan.kept_act_bytes;
    res->step_flops = t->plan.step_flops;
    res->recompute_flops = t->plan.recompute_flops;
    res->n_recompute_actions = t->plan.n_recompute_actions;
    if ((st = clremat_host_alloc_check((uint64_t)steps * (sizeof(float) + sizeof(double)), "the per-step losses and times")))
        goto fail;
    res->losses = calloc((size_t)steps, sizeof(float));
    res->step_ms = calloc((size_t)steps, sizeof(double));
    if (!res->losses || !res->step_ms) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
        goto fail;
    }
    clremat_pool_reset_peaks(ctx->pool);
    t0 = now_ms();
    for (int64_t s = 0; s < steps; s++) {
        float loss, correct;
        double a;
        clremat_data_batch(&data.train, cfg->seed, s, batch, x, y);
        clremat_trainer_set_profiling(t, cfg->profile && s == steps - 1);
        if (cfg->timeline && s == steps - 1)
            clremat_pool_record_timeline(ctx->pool, 1);
        a = now_ms();
        st = clremat_trainer_step(t, x, y, &loss, &correct);
        if (st == CLREMAT_OK)
            st = clremat_finish(ctx);
        res->step_ms[s] = now_ms() - a;
        if (cfg->timeline && s == steps - 1 && st == CLREMAT_OK)
            st = copy_timeline(ctx->pool, res);
        if (st == CLREMAT_ERR_NONFINITE) {
            clremat_pool_stats ps = clremat_pool_get_stats(ctx->pool);
            res->stopped_nonfinite = 1;
            res->losses[s] = loss;
            res->final_loss = loss; /* the non-finite loss that stopped the run */
            res->steps_run = s + 1;
            res->measured_peak = ps.live_peak; /* the step ran to its end */
            res->reserved_peak = ps.reserved_peak;
            snprintf(res->message, sizeof res->message, "%s", clremat_ctx_last_error(ctx));
        }
        if (st != CLREMAT_OK) {
            clremat_set_error(st, "%s", clremat_ctx_last_error(ctx));
            goto fail;
        }
        res->losses[s] = loss;
        res->steps_run = s + 1;
        if (s == 0)
            created_after_first = clremat_pool_get_stats(ctx->pool).created;
        progress(cfg, s, loss, t0, &last);
    }
    {
        clremat_pool_stats ps = clremat_pool_get_stats(ctx->pool);
        res->measured_peak = ps.live_peak;
        res->reserved_peak = ps.reserved_peak;
        res->buffers_created_after_first_step = ps.created - created_after_first;
    }
    res->final_loss = res->losses[steps - 1];
    if (cfg->profile) {
        res->profile = malloc(sizeof *res->profile * (size_t)(g->n_layers + 1));
        if (res->profile)
            memcpy(res->profile, t->profile, sizeof *res->profile * (size_t)(g->n_layers + 1));
        if (t->n_kprof > 0 && (res->kernels = malloc(sizeof *res->kernels * (size_t)t->n_kprof)) != NULL) {
            memcpy(res->kernels, t->kprof, sizeof *res->kernels * (size_t)t->n_kprof);
            res->n_kernels = t->n_kprof;
        }
    }
    res->final_params = malloc(t->plan.param_bytes ? t->plan.param_bytes : 1);
    if (!res->final_params || (st = clremat_trainer_get_params(t, res->final_params))) {
        st = clremat_set_error(st ? st : CLREMAT_ERR_INTERNAL, "reading parameters back failed");
        goto fail;
    }
    if ((st = validate(t, &data, res))) {
        clremat_set_error(st, "%s", clremat_ctx_last_error(ctx));
        goto fail;
    }
    if (cfg->save && (st = clremat_weights_save(t, cfg->save)))
        goto fail;
fail:
    timing_stats(res, cfg->warmup >= 0 ? cfg->warmup : 5);
    free(layer_ms);
    free(x);
    free(y);
    clremat_trainer_free(t);
    clremat_data_free(&data);
    return st;
}

int clremat_train_run(const clremat_train_config *cfg, clremat_train_result *res)
{
    clremat_ctx *ctx = NULL;
    clremat_gemm_path path = CLREMAT_GEMM_AUTO;
    int st = cfg->gemm ? clremat_gemm_path_parse(cfg->gemm, &path) : CLREMAT_OK;
    if (st == CLREMAT_OK) /* before a device is opened (a calibration can take seconds) */
        st = check_paths(cfg);
    if (st == CLREMAT_OK)
        st = clremat_ctx_create(cfg->device, cfg->memory_limit, &ctx);
    if (st == CLREMAT_OK)
        clremat_ctx_set_gemm(ctx, path);
    if (st != CLREMAT_OK) {
        memset(res, 0, sizeof *res);
        return st;
    }
    st = clremat_train_run_ctx(ctx, cfg, res);
    clremat_ctx_destroy(ctx);
    return st;
}

void clremat_train_result_free(clremat_train_result *res)
{
    free(res->losses);
    free(res->step_ms);
    free(res->profile);
    free(res->kernels);
    free(res->final_params);
    free(res->timeline);
    if (res->g)
        clremat_graph_free(res->g);
    memset(res, 0, sizeof *res);
}
