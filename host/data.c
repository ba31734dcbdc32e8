/* data.c: training and validation data for a model: seeded synthetic tasks
 * (clusters, sequence/copy/sort, language, regression, images) built to fit the model's io,
 * user data from safetensors files checked against it, and deterministic
 * shuffled batches. Every random draw is clremat_hash of (seed, stream tag,
 * index, element), so splits and batches are reproducible and independent. */
#include "backend.h"
#include "data.h"
#include "rng.h"
#include "safetensors.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stream tags (the hash's step field). Train and validation samples come
 * from disjoint streams; the task's fixed structure (cluster centres, the
 * regression matrix) from its own. */
#define TAG_CENTRES 0x44410001u
#define TAG_MATRIX 0x44410002u
#define TAG_TRAIN 0x44411000u
#define TAG_VAL 0x44412000u
#define TAG_SHUFFLE 0x44413000u
#define TAG_GRAMMAR 0x44410003u  /* the language task's successor table */
#define SUB_LABEL 1u
#define SUB_VALUE 2u

#define CLUSTER_SCALE 2.0   /* centres ~ N(0, 1) * 2 per dimension */
#define CLUSTER_NOISE 0.7   /* samples = centre + N(0, 1) * 0.7 */
#define CLUSTER_MIN_DIST 3.5 /* 5 noise deviations between centres */
#define CENTRE_TRIES 100
#define REGRESSION_SCALE 1.0

typedef enum task_kind { TASK_CLUSTERS, TASK_REVERSE, TASK_COPY, TASK_SORT, TASK_REGRESSION, TASK_LANGUAGE, TASK_IMAGES } task_kind;

static const struct {
    const char *name;
    task_kind kind;
} task_names[] = {
    {"clusters", TASK_CLUSTERS}, {"sequence", TASK_REVERSE}, {"reverse", TASK_REVERSE},
    {"copy", TASK_COPY},         {"sort", TASK_SORT},        {"regression", TASK_REGRESSION},
    {"language", TASK_LANGUAGE},
    {"images", TASK_IMAGES},
};

/* "images": class c is a grating of orientation pi * c / K and period
 * 4 + 2 * (c % 2) pixels at a random phase and gain, in N(0, 1) * 0.6 noise,
 * the same on every channel: only texture tells the classes apart. */
#define IMAGE_NOISE 0.6

/* ------------------------------------------------------------- helpers */

