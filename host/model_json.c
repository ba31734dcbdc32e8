/* model_json.c: loads a model file (JSON, docs/model-format.md) into a
 * finalized graph. Two passes over the layer list: the first expands blocks
 * and repeats into the full layer names (so a reference to a layer defined
 * later can be told from an unknown name), the second checks every field and
 * builds the graph. Every error says FILE:LINE:COL of the offending value and
 * what was expected. */
#include "atomic_file.h"
#include "graph.h"
#include "error.h"
#include "json_pos.h"
#include "conv_geom.h"
#include "data.h"
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 10000        /* layers after expanding repeats */
#define MAX_REPEAT 10000
#define MAX_BLOCK_DEPTH 16
#define MAX_DIM ((int64_t)1 << 30)
#define MAX_FILE_BYTES ((long)64 << 20)
#define N_NAMED_TYPES (CLREMAT_LAYER_TYPE_COUNT + 1)  /* + "flatten" */
#define TYPE_FLATTEN CLREMAT_LAYER_TYPE_COUNT

/* Where a layer list is being read: a block instance or the top level. */
typedef struct scope {
    const char *path;           /* "" at top level, else the block's full name */
    int block_input;            /* layer entering the block (-1 model input); -2 top level */
    int counters[N_NAMED_TYPES];/* automatic names per type */
    const struct scope *parent;
    int frozen;                 /* inside a block with "trainable": false */
} scope;

typedef struct loader {
    const char *origin;
    int generated;              /* the text was made from origin (a Keras or Hugging Face file): its
                                 * lines and columns are in no file the user has, so errors omit them */
    const clremat_json_index *ix;
    clremat_graph *g;
    int pass;                   /* 1: collect names, 2: build */
    /* pass 1: every layer's full name in file order; index = layer index */
    char (*names)[CLREMAT_NAME_LEN];
    int n_names, cap_names;
    int *hash;                  /* open addressing over names, -1 empty */
    size_t hash_size;
    int total;                  /* layers seen in this pass */
    clremat_jpos *block_pos;    /* pass 2: where each block was declared */
    int cap_block_pos;
} loader;

static const char *const type_list = "dense, activation, dropout, layernorm, add, embedding, attention, "
                                     "reshape, flatten, softmax_cross_entropy, mse, rmsnorm, rope, multiply, "
                                     "conv2d, max_pool2d, avg_pool2d, global_avg_pool2d, zero_pad2d, batchnorm, concat";
static const char *const act_list = "relu, gelu, gelu_exact, tanh, sigmoid, silu, linear";

/* ---------------------------------------------------------------- errors */

static int lfail(const loader *ld, int status, clremat_jpos p, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int lfail(const loader *ld, int status, clremat_jpos p, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ld->generated)
        return clremat_set_error(status, "%s, as a clremat model: %s", ld->origin, msg);
    clremat_error_set_pos(ld->origin, p.line, p.col);
    return clremat_set_error(status, "%s:%d:%d: %s", ld->origin, p.line, p.col, msg);
}

/* Where p is, for "already defined at ..." in messages: ORIGIN:LINE:COL,
 * or for a generated text its origin alone. */
static const char *at(const loader *ld, clremat_jpos p, char *buf, size_t n)
{
    if (ld->generated)
        snprintf(buf, n, "%s, as a clremat model", ld->origin);
    else
        snprintf(buf, n, "%s:%d:%d", ld->origin, p.line, p.col);
    return buf;
}

/* A short JSON rendering of v for "got ..." in messages. */
static const char *got(const json_t *v, char *buf, size_t len)
{
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    if (!s)
        snprintf(buf, len, "%s", v ? "(value)" : "nothing");
    else if (strlen(s) > 60)
        snprintf(buf, len, "%.57s...", s);
    else
        snprintf(buf, len, "%s", s);
    free(s);
    return buf;
}

static clremat_jpos opos(const loader *ld, const json_t *obj) { return clremat_json_pos(ld->ix, obj); }

static clremat_jpos mpos(const loader *ld, const json_t *obj, const char *key)
{
    return clremat_json_member_pos(ld->ix, obj, key, 0);
}

/* ---------------------------------------------------------- name lookups */

static size_t hash_str(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Index of the first layer of pass 1 with full name s, or -1. */
static int name_lookup(const loader *ld, const char *s)
{
    if (!ld->hash)
        return -1;
    for (size_t h = hash_str(s) & (ld->hash_size - 1);; h = (h + 1) & (ld->hash_size - 1)) {
        int i = ld->hash[h];
        if (i < 0)
            return -1;
        if (!strcmp(ld->names[i], s))
            return i;
    }
}

static int build_hash(loader *ld)
{
    size_t size = 16;
    while (size < 2 * (size_t)ld->n_names + 16)
        size *= 2;
    ld->hash = malloc(size * sizeof *ld->hash);
    if (!ld->hash)
        return -1;
    ld->hash_size = size;
    for (size_t i = 0; i < size; i++)
        ld->hash[i] = -1;
    for (int i = 0; i < ld->n_names; i++) {
        size_t h = hash_str(ld->names[i]) & (size - 1);
        if (name_lookup(ld, ld->names[i]) >= 0)
            continue; /* a duplicate: the first one is kept */
        while (ld->hash[h] >= 0)
            h = (h + 1) & (size - 1);
        ld->hash[h] = i;
    }
    return 0;
}

static int push_name(loader *ld, const char *full)
{
    if (ld->n_names == ld->cap_names) {
        int cap = ld->cap_names ? 2 * ld->cap_names : 64;
        char (*nn)[CLREMAT_NAME_LEN] = realloc(ld->names, (size_t)cap * sizeof *nn);
        if (!nn)
            return -1;
        ld->names = nn;
        ld->cap_names = cap;
    }
    snprintf(ld->names[ld->n_names++], CLREMAT_NAME_LEN, "%s", full);
    return 0;
}

/* Letters, digits, '_', '-' and '.': names that stay unambiguous in block paths. */
static int valid_name(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return 0;
    return 1;
}

/* Joins scope path and name into out; -1 when it does not fit. */
static int join_name(const char *path, const char *name, char *out)
{
    int n = path[0] ? snprintf(out, CLREMAT_NAME_LEN, "%s/%s", path, name)
                    : snprintf(out, CLREMAT_NAME_LEN, "%s", name);
    return n < 0 || n >= CLREMAT_NAME_LEN ? -1 : 0;
}

/* ---------------------------------------------------------- field access */

/* Fails on the first member of obj not in allowed (a NULL-ended list). */
static int check_fields(const loader *ld, const json_t *obj, const char *what, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        int ok = 0;
        char list[512] = "";
        for (int i = 0; allowed[i]; i++)
            if (!strcmp(key, allowed[i]))
                ok = 1;
        if (ok)
            continue;
        for (int i = 0; allowed[i]; i++) {
            size_t n = strlen(list);
            snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", allowed[i]);
        }
        return lfail(ld, CLREMAT_ERR_PARSE, clremat_json_member_pos(ld->ix, obj, key, 1),
                     "%s: unknown field '%.64s'; allowed fields: %s", what, key, list);
    }
    return CLREMAT_OK;
}

