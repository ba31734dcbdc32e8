/* api.c: the embedding API (include/clremat_api.h): options as a JSON
 * object, checked strictly (an unknown option or a value of the wrong type
 * is refused, naming it), the same library calls the command makes, and
 * the same --json report (host/report_json.c) written into a string. */
#include "clremat_api.h"
#include "compare.h"
#include "error.h"
#include "fit_run.h"
#include "model_load.h"
#include "plan_run.h"
#include "report_json.h"
#include "safetensors.h"
#include "train.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct clremat_api_run {
    char *json;
    clremat_train_result res;
    int n_weights;
    char (*names)[160];
    int64_t (*dims)[8];
    int *ranks;
    const float **data;
};

void clremat_api_free(void *p) { free(p); }

int clremat_api_error_bytes(uint64_t *needed, uint64_t *available)
{
    const clremat_error_details *d = clremat_error_details_get();
    if (!d->has_bytes)
        return 0;
    if (needed)
        *needed = d->bytes_needed;
    if (available)
        *available = d->bytes_available;
    return 1;
}

int clremat_api_error_position(const char **file, int *line, int *col)
{
    const clremat_error_details *d = clremat_error_details_get();
    if (!d->has_pos)
        return 0;
    if (file)
        *file = d->file;
    if (line)
        *line = d->line;
    if (col)
        *col = d->col;
    return 1;
}

/* ------------------------------------------------------------ options */

/* The parsed options object and the names a call accepts. */
typedef struct opts {
    json_t *root;
    const char *const *known;
} opts;

static int opts_open(const char *text, const char *const *known, opts *o)
{
    json_error_t err;
    const char *key;
    json_t *v;
    o->known = known;
    o->root = NULL;
    if (!text || !*text)
        text = "{}";
    o->root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!o->root)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "options: JSON syntax error at line %d, column %d: %s",
                                 err.line, err.column, err.text);
    if (!json_is_object(o->root)) {
        json_decref(o->root);
        o->root = NULL;
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "options: must be a JSON object");
    }
    json_object_foreach(o->root, key, v) {
        int ok = 0;
        for (const char *const *k = known; *k; k++)
            ok |= !strcmp(*k, key);
        if (!ok) {
            char list[1024] = "";
            for (const char *const *k = known; *k; k++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k == known ? "" : ", ", *k);
            int st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "unknown option '%s'; known: %s", key, list);
            json_decref(o->root); /* key lives in it */
            o->root = NULL;
            return st;
        }
    }
    return CLREMAT_OK;
}

static void opts_close(opts *o) { json_decref(o->root); }

/* A string option (null or absent: *out unchanged). */
static int opt_str(const opts *o, const char *name, const char **out)
{
    json_t *v = json_object_get(o->root, name);
    if (!v || json_is_null(v))
        return CLREMAT_OK;
    if (!json_is_string(v))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option '%s' must be a string", name);
    *out = json_string_value(v);
    return CLREMAT_OK;
}

/* An integer option in [lo, hi]. */
static int opt_int(const opts *o, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(o->root, name);
    if (!v || json_is_null(v))
        return CLREMAT_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option '%s' must be an integer in [%lld, %lld]", name,
                                 (long long)lo, (long long)hi);
    *out = (int64_t)json_integer_value(v);
    return CLREMAT_OK;
}

static int opt_bool(const opts *o, const char *name, int *out)
{
    json_t *v = json_object_get(o->root, name);
    if (!v || json_is_null(v))
        return CLREMAT_OK;
    if (!json_is_boolean(v))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option '%s' must be true or false", name);
    *out = json_is_true(v);
    return CLREMAT_OK;
}

/* A finite number option; *set gets bit when given. */
static int opt_num(const opts *o, const char *name, double *out, unsigned *set, unsigned bit)
{
    json_t *v = json_object_get(o->root, name);
    if (!v || json_is_null(v))
        return CLREMAT_OK;
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option '%s' must be a finite number", name);
    *out = json_number_value(v);
    if (set)
        *set |= bit;
    return CLREMAT_OK;
}

