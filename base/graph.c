/* graph.c: the layer graph IR: building a graph layer by layer (names,
 * inputs, nested blocks), checking its structure, and inferring every
 * per-sample shape, parameter and the data the model needs (g->io).
 * Errors go to g->error and to the thread's last error. */
#include "graph.h"
#include "error.h"
#include "conv_geom.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest per-sample tensor or parameter, in elements: keeps every index a
 * device kernel computes inside 32 bits per sample. */
#define MAX_ELEMS ((int64_t)1 << 31)

static int gfail(clremat_graph *g, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int gfail(clremat_graph *g, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
    return clremat_set_error(status, "%s", g->error);
}

/* ------------------------------------------------------------ name tables */

static const char *const type_names[CLREMAT_LAYER_TYPE_COUNT] = {
    [CLREMAT_DENSE] = "dense",           [CLREMAT_ACTIVATION] = "activation",
    [CLREMAT_DROPOUT] = "dropout",       [CLREMAT_LAYERNORM] = "layernorm",
    [CLREMAT_ADD] = "add",               [CLREMAT_EMBEDDING] = "embedding",
    [CLREMAT_ATTENTION] = "attention",   [CLREMAT_RESHAPE] = "reshape",
    [CLREMAT_SOFTMAX_CE] = "softmax_cross_entropy", [CLREMAT_MSE] = "mse",
    [CLREMAT_RMSNORM] = "rmsnorm",       [CLREMAT_ROPE] = "rope",
    [CLREMAT_MULTIPLY] = "multiply",
    [CLREMAT_CONV2D] = "conv2d",         [CLREMAT_MAX_POOL2D] = "max_pool2d",
    [CLREMAT_AVG_POOL2D] = "avg_pool2d", [CLREMAT_GLOBAL_AVG_POOL2D] = "global_avg_pool2d",
    [CLREMAT_ZERO_PAD2D] = "zero_pad2d",  [CLREMAT_BATCHNORM] = "batchnorm",
    [CLREMAT_CONCAT] = "concat",
};

static const char *const act_names[CLREMAT_ACT_COUNT] = {
    [CLREMAT_ACT_NONE] = "linear",       [CLREMAT_ACT_RELU] = "relu",
    [CLREMAT_ACT_GELU_TANH] = "gelu",    [CLREMAT_ACT_GELU_EXACT] = "gelu_exact",
    [CLREMAT_ACT_TANH] = "tanh",         [CLREMAT_ACT_SIGMOID] = "sigmoid",
    [CLREMAT_ACT_SILU] = "silu",
};

const char *clremat_layer_type_name(clremat_layer_type t)
{
    return (unsigned)t < CLREMAT_LAYER_TYPE_COUNT ? type_names[t] : "unknown";
}

int clremat_layer_type_from_name(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "flatten"))
        return CLREMAT_RESHAPE;
    for (int t = 0; t < CLREMAT_LAYER_TYPE_COUNT; t++)
        if (!strcmp(name, type_names[t]))
            return t;
    return -1;
}

const char *clremat_act_name(clremat_act a)
{
    return (unsigned)a < CLREMAT_ACT_COUNT ? act_names[a] : "unknown";
}

int clremat_act_from_name(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "none"))
        return CLREMAT_ACT_NONE;
    for (int a = 0; a < CLREMAT_ACT_COUNT; a++)
        if (!strcmp(name, act_names[a]))
            return a;
    return -1;
}

/* ---------------------------------------------------------------- shapes */

int64_t clremat_shape_elems(const clremat_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank && i < CLREMAT_MAX_RANK; i++)
        n *= s->dims[i];
    return n;
}

const char *clremat_shape_str(const clremat_shape *s, char *buf, size_t len)
{
    size_t used = 0;
    if (!buf || len == 0)
        return "";
    buf[0] = '\0';
    used += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < s->rank && i < CLREMAT_MAX_RANK && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)s->dims[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}