static int missing(const loader *ld, const json_t *obj, const char *what, const char *key, const char *expect)
{
    return lfail(ld, CLREMAT_ERR_PARSE, opos(ld, obj), "%s: missing field '%s' (%s)", what, key, expect);
}

static int bad_field(const loader *ld, const json_t *obj, const char *what, const char *key, const char *expect)
{
    char b[96];
    return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, key), "%s: field '%s' must be %s, got %s", what, key, expect,
                 got(json_object_get(obj, key), b, sizeof b));
}

/* Integer field in [lo, hi]; *out = def when absent and not required. */
static int get_int(const loader *ld, const json_t *obj, const char *what, const char *key, int required,
                   int64_t lo, int64_t hi, int64_t def, const char *expect, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required)
            return missing(ld, obj, what, key, expect);
        *out = def;
        return CLREMAT_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return bad_field(ld, obj, what, key, expect);
    *out = json_integer_value(v);
    return CLREMAT_OK;
}

/* Number field in [lo, hi) (hi_open) or [lo, hi], lo excluded when lo_open. */
static int get_num(const loader *ld, const json_t *obj, const char *what, const char *key, int required, double lo,
                   int lo_open, double hi, int hi_open, double def, const char *expect, double *out)
{
    json_t *v = json_object_get(obj, key);
    double x;
    if (!v) {
        if (required)
            return missing(ld, obj, what, key, expect);
        *out = def;
        return CLREMAT_OK;
    }
    x = json_is_number(v) ? json_number_value(v) : 0.0;
    if (!json_is_number(v) || !(lo_open ? x > lo : x >= lo) || !(hi_open ? x < hi : x <= hi))
        return bad_field(ld, obj, what, key, expect);
    *out = x;
    return CLREMAT_OK;
}

static int get_bool(const loader *ld, const json_t *obj, const char *what, const char *key, int def, int *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        *out = def;
        return CLREMAT_OK;
    }
    if (!json_is_boolean(v))
        return bad_field(ld, obj, what, key, "true or false");
    *out = json_is_true(v);
    return CLREMAT_OK;
}

/* Shape array: 1..MAX_RANK integers in 1..MAX_DIM, or -1 (once) when allow_neg. */
static int get_shape(const loader *ld, const json_t *obj, const char *what, const char *key, int allow_neg,
                     clremat_shape *out)
{
    json_t *v = json_object_get(obj, key);
    const char *expect = allow_neg ? "an array of 1 to 4 positive integers, one of which may be -1"
                                   : "an array of 1 to 4 positive integers";
    int neg = 0;
    char b[96];
    if (!v)
        return missing(ld, obj, what, key, expect);
    if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > CLREMAT_MAX_RANK)
        return bad_field(ld, obj, what, key, expect);
    memset(out, 0, sizeof *out);
    out->rank = (int)json_array_size(v);
    for (int i = 0; i < out->rank; i++) {
        json_t *d = json_array_get(v, (size_t)i);
        json_int_t x = json_is_integer(d) ? json_integer_value(d) : 0;
        if (!json_is_integer(d) || !((x >= 1 && x <= MAX_DIM) || (allow_neg && x == -1 && !neg++)))
            return lfail(ld, CLREMAT_ERR_PARSE, clremat_json_elem_pos(ld->ix, v, (size_t)i),
                         "%s: field '%s' must be %s; element %d is %s", what, key, expect, i, got(d, b, sizeof b));
        out->dims[i] = x;
    }
    return CLREMAT_OK;
}

/* ---------------------------------------------------------------- inputs */

/* Resolves input name nm of the layer being added (index self, full name
 * selfname) to a layer index or -1 (model input). */
static int resolve_input(const loader *ld, const scope *sc, const json_t *arr, size_t i, const char *selfname,
                         int self, int *out)
{
    const char *nm = json_string_value(json_array_get(arr, i));
    clremat_jpos p = clremat_json_elem_pos(ld->ix, arr, i);
    if (!strcmp(nm, "@input")) {
        *out = -1;
        return CLREMAT_OK;
    }
    if (!strcmp(nm, "@block_input")) {
        if (sc->block_input < -1)
            return lfail(ld, CLREMAT_ERR_PARSE, p, "layer '%s': '@block_input' is only valid inside a block "
                         "(use '@input' for the model input)", selfname);
        *out = sc->block_input;
        return CLREMAT_OK;
    }
    if (nm[0] == '@')
        return lfail(ld, CLREMAT_ERR_PARSE, p, "layer '%s': unknown reserved input name '%.64s' (reserved names: "
                     "@input, @block_input)", selfname, nm);
    for (const scope *s = sc; s; s = s->parent) {
        char cand[CLREMAT_NAME_LEN];
        int ord;
        if (join_name(s->path, nm, cand) < 0 || (ord = name_lookup(ld, cand)) < 0)
            continue;
        if (ord == self)
            return lfail(ld, CLREMAT_ERR_PARSE, p, "layer '%s': input '%s' is the layer itself (a cycle): a "
                         "layer can only use layers defined before it", selfname, nm);
        if (ord > self || ord >= ld->g->n_layers)
            return lfail(ld, CLREMAT_ERR_PARSE, p, "layer '%s': input '%s' is layer '%s', defined later in the "
                         "file (cycle / forward reference): a layer can only use layers defined before it",
                         selfname, nm, ld->names[ord]);
        if (strcmp(ld->g->layers[ord].name, cand))
            return lfail(ld, CLREMAT_ERR_INTERNAL, p, "layer '%s': name index out of step at '%s'", selfname,
                         cand);
        *out = ord;
        return CLREMAT_OK;
    }
    return lfail(ld, CLREMAT_ERR_PARSE, p, "layer '%s': unknown input name '%.64s': no layer has this name (inside "
                 "a block, short names are looked up in the block first, then in enclosing blocks, then as full "
                 "names such as 'block/layer'; reserved: @input, @block_input)", selfname, nm);
}