/* A byte count: a positive integer or a text such as "512MiB". */
static int opt_bytes(const opts *o, const char *name, uint64_t *out)
{
    json_t *v = json_object_get(o->root, name);
    if (!v || json_is_null(v))
        return CLREMAT_OK;
    if (json_is_integer(v) && json_integer_value(v) > 0) {
        *out = (uint64_t)json_integer_value(v);
        return CLREMAT_OK;
    }
    if (json_is_string(v) && clremat_parse_bytes(json_string_value(v), out) == 0 && *out > 0)
        return CLREMAT_OK;
    return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                             "option '%s' takes a positive byte count such as 536870912 or \"512MiB\"", name);
}

/* The optimizer's hyperparameters (as the command's --momentum etc.). */
static int opt_hparams(const opts *o, double *lr, double *momentum, double *beta1, double *beta2, double *eps,
                       double *wd, unsigned *set)
{
    int st;
    if ((st = opt_num(o, "lr", lr, NULL, 0)) || (st = opt_num(o, "momentum", momentum, set, CLREMAT_OPT_SET_MOMENTUM)) ||
        (st = opt_num(o, "beta1", beta1, set, CLREMAT_OPT_SET_BETA1)) ||
        (st = opt_num(o, "beta2", beta2, set, CLREMAT_OPT_SET_BETA2)) ||
        (st = opt_num(o, "epsilon", eps, set, CLREMAT_OPT_SET_EPS)) ||
        (st = opt_num(o, "weight_decay", wd, set, CLREMAT_OPT_SET_WEIGHT_DECAY)))
        return st;
    if (*lr < 0 || (json_object_get(o->root, "lr") && !json_is_null(json_object_get(o->root, "lr")) && *lr <= 0))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option 'lr' must be > 0");
    return CLREMAT_OK;
}

/* The optimizer by name with the given hyperparameters applied (checked). */
static int make_opt(const char *name, unsigned set, double lr, const double hp[5], clremat_opt_config *out)
{
    clremat_opt_config v = {CLREMAT_OPT_SGD, (float)lr, (float)hp[0], (float)hp[1], (float)hp[2], (float)hp[3],
                            (float)hp[4], 0};
    if (clremat_opt_defaults(name, out) != 0)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "unknown optimizer '%s'; valid: sgd, adam, adamw",
                                 name);
    return clremat_opt_apply(out, set | (lr > 0 ? CLREMAT_OPT_SET_LR : 0u), &v);
}

/* ------------------------------------------------------------ reports */

/* The report that call writes to FILE *f, into the malloc'd string
 * *json_out; on failure st is set and control goes to fail. */
#define REPORT(json_out, call, fail)                                                                                  \
    do {                                                                                                              \
        size_t len_ = 0;                                                                                              \
        FILE *f = open_memstream(json_out, &len_);                                                                    \
        if (!f) {                                                                                                     \
            st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory for the report");                  \
            goto fail;                                                                                                \
        }                                                                                                             \
        call;                                                                                                         \
        if (fclose(f) != 0) {                                                                                         \
            free(*(json_out));                                                                                        \
            *(json_out) = NULL;                                                                                       \
            st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory for the report");                  \
            goto fail;                                                                                                \
        }                                                                                                             \
    } while (0)

static int start(char **json)
{
    clremat_error_details_clear();
    clremat_set_error(CLREMAT_OK, "%s", "");
    if (!json)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "NULL output argument");
    *json = NULL;
    return CLREMAT_OK;
}

int clremat_api_devices(char **json)
{
    clremat_device_info *devs = NULL;
    size_t n = 0;
    int st;
    if ((st = start(json)) || (st = clremat_list_devices(&devs, &n)))
        return st;
    REPORT(json, clremat_report_devices_json(f, devs, n), done);
done:
    free(devs);
    return st;
}

static int load_model(const char *model, const char *precision, clremat_graph **gr)
{
    int st;
    if (!model)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "model: NULL path");
    if ((st = clremat_model_load(model, gr, NULL)) == CLREMAT_OK && (st = clremat_model_set_precision(*gr, precision))) {
        clremat_graph_free(*gr);
        *gr = NULL;
    }
    return st;
}