static int64_t shape_elems(const clremat_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

/* "[a, b]" into buf (a local copy: this file does not depend on graph.c). */
static const char *shape_fmt(const int64_t *dims, int rank, char *buf, size_t len)
{
    size_t off = 0;
    off += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
    return buf;
}

static const char *shape_str(const clremat_shape *s, char *buf, size_t len)
{
    return shape_fmt(s->dims, s->rank, buf, len);
}

static uint32_t hash_at(uint64_t seed, uint32_t tag, int64_t index, uint32_t elem)
{
    uint64_t s = seed ^ ((uint64_t)index >> 32) * 0x9e3779b97f4a7c15ULL;
    return clremat_hash(s, tag, (uint32_t)index, elem);
}

/* Standard normal (Box-Muller) for element k of index i in stream tag. */
static double normal_at(uint64_t seed, uint32_t tag, int64_t i, uint32_t k)
{
    double u1 = 1.0 - clremat_uniform(hash_at(seed, tag, i, 2 * k));
    double u2 = clremat_uniform(hash_at(seed, tag, i, 2 * k + 1));
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Integer in [0, n) from a hash (multiply-shift). */
static int64_t below(uint32_t h, int64_t n) { return (int64_t)(((uint64_t)h * (uint64_t)n) >> 32); }

/* Vocabulary of the model's token-id input: the first embedding layer's,
 * else the class count. */
static int64_t model_vocab(const clremat_graph *g)
{
    for (int l = 0; l < g->n_layers; l++)
        if (g->layers[l].type == CLREMAT_EMBEDDING)
            return g->layers[l].vocab;
    return g->io.classes;
}

static void split_free(clremat_split *s)
{
    if (!s->x_borrowed)
        free(s->x);
    if (!s->y_borrowed)
        free(s->y);
    memset(s, 0, sizeof *s);
}

static int split_alloc(clremat_split *s, int64_t n, int64_t x_elems, int64_t y_elems)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->x_elems = x_elems;
    s->y_elems = y_elems;
    if (n < 0 || x_elems < 0 || y_elems < 0 || (x_elems && n > INT64_MAX / 4 / x_elems) ||
        (y_elems && n > INT64_MAX / 4 / y_elems) || (x_elems + y_elems && n > INT64_MAX / 4 / (x_elems + y_elems)))
        goto fail;
    if (clremat_host_alloc_check((uint64_t)n * (uint64_t)(x_elems + y_elems) * sizeof(float), "the data set") !=
        CLREMAT_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", clremat_last_error());
        split_free(s);
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s (%lld samples of %lld + %lld floats)", why,
                                 (long long)n, (long long)x_elems, (long long)y_elems);
    }
    s->x = malloc(n * x_elems > 0 ? (size_t)(n * x_elems) * sizeof(float) : 1);
    s->y = malloc(n * y_elems > 0 ? (size_t)(n * y_elems) * sizeof(float) : 1);
    if (!s->x || !s->y)
        goto fail;
    return CLREMAT_OK;
fail:
    split_free(s);
    return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory for %lld samples of %lld + %lld floats",
                             (long long)n, (long long)x_elems, (long long)y_elems);
}

void clremat_data_free(clremat_dataset *d)
{
    if (!d)
        return;
    split_free(&d->train);
    split_free(&d->val);
}

/* ---------------------------------------------------- synthetic tasks */

/* Describes the model's input and labels for mismatch messages. */
static void describe_io(const clremat_graph_io *io, char *in, size_t in_len, char *lab, size_t lab_len)
{
    char s[96];
    snprintf(in, in_len, "%s %s", shape_str(&io->input, s, sizeof s), io->input_ids ? "token ids" : "floats");
    snprintf(lab, lab_len, "%s %s", shape_str(&io->labels, s, sizeof s),
             io->labels_ids ? "class ids (softmax_ce)" : "float targets (mse)");
}

/* Checks that the task fits the model; the error names both. */
static int check_task(const clremat_graph *g, const char *task, task_kind kind)
{
    const clremat_graph_io *io = &g->io;
    char in[160], lab[160];
    describe_io(io, in, sizeof in, lab, sizeof lab);
    if (shape_elems(&io->input) <= 0 || shape_elems(&io->labels) <= 0)
        return clremat_set_error(CLREMAT_ERR_MISMATCH, "task '%s': the model's input %s or labels %s are empty", task,
                                 in, lab);
    switch (kind) {
    case TASK_CLUSTERS:
        if (io->input_ids)
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "task '%s' needs float vector input but the model's input is %s", task, in);
        if (!io->labels_ids || shape_elems(&io->labels) != 1)
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "task '%s' needs one class id per sample but the model's labels are %s", task,
                                     lab);
        if (io->classes < 2)
            return clremat_set_error(CLREMAT_ERR_MISMATCH, "task '%s' needs at least 2 classes but the model has %lld",
                                     task, (long long)io->classes);
        return CLREMAT_OK;
    case TASK_REVERSE:
    case TASK_COPY:
    case TASK_SORT:
    case TASK_LANGUAGE: {
        int64_t vocab = model_vocab(g);
        if (!io->input_ids || io->input.rank != 1)
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "task '%s' needs token-id input [T] but the model's input is %s", task, in);
        if (!io->labels_ids || !clremat_shape_eq(&io->labels, &io->input))
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "task '%s' needs one class id per token, labels [%lld], but the model's labels "
                                     "are %s",
                                     task, (long long)io->input.dims[0], lab);
        if (vocab != io->classes || vocab < 2)
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "task '%s' needs the embedding vocabulary (%lld) to equal the model's classes "
                                     "(%lld), at least 2",
                                     task, (long long)vocab, (long long)io->classes);
        return CLREMAT_OK;
    }
    case TASK_IMAGES:
        if (io->input_ids || io->input.rank != 3)
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "task '%s' needs float image input [H, W, C] but the model's input is %s", task,
                                     in);
        if (!io->labels_ids || shape_elems(&io->labels) != 1 || io->classes < 2)
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "task '%s' needs one class id per sample (2 classes or more) but the model's "
                                     "labels are %s", task, lab);
        return CLREMAT_OK;
    case TASK_REGRESSION:
        if (io->input_ids)
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "task '%s' needs float vector input but the model's input is %s", task, in);
        if (io->labels_ids)
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "task '%s' needs float targets (mse) but the model's labels are %s", task, lab);
        return CLREMAT_OK;
    }
    return clremat_set_error(CLREMAT_ERR_INTERNAL, "task '%s': unknown kind", task);
}