/* ---------------------------------------------------------------- layers */

static int build_list(loader *ld, const json_t *arr, scope *sc, int depth);

/* Fields of each layer type beyond name, type and inputs. */
static const char *const *type_fields(int t)
{
    static const char *const dense[] = {"name", "type", "inputs", "units", "activation", "use_bias", "trainable",
                                        "tie", "lora", NULL};
    static const char *const act[] = {"name", "type", "inputs", "activation", "trainable", NULL};
    static const char *const drop[] = {"name", "type", "inputs", "rate", "trainable", NULL};
    static const char *const ln[] = {"name", "type", "inputs", "eps", "trainable", NULL};
    static const char *const emb[] = {"name", "type", "inputs", "vocab", "dim", "positions", "trainable", NULL};
    static const char *const att[] = {"name", "type", "inputs", "heads", "causal", "rate", "kv_heads", "use_bias",
                                      "rope", "attention", "trainable", NULL};
    static const char *const rms[] = {"name", "type", "inputs", "eps", "trainable", NULL};
    static const char *const rope[] = {"name", "type", "inputs", "theta", "head_dim", "trainable", NULL};
    static const char *const resh[] = {"name", "type", "inputs", "shape", "trainable", NULL};
    static const char *const plain[] = {"name", "type", "inputs", "trainable", NULL};
    /* convolutional networks */
    static const char *const conv[] = {"name", "type", "inputs", "filters", "kernel_size", "strides", "padding",
                                       "dilation_rate", "groups", "depth_multiplier", "use_bias", "activation",
                                       "trainable", NULL};
    static const char *const pool[] = {"name", "type", "inputs", "pool_size", "strides", "padding", "trainable", NULL};
    static const char *const zpad[] = {"name", "type", "inputs", "padding", "trainable", NULL};
    static const char *const bn[] = {"name", "type", "inputs", "momentum", "epsilon", "center", "scale", "trainable", NULL};
    switch (t) {
    case CLREMAT_BATCHNORM: return bn;
    case CLREMAT_CONV2D: return conv;
    case CLREMAT_MAX_POOL2D:
    case CLREMAT_AVG_POOL2D: return pool;
    case CLREMAT_ZERO_PAD2D: return zpad;
    case CLREMAT_DENSE: return dense;
    case CLREMAT_ACTIVATION: return act;
    case CLREMAT_DROPOUT: return drop;
    case CLREMAT_LAYERNORM: return ln;
    case CLREMAT_EMBEDDING: return emb;
    case CLREMAT_ATTENTION: return att;
    case CLREMAT_RESHAPE: return resh;
    case CLREMAT_RMSNORM: return rms;
    case CLREMAT_ROPE: return rope;
    default: return plain;
    }
}

static int get_activation(const loader *ld, const json_t *obj, const char *what, int required, clremat_act *out)
{
    json_t *v = json_object_get(obj, "activation");
    int a;
    char expect[160];
    snprintf(expect, sizeof expect, "one of: %s", act_list);
    if (!v) {
        if (required)
            return missing(ld, obj, what, "activation", expect);
        *out = CLREMAT_ACT_NONE;
        return CLREMAT_OK;
    }
    if (!json_is_string(v))
        return bad_field(ld, obj, what, "activation", expect);
    if ((a = clremat_act_from_name(json_string_value(v))) < 0)
        return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, "activation"), "%s: unknown activation '%.64s'; "
                     "known activations: %s", what, json_string_value(v), act_list);
    *out = (clremat_act)a;
    return CLREMAT_OK;
}

/* Attention's optional "rope": {"theta": BASE}: RoPE on q and k (0 = none). */
static int get_attn_rope(const loader *ld, const json_t *obj, const char *what, double *theta)
{
    static const char *const fields[] = {"theta", NULL};
    json_t *v = json_object_get(obj, "rope");
    char w[CLREMAT_NAME_LEN + 32];
    int st;
    *theta = 0.0;
    if (!v)
        return CLREMAT_OK;
    if (!json_is_object(v))
        return bad_field(ld, obj, what, "rope", "an object {\"theta\": BASE}");
    snprintf(w, sizeof w, "%s: rope", what);
    if ((st = check_fields(ld, v, w, fields)) != CLREMAT_OK)
        return st;
    return get_num(ld, v, w, "theta", 0, 0.0, 1, 1e12, 0, 10000.0, "a number with 0 < theta <= 1e12", theta);
}

/* Reads an attention layer's "attention" field: "plain" (also when
 * absent), "memory_efficient", or "auto" (budget:/auto choose). */
static int get_attn_mode(const loader *ld, const json_t *obj, const char *what, int *out)
{
    static const char *const expect = "\"plain\", \"memory_efficient\" or \"auto\"";
    json_t *v = json_object_get(obj, "attention");
    *out = CLREMAT_ATTN_DEFAULT;
    if (!v)
        return CLREMAT_OK;
    if (!json_is_string(v))
        return bad_field(ld, obj, what, "attention", expect);
    if (!strcmp(json_string_value(v), "plain"))
        *out = CLREMAT_ATTN_PLAIN;
    else if (!strcmp(json_string_value(v), "memory_efficient"))
        *out = CLREMAT_ATTN_MEMORY_EFFICIENT;
    else if (!strcmp(json_string_value(v), "auto"))
        *out = CLREMAT_ATTN_AUTO;
    else
        return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, "attention"), "%s: unknown attention mode '%.64s'; "
                     "known modes: plain, memory_efficient, auto", what, json_string_value(v));
    return CLREMAT_OK;
}

/* Convolutional layers: an integer in [lo, hi] or an array of two of them
 * into out[0..1] (def for both when absent). */
static int get_pair(const loader *ld, const json_t *obj, const char *what, const char *key, int def, int lo, int hi,
                    int *out)
{
    json_t *v = json_object_get(obj, key);
    char expect[96];
    snprintf(expect, sizeof expect, "an integer from %d to %d or an array of two", lo, hi);
    if (!v) {
        out[0] = out[1] = def;
        return CLREMAT_OK;
    }
    if (json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi) {
        out[0] = out[1] = (int)json_integer_value(v);
        return CLREMAT_OK;
    }
    if (!json_is_array(v) || json_array_size(v) != 2)
        return bad_field(ld, obj, what, key, expect);
    for (size_t i = 0; i < 2; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < lo || json_integer_value(e) > hi)
            return bad_field(ld, obj, what, key, expect);
        out[i] = (int)json_integer_value(e);
    }
    return CLREMAT_OK;
}

