/* train.c: the training loop: data, steps with warm-up, progress, validation,
 * step-time statistics, memory high-water, and weights load/save. */
#include "keras.h"
#include "clock.h"
#include "model_load.h"
#include "train.h"
#include "dp.h"
#include "hf_llama.h"
#include "memory_trace.h"
#include "atomic_file.h"
#include "safetensors.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* Median of v[warmup .. n) (all of v when warm-up leaves none). */
static double median_after(const double *v, int64_t n, int64_t warmup)
{
    double *w, m;
    if (n - warmup <= 0)
        warmup = 0;
    if (!v || n <= 0 || !(w = malloc(sizeof(double) * (size_t)(n - warmup))))
        return NAN;
    memcpy(w, v + warmup, sizeof(double) * (size_t)(n - warmup));
    qsort(w, (size_t)(n - warmup), sizeof(double), cmp_double);
    m = percentile(w, n - warmup, 0.5);
    free(w);
    return m;
}

/* The data-parallel figures: medians and the exchange's share of the step. */
static void comm_stats(clremat_train_result *r, int64_t warmup)
{
    double c = 0, s = 0;
    if (!r->comm_ms || r->steps_run <= 0)
        return;
    if (r->steps_run - warmup <= 0)
        warmup = 0;
    r->comm_median_ms = median_after(r->comm_ms, r->steps_run, warmup);
    r->wait_median_ms = median_after(r->wait_ms, r->steps_run, warmup);
    for (int64_t i = warmup; i < r->steps_run; i++) {
        c += r->comm_ms[i];
        s += r->step_ms[i];
    }
    r->comm_share = s > 0 ? c / s : 0;
}

static void timing_stats(clremat_train_result *r, int64_t warmup)
{
    int64_t n = r->steps_run - warmup;
    double *v;
    if (n <= 0) {
        warmup = 0;
        n = r->steps_run;
    }
    r->warmup_excluded = warmup;
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

/* Optimizer state in a weights file: tensors "@optimizer/SLOT/LAYER/PARAM"
 * (no layer name starts with '@', so they never clash with weights) and the
 * metadata entries "clremat.*" (docs/model-format.md, "Weights files"). */
#define STATE_PREFIX "@optimizer/"

/* The state tensors' slot names of an optimizer, in the trainer's order. */
static const char *state_slot(clremat_opt_kind kind, int k)
{
    return kind == CLREMAT_OPT_SGD ? "momentum" : k == 0 ? "m" : "v";
}

/* Hyperparameter metadata keys by CLREMAT_OPT_SET_* bit. */
static const struct {
    unsigned bit;
    const char *key;
    size_t off;
} meta_hp[] = {
    {CLREMAT_OPT_SET_LR, "clremat.lr", offsetof(clremat_opt_config, lr)},
    {CLREMAT_OPT_SET_MOMENTUM, "clremat.momentum", offsetof(clremat_opt_config, momentum)},
    {CLREMAT_OPT_SET_BETA1, "clremat.beta1", offsetof(clremat_opt_config, beta1)},
    {CLREMAT_OPT_SET_BETA2, "clremat.beta2", offsetof(clremat_opt_config, beta2)},
    {CLREMAT_OPT_SET_EPS, "clremat.epsilon", offsetof(clremat_opt_config, eps)},
    {CLREMAT_OPT_SET_WEIGHT_DECAY, "clremat.weight_decay", offsetof(clremat_opt_config, weight_decay)},
};
#define N_META_HP (sizeof meta_hp / sizeof meta_hp[0])

/* Copies every optimizer state tensor (k of nstate per parameter) to or
 * from host, in the order of the parameters, all of slot 0 then slot 1. */
static int copy_state(clremat_trainer *t, float *host, int to_device)
{
    const clremat_graph *g = t->g;
    int nstate = clremat_opt_state_count(t->opt.kind);
    size_t off = 0;
    for (int k = 0; k < nstate; k++)
        for (int l = 0; l < g->n_layers; l++)
            for (int p = 0; p < g->layers[l].n_params; p++) {
                size_t bytes = (size_t)g->layers[l].params[p].elems * sizeof(float);
                clremat_buf *b = t->state[l][2 * p + k];
                int st;
                if (g->layers[l].params[p].frozen) { /* no optimizer state: its place stays zero */
                    if (!to_device)
                        memset(host + off, 0, bytes);
                    off += bytes / sizeof(float);
                    continue;
                }
                st = to_device ? clremat_write(t->ctx, b, 0, bytes, host + off)
                                   : clremat_read(t->ctx, b, 0, bytes, host + off);
                if (st != CLREMAT_OK)
                    return clremat_set_error(st, "%s", clremat_ctx_last_error(t->ctx));
                off += bytes / sizeof(float);
            }
    return CLREMAT_OK;
}

int clremat_weights_save(clremat_trainer *t, const char *path)
{
    const clremat_graph *g = t->g;
    int nstate = clremat_opt_state_count(t->opt.kind);
    size_t n = 0, k = 0, nm = 0, pfloats = t->plan.param_bytes / sizeof(float);
    clremat_st_tensor *ts = NULL;
    clremat_st_meta meta[6 + N_META_HP];
    char vals[6 + N_META_HP][40];
    int st = clremat_host_alloc_check(t->plan.param_bytes * (uint64_t)(1 + nstate), "saving the weights");
    float *host = st == CLREMAT_OK ? malloc(t->plan.param_bytes * (size_t)(1 + nstate) + 1) : NULL;
    if (st != CLREMAT_OK)
        return st;
    for (int l = 0; l < g->n_layers; l++)
        n += (size_t)g->layers[l].n_params;
    ts = calloc(n * (size_t)(1 + nstate) + 1, sizeof *ts);
    if (!host || !ts) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
        goto done;
    }
    st = clremat_trainer_get_params(t, host);
    if (st != CLREMAT_OK) {
        clremat_set_error(st, "%s", clremat_ctx_last_error(t->ctx));
        goto done;
    }
    if ((st = copy_state(t, host + pfloats, 0)) != CLREMAT_OK)
        goto done;
    for (int s = -1; s < nstate; s++) { /* the weights, then each state slot */
        size_t off = s < 0 ? 0 : (size_t)(s + 1) * pfloats;
        for (int l = 0; l < g->n_layers; l++)
            for (int p = 0; p < g->layers[l].n_params; p++) {
                const clremat_param *pr = &g->layers[l].params[p];
                if (s >= 0 && pr->frozen) { /* frozen: no optimizer state saved */
                    off += (size_t)pr->elems;
                    continue;
                }
                if (s < 0)
                    snprintf(ts[k].name, sizeof ts[k].name, "%s/%s", g->layers[l].name, pr->name);
                else
                    snprintf(ts[k].name, sizeof ts[k].name, STATE_PREFIX "%s/%s/%s", state_slot(t->opt.kind, s),
                             g->layers[l].name, pr->name);
                ts[k].dtype = CLREMAT_ST_F32;
                ts[k].rank = pr->shape.rank;
                for (int d = 0; d < pr->shape.rank; d++)
                    ts[k].dims[d] = pr->shape.dims[d];
                ts[k].elems = pr->elems;
                ts[k].data = host + off;
                off += (size_t)pr->elems;
                k++;
            }
    }
#define META(K, ...) (snprintf(vals[nm], sizeof vals[nm], __VA_ARGS__), meta[nm].key = (K), \
                      meta[nm].value = vals[nm], nm++)
    META("clremat.optimizer", "%s", clremat_opt_name(t->opt.kind));
    META("clremat.step", "%lld", (long long)t->step);
    META("clremat.data_position", "%lld", (long long)t->data_position);
    META("clremat.seed", "%llu", (unsigned long long)t->seed);
    META("clremat.batch", "%lld", (long long)(t->batch * t->accumulate)); /* the step's batch */
    for (size_t i = 0; i < N_META_HP; i++)
        if (clremat_opt_uses(t->opt.kind, meta_hp[i].bit)) {
            float v;
            memcpy(&v, (const char *)&t->opt + meta_hp[i].off, sizeof v);
            META(meta_hp[i].key, "%.9g", (double)v);
        }