/* K cluster centres in D dimensions, N(0, 1) * CLUSTER_SCALE each, redrawn
 * (up to CENTRE_TRIES times) while closer than CLUSTER_MIN_DIST to an earlier
 * one, so that even in few dimensions the classes stay separable. The check
 * costs K^2 D / 2 steps, so above CENTRE_CHECK_MAX_WORK it is skipped (many
 * classes: centres drawn once; a model with that many classes would
 * otherwise wait minutes for its data). */
#define CENTRE_CHECK_MAX_WORK ((int64_t)1 << 30)
static void make_centres(uint64_t seed, int64_t K, int64_t D, double *centres)
{
    int64_t tries = K <= CENTRE_CHECK_MAX_WORK / K / (D > 0 ? D : 1) ? CENTRE_TRIES : 1;
    for (int64_t c = 0; c < K; c++) {
        double *x = centres + c * D;
        for (int64_t attempt = 0; attempt < tries; attempt++) {
            int close = 0;
            for (int64_t d = 0; d < D; d++)
                x[d] = CLUSTER_SCALE * normal_at(seed, TAG_CENTRES, (attempt << 32) | c, (uint32_t)d);
            for (int64_t o = 0; o < c && !close && tries > 1; o++) {
                double dist2 = 0;
                for (int64_t d = 0; d < D; d++)
                    dist2 += (x[d] - centres[o * D + d]) * (x[d] - centres[o * D + d]);
                close = dist2 < CLUSTER_MIN_DIST * CLUSTER_MIN_DIST;
            }
            if (!close)
                break;
        }
    }
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The language task: a seeded second-order Markov language. After tokens
 * (a, b) the next is one of LANG_K successors of (b, parity of a), drawn
 * once from the seed, with probabilities lang_p; the first two tokens are
 * uniform. The parity of the token before the last doubles the contexts
 * (2 vocab of them), so a model that sees only the last token does worse
 * than one that attends to the one before. */
#define LANG_K 3
static const double lang_p[LANG_K] = {0.6, 0.3, 0.1};

static int64_t lang_next(uint64_t seed, int64_t V, int64_t a, int64_t b, uint32_t h)
{
    double u = clremat_uniform(h), acc = 0;
    int k = 0;
    for (; k < LANG_K - 1; k++)
        if (u < (acc += lang_p[k]))
            break;
    return below(hash_at(seed, TAG_GRAMMAR, 2 * b + (a & 1), (uint32_t)k), V);
}

/* Fills a split of kind from stream tag. fixed: centres (clusters) or A
 * (regression). */
static void fill_split(const clremat_graph *g, task_kind kind, uint64_t seed, uint32_t tag, const double *fixed,
                       clremat_split *s)
{
    const clremat_graph_io *io = &g->io;
    int64_t D = s->x_elems, M = s->y_elems;
    for (int64_t i = 0; i < s->n; i++) {
        float *x = s->x + i * D, *y = s->y + i * M;
        switch (kind) {
        case TASK_CLUSTERS: {
            int64_t c = below(hash_at(seed, tag + SUB_LABEL, i, 0), io->classes);
            for (int64_t d = 0; d < D; d++)
                x[d] = (float)(fixed[c * D + d] + CLUSTER_NOISE * normal_at(seed, tag + SUB_VALUE, i, (uint32_t)d));
            y[0] = (float)c;
            break;
        }
        case TASK_REVERSE:
        case TASK_COPY:
        case TASK_SORT:
            for (int64_t t = 0; t < D; t++)
                x[t] = (float)below(hash_at(seed, tag + SUB_VALUE, i, (uint32_t)t), io->classes);
            for (int64_t t = 0; t < D; t++)
                y[t] = kind == TASK_REVERSE ? x[D - 1 - t] : x[t];
            if (kind == TASK_SORT)
                qsort(y, (size_t)D, sizeof *y, cmp_float);
            break;
        case TASK_LANGUAGE: { /* x = s[0..T-1], y = s[1..T] (next token) */
            int64_t a = below(hash_at(seed, tag + SUB_VALUE, i, 0), io->classes);
            int64_t b = below(hash_at(seed, tag + SUB_VALUE, i, 1), io->classes);
            x[0] = (float)a;
            for (int64_t t = 0; t < D; t++) {
                if (t > 0) {
                    int64_t c = lang_next(seed, io->classes, a, b, hash_at(seed, tag + SUB_LABEL, i, (uint32_t)t));
                    a = b;
                    b = c;
                }
                y[t] = (float)b;
                if (t + 1 < D)
                    x[t + 1] = (float)b;
            }
            break;
        }
        case TASK_IMAGES: {
            const int64_t H = io->input.dims[0], W = io->input.dims[1], C = io->input.dims[2];
            const int64_t c = below(hash_at(seed, tag + SUB_LABEL, i, 0), io->classes);
            const double th = M_PI * (double)c / (double)io->classes, k = 2.0 * M_PI / (4.0 + 2.0 * (double)(c % 2));
            const double phase = 2.0 * M_PI * clremat_uniform(hash_at(seed, tag + SUB_LABEL, i, 1));
            const double gain = 0.75 + 0.5 * clremat_uniform(hash_at(seed, tag + SUB_LABEL, i, 2));
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    const double v = gain * cos(k * ((double)h * cos(th) + (double)w * sin(th)) + phase);
                    for (int64_t ch = 0; ch < C; ch++) {
                        const int64_t d = (h * W + w) * C + ch;
                        x[d] = (float)(v + IMAGE_NOISE * normal_at(seed, tag + SUB_VALUE, i, (uint32_t)d));
                    }
                }
            y[0] = (float)c;
            break;
        }
        case TASK_REGRESSION:
            for (int64_t d = 0; d < D; d++)
                x[d] = (float)normal_at(seed, tag + SUB_VALUE, i, (uint32_t)d);
            for (int64_t m = 0; m < M; m++) {
                double acc = 0;
                for (int64_t d = 0; d < D; d++)
                    acc += (double)x[d] * fixed[d * M + m];
                y[m] = (float)(REGRESSION_SCALE * tanh(acc));
            }
            break;
        }
    }
}