int clremat_api_plan(const char *model, const char *options, char **json)
{
    static const char *const known[] = {"remat", "batch", "accumulate", "optimizer", "memory_limit", "device",
                                        "gemm", "overlap", "no_fused_update", "offload", "actions", "precision", NULL};
    opts o = {0};
    clremat_plan_request rq;
    const char *precision = NULL;
    clremat_opt_config opt;
    const char *optname = "adam";
    int64_t batch = 32, accumulate = 1;
    int actions = 0, nofuse = 0, st;
    clremat_graph *gr = NULL;
    clremat_policy pol;
    clremat_plan plan;
    clremat_layer_cost *costs = NULL;
    clremat_ctx *ctx = NULL;

    if ((st = start(json)) || (st = opts_open(options, known, &o)))
        return st;
    memset(&rq, 0, sizeof rq);
    if ((st = opt_str(&o, "remat", &rq.remat)) || (st = opt_int(&o, "batch", 1, INT32_MAX, &batch)) ||
        (st = opt_int(&o, "accumulate", 1, CLREMAT_MAX_ACCUMULATE, &accumulate)) ||
        (st = opt_str(&o, "optimizer", &optname)) || (st = opt_bytes(&o, "memory_limit", &rq.memory_limit)) ||
        (st = opt_str(&o, "device", &rq.device)) || (st = opt_str(&o, "gemm", &rq.gemm)) ||
        (st = opt_bool(&o, "overlap", &rq.overlap)) || (st = opt_bool(&o, "no_fused_update", &nofuse)) ||
        (st = opt_str(&o, "offload", &rq.offload)) || (st = opt_bool(&o, "actions", &actions)) ||
        (st = opt_str(&o, "precision", &precision)))
        goto done;
    if (clremat_opt_defaults(optname, &opt) != 0) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "unknown optimizer '%s'; valid: sgd, adam, adamw", optname);
        goto done;
    }
    opt.no_fused_update = nofuse;
    rq.batch = batch;
    rq.accumulate = accumulate;
    rq.opt = &opt;
    if ((st = load_model(model, precision, &gr)) || (st = clremat_plan_run(gr, &rq, &pol, &plan, &costs, &ctx)))
        goto done;
    REPORT(json, clremat_report_plan_json(f, gr, pol.text, batch, &plan, costs, ctx,
                                          clremat_trainer_fused(&opt, (int)accumulate, gr), actions), planned);
planned:
    clremat_plan_free(&plan);
done:
    free(costs);
    clremat_ctx_destroy(ctx);
    clremat_graph_free(gr);
    opts_close(&o);
    return st;
}

int clremat_api_pareto(const char *model, const char *options, char **json)
{
    static const char *const known[] = {"batch", "accumulate", "optimizer", "no_fused_update", "points",
                                        "precision", NULL};
    opts o = {0};
    const char *precision = NULL;
    clremat_opt_config opt;
    const char *optname = "adam";
    int64_t batch = 32, accumulate = 1, points = 40;
    int nofuse = 0, n = 0, nm = 0, st;
    clremat_graph *gr = NULL;
    clremat_pareto_point *pts = NULL;
    clremat_pareto_mark *marks = NULL;

    if ((st = start(json)) || (st = opts_open(options, known, &o)))
        return st;
    if ((st = opt_int(&o, "batch", 1, INT32_MAX, &batch)) ||
        (st = opt_int(&o, "accumulate", 1, CLREMAT_MAX_ACCUMULATE, &accumulate)) ||
        (st = opt_str(&o, "optimizer", &optname)) || (st = opt_bool(&o, "no_fused_update", &nofuse)) ||
        (st = opt_int(&o, "points", 2, 100000, &points)) || (st = opt_str(&o, "precision", &precision)))
        goto done;
    if (clremat_opt_defaults(optname, &opt) != 0) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "unknown optimizer '%s'; valid: sgd, adam, adamw", optname);
        goto done;
    }
    opt.no_fused_update = nofuse;
    if (accumulate > 1 && batch % accumulate) {
        int64_t micro;
        if ((st = clremat_accumulate_split(batch, accumulate, &micro)))
            goto done;
    }
    if ((st = load_model(model, precision, &gr)) ||
        (st = clremat_pareto_run(gr, batch, (int)accumulate, clremat_plan_opt_states(&opt, (int)accumulate, gr),
                                 (int)points, &pts, &n, &marks, &nm)))
        goto done;
    REPORT(json, clremat_report_pareto_json(f, gr->name, batch, (int)accumulate, pts, n, marks, nm), done);
done:
    free(pts);
    free(marks);
    clremat_graph_free(gr);
    opts_close(&o);
    return st;
}