/* "padding": "valid" (default) or "same". */
static int get_padding(const loader *ld, const json_t *obj, const char *what, int *same)
{
    json_t *v = json_object_get(obj, "padding");
    *same = 0;
    if (!v)
        return CLREMAT_OK;
    if (!json_is_string(v) || (strcmp(json_string_value(v), "valid") && strcmp(json_string_value(v), "same")))
        return bad_field(ld, obj, what, "padding", "\"valid\" or \"same\"");
    *same = !strcmp(json_string_value(v), "same");
    return CLREMAT_OK;
}

/* zero_pad2d "padding": n (all sides), [h, w] (symmetric) or [[top, bottom],
 * [left, right]] as in Keras; default 1. */
static int get_zero_pad(const loader *ld, const json_t *obj, const char *what, int *pad)
{
    static const char *const expect = "an integer, [h, w] or [[top, bottom], [left, right]] of integers 0 .. 65536";
    json_t *v = json_object_get(obj, "padding");
    int pair[2];
    if (!v) {
        pad[0] = pad[1] = pad[2] = pad[3] = 1;
        return CLREMAT_OK;
    }
    if (json_is_array(v) && json_array_size(v) == 2 && json_is_array(json_array_get(v, 0))) {
        for (size_t a = 0; a < 2; a++) {
            json_t *e = json_array_get(v, a);
            if (!json_is_array(e) || json_array_size(e) != 2)
                return bad_field(ld, obj, what, "padding", expect);
            for (size_t b = 0; b < 2; b++) {
                json_t *x = json_array_get(e, b);
                if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 65536)
                    return bad_field(ld, obj, what, "padding", expect);
                pad[2 * a + b] = (int)json_integer_value(x);
            }
        }
        return CLREMAT_OK;
    }
    if (get_pair(ld, obj, what, "padding", 1, 0, 65536, pair) != CLREMAT_OK)
        return bad_field(ld, obj, what, "padding", expect);
    pad[0] = pad[1] = pair[0];
    pad[2] = pad[3] = pair[1];
    return CLREMAT_OK;
}

/* The fields of the convolutional layer types (read_settings). */
static int read_conv_settings(const loader *ld, const json_t *obj, const char *what, int t, clremat_layer *L)
{
    int st;
    int64_t x;
    switch (t) {
    case CLREMAT_CONV2D:
        if ((st = get_int(ld, obj, what, "depth_multiplier", 0, 1, 65536, 0, "a positive integer", &x)))
            return st;
        L->depth_multiplier = (int)x;
        if ((st = get_int(ld, obj, what, "filters", !L->depth_multiplier, 1, MAX_DIM, 0,
                          "a positive integer (or depth_multiplier for a depthwise conv2d)", &L->filters)))
            return st;
        if ((st = get_int(ld, obj, what, "groups", 0, 1, 65536, 1, "a positive integer", &x)))
            return st;
        L->groups = (int)x;
        if (!json_object_get(obj, "kernel_size"))
            return missing(ld, obj, what, "kernel_size", "an integer or an array of two");
        if ((st = get_pair(ld, obj, what, "kernel_size", 1, 1, 1024, L->ksize)) ||
            (st = get_pair(ld, obj, what, "strides", 1, 1, 1024, L->strides)) ||
            (st = get_pair(ld, obj, what, "dilation_rate", 1, 1, 1024, L->dilation)) ||
            (st = get_padding(ld, obj, what, &L->pad_same)) || (st = get_activation(ld, obj, what, 0, &L->act)) ||
            (st = get_bool(ld, obj, what, "use_bias", 1, &L->use_bias)))
            return st;
        if (L->depth_multiplier && (json_object_get(obj, "filters") || json_object_get(obj, "groups")))
            return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, "depth_multiplier"), "%s: depth_multiplier makes a "
                         "depthwise conv2d (groups = input channels, filters = channels * depth_multiplier) and "
                         "cannot be given with filters or groups", what);
        return CLREMAT_OK;
    case CLREMAT_MAX_POOL2D:
    case CLREMAT_AVG_POOL2D:
        if ((st = get_pair(ld, obj, what, "pool_size", 2, 1, 1024, L->ksize)) ||
            (st = get_pair(ld, obj, what, "strides", 0, 1, 1024, L->strides)) ||
            (st = get_padding(ld, obj, what, &L->pad_same)))
            return st;
        if (!json_object_get(obj, "strides")) { /* Keras: strides default to pool_size */
            L->strides[0] = L->ksize[0];
            L->strides[1] = L->ksize[1];
        }
        L->dilation[0] = L->dilation[1] = 1;
        return CLREMAT_OK;
    case CLREMAT_ZERO_PAD2D:
        return get_zero_pad(ld, obj, what, L->zpad);
    case CLREMAT_BATCHNORM:
        if ((st = get_num(ld, obj, what, "momentum", 0, 0.0, 0, 1.0, 0, 0.99, "a number with 0 <= momentum <= 1",
                          &L->momentum)) ||
            (st = get_num(ld, obj, what, "epsilon", 0, 0.0, 1, 1.0, 0, 1e-3, "a number with 0 < epsilon <= 1",
                          &L->eps)) ||
            (st = get_bool(ld, obj, what, "center", 1, &L->center)) ||
            (st = get_bool(ld, obj, what, "scale", 1, &L->scale)))
            return st;
        return CLREMAT_OK;
    default:
        return CLREMAT_OK;
    }
}