int clremat_data_task_check(const clremat_graph *g, const char *task)
{
    if (!g || !task)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "clremat_data_task_check: NULL argument");
    for (size_t i = 0; i < sizeof task_names / sizeof task_names[0]; i++)
        if (strcmp(task, task_names[i].name) == 0)
            return check_task(g, task, task_names[i].kind);
    return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                             "unknown task '%s' (known: clusters, sequence (= reverse), copy, sort, language, "
                             "regression, images)",
                             task);
}

int clremat_data_synthetic(const clremat_graph *g, const char *task, uint64_t seed, int64_t n_train, int64_t n_val,
                           clremat_dataset *out)
{
    task_kind kind = TASK_CLUSTERS;
    double *fixed = NULL;
    int64_t D, M;
    int st, found = 0;
    if (!g || !out)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "clremat_data_synthetic: NULL argument");
    memset(out, 0, sizeof *out);
    if (n_train <= 0 || n_val < 0)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                 "synthetic data needs n_train > 0 and n_val >= 0 (got %lld and %lld)",
                                 (long long)n_train, (long long)n_val);
    if (!task && g->task[0])
        task = g->task;
    if (!task)
        task = g->io.input_ids              ? "sequence"
               : !g->io.labels_ids           ? "regression"
               : g->io.input.rank == 3       ? "images"
                                             : "clusters";
    for (size_t i = 0; i < sizeof task_names / sizeof task_names[0]; i++)
        if (strcmp(task, task_names[i].name) == 0) {
            kind = task_names[i].kind;
            found = 1;
        }
    if (!found)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                 "unknown task '%s' (known: clusters, sequence (= reverse), copy, sort, language, "
                                 "regression, images)",
                                 task);
    if ((st = check_task(g, task, kind)) != CLREMAT_OK)
        return st;
    D = shape_elems(&g->io.input);
    M = shape_elems(&g->io.labels);
    if (kind == TASK_CLUSTERS || kind == TASK_REGRESSION) {
        int64_t rows = kind == TASK_CLUSTERS ? g->io.classes : D, cols = kind == TASK_CLUSTERS ? D : M;
        /* rows and cols are each below 2^31: the product fits, the bytes are checked */
        if ((st = clremat_host_alloc_check((uint64_t)rows * (uint64_t)cols * sizeof *fixed, "synthetic task data")))
            return st;
        fixed = malloc((size_t)((uint64_t)rows * (uint64_t)cols * sizeof *fixed));
        if (!fixed)
            return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "task '%s': out of host memory", task);
        if (kind == TASK_CLUSTERS)
            make_centres(seed, rows, cols, fixed);
        else
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++)
                    fixed[r * cols + c] = normal_at(seed, TAG_MATRIX, r, (uint32_t)c) / sqrt((double)D);
    }
    if ((st = split_alloc(&out->train, n_train, D, M)) != CLREMAT_OK ||
        (st = split_alloc(&out->val, n_val, D, M)) != CLREMAT_OK)
        goto fail;
    fill_split(g, kind, seed, TAG_TRAIN, fixed, &out->train);
    fill_split(g, kind, seed, TAG_VAL, fixed, &out->val);
    snprintf(out->name, sizeof out->name, "%s", task);
    out->x_shape = g->io.input;
    out->y_shape = g->io.labels;
    out->y_ids = g->io.labels_ids;
    out->classes = g->io.labels_ids ? g->io.classes : 0;
    free(fixed);
    return CLREMAT_OK;