#undef META
    st = clremat_st_write_meta(path, ts, k, meta, nm);
done:
    free(ts);
    free(host);
    return st;
}

/* Strict decimal integer in [0, max] from metadata entry key of f. */
static int meta_u64(const clremat_st_file *f, const char *path, const char *key, uint64_t max, uint64_t *out)
{
    const char *v = clremat_st_meta_get(f, key);
    char *end;
    unsigned long long x;
    if (!v)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: optimizer state without metadata '%s'", path, key);
    errno = 0;
    x = strtoull(v, &end, 10);
    if (!isdigit((unsigned char)v[0]) || *end || errno == ERANGE || x > max)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: metadata '%s' must be an integer in [0, %llu], got \"%s\"",
                                 path, key, (unsigned long long)max, v);
    *out = x;
    return CLREMAT_OK;
}

/* Fills *out from the metadata of an open file. */
static int info_from_file(const clremat_st_file *f, const char *path, clremat_checkpoint_info *out)
{
    const char *name = clremat_st_meta_get(f, "clremat.optimizer");
    clremat_opt_config v;
    unsigned set = 0;
    uint64_t step, pos, batch;
    const uint64_t big = (uint64_t)1 << 53; /* counts beyond this are not a real run's */
    int st;
    memset(out, 0, sizeof *out);
    if (!name) { /* weights alone, unless state tensors say the metadata was lost */
        for (size_t i = 0; i < f->n; i++)
            if (strncmp(f->tensors[i].name, STATE_PREFIX, strlen(STATE_PREFIX)) == 0)
                return clremat_set_error(CLREMAT_ERR_PARSE,
                                         "%s: holds optimizer state (tensor '%s') but no metadata "
                                         "'clremat.optimizer' naming its optimizer, step and data position: the "
                                         "file is inconsistent (edited or damaged), so training cannot continue "
                                         "from it; to start from its weights alone give --weights-only",
                                         path, f->tensors[i].name);
        return CLREMAT_OK;
    }
    if (clremat_opt_defaults(name, &out->opt) != 0)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: metadata 'clremat.optimizer' is \"%s\"; known: sgd, adam, adamw",
                                 path, name);
    if ((st = meta_u64(f, path, "clremat.step", big, &step)) ||
        (st = meta_u64(f, path, "clremat.data_position", big, &pos)) ||
        (st = meta_u64(f, path, "clremat.seed", UINT64_MAX, &out->seed)) ||
        (st = meta_u64(f, path, "clremat.batch", big, &batch)))
        return st;
    out->step = (int64_t)step;
    out->data_position = (int64_t)pos;
    out->batch = (int64_t)batch;
    v = out->opt;
    for (size_t i = 0; i < N_META_HP; i++) {
        const char *text = clremat_st_meta_get(f, meta_hp[i].key);
        double d;
        float x;
        if (!clremat_opt_uses(out->opt.kind, meta_hp[i].bit))
            continue;
        if (!text)
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: %s optimizer state without metadata '%s'", path, name,
                                     meta_hp[i].key);
        if (clremat_parse_decimal(text, &d) != 0) /* as written: %.9g */
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: metadata '%s' must be a number, in decimal, got \"%s\"",
                                     path, meta_hp[i].key, text);
        x = (float)d;
        memcpy((char *)&v + meta_hp[i].off, &x, sizeof x);
        set |= meta_hp[i].bit;
    }
    if ((st = clremat_opt_apply(&out->opt, set, &v)) != CLREMAT_OK) {
        char why[512]; /* the last error is rewritten below: copy it first */
        snprintf(why, sizeof why, "%s", clremat_last_error());
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: saved optimizer state: %s", path, why);
    }
    out->has_state = 1;
    return CLREMAT_OK;
}