int clremat_api_compare(const char *model, const char *options, char **json)
{
    static const char *const known[] = {"devices", "remat", "batch", "steps", "warmup", "seed", "data", "optimizer",
                                        "lr", "momentum", "beta1", "beta2", "epsilon", "weight_decay",
                                        "memory_limit", "accumulate", "precision", NULL};
    opts o = {0};
    clremat_compare_config cfg;
    clremat_compare_run *runs = NULL;
    clremat_opt_config opt;
    double hp[5] = {0};
    int64_t seed = 1;
    int n = 0, st;

    if ((st = start(json)) || (st = opts_open(options, known, &o)))
        return st;
    memset(&cfg, 0, sizeof cfg);
    cfg.model_path = model;
    cfg.devices = "all";
    cfg.modes = "none,full";
    cfg.batch = 32;
    cfg.steps = 20;
    cfg.warmup = 3;
    cfg.optimizer = "adam";
    if ((st = opt_str(&o, "devices", &cfg.devices)) || (st = opt_str(&o, "remat", &cfg.modes)) ||
        (st = opt_int(&o, "batch", 1, INT32_MAX, &cfg.batch)) || (st = opt_int(&o, "steps", 1, 100000000, &cfg.steps)) ||
        (st = opt_int(&o, "warmup", 0, 100000000, &cfg.warmup)) || (st = opt_int(&o, "seed", 0, INT64_MAX, &seed)) ||
        (st = opt_str(&o, "data", &cfg.data)) || (st = opt_str(&o, "optimizer", &cfg.optimizer)) ||
        (st = opt_hparams(&o, &cfg.lr, &cfg.momentum, &cfg.beta1, &cfg.beta2, &cfg.epsilon, &cfg.weight_decay,
                          &cfg.opt_set)) ||
        (st = opt_bytes(&o, "memory_limit", &cfg.memory_limit)) ||
        (st = opt_int(&o, "accumulate", 1, CLREMAT_MAX_ACCUMULATE, &cfg.accumulate)) ||
        (st = opt_str(&o, "precision", &cfg.precision)))
        goto done;
    cfg.seed = (uint64_t)seed;
    hp[0] = cfg.momentum, hp[1] = cfg.beta1, hp[2] = cfg.beta2, hp[3] = cfg.epsilon, hp[4] = cfg.weight_decay;
    if (cfg.warmup >= cfg.steps) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "compare: warmup (%lld) must be below steps (%lld)",
                               (long long)cfg.warmup, (long long)cfg.steps);
        goto done;
    }
    if (!model) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "model: NULL path");
        goto done;
    }
    if ((st = make_opt(cfg.optimizer, cfg.opt_set, cfg.lr, hp, &opt)) || (st = clremat_compare(&cfg, &runs, &n)))
        goto done;
    REPORT(json, clremat_report_compare_json(f, &cfg, runs, n), done);
done:
    clremat_compare_free(runs, n);
    opts_close(&o);
    return st;
}

/* A list option of n <= max positive integers or byte counts (a single value too). */
static int opt_list(const opts *o, const char *name, int bytes, uint64_t *vals, int max, int *n)
{
    json_t *v = json_object_get(o->root, name), *e;
    size_t i;
    *n = 0;
    if (!v || json_is_null(v))
        return CLREMAT_OK;
    if (!json_is_array(v)) {
        json_t *one = json_array();
        int st;
        opts tmp = *o;
        json_array_append(one, v);
        tmp.root = json_pack("{sO}", name, one);
        st = opt_list(&tmp, name, bytes, vals, max, n);
        json_decref(tmp.root);
        json_decref(one);
        return st;
    }
    if (json_array_size(v) == 0 || json_array_size(v) > (size_t)max)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option '%s' takes 1 to %d values", name, max);
    json_array_foreach(v, i, e) {
        if (json_is_integer(e) && json_integer_value(e) > 0)
            vals[i] = (uint64_t)json_integer_value(e);
        else if (!(bytes && json_is_string(e) && clremat_parse_bytes(json_string_value(e), &vals[i]) == 0 &&
                   vals[i] > 0))
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option '%s': value %zu must be a positive %s",
                                     name, i + 1, bytes ? "byte count such as 8589934592 or \"8GiB\"" : "integer");
    }
    *n = (int)json_array_size(v);
    return CLREMAT_OK;
}