fail:
    free(fixed);
    clremat_data_free(out);
    return st;
}

/* ------------------------------------------------------------ loading */

/* Element i of a tensor as a double (little-endian data, any alignment). */
static double st_value(const clremat_st_tensor *t, int64_t i)
{
    const unsigned char *p = (const unsigned char *)t->data + (size_t)i * clremat_st_dtype_size(t->dtype);
    uint64_t bits = 0;
    size_t size = clremat_st_dtype_size(t->dtype);
    for (size_t k = size; k-- > 0;)
        bits = (bits << 8) | p[k];
    switch (t->dtype) {
    case CLREMAT_ST_F32: {
        uint32_t b = (uint32_t)bits;
        float f;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    case CLREMAT_ST_I32:
        return (double)(int32_t)(uint32_t)bits;
    case CLREMAT_ST_I64:
        return (double)(int64_t)bits;
    case CLREMAT_ST_F64: {
        double d;
        memcpy(&d, &bits, sizeof d);
        return d;
    }
    case CLREMAT_ST_F16:
    case CLREMAT_ST_BF16:
        return clremat_st_half_to_float((uint16_t)bits, t->dtype == CLREMAT_ST_BF16);
    }
    return NAN;
}

/* Checks one tensor against the model's per-sample shape and converts it
 * into s->x (is_x) or s->y. limit > 0: values are ids in [0, limit).
 * borrow: an aligned F32 tensor is used in place (checked, not copied). */
static int load_tensor(const char *path, const clremat_st_file *f, const char *name, const clremat_shape *model,
                       const char *what, int ids, int64_t limit, clremat_split *s, int is_x, int borrow)
{
    const clremat_st_tensor *t = clremat_st_find(f, name);
    char a[128], b[128];
    int64_t per, n;
    int in_place;
    float *dst;
    if (!t)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: no tensor '%s' (a data file holds train_x, train_y, val_x, "
                                 "val_y)", path, name);
    if (t->rank < 1)
        return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                 "%s: %s is a scalar; it needs a sample dimension first: [samples] + the model's %s %s",
                                 path, name, what, shape_str(model, b, sizeof b));
    if (t->rank - 1 != model->rank || memcmp(t->dims + 1, model->dims, sizeof(int64_t) * (size_t)model->rank) != 0)
        return clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: %s has per-sample shape %s but the model's %s is %s", path,
                                 name, shape_fmt(t->dims + 1, t->rank - 1, a, sizeof a), what,
                                 shape_str(model, b, sizeof b));
    if (!ids && t->dtype != CLREMAT_ST_F32 && t->dtype != CLREMAT_ST_F64)
        return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                 "%s: %s has dtype %s but the model's %s takes floats (F32 or F64)", path, name,
                                 clremat_st_dtype_name(t->dtype), what);
    n = t->dims[0];
    per = shape_elems(model);
    in_place = borrow && t->dtype == CLREMAT_ST_F32 && (!t->data || (uintptr_t)t->data % sizeof(float) == 0);
    if (is_x) {
        if (in_place) {
            split_free(s);
            s->n = n;
            s->x_elems = per;
            s->x = (float *)(uintptr_t)t->data; /* read only: batches are copied out of it */
            s->x_borrowed = 1;
        } else if (split_alloc(s, n, per, 0) != CLREMAT_OK)
            return CLREMAT_ERR_OUT_OF_MEMORY;
        dst = s->x;
    } else {
        if (s->n != n)
            return clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: %s has %lld samples but %.*s_x has %lld", path, name,
                                     (long long)n, (int)(strlen(name) - 2), name, (long long)s->n);
        if (!s->y_borrowed)
            free(s->y);
        s->y_elems = per;
        s->y_borrowed = in_place;
        s->y = in_place ? (float *)(uintptr_t)t->data : malloc(n * per > 0 ? (size_t)(n * per) * sizeof(float) : 1);
        if (!s->y && !in_place)
            return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory for %s", path, name);
        dst = s->y;
    }
    for (int64_t i = 0; i < n * per; i++) {
        double v = st_value(t, i);
        float fv = (float)v;
        if (ids && (v != floor(v) || v < 0 || v >= (double)limit))
            return clremat_set_error(CLREMAT_ERR_MISMATCH,
                                     "%s: %s element %lld (sample %lld) = %g is not %s in [0, %lld)", path, name,
                                     (long long)i, (long long)(i / per), v,
                                     is_x ? "a token id" : "a class id", (long long)limit);
        if (!in_place)
            dst[i] = fv;
        if (!ids && !isfinite(fv))
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: %s element %lld (sample %lld) = %g is not a finite float",
                                     path, name, (long long)i, (long long)(i / per), v);
    }
    return CLREMAT_OK;
}