int clremat_checkpoint_info_read(const char *path, clremat_checkpoint_info *out)
{
    clremat_st_file f;
    int st;
    if (!path || !out)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "clremat_checkpoint_info_read: NULL argument");
    memset(out, 0, sizeof *out);
    if ((st = clremat_st_read(path, &f)) != CLREMAT_OK)
        return st;
    st = info_from_file(&f, path, out);
    clremat_st_free(&f);
    return st;
}

/* The F32 tensor name of f with the shape of parameter pr, or an error. */
static int find_param_tensor(const clremat_st_file *f, const char *path, const char *name, const clremat_param *pr,
                             const char *model, const clremat_st_tensor **out)
{
    const clremat_st_tensor *tt = clremat_st_find(f, name);
    char want[64], got[64];
    clremat_shape s = {0};
    if (!tt)
        return clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: weights file has no tensor '%s' (model '%s')", path, name,
                                 model);
    s.rank = tt->rank > CLREMAT_MAX_RANK ? CLREMAT_MAX_RANK : tt->rank;
    for (int d = 0; d < s.rank; d++)
        s.dims[d] = tt->dims[d];
    if (tt->dtype != CLREMAT_ST_F32 || tt->rank != pr->shape.rank || tt->elems != pr->elems ||
        memcmp(s.dims, pr->shape.dims, sizeof(int64_t) * (size_t)s.rank) != 0)
        return clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: tensor '%s' is %s %s but the model needs F32 %s", path,
                                 name, tt->dtype == CLREMAT_ST_F32 ? "F32" : "non-F32",
                                 clremat_shape_str(&s, got, sizeof got), clremat_shape_str(&pr->shape, want, sizeof want));
    *out = tt;
    return CLREMAT_OK;
}

int clremat_weights_load(clremat_trainer *t, const char *path) { return clremat_weights_load_opt(t, path, 1); }