int clremat_api_fit(const char *model, const char *options, char **json)
{
    static const char *const known[] = {"device", "memory", "remat", "optimizer", "batch", "max_batch", "steps",
                                        "calibration_batch", "accumulate", "offload", "recalibrate", "precision", NULL};
    opts o = {0};
    clremat_fit_options fo;
    clremat_fit_outcome out;
    clremat_opt_config opt;
    const char *optname = "adam";
    uint64_t sizes[16], acc[16];
    int64_t acc_i[16];
    int n_acc = 0, usage = 0, st;

    memset(&out, 0, sizeof out);
    if ((st = start(json)) || (st = opts_open(options, known, &o)))
        return st;
    memset(&fo, 0, sizeof fo);
    fo.model_path = model;
    fo.batch = 32;
    fo.max_batch = (int64_t)1 << 20;
    fo.steps = 5;
    if ((st = opt_str(&o, "device", &fo.device)) || (st = opt_list(&o, "memory", 1, sizes, 16, &fo.n_sizes)) ||
        (st = opt_str(&o, "remat", &fo.remat)) || (st = opt_str(&o, "optimizer", &optname)) ||
        (st = opt_int(&o, "batch", 1, INT32_MAX, &fo.batch)) ||
        (st = opt_int(&o, "max_batch", 1, INT32_MAX, &fo.max_batch)) ||
        (st = opt_int(&o, "steps", 1, 1000, &fo.steps)) ||
        (st = opt_int(&o, "calibration_batch", 1, INT32_MAX, &fo.calibration_batch)) ||
        (st = opt_list(&o, "accumulate", 0, acc, 16, &n_acc)) || (st = opt_bool(&o, "offload", &fo.offload)) ||
        (st = opt_bool(&o, "recalibrate", &fo.recalibrate)) || (st = opt_str(&o, "precision", &fo.precision)))
        goto done;
    if (!model) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "model: NULL path");
        goto done;
    }
    if (clremat_opt_defaults(optname, &opt) != 0) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "unknown optimizer '%s'; valid: sgd, adam, adamw", optname);
        goto done;
    }
    for (int i = 0; i < n_acc; i++) {
        if (acc[i] > CLREMAT_MAX_ACCUMULATE) {
            st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option 'accumulate': %llu is above %d",
                                   (unsigned long long)acc[i], CLREMAT_MAX_ACCUMULATE);
            goto done;
        }
        acc_i[i] = (int64_t)acc[i];
    }
    fo.sizes = sizes;
    fo.opt = &opt;
    fo.accumulate = acc_i;
    fo.n_accumulate = n_acc;
    if ((st = clremat_fit_execute(&fo, &out, &usage)))
        goto done;
    REPORT(json, clremat_report_fit_json(f, out.gr, &opt, &out.rq, out.rows, out.from_cache), done);
done:
    clremat_fit_outcome_free(&out);
    opts_close(&o);
    return st;
}

/* ------------------------------------------------------------ training */

/* The weights of a finished run, by parameter, pointing into final_params. */
static int index_weights(clremat_api_run *r)
{
    const clremat_graph *g = r->res.g;
    size_t off = 0;
    int k = 0, n = 0;
    if (!g || !r->res.final_params)
        return CLREMAT_OK;
    for (int l = 0; l < g->n_layers; l++)
        n += g->layers[l].n_params;
    r->names = calloc((size_t)n + 1, sizeof *r->names);
    r->dims = calloc((size_t)n + 1, sizeof *r->dims);
    r->ranks = calloc((size_t)n + 1, sizeof *r->ranks);
    r->data = calloc((size_t)n + 1, sizeof *r->data);
    if (!r->names || !r->dims || !r->ranks || !r->data)
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int l = 0; l < g->n_layers; l++)
        for (int p = 0; p < g->layers[l].n_params; p++, k++) {
            const clremat_param *pr = &g->layers[l].params[p];
            snprintf(r->names[k], sizeof r->names[k], "%s/%s", g->layers[l].name, pr->name);
            r->ranks[k] = pr->shape.rank;
            for (int d = 0; d < pr->shape.rank; d++)
                r->dims[k][d] = pr->shape.dims[d];
            r->data[k] = r->res.final_params + off;
            off += (size_t)pr->elems;
        }
    r->n_weights = n;
    return CLREMAT_OK;
}