int clremat_shape_eq(const clremat_shape *a, const clremat_shape *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

/* 1 when b's dims are the trailing dims of a's (b shorter or equal). */
static int shape_is_suffix(const clremat_shape *a, const clremat_shape *b)
{
    if (b->rank > a->rank)
        return 0;
    for (int i = 0; i < b->rank; i++)
        if (a->dims[a->rank - b->rank + i] != b->dims[i])
            return 0;
    return 1;
}

/* Checks rank and dims of a shape; fills why on failure. */
static int shape_valid(const clremat_shape *s, char *why, size_t len)
{
    int64_t n = 1;
    if (s->rank < 1 || s->rank > CLREMAT_MAX_RANK) {
        snprintf(why, len, "rank %d is not between 1 and %d", s->rank, CLREMAT_MAX_RANK);
        return 0;
    }
    for (int i = 0; i < s->rank; i++) {
        if (s->dims[i] < 1 || s->dims[i] >= MAX_ELEMS) {
            snprintf(why, len, "dimension %d is %lld (must be 1 .. %lld)", i, (long long)s->dims[i],
                     (long long)MAX_ELEMS - 1);
            return 0;
        }
        n *= s->dims[i];
        if (n >= MAX_ELEMS) {
            snprintf(why, len, "more than %lld elements per sample", (long long)MAX_ELEMS - 1);
            return 0;
        }
    }
    return 1;
}

/* ----------------------------------------------------------------- build */

clremat_graph *clremat_graph_new(const char *name)
{
    clremat_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    snprintf(g->name, sizeof g->name, "%s", name ? name : "model");
    g->open_block = -1;
    return g;
}

void clremat_graph_free(clremat_graph *g)
{
    if (!g)
        return;
    free(g->layers);
    free(g->blocks);
    free(g);
}

int clremat_graph_set_input(clremat_graph *g, const clremat_shape *shape, int ids)
{
    char why[128], b[96];
    if (!g || !shape)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_set_input: NULL argument");
    if (!shape_valid(shape, why, sizeof why))
        return gfail(g, CLREMAT_ERR_SHAPE, "model input shape %s: %s",
                     clremat_shape_str(shape, b, sizeof b), why);
    g->io.input = *shape;
    g->io.input_ids = ids != 0;
    g->finalized = 0;
    return CLREMAT_OK;
}

int clremat_graph_find_layer(const clremat_graph *g, const char *name)
{
    if (!g || !name)
        return -1;
    for (int i = 0; i < g->n_layers; i++)
        if (!strcmp(g->layers[i].name, name))
            return i;
    return -1;
}

int clremat_graph_find_block(const clremat_graph *g, const char *name)
{
    if (!g || !name)
        return -1;
    for (int i = 0; i < g->n_blocks; i++)
        if (!strcmp(g->blocks[i].name, name))
            return i;
    return -1;
}

int clremat_block_contains(const clremat_graph *g, int b, int l)
{
    if (!g || l < 0 || l >= g->n_layers || b < 0)
        return 0;
    for (int c = g->layers[l].block; c >= 0; c = g->blocks[c].parent)
        if (c == b)
            return 1;
    return 0;
}

/* 1 when the path component c[0..cn) is u[0..un) or u followed by "_<digits>". */
static int component_matches(const char *u, size_t un, const char *c, size_t cn)
{
    if (cn == un)
        return memcmp(u, c, un) == 0;
    if (cn < un + 2 || memcmp(u, c, un) != 0 || c[un] != '_')
        return 0;
    for (size_t i = un + 1; i < cn; i++)
        if (c[i] < '0' || c[i] > '9')
            return 0;
    return 1;
}

/* 1 when every '/'-separated component of user matches the block path's. */
static int path_matches(const char *user, const char *path)
{
    for (;;) {
        size_t un = strcspn(user, "/"), cn = strcspn(path, "/");
        if (!component_matches(user, un, path, cn))
            return 0;
        if (!user[un] || !path[cn])
            return !user[un] && !path[cn];
        user += un + 1;
        path += cn + 1;
    }
}

int clremat_graph_blocks_named(const clremat_graph *g, const char *name, int *out, int max)
{
    int n = 0, exact;
    if (!g || !name || !name[0])
        return 0;
    if ((exact = clremat_graph_find_block(g, name)) >= 0) {
        if (out && max > 0)
            out[0] = exact;
        return 1;
    }
    for (int b = 0; b < g->n_blocks; b++)
        if (path_matches(name, g->blocks[b].name)) {
            if (out && n < max)
                out[n] = b;
            n++;
        }
    return n;
}

/* Checks that name is non-empty, fits, and is used by no layer or block. */
static int check_new_name(clremat_graph *g, const char *name, size_t cap, const char *what)
{
    int other;
    if (memchr(name, '\0', cap) == NULL)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "%s name is longer than %zu characters", what, cap - 1);
    if (!name[0])
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "%s name is empty", what);
    if ((other = clremat_graph_find_layer(g, name)) >= 0) {
        const clremat_layer *o = &g->layers[other];
        if (o->src_line > 0)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT,
                         "duplicate name '%s': already used by layer %d (defined at line %d, column %d)",
                         name, other, o->src_line, o->src_col);
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "duplicate name '%s': already used by layer %d",
                     name, other);
    }
    if ((other = clremat_graph_find_block(g, name)) >= 0)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "duplicate name '%s': already used by block %d", name,
                     other);
    return CLREMAT_OK;
}