/* Reads the type-specific fields of a layer into L (pass 2). */
static int read_settings(const loader *ld, const json_t *obj, const char *what, int t, clremat_layer *L)
{
    int st = CLREMAT_OK;
    int64_t x;
    L->use_bias = 1;
    L->eps = 1e-5;
    switch (t) {
    case CLREMAT_DENSE:
        if ((st = get_int(ld, obj, what, "units", 1, 1, MAX_DIM, 0, "a positive integer", &L->units)) ||
            (st = get_activation(ld, obj, what, 0, &L->act)) ||
            (st = get_bool(ld, obj, what, "use_bias", 1, &L->use_bias)))
            return st;
        break;
    case CLREMAT_ACTIVATION:
        return get_activation(ld, obj, what, 1, &L->act);
    case CLREMAT_DROPOUT:
        return get_num(ld, obj, what, "rate", 1, 0.0, 0, 1.0, 1, 0.0, "a number with 0 <= rate < 1", &L->rate);
    case CLREMAT_LAYERNORM:
        return get_num(ld, obj, what, "eps", 0, 0.0, 1, 1.0, 0, 1e-5, "a number with 0 < eps <= 1", &L->eps);
    case CLREMAT_EMBEDDING:
        if ((st = get_int(ld, obj, what, "vocab", 1, 1, MAX_DIM, 0, "a positive integer", &L->vocab)) ||
            (st = get_int(ld, obj, what, "dim", 1, 1, MAX_DIM, 0, "a positive integer", &L->dim)) ||
            (st = get_bool(ld, obj, what, "positions", 0, &L->positions)))
            return st;
        break;
    case CLREMAT_ATTENTION:
        if ((st = get_int(ld, obj, what, "heads", 1, 1, 1 << 16, 0, "a positive integer", &x)) ||
            (st = get_bool(ld, obj, what, "causal", 0, &L->causal)) ||
            (st = get_num(ld, obj, what, "rate", 0, 0.0, 0, 1.0, 1, 0.0, "a number with 0 <= rate < 1",
                          &L->rate)))
            return st;
        L->heads = (int)x;
        if ((st = get_int(ld, obj, what, "kv_heads", 0, 1, 1 << 16, x, "a positive integer dividing heads", &x)) ||
            (st = get_bool(ld, obj, what, "use_bias", 1, &L->use_bias)) ||
            (st = get_attn_rope(ld, obj, what, &L->rope_theta)) ||
            (st = get_attn_mode(ld, obj, what, &L->attn_mode)))
            return st;
        if (L->heads % (int)x)
            return bad_field(ld, obj, what, "kv_heads", "a positive integer dividing heads");
        L->kv_heads = (int)x;
        break;
    case CLREMAT_RMSNORM:
        return get_num(ld, obj, what, "eps", 0, 0.0, 1, 1.0, 0, 1e-6, "a number with 0 < eps <= 1", &L->eps);
    case CLREMAT_ROPE:
        if ((st = get_num(ld, obj, what, "theta", 0, 0.0, 1, 1e12, 0, 10000.0, "a number with 0 < theta <= 1e12",
                          &L->rope_theta)) ||
            (st = get_int(ld, obj, what, "head_dim", 0, 2, MAX_DIM, 0, "a positive even integer", &L->head_dim)))
            return st;
        if (L->head_dim % 2)
            return bad_field(ld, obj, what, "head_dim", "a positive even integer");
        break;
    case CLREMAT_RESHAPE:
        return get_shape(ld, obj, what, "shape", 1, &L->target);
    case TYPE_FLATTEN:
        L->target.rank = 1;
        L->target.dims[0] = -1;
        break;
    default:
        if (clremat_is_conv_type((clremat_layer_type)t) || t == CLREMAT_BATCHNORM)
            return read_conv_settings(ld, obj, what, t, L);
        break;
    }
    return st;
}

/* Fields of issue 13 (small language models) any layer or a dense one may
 * have: "trainable" (and an enclosing block's), dense "tie" (the name of an
 * earlier embedding layer) and "lora": {"rank": R, "alpha": A}. */
static int read_llm_settings(const loader *ld, const json_t *obj, const char *what, const scope *sc, clremat_layer *L)
{
    static const char *const lora_fields[] = {"rank", "alpha", NULL};
    json_t *tv = json_object_get(obj, "tie"), *lv = json_object_get(obj, "lora");
    int trainable, st;
    int64_t r;
    if ((st = get_bool(ld, obj, what, "trainable", 1, &trainable)) != CLREMAT_OK)
        return st;
    L->frozen = sc->frozen || !trainable;
    if (tv) {
        int e;
        if (!json_is_string(tv))
            return bad_field(ld, obj, what, "tie", "the name of an earlier embedding layer");
        e = clremat_graph_find_layer(ld->g, json_string_value(tv));
        if (e < 0 || ld->g->layers[e].type != CLREMAT_EMBEDDING)
            return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, "tie"), "%s: \"tie\" names '%.64s', which is not an "
                         "earlier embedding layer (the full name, block path included)", what,
                         json_string_value(tv));
        L->tie = e + 1;
    }
    if (lv) {
        char w[CLREMAT_NAME_LEN + 32];
        if (!json_is_object(lv))
            return bad_field(ld, obj, what, "lora", "an object {\"rank\": R, \"alpha\": A}");
        snprintf(w, sizeof w, "%s: lora", what);
        if ((st = check_fields(ld, lv, w, lora_fields)) != CLREMAT_OK ||
            (st = get_int(ld, lv, w, "rank", 1, 1, 1 << 20, 0, "a positive integer", &r)) != CLREMAT_OK)
            return st;
        L->lora_rank = (int)r;
        if ((st = get_num(ld, lv, w, "alpha", 0, 0.0, 1, 1e6, 0, (double)r, "a number with 0 < alpha <= 1e6",
                          &L->lora_alpha)) != CLREMAT_OK)
            return st;
    }
    return CLREMAT_OK;
}

/* Where graph errors about layer index l point: the layer's declaration. */
static clremat_jpos layer_pos(const loader *ld, int l)
{
    clremat_jpos p = {0, 0};
    if (l >= 0 && l < ld->g->n_layers) {
        p.line = ld->g->layers[l].src_line;
        p.col = ld->g->layers[l].src_col;
    }
    return p;
}