static void run_free(clremat_api_run *r)
{
    if (!r)
        return;
    free(r->json);
    clremat_train_result_free(&r->res);
    free(r->names);
    free(r->dims);
    free(r->ranks);
    free(r->data);
    free(r);
}

/* The progress callback of the API behind the trainer's on_step. */
typedef struct progress_hook {
    clremat_api_progress fn;
    void *user;
} progress_hook;

static int on_step(void *user, int64_t step, int64_t steps, float loss)
{
    const progress_hook *h = user;
    return h->fn(h->user, step, steps, (double)loss);
}

/* The data tensors as a safetensors file in memory. */
static int data_tensors(const clremat_api_tensor *t, int n, clremat_st_tensor *ts, clremat_st_file *f)
{
    static const clremat_st_dtype types[] = {CLREMAT_ST_F32, CLREMAT_ST_F64, CLREMAT_ST_I32, CLREMAT_ST_I64};
    if (n != 4)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "data: %d tensors given; it takes four: train_x, "
                                 "train_y, val_x, val_y", n);
    for (int i = 0; i < n; i++) {
        if (!t[i].name || (!t[i].data && t[i].rank > 0 && t[i].dims && t[i].dims[0] > 0))
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "data: tensor %d has no name or no data", i);
        if (t[i].dtype < 0 || t[i].dtype > CLREMAT_API_I64)
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "data: %s: unknown dtype %d", t[i].name,
                                     t[i].dtype);
        if (t[i].rank < 1 || t[i].rank > 8 || !t[i].dims)
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "data: %s: rank %d; it needs 1 to 8 dimensions",
                                     t[i].name, t[i].rank);
        memset(&ts[i], 0, sizeof ts[i]);
        snprintf(ts[i].name, sizeof ts[i].name, "%s", t[i].name);
        ts[i].dtype = types[t[i].dtype];
        ts[i].rank = t[i].rank;
        ts[i].elems = 1;
        for (int d = 0; d < t[i].rank; d++) {
            if (t[i].dims[d] < 0)
                return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "data: %s: negative dimension", t[i].name);
            ts[i].dims[d] = t[i].dims[d];
            ts[i].elems *= t[i].dims[d];
        }
        ts[i].data = t[i].data;
    }
    memset(f, 0, sizeof *f);
    f->tensors = ts;
    f->n = (size_t)n;
    return CLREMAT_OK;
}