int clremat_weights_load_opt(clremat_trainer *t, const char *path, int with_state)
{
    const clremat_graph *g = t->g;
    clremat_st_file f;
    clremat_checkpoint_info info;
    int nstate = clremat_opt_state_count(t->opt.kind);
    int st = clremat_host_alloc_check(t->plan.param_bytes * (uint64_t)(1 + nstate), "loading the weights");
    float *host = st == CLREMAT_OK ? malloc(t->plan.param_bytes * (size_t)(1 + nstate) + 1) : NULL;
    size_t off = 0, pfloats = t->plan.param_bytes / sizeof(float);
    if (st == CLREMAT_OK)
        st = host ? clremat_st_read(path, &f) : clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    if (st != CLREMAT_OK) {
        free(host);
        return st;
    }
    memset(&info, 0, sizeof info);
    /* LoRA adapters a base checkpoint lacks keep their initial values */
    if ((st = clremat_trainer_get_params(t, host)) != CLREMAT_OK)
        clremat_set_error(st, "%s", clremat_ctx_last_error(t->ctx));
    if (st == CLREMAT_OK && with_state && (st = info_from_file(&f, path, &info)) == CLREMAT_OK && info.has_state &&
        info.opt.kind != t->opt.kind)
        st = clremat_set_error(CLREMAT_ERR_MISMATCH,
                               "%s holds %s optimizer state (step %lld) but this run uses %s: continue with %s, or "
                               "load the weights alone (--weights-only)",
                               path, clremat_opt_name(info.opt.kind), (long long)info.step,
                               clremat_opt_name(t->opt.kind), clremat_opt_name(info.opt.kind));
    for (int s = -1; s < (info.has_state ? nstate : 0) && st == CLREMAT_OK; s++)
        for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++)
            for (int p = 0; p < g->layers[l].n_params && st == CLREMAT_OK; p++) {
                const clremat_param *pr = &g->layers[l].params[p];
                const clremat_st_tensor *tt = NULL;
                char name[200];
                if (s >= 0 && pr->frozen) { /* frozen: no optimizer state */
                    memset(host + off, 0, sizeof(float) * (size_t)pr->elems);
                    off += (size_t)pr->elems;
                    continue;
                }
                if (s < 0)
                    snprintf(name, sizeof name, "%s/%s", g->layers[l].name, pr->name);
                else
                    snprintf(name, sizeof name, STATE_PREFIX "%s/%s/%s", state_slot(t->opt.kind, s),
                             g->layers[l].name, pr->name);
                if (s < 0 && !clremat_st_find(&f, name) && g->layers[l].lora_rank > 0 &&
                    !strncmp(pr->name, "lora_", 5)) { /* fine-tuning a base: the adapter as initialized */
                    off += (size_t)pr->elems;
                    continue;
                }
                if ((st = find_param_tensor(&f, path, name, pr, g->name, &tt)) != CLREMAT_OK)
                    break;
                memcpy(host + off, tt->data, sizeof(float) * (size_t)pr->elems);
                off += (size_t)pr->elems;
            }
    /* every tensor of the file must be one the model has, by its exact name:
     * LAYER/PARAM, or optimizer state STATE_PREFIX SLOT/LAYER/PARAM of one */
    for (size_t i = 0; i < f.n && st == CLREMAT_OK; i++) {
        const char *tn = f.tensors[i].name, *pname = tn, *slash;
        char lname[sizeof f.tensors[i].name];
        int l = -1, known = 0;
        if (strncmp(tn, STATE_PREFIX, strlen(STATE_PREFIX)) == 0) { /* skip the state slot */
            const char *sl = strchr(tn + strlen(STATE_PREFIX), '/');
            pname = sl ? sl + 1 : "";
        }
        slash = strrchr(pname, '/');
        if (slash) {
            snprintf(lname, sizeof lname, "%.*s", (int)(slash - pname), pname);
            l = clremat_graph_find_layer(g, lname);
        }
        for (int p = 0; l >= 0 && p < g->layers[l].n_params && !known; p++)
            known = strcmp(slash + 1, g->layers[l].params[p].name) == 0;
        if (!known)
            st = clremat_set_error(CLREMAT_ERR_MISMATCH,
                                   "%s: tensor '%s' is not a parameter of model '%s' (a weights file holds exactly "
                                   "the model's LAYER/PARAM tensors, and optimizer state " STATE_PREFIX
                                   "SLOT/LAYER/PARAM of them)",
                                   path, tn, g->name);
    }
    /* every value loaded must be a finite float */
    for (size_t i = 0; i < off && st == CLREMAT_OK; i++)
        if (!isfinite(host[i])) {
            size_t at = i % (pfloats ? pfloats : 1), acc = 0;
            for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++)
                for (int p = 0; p < g->layers[l].n_params && st == CLREMAT_OK; p++) {
                    size_t e = (size_t)g->layers[l].params[p].elems;
                    if (at < acc + e)
                        st = clremat_set_error(CLREMAT_ERR_PARSE,
                                               "%s: %s'%s/%s' element %zu is %g, not a finite float", path,
                                               i >= pfloats ? "optimizer state of " : "tensor ", g->layers[l].name,
                                               g->layers[l].params[p].name, at - acc, (double)host[i]);
                    acc += e;
                }
        }
    if (st == CLREMAT_OK) {
        st = clremat_trainer_set_params(t, host);
        if (st != CLREMAT_OK)
            clremat_set_error(st, "%s", clremat_ctx_last_error(t->ctx));
    }
    if (st == CLREMAT_OK && info.has_state && (st = copy_state(t, host + pfloats, 1)) == CLREMAT_OK) {
        t->step = info.step;
        t->data_position = info.data_position;
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
    if (cfg->data_arrays)
        return clremat_data_from_tensors(g, "data arrays", cfg->data_arrays, 1, d); /* in place where F32 */
    if (data_is_file(task))
        return clremat_data_load(g, task, d);
    return clremat_data_synthetic(g, task, cfg->seed, cfg->train_samples > 0 ? cfg->train_samples : 4096,
                                  cfg->val_samples > 0 ? cfg->val_samples : 512, d);
}

/* 1 when --save names a Keras file (.weights.h5 or .keras): the weights go
 * back in Keras 3's layout (host/keras_export.c). */
static int keras_save_path(const char *path)
{
    size_t n = strlen(path);
    return (n >= 11 && strcmp(path + n - 11, ".weights.h5") == 0) || (n >= 6 && strcmp(path + n - 6, ".keras") == 0);
}

static int save_keras(const clremat_train_config *cfg, const clremat_graph *g, const float *params)
{
    clremat_keras_model km;
    int st = clremat_keras_read(cfg->model_path, clremat_keras_json_weights(cfg->model_path), NULL, &km);
    if (!st)
        st = clremat_keras_save(&km, g, params, cfg->save);
    clremat_keras_free(&km);
    return st;
}

/* A Keras model's compile config gives the optimizer and its settings when
 * the run names none (and resumes none): *kc is cfg with them filled in.
 * Returns 1 when it did. */