static int build_layer(loader *ld, const json_t *obj, scope *sc)
{
    json_t *tv = json_object_get(obj, "type"), *nv = json_object_get(obj, "name"), *iv;
    char full[CLREMAT_NAME_LEN], what[CLREMAT_NAME_LEN + 16], autoname[48], expect[512], where[4200];
    const char *name;
    clremat_layer L;
    clremat_jpos here = opos(ld, obj);
    int t, st, self, other;

    snprintf(expect, sizeof expect, "a layer needs a type, one of: %s; a block object has \"block\"", type_list);
    if (!tv)
        return missing(ld, obj, "layer", "type", expect);
    snprintf(expect, sizeof expect, "a layer type, one of: %s", type_list);
    if (!json_is_string(tv))
        return bad_field(ld, obj, "layer", "type", expect);
    t = !strcmp(json_string_value(tv), "flatten") ? TYPE_FLATTEN : clremat_layer_type_from_name(json_string_value(tv));
    if (t < 0)
        return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, "type"), "unknown layer type '%.64s'; known types: %s",
                     json_string_value(tv), type_list);
    if (nv) {
        if (!json_is_string(nv) || !valid_name(json_string_value(nv)))
            return bad_field(ld, obj, "layer", "name",
                             "a non-empty string of letters, digits, '_', '-' and '.'");
        name = json_string_value(nv);
    } else {
        int k = sc->counters[t]++;
        const char *tn = t == TYPE_FLATTEN ? "flatten" : clremat_layer_type_name((clremat_layer_type)t);
        if (k == 0)
            snprintf(autoname, sizeof autoname, "%s", tn);
        else
            snprintf(autoname, sizeof autoname, "%s_%d", tn, k);
        name = autoname;
    }
    if (join_name(sc->path, name, full) < 0)
        return lfail(ld, CLREMAT_ERR_PARSE, nv ? mpos(ld, obj, "name") : here,
                     "layer '%s%s%.64s%s': the full name (block path included) is longer than %d characters",
                     sc->path, sc->path[0] ? "/" : "", name, strlen(name) > 64 ? "..." : "", CLREMAT_NAME_LEN - 1);
    snprintf(what, sizeof what, "layer '%s'", full);
    if ((st = check_fields(ld, obj, what, type_fields(t))) != CLREMAT_OK)
        return st;
    if (++ld->total > MAX_LAYERS)
        return lfail(ld, CLREMAT_ERR_PARSE, here, "%s: the model has more than %d layers (repeats expanded)", what,
                     MAX_LAYERS);
    if (ld->pass == 1)
        return push_name(ld, full) ? lfail(ld, CLREMAT_ERR_OUT_OF_MEMORY, here, "out of host memory") : CLREMAT_OK;

    /* pass 2: the layer's own index is the number of layers added so far */
    self = ld->g->n_layers;
    if ((other = name_lookup(ld, full)) >= 0 && other != self)
        return lfail(ld, CLREMAT_ERR_PARSE, nv ? mpos(ld, obj, "name") : here,
                     "duplicate layer name '%s': already defined at %s", full,
                     at(ld, layer_pos(ld, other), where, sizeof where));
    if ((other = clremat_graph_find_block(ld->g, full)) >= 0)
        return lfail(ld, CLREMAT_ERR_PARSE, nv ? mpos(ld, obj, "name") : here,
                     "duplicate name '%s': already used by the block defined at %s", full,
                     at(ld, ld->block_pos[other], where, sizeof where));
    memset(&L, 0, sizeof L);
    snprintf(L.name, sizeof L.name, "%s", full);
    L.type = t == TYPE_FLATTEN ? CLREMAT_RESHAPE : (clremat_layer_type)t;
    L.src_line = here.line;
    L.src_col = here.col;
    if ((st = read_settings(ld, obj, what, t, &L)) != CLREMAT_OK ||
        (st = read_llm_settings(ld, obj, what, sc, &L)) != CLREMAT_OK)
        return st;
    iv = json_object_get(obj, "inputs");
    {
        int want = L.type == CLREMAT_ADD || L.type == CLREMAT_MULTIPLY ? 2 : 1;
        char ex[96];
        snprintf(ex, sizeof ex, "an array of %d layer name%s (strings)", want, want == 1 ? "" : "s");
        if (L.type == CLREMAT_CONCAT) { /* 2 .. CLREMAT_MAX_INPUTS inputs */
            snprintf(ex, sizeof ex, "an array of 2 to %d layer names (strings)", CLREMAT_MAX_INPUTS);
            want = iv && json_is_array(iv) && json_array_size(iv) >= 2 && json_array_size(iv) <= CLREMAT_MAX_INPUTS
                       ? (int)json_array_size(iv) : 2;
        }
        if (!iv && want >= 2)
            return missing(ld, obj, what, "inputs", ex);
        if (iv) {
            if (!json_is_array(iv) || json_array_size(iv) != (size_t)want)
                return bad_field(ld, obj, what, "inputs", ex);
            for (int i = 0; i < want; i++) {
                if (!json_is_string(json_array_get(iv, (size_t)i)))
                    return bad_field(ld, obj, what, "inputs", ex);
                if ((st = resolve_input(ld, sc, iv, (size_t)i, full, self, &L.inputs[i])) != CLREMAT_OK)
                    return st;
            }
            L.n_inputs = want;
        }
    }
    if ((st = clremat_graph_add_layer(ld->g, &L)) != CLREMAT_OK)
        return lfail(ld, st == CLREMAT_ERR_INVALID_ARGUMENT ? CLREMAT_ERR_PARSE : st,
                     iv ? mpos(ld, obj, "inputs") : here, "%s", ld->g->error);
    return CLREMAT_OK;
}

/* ---------------------------------------------------------------- blocks */