int clremat_api_train(const char *model, const char *options, const clremat_api_tensor *tensors, int n_tensors,
                      clremat_api_progress progress, void *user, clremat_api_run **run)
{
    static const char *const known[] = {"device", "batch", "steps", "warmup", "seed", "data", "optimizer", "lr",
                                        "momentum", "beta1", "beta2", "epsilon", "weight_decay", "remat",
                                        "memory_limit", "gemm", "accumulate", "offload", "overlap",
                                        "no_fused_update", "load", "weights_only", "save", "train_samples",
                                        "val_samples", "precision", NULL};
    opts o = {0};
    clremat_train_config cfg;
    clremat_api_run *r = NULL;
    clremat_st_tensor ts[4];
    clremat_st_file dataf;
    progress_hook hook = {progress, user};
    double hp[5];
    int64_t seed = 1;
    int st;

    clremat_error_details_clear();
    clremat_set_error(CLREMAT_OK, "%s", "");
    if (!run)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "NULL output argument");
    *run = NULL;
    if (!model)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "model: NULL path");
    if ((st = opts_open(options, known, &o)))
        return st;
    memset(&cfg, 0, sizeof cfg);
    cfg.model_path = model;
    cfg.batch = 32;
    cfg.steps = 200;
    cfg.warmup = 5;
    if ((st = opt_str(&o, "device", &cfg.device)) || (st = opt_int(&o, "batch", 1, INT32_MAX, &cfg.batch)) ||
        (st = opt_int(&o, "steps", 1, 100000000, &cfg.steps)) ||
        (st = opt_int(&o, "warmup", 0, 100000000, &cfg.warmup)) || (st = opt_int(&o, "seed", 0, INT64_MAX, &seed)) ||
        (st = opt_str(&o, "data", &cfg.data)) || (st = opt_str(&o, "optimizer", &cfg.optimizer)) ||
        (st = opt_hparams(&o, &cfg.lr, &cfg.momentum, &cfg.beta1, &cfg.beta2, &cfg.epsilon, &cfg.weight_decay,
                          &cfg.opt_set)) ||
        (st = opt_str(&o, "remat", &cfg.remat)) || (st = opt_bytes(&o, "memory_limit", &cfg.memory_limit)) ||
        (st = opt_str(&o, "gemm", &cfg.gemm)) ||
        (st = opt_int(&o, "accumulate", 1, CLREMAT_MAX_ACCUMULATE, &cfg.accumulate)) ||
        (st = opt_str(&o, "offload", &cfg.offload)) || (st = opt_bool(&o, "overlap", &cfg.overlap)) ||
        (st = opt_bool(&o, "no_fused_update", &cfg.no_fused_update)) || (st = opt_str(&o, "load", &cfg.load)) ||
        (st = opt_bool(&o, "weights_only", &cfg.weights_only)) || (st = opt_str(&o, "save", &cfg.save)) ||
        (st = opt_int(&o, "train_samples", 1, INT32_MAX, &cfg.train_samples)) ||
        (st = opt_int(&o, "val_samples", 1, INT32_MAX, &cfg.val_samples)) ||
        (st = opt_str(&o, "precision", &cfg.precision)))
        goto done;
    cfg.seed = (uint64_t)seed;
    hp[0] = cfg.momentum, hp[1] = cfg.beta1, hp[2] = cfg.beta2, hp[3] = cfg.epsilon, hp[4] = cfg.weight_decay;
    if (cfg.gemm && strcmp(cfg.gemm, "native") && strcmp(cfg.gemm, "clblast") && strcmp(cfg.gemm, "auto")) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option 'gemm' takes native, clblast or auto, got '%s'",
                               cfg.gemm);
        goto done;
    }
    if (cfg.offload && cfg.overlap) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option 'offload' does not go with 'overlap'");
        goto done;
    }
    if (cfg.weights_only && !cfg.load) {
        st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "option 'weights_only' applies to 'load'");
        goto done;
    }
    if (cfg.accumulate > 1) {
        int64_t micro;
        if ((st = clremat_accumulate_split(cfg.batch, cfg.accumulate, &micro)))
            goto done;
    }
    if ((cfg.optimizer || !cfg.load || cfg.weights_only)) { /* else the saved optimizer decides */
        clremat_opt_config opt;
        if ((st = make_opt(cfg.optimizer ? cfg.optimizer : "adam", cfg.opt_set, cfg.lr, hp, &opt)))
            goto done;
    }
    if (n_tensors > 0) {
        if (cfg.data) {
            st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "give the data as arrays or as option 'data', not both");
            goto done;
        }
        if ((st = data_tensors(tensors, n_tensors, ts, &dataf)))
            goto done;
        cfg.data_arrays = &dataf;
    }
    if (progress) {
        cfg.on_step = on_step;
        cfg.on_step_user = &hook;
    }
    if (!(r = calloc(1, sizeof *r))) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
        goto done;
    }
    st = clremat_train_run(&cfg, &r->res);
    if (st != CLREMAT_OK && r->res.steps_run == 0)
        goto done;
    {
        int keep = st;
        char msg[CLREMAT_ERRMSG_LEN];
        snprintf(msg, sizeof msg, "%s", clremat_last_error());
        {
            char **json = &r->json;
            REPORT(json, clremat_report_train_json(f, &cfg, &r->res, NULL, NULL), done);
        }
        if ((st = index_weights(r)))
            goto done;
        st = keep;
        if (st != CLREMAT_OK)
            clremat_set_error(st, "%s", msg); /* the run's failure, as it was */
    }
    *run = r;
    r = NULL;
done:
    run_free(r);
    opts_close(&o);
    return st;
}

void clremat_api_run_free(clremat_api_run *run) { run_free(run); }

const char *clremat_api_run_json(const clremat_api_run *run) { return run && run->json ? run->json : ""; }

int clremat_api_run_weight_count(const clremat_api_run *run) { return run ? run->n_weights : 0; }

int clremat_api_run_weight(const clremat_api_run *run, int i, const char **name, int *rank, const int64_t **dims,
                           const float **data)
{
    if (!run || i < 0 || i >= run->n_weights)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "weight %d: out of range", i);
    *name = run->names[i];
    *rank = run->ranks[i];
    *dims = run->dims[i];
    *data = run->data[i];
    return CLREMAT_OK;
}