static int keras_compile_optimizer(const clremat_train_config *cfg, clremat_train_config *kc)
{
    clremat_keras_model km;
    int used = 0;
    if (clremat_keras_read(cfg->model_path, NULL, NULL, &km) != CLREMAT_OK) {
        return 0;
    }
    if (km.optimizer[0]) {
        *kc = *cfg;
        kc->optimizer = !strcmp(km.optimizer, "sgd") ? "sgd" : !strcmp(km.optimizer, "adam") ? "adam" : "adamw";
        if (!(cfg->lr > 0))
            kc->lr = km.lr;
        if (!strcmp(km.optimizer, "sgd") && !(cfg->opt_set & CLREMAT_OPT_SET_MOMENTUM)) {
            kc->momentum = km.momentum;
            kc->opt_set |= CLREMAT_OPT_SET_MOMENTUM;
        }
        if (strcmp(km.optimizer, "sgd") != 0) {
            if (!(cfg->opt_set & CLREMAT_OPT_SET_BETA1) && km.beta1 > 0) {
                kc->beta1 = km.beta1;
                kc->opt_set |= CLREMAT_OPT_SET_BETA1;
            }
            if (!(cfg->opt_set & CLREMAT_OPT_SET_BETA2) && km.beta2 > 0) {
                kc->beta2 = km.beta2;
                kc->opt_set |= CLREMAT_OPT_SET_BETA2;
            }
            if (!(cfg->opt_set & CLREMAT_OPT_SET_EPS) && km.epsilon > 0) {
                kc->epsilon = km.epsilon;
                kc->opt_set |= CLREMAT_OPT_SET_EPS;
            }
        }
        if (!strcmp(km.optimizer, "adamw") && !(cfg->opt_set & CLREMAT_OPT_SET_WEIGHT_DECAY)) {
            kc->weight_decay = km.weight_decay;
            kc->opt_set |= CLREMAT_OPT_SET_WEIGHT_DECAY;
        }
        used = 1;
    }
    clremat_keras_free(&km);
    return used;
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
    if (cfg->save && keras_save_path(cfg->save) && !clremat_keras_is_keras(cfg->model_path))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--save %s: a Keras weights file (.weights.h5, .keras) "
                                 "needs a Keras model (%s is not one); save to .safetensors instead",
                                 cfg->save, cfg->model_path);
    if (cfg->save && (st = clremat_keras_save_check(cfg->model_path, cfg->save)) != CLREMAT_OK)
        return st;
    if (cfg->save && (clremat_same_file(cfg->save, cfg->model_path) ||
                      (data_is_file(cfg->data) && clremat_same_file(cfg->save, cfg->data))))
        return clremat_set_error(CLREMAT_ERR_IO, "--save %s: is the run's %s; refusing to overwrite an input",
                                 cfg->save, clremat_same_file(cfg->save, cfg->model_path) ? "model file" : "--data file");
    if (cfg->memory_trace && (st = clremat_output_check(cfg->memory_trace, "--memory-trace")) != CLREMAT_OK)
        return st;
    if (cfg->memory_trace && (clremat_same_file(cfg->memory_trace, cfg->model_path) ||
                              (data_is_file(cfg->data) && clremat_same_file(cfg->memory_trace, cfg->data)) ||
                              (cfg->save && clremat_same_file(cfg->memory_trace, cfg->save))))
        return clremat_set_error(CLREMAT_ERR_IO, "--memory-trace %s: is an input or the --save file; refusing to "
                                 "overwrite it", cfg->memory_trace);
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

/* Writes the last step's measured live tensors as Chrome trace JSON. */
static int write_memory_trace(const clremat_train_config *cfg, const clremat_trainer *t,
                              const clremat_train_result *res)
{
    clremat_trace_event *ev = NULL;
    char title[512];
    int n = 0, st;
    uint64_t fixed = res->n_timeline ? (uint64_t)((int64_t)res->timeline[0].live_bytes - res->timeline[0].delta)
                                     : t->plan.fixed_bytes;
    if (t->accumulate > 1)
        snprintf(title, sizeof title, "%.200s, train %.200s, batch %lld as %d micro-batches of %lld (measured, the "
                 "last step)", t->g->name, t->plan.policy.text, (long long)(t->batch * t->accumulate), t->accumulate,
                 (long long)t->batch);
    else
        snprintf(title, sizeof title, "%.200s, train %.200s, batch %lld (measured)", t->g->name, t->plan.policy.text,
                 (long long)t->batch);
    if ((st = clremat_trace_from_pool(res->timeline, res->n_timeline, &ev, &n)) == CLREMAT_OK)
        st = clremat_trace_write(cfg->memory_trace, title, fixed, ev, n, NULL, NULL, NULL);
    free(ev);
    return st;
}

static void progress(const clremat_train_config *cfg, const clremat_trainer *tr, int64_t step, float loss,
                     double t0, double *last)
{
    double t = 1e3 * clremat_now_s();
    char scale[96] = "";
    if (!cfg->progress || (t - *last < 1000.0 && step + 1 != cfg->steps && !tr->last_skipped))
        return;
    *last = t;
    if (tr->g->precision == CLREMAT_PREC_MIXED_FLOAT16) /* dynamic loss scaling */
        snprintf(scale, sizeof scale, "  loss scale %g  skipped %lld%s", (double)tr->loss_scale,
                 (long long)tr->skipped_steps, tr->last_skipped ? " (this step)" : "");
    fprintf(stderr, "step %lld/%lld  loss %.6f  %.2f steps/s%s\n", (long long)(step + 1), (long long)cfg->steps,
            (double)loss, (double)(step + 1) / ((t - t0) / 1000.0), scale);
}

/* Mean loss and accuracy over every validation sample, in order: whole
 * batches, then a last partial batch (clremat_trainer_eval_n). The mean
 * weighs each batch by its samples, so it is the mean over the split; with
 * no partial batch it is the plain mean of the batch means. */