static int build_block(loader *ld, const json_t *obj, scope *sc, int depth)
{
    static const char *const fields[] = {"block", "repeat", "remat", "layers", "trainable", NULL};
    json_t *nv = json_object_get(obj, "block"), *lv = json_object_get(obj, "layers");
    char what[CLREMAT_NAME_LEN + 16], expect[64], where[4200];
    int64_t repeat = 1;
    int remat = 0, trainable = 1, st, has_repeat = json_object_get(obj, "repeat") != NULL;

    if (!json_is_string(nv) || !valid_name(json_string_value(nv)))
        return bad_field(ld, obj, "block", "block", "the block's name: a non-empty string of letters, digits, "
                         "'_', '-' and '.'");
    snprintf(what, sizeof what, "block '%s'", json_string_value(nv));
    if ((st = check_fields(ld, obj, what, fields)) != CLREMAT_OK)
        return st;
    snprintf(expect, sizeof expect, "an integer from 1 to %d", MAX_REPEAT);
    if ((st = get_int(ld, obj, what, "repeat", 0, 1, MAX_REPEAT, 1, expect, &repeat)) != CLREMAT_OK ||
        (st = get_bool(ld, obj, what, "remat", 0, &remat)) != CLREMAT_OK ||
        (st = get_bool(ld, obj, what, "trainable", 1, &trainable)) != CLREMAT_OK)
        return st;
    if (!lv)
        return missing(ld, obj, what, "layers", "a non-empty array of layers and blocks");
    if (!json_is_array(lv))
        return bad_field(ld, obj, what, "layers", "a non-empty array of layers and blocks");
    if (json_array_size(lv) == 0)
        return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, "layers"), "%s is empty: 'layers' must hold at least "
                     "one layer", what);
    if (depth >= MAX_BLOCK_DEPTH)
        return lfail(ld, CLREMAT_ERR_PARSE, opos(ld, obj), "%s: blocks are nested more than %d deep", what,
                     MAX_BLOCK_DEPTH);
    for (int64_t r = 0; r < repeat; r++) {
        char inst[CLREMAT_NAME_LEN + 16], full[CLREMAT_NAME_LEN];
        scope child;
        int other;
        if (has_repeat)
            snprintf(inst, sizeof inst, "%s_%lld", json_string_value(nv), (long long)r);
        else
            snprintf(inst, sizeof inst, "%s", json_string_value(nv));
        if (strlen(inst) >= CLREMAT_NAME_LEN || join_name(sc->path, inst, full) < 0)
            return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, "block"), "%s: the full block name (enclosing "
                         "blocks and repeat suffix included) is longer than %d characters", what,
                         CLREMAT_NAME_LEN - 1);
        memset(&child, 0, sizeof child);
        child.path = full;
        child.parent = sc;
        child.frozen = sc->frozen || !trainable;
        if (ld->pass == 2) {
            clremat_graph *g = ld->g;
            if ((other = clremat_graph_find_block(g, full)) >= 0)
                return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, "block"), "duplicate block name '%s': "
                             "already defined at %s", full, at(ld, ld->block_pos[other], where, sizeof where));
            if ((other = name_lookup(ld, full)) >= 0 && other < g->n_layers)
                return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, "block"), "duplicate name '%s': already used "
                             "by the layer defined at %s", full, at(ld, layer_pos(ld, other), where, sizeof where));
            if (other >= 0)
                return lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, obj, "block"), "duplicate name '%s': also used by "
                             "a layer defined later in the file", full);
            if (g->n_blocks == ld->cap_block_pos) {
                int cap = ld->cap_block_pos ? 2 * ld->cap_block_pos : 16;
                clremat_jpos *nb = realloc(ld->block_pos, (size_t)cap * sizeof *nb);
                if (!nb)
                    return lfail(ld, CLREMAT_ERR_OUT_OF_MEMORY, opos(ld, obj), "out of host memory");
                ld->block_pos = nb;
                ld->cap_block_pos = cap;
            }
            ld->block_pos[g->n_blocks] = opos(ld, obj);
            child.block_input = g->n_layers - 1;
            if ((st = clremat_graph_begin_block(g, full, remat)) != CLREMAT_OK)
                return lfail(ld, st == CLREMAT_ERR_INVALID_ARGUMENT ? CLREMAT_ERR_PARSE : st,
                             mpos(ld, obj, "block"), "%s", g->error);
        }
        if ((st = build_list(ld, lv, &child, depth + 1)) != CLREMAT_OK)
            return st;
        if (ld->pass == 2 && (st = clremat_graph_end_block(ld->g)) != CLREMAT_OK)
            return lfail(ld, st == CLREMAT_ERR_INVALID_ARGUMENT ? CLREMAT_ERR_PARSE : st, opos(ld, obj), "%s",
                         ld->g->error);
    }
    return CLREMAT_OK;
}

static int build_list(loader *ld, const json_t *arr, scope *sc, int depth)
{
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *item = json_array_get(arr, i);
        char b[96];
        int st;
        if (!json_is_object(item))
            return lfail(ld, CLREMAT_ERR_PARSE, clremat_json_elem_pos(ld->ix, arr, i),
                         "expected a layer object (with \"type\") or a block object (with \"block\"), got %s",
                         got(item, b, sizeof b));
        st = json_object_get(item, "block") ? build_block(ld, item, sc, depth) : build_layer(ld, item, sc);
        if (st != CLREMAT_OK)
            return st;
    }
    return CLREMAT_OK;
}

/* ------------------------------------------------------------------ model */

/* Position of the layer a graph error message names ("layer 'x'..."), else fallback. */
static clremat_jpos error_pos(const loader *ld, clremat_jpos fallback)
{
    const char *m = strstr(ld->g->error, "layer '");
    char name[CLREMAT_NAME_LEN];
    size_t n;
    int l;
    if (!m)
        return fallback;
    m += strlen("layer '");
    n = strcspn(m, "'");
    if (n >= sizeof name)
        return fallback;
    memcpy(name, m, n);
    name[n] = '\0';
    l = clremat_graph_find_layer(ld->g, name);
    return l >= 0 && ld->g->layers[l].src_line > 0 ? layer_pos(ld, l) : fallback;
}

static int read_input(const loader *ld, const json_t *root, clremat_shape *shape, int *ids)
{
    static const char *const fields[] = {"shape", "dtype", NULL};
    json_t *in = json_object_get(root, "input"), *dt;
    int st;
    if (!in)
        return missing(ld, root, "model", "input", "an object such as {\"shape\": [64]}");
    if (!json_is_object(in))
        return bad_field(ld, root, "model", "input", "an object such as {\"shape\": [64]}");
    if ((st = check_fields(ld, in, "input", fields)) != CLREMAT_OK ||
        (st = get_shape(ld, in, "input", "shape", 0, shape)) != CLREMAT_OK)
        return st;
    dt = json_object_get(in, "dtype");
    *ids = 0;
    if (dt) {
        if (!json_is_string(dt) || (strcmp(json_string_value(dt), "float32") && strcmp(json_string_value(dt), "int32")))
            return bad_field(ld, in, "input", "dtype", "\"float32\" (features) or \"int32\" (token ids)");
        *ids = !strcmp(json_string_value(dt), "int32");
    }
    return CLREMAT_OK;
}