int clremat_data_load(const clremat_graph *g, const char *path, clremat_dataset *out)
{
    clremat_st_file f = {0};
    int st;
    if (!g || !path || !out)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "clremat_data_load: NULL argument");
    memset(out, 0, sizeof *out);
    if ((st = clremat_st_read(path, &f)) != CLREMAT_OK)
        return st;
    st = clremat_data_from_tensors(g, path, &f, 0, out);
    clremat_st_free(&f);
    return st;
}

int clremat_data_from_tensors(const clremat_graph *g, const char *path, const clremat_st_file *tensors,
                              int borrow, clremat_dataset *out)
{
    const clremat_st_file f = *tensors;
    const clremat_graph_io *io;
    int st;
    memset(out, 0, sizeof *out);
    io = &g->io;
    if ((st = load_tensor(path, &f, "train_x", &io->input, "input", io->input_ids, model_vocab(g), &out->train, 1, borrow)) ||
        (st = load_tensor(path, &f, "train_y", &io->labels, "labels", io->labels_ids, io->classes, &out->train, 0, borrow)) ||
        (st = load_tensor(path, &f, "val_x", &io->input, "input", io->input_ids, model_vocab(g), &out->val, 1, borrow)) ||
        (st = load_tensor(path, &f, "val_y", &io->labels, "labels", io->labels_ids, io->classes, &out->val, 0, borrow)))
        goto fail;
    if (out->train.n < 1) {
        st = clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: train_x has no samples", path);
        goto fail;
    }
    snprintf(out->name, sizeof out->name, "%s", path);
    out->x_shape = io->input;
    out->y_shape = io->labels;
    out->y_ids = io->labels_ids;
    out->classes = io->labels_ids ? io->classes : 0;
    return CLREMAT_OK;
fail:
    clremat_data_free(out);
    return st;
}