int clremat_graph_begin_block(clremat_graph *g, const char *name, int remat)
{
    clremat_block *bl;
    int st;
    if (!g || !name)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_begin_block: NULL argument");
    if (strlen(name) >= CLREMAT_NAME_LEN)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "block name '%.40s...' is longer than %d characters",
                     name, CLREMAT_NAME_LEN - 1);
    if ((st = check_new_name(g, name, CLREMAT_NAME_LEN, "block")) != CLREMAT_OK)
        return st;
    if (g->n_blocks == g->cap_blocks) {
        int cap = g->cap_blocks ? 2 * g->cap_blocks : 8;
        clremat_block *nb = realloc(g->blocks, (size_t)cap * sizeof *nb);
        if (!nb)
            return gfail(g, CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory for block '%s'", name);
        g->blocks = nb;
        g->cap_blocks = cap;
    }
    bl = &g->blocks[g->n_blocks];
    memset(bl, 0, sizeof *bl);
    snprintf(bl->name, sizeof bl->name, "%s", name);
    bl->parent = g->open_block;
    bl->first = g->n_layers;
    bl->last = -1;
    bl->remat = remat != 0;
    g->open_block = g->n_blocks++;
    g->finalized = 0;
    return CLREMAT_OK;
}

int clremat_graph_end_block(clremat_graph *g)
{
    clremat_block *bl;
    if (!g)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_end_block: NULL graph");
    if (g->open_block < 0)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "end_block without an open block");
    bl = &g->blocks[g->open_block];
    if (g->n_layers <= bl->first)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "block '%s' is empty: a block needs at least one layer",
                     bl->name);
    bl->last = g->n_layers - 1;
    g->open_block = bl->parent;
    return CLREMAT_OK;
}

/* Number of inputs a layer type takes. */
static int inputs_wanted(clremat_layer_type t) { return t == CLREMAT_ADD || t == CLREMAT_MULTIPLY ? 2 : 1; }

/* Checks the type-specific settings that do not depend on shapes. */
static int check_settings(clremat_graph *g, const clremat_layer *L)
{
    switch (L->type) {
    case CLREMAT_DENSE:
        if (L->units < 1 || L->units >= MAX_ELEMS)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': units must be positive, got %lld",
                         L->name, (long long)L->units);
        if (L->lora_rank < 0 || (L->lora_rank > 0 && !(L->lora_alpha > 0.0)))
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': LoRA needs rank >= 1 and alpha > 0, got "
                         "rank %d, alpha %g", L->name, L->lora_rank, L->lora_alpha);
        if (L->tie < 0 || L->tie > g->n_layers)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': tie must name an earlier layer", L->name);
        break;
    case CLREMAT_DROPOUT:
    case CLREMAT_ATTENTION:
        if (!(L->rate >= 0.0 && L->rate < 1.0))
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': rate must be in [0, 1), got %g",
                         L->name, L->rate);
        if (L->type == CLREMAT_ATTENTION && L->heads < 1)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': heads must be >= 1, got %d", L->name,
                         L->heads);
        if (L->type == CLREMAT_ATTENTION && (L->kv_heads < 0 || (L->kv_heads > 0 && L->heads % L->kv_heads)))
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': kv_heads = %d must divide heads = %d",
                         L->name, L->kv_heads, L->heads);
        if (L->type == CLREMAT_ATTENTION && !(L->rope_theta >= 0.0))
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': rope theta must be > 0, got %g", L->name,
                         L->rope_theta);
        break;
    case CLREMAT_RMSNORM:
        if (!(L->eps > 0.0))
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': eps must be > 0, got %g", L->name,
                         L->eps);
        break;
    case CLREMAT_ROPE:
        if (!(L->rope_theta > 0.0) || L->head_dim < 0 || L->head_dim % 2)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': rope needs theta > 0 and an even "
                         "head_dim, got theta %g, head_dim %lld", L->name, L->rope_theta, (long long)L->head_dim);
        break;
    case CLREMAT_LAYERNORM:
        if (!(L->eps > 0.0))
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': eps must be > 0, got %g", L->name,
                         L->eps);
        break;
    case CLREMAT_EMBEDDING:
        if (L->vocab < 1 || L->vocab >= MAX_ELEMS || L->dim < 1 || L->dim >= MAX_ELEMS)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT,
                         "layer '%s': vocab and dim must be positive, got vocab %lld, dim %lld", L->name,
                         (long long)L->vocab, (long long)L->dim);
        break;
    case CLREMAT_RESHAPE: {
        int neg = 0;
        if (L->target.rank < 1 || L->target.rank > CLREMAT_MAX_RANK)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': target shape rank %d is not 1 .. %d",
                         L->name, L->target.rank, CLREMAT_MAX_RANK);
        for (int i = 0; i < L->target.rank; i++) {
            if (L->target.dims[i] == -1)
                neg++;
            else if (L->target.dims[i] < 1 || L->target.dims[i] >= MAX_ELEMS)
                return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT,
                             "layer '%s': target dimension %d is %lld (must be positive or -1)", L->name, i,
                             (long long)L->target.dims[i]);
        }
        if (neg > 1)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': target shape has %d dimensions of -1 "
                         "(at most one)", L->name, neg);
        break;
    }
    case CLREMAT_BATCHNORM:
        if (!(L->eps > 0.0) || !(L->momentum >= 0.0 && L->momentum <= 1.0))
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': batchnorm needs epsilon > 0 and 0 <= "
                         "momentum <= 1, got epsilon %g, momentum %g", L->name, L->eps, L->momentum);
        break;
    default:
        if (clremat_is_conv_type(L->type)) {
            char why[256];
            if (clremat_conv_check_settings(L, why, sizeof why))
                return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': %s", L->name, why);
        }
        break;
    }
    if ((L->type == CLREMAT_DENSE || L->type == CLREMAT_ACTIVATION || L->type == CLREMAT_CONV2D)
            ? (unsigned)L->act >= CLREMAT_ACT_COUNT
                                                                     : L->act != CLREMAT_ACT_NONE)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': activation %d is not valid for a %s layer",
                     L->name, (int)L->act, clremat_layer_type_name(L->type));
    return CLREMAT_OK;
}