static int load_root(loader *ld, const json_t *root, clremat_graph **out)
{
    static const char *const fields[] = {"name", "description", "input", "layers", "precision", "task", NULL};
    json_t *nv = json_object_get(root, "name"), *lv = json_object_get(root, "layers"), *dv,
           *pv = json_object_get(root, "precision"), *tv = json_object_get(root, "task");
    clremat_shape shape;
    int ids, st, precision = CLREMAT_PREC_FLOAT32;
    scope top;

    if ((st = check_fields(ld, root, "model", fields)) != CLREMAT_OK)
        return st;
    if (nv && (!json_is_string(nv) || !json_string_value(nv)[0] || strlen(json_string_value(nv)) >= CLREMAT_NAME_LEN))
        return bad_field(ld, root, "model", "name", "a non-empty string of at most 63 characters");
    if ((dv = json_object_get(root, "description")) && !json_is_string(dv))
        return bad_field(ld, root, "model", "description", "a string");
    if (pv && (!json_is_string(pv) || (precision = clremat_precision_from_name(json_string_value(pv))) < 0))
        return bad_field(ld, root, "model", "precision", "\"float32\", \"mixed_float16\" or \"mixed_bfloat16\"");
    if (tv && (!json_is_string(tv) || !json_string_value(tv)[0] || strlen(json_string_value(tv)) >= 16))
        return bad_field(ld, root, "model", "task", "the name of a synthetic task, such as \"language\"");
    if ((st = read_input(ld, root, &shape, &ids)) != CLREMAT_OK)
        return st;
    if (!lv)
        return missing(ld, root, "model", "layers", "a non-empty array of layers and blocks");
    if (!json_is_array(lv) || json_array_size(lv) == 0)
        return bad_field(ld, root, "model", "layers", "a non-empty array of layers and blocks");

    /* pass 1: names only; its errors come again, with more detail, in pass 2 */
    memset(&top, 0, sizeof top);
    top.path = "";
    top.block_input = -2;
    ld->pass = 1;
    ld->g = NULL;
    (void)build_list(ld, lv, &top, 0);
    if (build_hash(ld))
        return lfail(ld, CLREMAT_ERR_OUT_OF_MEMORY, opos(ld, root), "out of host memory");

    memset(&top, 0, sizeof top);
    top.path = "";
    top.block_input = -2;
    ld->pass = 2;
    ld->total = 0;
    ld->g = clremat_graph_new(nv ? json_string_value(nv) : "model");
    if (!ld->g)
        return lfail(ld, CLREMAT_ERR_OUT_OF_MEMORY, opos(ld, root), "out of host memory");
    if ((st = clremat_graph_set_input(ld->g, &shape, ids)) != CLREMAT_OK)
        st = lfail(ld, st, mpos(ld, json_object_get(root, "input"), "shape"), "%s", ld->g->error);
    else if ((st = build_list(ld, lv, &top, 0)) == CLREMAT_OK && (st = clremat_graph_finalize(ld->g)) != CLREMAT_OK)
        st = lfail(ld, st == CLREMAT_ERR_INVALID_ARGUMENT ? CLREMAT_ERR_PARSE : st,
                   error_pos(ld, mpos(ld, root, "layers")), "%s", ld->g->error);
    /* the task must be known and fit the model as built */
    if (st == CLREMAT_OK && tv && (st = clremat_data_task_check(ld->g, json_string_value(tv))) != CLREMAT_OK)
        st = lfail(ld, CLREMAT_ERR_PARSE, mpos(ld, root, "task"), "model: field 'task': %s", clremat_last_error());
    if (st != CLREMAT_OK) {
        clremat_graph_free(ld->g);
        ld->g = NULL;
        return st;
    }
    ld->g->precision = precision;
    if (tv)
        snprintf(ld->g->task, sizeof ld->g->task, "%s", json_string_value(tv));
    *out = ld->g;
    return CLREMAT_OK;
}

/* Where a syntax error is. jansson gives the position just past the token it
 * stopped at ("... near 'TOKEN'"); point at the token's start instead, like
 * every other message, when the token can be found there. */
static clremat_jpos syntax_error_pos(const char *text, size_t len, const json_error_t *err)
{
    clremat_jpos p = {err->line > 0 ? err->line : 1, err->column > 0 ? err->column : 1};
    const char *near = strstr(err->text, "near '");
    size_t n, start, pos = err->position > 0 ? (size_t)err->position : 0;
    if (!near || pos > len)
        return p;
    near += strlen("near '");
    n = strlen(near);
    if (n < 2 || near[n - 1] != '\'')
        return p;
    n--; /* without the closing quote */
    if (n > pos || memcmp(text + pos - n, near, n) != 0)
        return p;
    start = pos - n;
    p.line = 1;
    p.col = 1;
    for (size_t i = 0; i < start; i++) {
        if (text[i] == '\n') {
            p.line++;
            p.col = 1;
        } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
            p.col++;
        }
    }
    return p;
}

/* Parses text[0..len) named origin (generated: made from origin, see
 * loader). */
static int load_buffer(const char *text, size_t len, const char *origin, int generated, clremat_graph **out)
{
    loader ld;
    json_error_t err;
    json_t *root;
    clremat_json_index *ix = NULL;
    int st;

    memset(&ld, 0, sizeof ld);
    ld.origin = origin;
    ld.generated = generated;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        clremat_jpos p = syntax_error_pos(text, len, &err);
        if (generated)
            return clremat_set_error(CLREMAT_ERR_INTERNAL, "%s, as a clremat model: JSON syntax error: %s", origin,
                                     err.text);
        clremat_error_set_pos(origin, p.line, p.col);
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s:%d:%d: JSON syntax error: %s", origin, p.line, p.col,
                                 err.text);
    }
    ix = clremat_json_index_new(text, len, root);
    if (!ix) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", origin);
        goto fail;
    }
    ld.ix = ix;
    if (!json_is_object(root)) {
        char b[96];
        st = lfail(&ld, CLREMAT_ERR_PARSE, (clremat_jpos){1, 1}, "the model must be a JSON object "
                   "{\"name\", \"input\", \"layers\"}, got %s", got(root, b, sizeof b));
        goto fail;
    }
    st = load_root(&ld, root, out);
fail:
    free(ld.names);
    free(ld.hash);
    free(ld.block_pos);
    clremat_json_index_free(ix);
    json_decref(root);
    return st;
}

int clremat_graph_load_string(const char *json, const char *origin, clremat_graph **out)
{
    if (!out)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_load_string: NULL output");
    *out = NULL;
    if (!json)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_load_string: NULL text");
    return load_buffer(json, strlen(json), origin ? origin : "<string>", 0, out);
}

int clremat_graph_load_generated(const char *json, const char *source, clremat_graph **out)
{
    if (!out)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_load_generated: NULL output");
    *out = NULL;
    if (!json || !source)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_load_generated: NULL text or source");
    return load_buffer(json, strlen(json), source, 1, out);
}

int clremat_graph_load(const char *path, clremat_graph **out)
{
    FILE *f = NULL;
    char *buf = NULL;
    uint64_t size;
    int st;
    if (!out)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_load: NULL output");
    *out = NULL;
    if (!path)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "graph_load: NULL path");
    if ((st = clremat_open_regular(path, "model file", &f, &size)) != CLREMAT_OK)
        return st;
    if (size > (uint64_t)MAX_FILE_BYTES) {
        st = clremat_set_error(CLREMAT_ERR_IO, "%s: model file is %llu bytes, more than the %ld allowed", path,
                               (unsigned long long)size, MAX_FILE_BYTES);
        goto fail;
    }
    if (!(buf = malloc((size_t)size + 1))) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
        goto fail;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        st = clremat_set_error(CLREMAT_ERR_IO, "%s: read error: %s", path, ferror(f) ? strerror(errno) :
                               "file changed size");
        goto fail;
    }
    buf[size] = '\0';
    st = load_buffer(buf, (size_t)size, path, 0, out);
fail:
    free(buf);
    fclose(f);
    return st;
}