static int validate(clremat_trainer *t, const clremat_dataset *d, clremat_train_result *res)
{
    int64_t nb = d->val.n / t->batch, rest = d->val.n % t->batch, labels_per = d->val.y_elems;
    double loss_sum = 0, correct = 0, part = (double)rest / (double)t->batch;
    int st = CLREMAT_OK;
    if (d->val.n <= 0) {
        res->val_loss = res->val_accuracy = NAN;
        return CLREMAT_OK;
    }
    for (int64_t b = 0; b <= nb && st == CLREMAT_OK; b++) {
        int64_t n = b < nb ? t->batch : rest;
        float l, c;
        if (n == 0)
            break;
        st = clremat_trainer_eval_n(t, d->val.x + b * t->batch * d->val.x_elems,
                                    d->val.y + b * t->batch * d->val.y_elems, n, &l, &c);
        if (st == CLREMAT_OK && !isfinite(l)) { /* as a non-finite training loss: an error naming where */
            const char *layer = NULL;
            st = clremat_trainer_eval_nonfinite_layer(t, d->val.x + b * t->batch * d->val.x_elems,
                                                      d->val.y + b * t->batch * d->val.y_elems, n, &layer);
            if (st == CLREMAT_OK)
                st = clremat_fail(t->ctx, CLREMAT_ERR_NONFINITE,
                                  "validation: the loss of samples %lld..%lld is not finite (%s); first layer whose "
                                  "output is non-finite: '%s' (the trained parameters or the data hold values too "
                                  "large; nothing was saved)",
                                  (long long)(b * t->batch), (long long)(b * t->batch + n - 1),
                                  isnan(l) ? "nan" : l > 0 ? "inf" : "-inf",
                                  layer ? layer : t->g->layers[t->g->n_layers - 1].name);
            break;
        }
        loss_sum += b < nb ? (double)l : (double)l * part;
        correct += c;
    }
    res->val_loss = (float)(loss_sum / ((double)nb + part));
    res->val_accuracy = d->y_ids ? (float)(correct / (double)(d->val.n * labels_per)) : NAN;
    return st;
}

/* The optimizer of a run: the resumed state's (ck) or cfg->optimizer's
 * defaults, then the hyperparameters cfg gives. */
static int resolve_optimizer(const clremat_train_config *cfg, const clremat_checkpoint_info *ck,
                             clremat_opt_config *opt)
{
    clremat_opt_config v;
    unsigned set = cfg->opt_set & ~CLREMAT_OPT_SET_LR;
    if (cfg->optimizer && clremat_opt_defaults(cfg->optimizer, opt) != 0)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "unknown optimizer '%s'; valid: sgd, adam, adamw",
                                 cfg->optimizer);
    if (ck->has_state) {
        if (cfg->optimizer && opt->kind != ck->opt.kind)
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "%s holds %s optimizer state (step %lld); optimizer %s cannot continue it: "
                                     "leave the optimizer out (or give %s) to continue, or load the weights alone "
                                     "(--weights-only)",
                                     cfg->load, clremat_opt_name(ck->opt.kind), (long long)ck->step,
                                     cfg->optimizer, clremat_opt_name(ck->opt.kind));
        *opt = ck->opt;
    } else if (!cfg->optimizer) {
        clremat_opt_defaults("adam", opt);
    }
    memset(&v, 0, sizeof v);
    v.lr = (float)cfg->lr;
    v.momentum = (float)cfg->momentum;
    v.beta1 = (float)cfg->beta1;
    v.beta2 = (float)cfg->beta2;
    v.eps = (float)cfg->epsilon;
    v.weight_decay = (float)cfg->weight_decay;
    if (cfg->lr > 0)
        set |= CLREMAT_OPT_SET_LR;
    opt->no_fused_update = cfg->no_fused_update != 0;
    return clremat_opt_apply(opt, set, &v);
}