/* A layer outside block B may use, of B's layers, only B's last one. */
static int check_block_reference(clremat_graph *g, const clremat_layer *L, int r)
{
    for (int b = g->layers[r].block; b >= 0; b = g->blocks[b].parent) {
        const clremat_block *bl = &g->blocks[b];
        int inside = 0;
        for (int c = g->open_block; c >= 0; c = g->blocks[c].parent)
            if (c == b)
                inside = 1;
        if (!inside && bl->last != r)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT,
                         "layer '%s' uses layer '%s', which is inside block '%s': from outside a block only "
                         "its last layer ('%s', the block's output) can be used",
                         L->name, g->layers[r].name, bl->name, g->layers[bl->last].name);
    }
    return CLREMAT_OK;
}

int clremat_graph_add_layer(clremat_graph *g, const clremat_layer *layer)
{
    clremat_layer L;
    int st, want;
    if (!g || !layer)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_add_layer: NULL argument");
    L = *layer;
    if (memchr(L.name, '\0', sizeof L.name) == NULL)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer name '%.40s...' is longer than %d characters",
                     L.name, CLREMAT_NAME_LEN - 1);
    if ((unsigned)L.type >= CLREMAT_LAYER_TYPE_COUNT)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': unknown layer type %d", L.name, (int)L.type);
    if ((st = check_new_name(g, L.name, sizeof L.name, "layer")) != CLREMAT_OK)
        return st;
    want = inputs_wanted(L.type);
    if (L.n_inputs == 0) {
        L.n_inputs = 1;
        L.inputs[0] = g->n_layers - 1;
    }
    if (L.type == CLREMAT_CONCAT) {
        if (L.n_inputs < 2 || L.n_inputs > CLREMAT_MAX_INPUTS)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': a concat layer takes 2 to %d inputs, got %d",
                         L.name, CLREMAT_MAX_INPUTS, L.n_inputs);
        for (int i = 0; i < L.n_inputs; i++)
            for (int k = 0; k < i; k++)
                if (L.inputs[i] == L.inputs[k])
                    return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': concat input %d repeats input %d "
                                 "(each input at most once)", L.name, i, k);
        want = L.n_inputs;
    }
    if (L.n_inputs != want)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s': a %s layer takes %d input%s, got %d", L.name,
                     clremat_layer_type_name(L.type), want, want == 1 ? "" : "s", L.n_inputs);
    for (int i = 0; i < L.n_inputs; i++) {
        int r = L.inputs[i];
        if (r < -1 || r >= g->n_layers)
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT,
                         "layer '%s': input %d is layer index %d, which is not an earlier layer "
                         "(cycle / forward reference; %d layers so far)", L.name, i, r, g->n_layers);
        if (r >= 0 && (st = check_block_reference(g, &L, r)) != CLREMAT_OK)
            return st;
    }
    if ((st = check_settings(g, &L)) != CLREMAT_OK)
        return st;
    if (g->n_layers == g->cap_layers) {
        int cap = g->cap_layers ? 2 * g->cap_layers : 16;
        clremat_layer *nl = realloc(g->layers, (size_t)cap * sizeof *nl);
        if (!nl)
            return gfail(g, CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory for layer '%s'", L.name);
        g->layers = nl;
        g->cap_layers = cap;
    }
    for (int i = L.n_inputs; i < CLREMAT_MAX_INPUTS; i++)
        L.inputs[i] = -1;
    L.block = g->open_block;
    memset(L.in_shape, 0, sizeof L.in_shape);
    memset(&L.out_shape, 0, sizeof L.out_shape);
    L.n_params = 0;
    memset(L.params, 0, sizeof L.params);
    g->layers[g->n_layers++] = L;
    g->finalized = 0;
    return CLREMAT_OK;
}