/* ------------------------------------------------------------ batches */

/* Position pos of a seeded permutation of [0, n) for epoch: a 4-round
 * Feistel network over the next even power of two, cycle-walked into
 * range. Stateless, O(1) memory, a bijection for every (seed, epoch). */
static int64_t permute(uint64_t seed, int64_t epoch, int64_t n, int64_t pos)
{
    int bits = 2, half;
    uint64_t mask, x = (uint64_t)pos;
    uint64_t s = seed ^ ((uint64_t)epoch >> 32) * 0x9e3779b97f4a7c15ULL;
    while (bits < 63 && (1ULL << bits) < (uint64_t)n)
        bits++;
    bits += bits & 1;
    half = bits / 2;
    mask = (1ULL << half) - 1;
    do {
        uint64_t L = x >> half, R = x & mask;
        for (uint32_t r = 0; r < 4; r++) {
            uint64_t F = clremat_hash(s, TAG_SHUFFLE + r, (uint32_t)epoch, (uint32_t)R) & mask, t = R;
            R = L ^ F;
            L = t;
        }
        x = (L << half) | R;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

void clremat_data_batch(const clremat_split *s, uint64_t seed, int64_t b, int64_t batch, float *x, float *y)
{
    if (b < 0 || batch <= 0)
        return;
    clremat_data_batch_at(s, seed, b * batch, batch, x, y);
}

void clremat_data_batch_at(const clremat_split *s, uint64_t seed, int64_t pos, int64_t batch, float *x, float *y)
{
    if (!s || s->n <= 0 || pos < 0 || batch <= 0)
        return;
    for (int64_t j = 0; j < batch; j++) {
        int64_t i = pos + j, k = permute(seed, i / s->n, s->n, i % s->n);
        if (x)
            memcpy(x + j * s->x_elems, s->x + k * s->x_elems, (size_t)s->x_elems * sizeof(float));
        if (y)
            memcpy(y + j * s->y_elems, s->y + k * s->y_elems, (size_t)s->y_elems * sizeof(float));
    }
}