int clremat_train_run_ctx(clremat_ctx *ctx, const clremat_train_config *cfg, clremat_train_result *res)
{
    clremat_graph *g = NULL;
    clremat_dataset data;
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_checkpoint_info ck;
    int hf = 0;
    clremat_trainer *t = NULL;
    float *x = NULL, *y = NULL, *keras_params = NULL;
    clremat_train_config kcfg;
    const clremat_train_config *ocfg = cfg;
    double *layer_ms = NULL;
    int64_t steps = cfg->steps > 0 ? cfg->steps : 200, batch = cfg->batch > 0 ? cfg->batch : 32;
    int accumulate = cfg->accumulate > 1 ? (int)cfg->accumulate : 1;
    const clremat_dp_transport *dp = clremat_dp_transport_get(); /* NULL: one process */
    uint64_t created_after_first = 0;
    double t0, last = 0;
    int st;

    memset(&data, 0, sizeof data);
    memset(&ck, 0, sizeof ck);
    memset(res, 0, sizeof *res);
    snprintf(res->device, sizeof res->device, "%s", ctx->info.name);
    snprintf(res->platform, sizeof res->platform, "%s", ctx->info.platform);
    res->val_loss = res->val_accuracy = res->final_loss = NAN;
    res->nranks = dp ? dp->nranks : 1;
    res->rank = dp ? dp->rank : 0;
    if (dp && batch % dp->nranks != 0) { /* data parallel: --batch is the global batch, in equal shards */
        int64_t lo = batch / dp->nranks * dp->nranks;
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                               "global batch %lld does not split evenly over %d ranks (%lld = %d x %lld + %lld): "
                               "give a multiple of %d, such as %lld or %lld",
                               (long long)batch, dp->nranks, (long long)batch, dp->nranks,
                               (long long)(batch / dp->nranks), (long long)(batch % dp->nranks), dp->nranks,
                               (long long)(lo > 0 ? lo : dp->nranks), (long long)(lo + dp->nranks));
        goto fail;
    }
    if (dp)
        batch /= dp->nranks; /* this rank's shard; every plan and buffer below is per rank */
    res->local_batch = batch;
    if ((st = check_paths(cfg)) || (st = clremat_model_load(cfg->model_path, &g, &keras_params)))
        goto fail;
    res->g = g;
    if ((st = clremat_model_set_precision(g, cfg->precision)))
        goto fail;
    res->g = g;
    /* before the data or anything else is sized from the batch */
    if ((st = clremat_batch_check(g, batch)))
        goto fail;
    if (cfg->accumulate > CLREMAT_MAX_ACCUMULATE || cfg->accumulate < 0) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--accumulate %lld is outside [1, %d]",
                               (long long)cfg->accumulate, CLREMAT_MAX_ACCUMULATE);
        goto fail;
    }
    res->accumulate = accumulate;
    if (dp && accumulate > 1) { /* the exchange stages each backward's gradients: not a sum over micro-batches */
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                               "--accumulate %d with data parallel training (%d ranks) is not supported: "
                               "drop --accumulate, or lower the per-rank batch with more ranks",
                               accumulate, dp->nranks);
        goto fail;
    }
    if ((st = clremat_accumulate_split(batch, accumulate, &res->micro_batch)))
        goto fail;
    if ((st = clremat_policy_parse(cfg->remat, &pol)))
        goto fail;
    snprintf(res->remat, sizeof res->remat, "%s", pol.text);
    hf = cfg->load && clremat_hf_is_checkpoint(cfg->load); /* weights alone, Hugging Face's layout */
    if (cfg->load && !cfg->weights_only && !hf && (st = clremat_checkpoint_info_read(cfg->load, &ck)))
        goto fail;
    if (!cfg->optimizer && !ck.has_state && clremat_keras_is_keras(cfg->model_path) &&
        keras_compile_optimizer(cfg, &kcfg))
        ocfg = &kcfg;
    if ((st = resolve_optimizer(ocfg, &ck, &opt)))
        goto fail;
    if (ck.has_state && ck.seed != cfg->seed) {
        st = clremat_set_error(CLREMAT_ERR_MISMATCH,
                               "%s was saved by a run with seed %llu but this run has seed %llu (the seed draws the "
                               "data and dropout): give seed %llu to continue it, or load the weights alone "
                               "(--weights-only)",
                               cfg->load, (unsigned long long)ck.seed, (unsigned long long)cfg->seed,
                               (unsigned long long)ck.seed);
        goto fail;
    }
    res->opt = opt;
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
    if ((st = clremat_trainer_new_accum(ctx, g, batch, accumulate, &pol, &opt, cfg->seed, NULL, cfg->overlap,
                                        cfg->offload, &t))) {
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
        /* the plan is made per micro-batch: so are its measured costs */
        if ((st = clremat_measure_layer_ms(ctx, g, res->micro_batch, &opt, cfg->seed, x, y, &layer_ms))) {
            clremat_set_error(st, "measuring layer costs: %s", clremat_ctx_last_error(ctx));
            goto fail;
        }
        if ((st = clremat_trainer_new_accum(ctx, g, batch, accumulate, &pol, &opt, cfg->seed, layer_ms, cfg->overlap,
                                            cfg->offload, &t))) {
            clremat_set_error(st, "%s", clremat_ctx_last_error(ctx));
            goto fail;
        }
    }
    if (cfg->load && (st = hf ? clremat_hf_load(t, cfg->load) : clremat_weights_load_opt(t, cfg->load,
                                                                                          !cfg->weights_only)))
        goto fail;
    /* a Keras model starts from its own weights (unless --load replaces them) */
    if (!cfg->load && keras_params && (st = clremat_trainer_set_params(t, keras_params)))
        goto fail;
    res->start_step = t->step;
    snprintf(res->gemm, sizeof res->gemm, "%s", clremat_gemm_path_name(clremat_ctx_gemm(ctx)));
    res->predicted_peak = t->plan.peak_bytes;
    res->fixed_bytes = t->plan.fixed_bytes;
    res->fused_update = t->fused;
    res->accum_bytes = t->plan.accum_bytes;
    res->predicted_host_peak = t->plan.host_peak_bytes;
    res->offload_bytes = t->plan.offload_bytes;
    res->n_offloads = t->plan.n_offloads;
    res->host_unified = ctx->info.host_unified;
    res->param_bytes = t->plan.param_bytes;
    res->kept_act_bytes = t->plan.kept_act_bytes;
    res->step_flops = t->plan.step_flops;
    res->recompute_flops = t->plan.recompute_flops;
    res->n_recompute_actions = t->plan.n_recompute_actions;
    res->staging_bytes = dp ? clremat_dp_staging_bytes(g) : 0;
    res->buckets = dp ? clremat_dp_bucket_count(g) : 0;
    if ((st = clremat_host_alloc_check((uint64_t)steps * (sizeof(float) + 3 * sizeof(double)), "the per-step losses and times")))
        goto fail;
    res->losses = calloc((size_t)steps, sizeof(float));
    res->step_ms = calloc((size_t)steps, sizeof(double));
    if (dp) {
        res->comm_ms = calloc((size_t)steps, sizeof(double));
        res->wait_ms = calloc((size_t)steps, sizeof(double));
    }
    if (!res->losses || !res->step_ms || (dp && (!res->comm_ms || !res->wait_ms))) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
        goto fail;
    }
    clremat_pool_reset_peaks(ctx->pool);
    t0 = 1e3 * clremat_now_s();
    for (int64_t s = 0; s < steps; s++) {
        float loss, correct;
        double a;
        /* the trainer's data position: s * batch, plus where a resumed run had got to */
        /* data parallel: the global batch from the same position on every
         * rank; this rank's shard starts rank * batch samples into it */
        clremat_data_batch_at(&data.train, cfg->seed, t->data_position + (dp ? dp->rank * batch : 0), batch, x, y);
        clremat_trainer_set_profiling(t, cfg->profile && s == steps - 1);
        if ((cfg->timeline || cfg->memory_trace) && s == steps - 1)
            clremat_pool_record_timeline(ctx->pool, 1);
        a = 1e3 * clremat_now_s();
        st = clremat_trainer_step_replan(t, x, y, &loss, &correct);
        if (st == CLREMAT_OK)
            st = clremat_finish(ctx);
        res->step_ms[s] = 1e3 * clremat_now_s() - a;
        if (dp) {
            res->comm_ms[s] = clremat_dp_comm_ms(t);
            res->wait_ms[s] = clremat_dp_device_wait_ms(t);
            if (st == CLREMAT_OK) /* the other ranks' shards were drawn too */
                t->data_position += (int64_t)(dp->nranks - 1) * batch;
        }
        if (st == CLREMAT_OK) { /* the step ran, whatever becomes of its trace below */
            res->losses[s] = loss;
            res->steps_run = s + 1;
        }
        if ((cfg->timeline || cfg->memory_trace) && s == steps - 1 && st == CLREMAT_OK &&
            (st = copy_timeline(ctx->pool, res)) != CLREMAT_OK)
            clremat_fail(ctx, st, "%s", clremat_last_error()); /* host-side: into the ctx, read below */
        if (cfg->memory_trace && s == steps - 1 && st == CLREMAT_OK && (!dp || dp->rank == 0) &&
            (st = write_memory_trace(cfg, t, res)) != CLREMAT_OK) /* the tags live in the trainer */
            clremat_fail(ctx, st, "%s", clremat_last_error());
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
        if (s == 0)
            created_after_first = clremat_pool_get_stats(ctx->pool).created;
        if (!dp || dp->rank == 0) /* data parallel: rank 0 reports progress */
            progress(cfg, t, s, loss, t0, &last);
        if (cfg->on_step && cfg->on_step(cfg->on_step_user, s + 1, steps, loss) != 0) {
            /* stopped between steps: the parameters are those after step s + 1 */
            res->final_params = malloc(t->plan.param_bytes ? t->plan.param_bytes : 1);
            if (res->final_params && clremat_trainer_get_params(t, res->final_params) != CLREMAT_OK) {
                free(res->final_params);
                res->final_params = NULL;
            }
            st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "training stopped by the progress callback after "
                                   "step %lld", (long long)(s + 1));
            goto fail;
        }
    }
    if (t->replans) { /* the plan changed during the run: report the one that ran last */
        res->replans = t->replans;
        res->replan_step = t->replan_step;
        res->replan_from_peak = t->replan_from;
        res->replan_to_peak = t->replan_to;
        snprintf(res->replan_reason, sizeof res->replan_reason, "%s", t->replan_reason);
        res->predicted_peak = t->plan.peak_bytes;
        res->kept_act_bytes = t->plan.kept_act_bytes;
        res->step_flops = t->plan.step_flops;
        res->recompute_flops = t->plan.recompute_flops;
        res->n_recompute_actions = t->plan.n_recompute_actions;
    }
    {
        clremat_pool_stats ps = clremat_pool_get_stats(ctx->pool);
        res->measured_peak = ps.live_peak;
        res->reserved_peak = ps.reserved_peak;
        res->measured_host_peak = ps.host_peak;
        res->buffers_created_after_first_step = ps.created - created_after_first;
    }
    res->final_loss = res->losses[steps - 1];
    res->precision = g->precision;
    res->loss_scale = t->loss_scale;
    res->skipped_steps = t->skipped_steps;
    if (cfg->profile) {
        res->profile = malloc(sizeof *res->profile * (size_t)(g->n_layers + 1));
        if (res->profile)
            memcpy(res->profile, t->profile, sizeof *res->profile * (size_t)(g->n_layers + 1));
        if (t->n_kprof > 0 && (res->kernels = malloc(sizeof *res->kernels * (size_t)t->n_kprof)) != NULL) {
            memcpy(res->kernels, t->kprof, sizeof *res->kernels * (size_t)t->n_kprof);
            res->n_kernels = t->n_kprof;
        }
        if (!clremat_trainer_profile_usable(t))
            clremat_trainer_profile_problem(t, res->profile_problem, sizeof res->profile_problem);
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
    if (cfg->save && (!dp || dp->rank == 0)) { /* data parallel: rank 0 writes, recording the global batch */
        if (clremat_keras_save_path(cfg->model_path, cfg->save))
            st = save_keras(cfg, g, res->final_params);
        else {
            int64_t local = t->batch;
            t->batch = dp ? local * dp->nranks : local;
            st = cfg->save_hf ? clremat_hf_save(t, cfg->save) : clremat_weights_save(t, cfg->save);
            t->batch = local;
            if (st)
                goto fail;
        }
    }
fail:
    timing_stats(res, cfg->warmup >= 0 ? cfg->warmup : 5);
    comm_stats(res, cfg->warmup >= 0 ? cfg->warmup : 5);
    free(keras_params);
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
    free(res->comm_ms);
    free(res->wait_ms);
    if (res->g)
        clremat_graph_free(res->g);
    memset(res, 0, sizeof *res);
}