/* ------------------------------------------------------------- inference */

static void add_param(clremat_layer *L, const char *name, int rank, int64_t d0, int64_t d1, int init)
{
    clremat_param *p = &L->params[L->n_params++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->shape.rank = rank;
    p->shape.dims[0] = d0;
    if (rank > 1)
        p->shape.dims[1] = d1;
    p->elems = clremat_shape_elems(&p->shape);
    p->init = init;
}

/* Shape error about layer L, naming its input and output shapes. */
#define SHAPE_FAIL(...) gfail(g, CLREMAT_ERR_SHAPE, __VA_ARGS__)

static int infer_layer(clremat_graph *g, int l)
{
    clremat_layer *L = &g->layers[l];
    const clremat_shape *in = &L->in_shape[0];
    clremat_shape out;
    char sa[96], sb[96], why[128];
    int64_t last;

    for (int i = 0; i < L->n_inputs; i++) {
        int r = L->inputs[i];
        if (r < 0 && g->io.input_ids && L->type != CLREMAT_EMBEDDING)
            return SHAPE_FAIL("layer '%s': the model input holds token ids (int32); only an embedding layer "
                              "can read it", L->name);
        L->in_shape[i] = r < 0 ? g->io.input : g->layers[r].out_shape;
    }
    out = *in;
    last = in->rank > 0 ? in->dims[in->rank - 1] : 0;
    L->n_params = 0;

    switch (L->type) {
    case CLREMAT_DENSE:
        if (in->rank < 1)
            return SHAPE_FAIL("layer '%s': input has shape %s but a dense layer needs rank >= 1", L->name,
                              clremat_shape_str(in, sa, sizeof sa));
        out.dims[out.rank - 1] = L->units;
        if (last * L->units >= MAX_ELEMS)
            return SHAPE_FAIL("layer '%s': kernel [%lld, %lld] has too many elements", L->name,
                              (long long)last, (long long)L->units);
        if (L->tie) { /* the kernel is the embedding's table, transposed: no parameters of its own */
            const clremat_layer *E = L->tie - 1 < l && L->tie >= 1 ? &g->layers[L->tie - 1] : NULL;
            if (!E || E->type != CLREMAT_EMBEDDING || E->vocab != L->units || E->dim != last || L->use_bias ||
                L->act != CLREMAT_ACT_NONE || L->lora_rank)
                return SHAPE_FAIL("layer '%s': input has shape %s; \"tie\" needs an earlier embedding layer of "
                                  "vocab = units (%lld) and dim = the input's last dimension, and a dense layer "
                                  "without bias, activation or LoRA", L->name, clremat_shape_str(in, sa, sizeof sa),
                                  (long long)L->units);
            if (clremat_graph_tied_user(g, L->tie - 1) != l)
                return SHAPE_FAIL("layer '%s': embedding '%s' is already tied to another layer (one tie per table)",
                                  L->name, E->name);
            break;
        }
        add_param(L, "kernel", 2, last, L->units,
                  L->act == CLREMAT_ACT_RELU ? CLREMAT_INIT_HE_NORMAL : CLREMAT_INIT_GLOROT_UNIFORM);
        if (L->use_bias)
            add_param(L, "bias", 1, L->units, 0, CLREMAT_INIT_ZEROS);
        if (L->lora_rank) { /* LoRA: x W + b + (alpha / r) x A B, W and b frozen */
            if (L->lora_rank > last || L->lora_rank > L->units)
                return SHAPE_FAIL("layer '%s': input has shape %s; LoRA rank %d must be at most min(in, units) = "
                                  "min(%lld, %lld)", L->name,
                                  clremat_shape_str(in, sa, sizeof sa), L->lora_rank, (long long)last,
                                  (long long)L->units);
            for (int p = 0; p < L->n_params; p++)
                L->params[p].frozen = 1;
            add_param(L, "lora_a", 2, last, L->lora_rank, CLREMAT_INIT_NORMAL_LORA);
            add_param(L, "lora_b", 2, L->lora_rank, L->units, CLREMAT_INIT_ZEROS);
        }
        break;
    case CLREMAT_ACTIVATION:
    case CLREMAT_DROPOUT:
        break;
    case CLREMAT_LAYERNORM:
        add_param(L, "gamma", 1, last, 0, CLREMAT_INIT_ONES);
        add_param(L, "beta", 1, last, 0, CLREMAT_INIT_ZEROS);
        break;
    case CLREMAT_ADD: {
        const clremat_shape *b = &L->in_shape[1];
        if (!clremat_shape_eq(in, b) && !shape_is_suffix(in, b))
            return SHAPE_FAIL("layer '%s': input has shape %s but the second input has shape %s (add needs "
                              "equal shapes, or the second shape a suffix of the first)", L->name,
                              clremat_shape_str(in, sa, sizeof sa), clremat_shape_str(b, sb, sizeof sb));
        break;
    }
    case CLREMAT_EMBEDDING:
        if (L->inputs[0] != -1 || !g->io.input_ids || in->rank != 1)
            return SHAPE_FAIL("layer '%s': input has shape %s (%s) but an embedding layer must read the model "
                              "input holding token ids (dtype int32) of shape [T]", L->name,
                              clremat_shape_str(in, sa, sizeof sa),
                              L->inputs[0] != -1 ? g->layers[L->inputs[0]].name
                                                 : g->io.input_ids ? "model input" : "model input, float32");
        out.rank = 2;
        out.dims[0] = in->dims[0];
        out.dims[1] = L->dim;
        if (L->vocab * L->dim >= MAX_ELEMS || in->dims[0] * L->dim >= MAX_ELEMS)
            return SHAPE_FAIL("layer '%s': table [%lld, %lld] has too many elements", L->name,
                              (long long)L->vocab, (long long)L->dim);
        add_param(L, "table", 2, L->vocab, L->dim, CLREMAT_INIT_NORMAL_002);
        if (L->positions)
            add_param(L, "pos_table", 2, in->dims[0], L->dim, CLREMAT_INIT_NORMAL_002);
        break;
    case CLREMAT_ATTENTION: {
        int64_t D = last;
        if (in->rank != 2)
            return SHAPE_FAIL("layer '%s': input has shape %s but attention needs [T, D]", L->name,
                              clremat_shape_str(in, sa, sizeof sa));
        if (D % L->heads != 0)
            return SHAPE_FAIL("layer '%s': input has shape %s but D = %lld is not divisible by heads = %d",
                              L->name, clremat_shape_str(in, sa, sizeof sa), (long long)D, L->heads);
        if (3 * D * D >= MAX_ELEMS || in->dims[0] * in->dims[0] >= MAX_ELEMS)
            return SHAPE_FAIL("layer '%s': input %s is too large for attention", L->name,
                              clremat_shape_str(in, sa, sizeof sa));
        {
            /* kv_heads < heads: k and v have kv_heads heads of D / heads */
            int64_t kvw = D / L->heads * (L->kv_heads > 0 ? L->kv_heads : L->heads);
            if (L->rope_theta > 0.0 && (D / L->heads) % 2)
                return SHAPE_FAIL("layer '%s': input has shape %s but RoPE needs an even head width, got %lld",
                                  L->name, clremat_shape_str(in, sa, sizeof sa), (long long)(D / L->heads));
            add_param(L, "wqkv", 2, D, D + 2 * kvw, CLREMAT_INIT_GLOROT_UNIFORM);
            if (L->use_bias)
                add_param(L, "bqkv", 1, D + 2 * kvw, 0, CLREMAT_INIT_ZEROS);
        }
        add_param(L, "wo", 2, D, D, CLREMAT_INIT_GLOROT_UNIFORM);
        if (L->use_bias)
            add_param(L, "bo", 1, D, 0, CLREMAT_INIT_ZEROS);
        break;
    }
    case CLREMAT_RMSNORM:
        if (in->rank < 1 || last < 1)
            return SHAPE_FAIL("layer '%s': input has shape %s but rmsnorm needs rank >= 1", L->name,
                              clremat_shape_str(in, sa, sizeof sa));
        add_param(L, "scale", 1, last, 0, CLREMAT_INIT_ONES);
        break;
    case CLREMAT_ROPE: {
        int64_t hd = L->head_dim > 0 ? L->head_dim : last;
        if (in->rank != 2 || hd % 2 || last % hd)
            return SHAPE_FAIL("layer '%s': input has shape %s but rope needs [T, D] with D a multiple of an even "
                              "head_dim (%lld)", L->name, clremat_shape_str(in, sa, sizeof sa), (long long)hd);
        break;
    }
    case CLREMAT_MULTIPLY:
        if (!clremat_shape_eq(in, &L->in_shape[1]))
            return SHAPE_FAIL("layer '%s': input has shape %s but the second input has shape %s (multiply needs "
                              "equal shapes)", L->name, clremat_shape_str(in, sa, sizeof sa),
                              clremat_shape_str(&L->in_shape[1], sb, sizeof sb));
        break;
    case CLREMAT_RESHAPE: {
        int64_t n = clremat_shape_elems(in), known = 1;
        int neg = -1;
        out = L->target;
        for (int i = 0; i < out.rank; i++) {
            if (out.dims[i] == -1)
                neg = i;
            else
                known *= out.dims[i];
        }
        if (neg >= 0) {
            if (n % known != 0)
                return SHAPE_FAIL("layer '%s': input has shape %s (%lld elements) which cannot be reshaped to "
                                  "%s", L->name, clremat_shape_str(in, sa, sizeof sa), (long long)n,
                                  clremat_shape_str(&L->target, sb, sizeof sb));
            out.dims[neg] = n / known;
        }
        if (clremat_shape_elems(&out) != n)
            return SHAPE_FAIL("layer '%s': input has shape %s (%lld elements) but the target shape %s has %lld",
                              L->name, clremat_shape_str(in, sa, sizeof sa), (long long)n,
                              clremat_shape_str(&out, sb, sizeof sb), (long long)clremat_shape_elems(&out));
        break;
    }
    case CLREMAT_SOFTMAX_CE:
        if (in->rank < 1 || last < 1)
            return SHAPE_FAIL("layer '%s': input has shape %s but softmax_cross_entropy needs logits [..., C]",
                              L->name, clremat_shape_str(in, sa, sizeof sa));
        g->io.labels = *in;
        g->io.labels.rank = in->rank - 1;
        g->io.labels.dims[in->rank - 1] = 0;
        g->io.labels_ids = 1;
        g->io.classes = last;
        memset(&out, 0, sizeof out);
        break;
    case CLREMAT_MSE:
        g->io.labels = *in;
        g->io.labels_ids = 0;
        g->io.classes = 0;
        memset(&out, 0, sizeof out);
        break;
    case CLREMAT_CONCAT:
        out.dims[out.rank - 1] = 0;
        for (int i = 0; i < L->n_inputs; i++) {
            const clremat_shape *b = &L->in_shape[i];
            int ok = b->rank == in->rank && b->rank >= 1;
            for (int k = 0; ok && k + 1 < in->rank; k++)
                ok = b->dims[k] == in->dims[k];
            if (!ok)
                return SHAPE_FAIL("layer '%s': input has shape %s but input %d has shape %s (concat needs equal "
                                  "shapes but for the last dimension)", L->name, clremat_shape_str(in, sa, sizeof sa),
                                  i, clremat_shape_str(b, sb, sizeof sb));
            out.dims[out.rank - 1] += b->dims[b->rank - 1];
        }
        break;
    case CLREMAT_BATCHNORM:
        if (in->rank < 1 || last < 1)
            return SHAPE_FAIL("layer '%s': input has shape %s but batchnorm needs rank >= 1", L->name,
                              clremat_shape_str(in, sa, sizeof sa));
        /* Keras's order: gamma (scale), beta (center), moving_mean, moving_variance */
        if (L->scale)
            add_param(L, "gamma", 1, last, 0, CLREMAT_INIT_ONES);
        if (L->center)
            add_param(L, "beta", 1, last, 0, CLREMAT_INIT_ZEROS);
        add_param(L, "moving_mean", 1, last, 0, CLREMAT_INIT_ZEROS);
        L->params[L->n_params - 1].frozen = 1;
        add_param(L, "moving_variance", 1, last, 0, CLREMAT_INIT_ONES);
        L->params[L->n_params - 1].frozen = 1;
        break;
    default:
        if (clremat_is_conv_type(L->type)) {
            char cwhy[256];
            if (clremat_conv_infer(L, cwhy, sizeof cwhy))
                return SHAPE_FAIL("layer '%s': input has shape %s: %s", L->name,
                                  clremat_shape_str(in, sa, sizeof sa), cwhy);
            out = L->out_shape;
            break;
        }
        return gfail(g, CLREMAT_ERR_INTERNAL, "layer '%s': unknown type %d", L->name, (int)L->type);
    }
    /* "trainable": false freezes the layer's weights; LoRA adapters stay trained */
    for (int p = 0; L->frozen && p < L->n_params; p++)
        if (strncmp(L->params[p].name, "lora_", 5) != 0)
            L->params[p].frozen = 1;
    if (L->type != CLREMAT_SOFTMAX_CE && L->type != CLREMAT_MSE && !shape_valid(&out, why, sizeof why))
        return SHAPE_FAIL("layer '%s': input has shape %s but the output shape %s is not valid: %s", L->name,
                          clremat_shape_str(in, sa, sizeof sa), clremat_shape_str(&out, sb, sizeof sb), why);
    L->out_shape = out;
    return CLREMAT_OK;
}

static int is_loss(clremat_layer_type t) { return t == CLREMAT_SOFTMAX_CE || t == CLREMAT_MSE; }

int clremat_graph_finalize(clremat_graph *g)
{
    char why[128];
    unsigned char *used = NULL;
    int st = CLREMAT_OK, n;
    if (!g)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_finalize: NULL graph");
    g->finalized = 0;
    n = g->n_layers;
    if (g->open_block >= 0)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "block '%s' is not closed (end_block missing)",
                     g->blocks[g->open_block].name);
    if (!shape_valid(&g->io.input, why, sizeof why))
        return gfail(g, CLREMAT_ERR_SHAPE, "model input shape is not set or not valid: %s", why);
    if (n == 0)
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "model '%s' has no layers", g->name);
    for (int l = 0; l < n - 1; l++)
        if (is_loss(g->layers[l].type))
            return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT,
                         "layer '%s' is a loss layer (%s) but is not the last layer: a model has exactly one "
                         "loss layer, at the end", g->layers[l].name, clremat_layer_type_name(g->layers[l].type));
    if (!is_loss(g->layers[n - 1].type))
        return gfail(g, CLREMAT_ERR_INVALID_ARGUMENT,
                     "layer '%s' is the last layer but not a loss layer: the model has no loss "
                     "(softmax_cross_entropy or mse must be the last layer)", g->layers[n - 1].name);
    used = calloc((size_t)n, 1);
    if (!used)
        return gfail(g, CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int l = 0; l < n; l++)
        for (int i = 0; i < g->layers[l].n_inputs; i++)
            if (g->layers[l].inputs[i] >= 0)
                used[g->layers[l].inputs[i]] = 1;
    for (int l = 0; l < n - 1; l++)
        if (!used[l]) {
            st = gfail(g, CLREMAT_ERR_INVALID_ARGUMENT, "layer '%s''s output is never used: every layer but the "
                       "loss must feed a later layer", g->layers[l].name);
            goto fail;
        }
    memset(&g->io.labels, 0, sizeof g->io.labels);
    for (int l = 0; l < n; l++)
        if ((st = infer_layer(g, l)) != CLREMAT_OK)
            goto fail;
    g->finalized = 1;
    g->error[0] = '\0';
fail:
    free(used);
    return st;
}

int64_t clremat_graph_param_elems(const clremat_graph *g)
{
    int64_t n = 0;
    if (!g)
        return 0;
    for (int l = 0; l < g->n_layers; l++)
        for (int p = 0; p < g->layers[l].n_params; p++)
            n += g->layers[l].params[p].elems;
    return n;
}

int64_t clremat_graph_trainable_elems(const clremat_graph *g)
{
    int64_t n = 0;
    if (!g)
        return 0;
    for (int l = 0; l < g->n_layers; l++)
        for (int p = 0; p < g->layers[l].n_params; p++)
            if (!g->layers[l].params[p].frozen)
                n += g->layers[l].params[p].elems;
    return n;
}

int clremat_graph_tied_user(const clremat_graph *g, int e)
{
    for (int l = 0; g && l < g->n_layers; l++)
        if (g->layers[l].type == CLREMAT_DENSE && g->layers[l].tie == e + 1)
            return l;
    return -1;
}
