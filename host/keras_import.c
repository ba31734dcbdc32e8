/* keras_import.c: walks a Keras 3 model config (Sequential or Functional,
 * nested models as named blocks) and builds the clremat model JSON through
 * the class table of keras_layers.c; maps the compile config's loss and
 * optimizer; copies the Keras variables into clremat's parameter layout. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "atomic_file.h"
#include "error.h"
#include "keras_map.h"

/* A Keras layer name and the clremat reference to its output. */
typedef struct {
    char keras[CLREMAT_NAME_LEN * 2];
    char ref[CLREMAT_NAME_LEN * 2];
} name_ref;

typedef struct {
    clremat_keras_model *m;
    json_t *input;          /* the clremat "input" object */
    name_ref *refs;
    int n_refs, cap_refs;
    int frozen;             /* depth of enclosing sub-models with trainable=False */
    char policy[32];        /* the mixed dtype policy of the model ("": float32 so far) */
    char policy_layer[CLREMAT_NAME_LEN * 2], f32_layer[CLREMAT_NAME_LEN * 2]; /* first layer of each */
    char f32_class[64];
} walk;

static int add_ref(walk *w, const char *keras, const char *ref)
{
    if (w->n_refs == w->cap_refs) {
        int cap = w->cap_refs ? 2 * w->cap_refs : 32;
        void *p = realloc(w->refs, sizeof *w->refs * (size_t)cap);
        if (!p)
            return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
        w->refs = p;
        w->cap_refs = cap;
    }
    snprintf(w->refs[w->n_refs].keras, sizeof w->refs[0].keras, "%s", keras);
    snprintf(w->refs[w->n_refs].ref, sizeof w->refs[0].ref, "%s", ref);
    w->n_refs++;
    return CLREMAT_OK;
}

/* Looks name up among the refs of scope base (refs added since base). */
static const char *find_ref(const walk *w, int base, const char *keras)
{
    for (int i = w->n_refs - 1; i >= base; i--)
        if (strcmp(w->refs[i].keras, keras) == 0)
            return w->refs[i].ref;
    return NULL;
}

/* Keras's naming.to_snake_case of a class name (the weights file names
 * layers by class: Dense -> dense, MultiHeadAttention -> multi_head_attention,
 * Conv2D -> conv2d): its two regular expressions, "(.)([A-Z][a-z]+)" ->
 * "\1_\2" then "([a-z])([A-Z])" -> "\1_\2", then lower case. */
static void snake(const char *cls, char *out, size_t len)
{
    char a[128];
    size_t n = 0, o = 0, i = 0, L = strlen(cls);
    while (i < L && n + 2 < sizeof a) { /* pass 1, leftmost non-overlapping matches */
        if (i + 2 < L && isupper((unsigned char)cls[i + 1]) && islower((unsigned char)cls[i + 2])) {
            size_t e = i + 2;
            while (e < L && islower((unsigned char)cls[e]))
                e++;
            a[n++] = cls[i];
            a[n++] = '_';
            for (size_t k = i + 1; k < e && n + 1 < sizeof a; k++)
                a[n++] = cls[k];
            i = e;
        } else {
            a[n++] = cls[i++];
        }
    }
    a[n] = 0;
    for (i = 0; i < n && o + 2 < len; i++) { /* pass 2 */
        out[o++] = (char)tolower((unsigned char)a[i]);
        if (islower((unsigned char)a[i]) && i + 1 < n && isupper((unsigned char)a[i + 1]) && o + 2 < len) {
            out[o++] = '_';
            out[o++] = (char)tolower((unsigned char)a[++i]);
        }
    }
    out[o] = 0;
}

/* Snake-case names used so far in one container, with Keras's counters. */
typedef struct {
    char names[512][64];
    int counts[512];
    int n;
} h5names;

static void h5_name(h5names *h, const char *cls, char *out, size_t len)
{
    char base[64];
    snake(cls, base, sizeof base);
    for (int i = 0; i < h->n; i++)
        if (strcmp(h->names[i], base) == 0) {
            snprintf(out, len, "%s_%d", base, ++h->counts[i]);
            return;
        }
    if (h->n < 512) {
        snprintf(h->names[h->n], sizeof h->names[0], "%s", base);
        h->counts[h->n++] = 0;
    }
    snprintf(out, len, "%s", base);
}

/* THE place where a layer's Keras dtype policy is mapped (every layer's
 * config passes here, nested models' layers included). "float32" (or none)
 * is clremat's arithmetic. Mixed precision ("mixed_float16",
 * "mixed_bfloat16": float16/bfloat16 compute, float32 variables) is being
 * built in clremat separately; when it lands, map those two names here to
 * the layer's clremat precision field, and nowhere else. Until then they,
 * and every other policy (float16, bfloat16, float64, int8 quantized ...),
 * are refused naming the policy. */
/* A layer's dtype policy. clremat's precision is the model's (its
 * "precision" field): Keras's mixed_float16 and mixed_bfloat16 map to it
 * when every layer has the same one (noted in w, checked by
 * policy_finish); float32 layers beside them, other policies, are
 * refused. */
static int dtype_policy(walk *w, const char *name, const char *cls, json_t *cfg)
{
    const clremat_keras_model *m = w->m;
    json_t *d = json_object_get(cfg, "dtype");
    const char *s = json_is_string(d) ? json_string_value(d)
                                      : json_string_value(json_object_get(json_object_get(d, "config"), "name"));
    if (!d || json_is_null(d) || (s && strcmp(s, "float32") == 0)) {
        if (!w->f32_layer[0]) {
            snprintf(w->f32_layer, sizeof w->f32_layer, "%s", name);
            snprintf(w->f32_class, sizeof w->f32_class, "%s", cls);
        }
        return CLREMAT_OK;
    }
    if (s && (strcmp(s, "mixed_float16") == 0 || strcmp(s, "mixed_bfloat16") == 0)) {
        if (!w->policy[0]) {
            snprintf(w->policy, sizeof w->policy, "%s", s);
            snprintf(w->policy_layer, sizeof w->policy_layer, "%s", name);
        } else if (strcmp(w->policy, s) != 0)
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s' (%s): dtype policy '%s' differs from layer "
                                     "'%s''s '%s': clremat's precision is one per model, refused, not approximated",
                                     m->origin, name, cls, s, w->policy_layer, w->policy);
        return CLREMAT_OK;
    }
    return clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s' (%s): dtype policy '%s' is not supported (clremat "
                             "imports float32 models), refused, not approximated", m->origin, name, cls,
                             s ? s : "(not a name)");
}

static int set_input(walk *w, const char *name, json_t *cfg)
{
    json_t *bs = json_object_get(cfg, "batch_shape"), *shape;
    const char *dt = json_string_value(json_object_get(cfg, "dtype"));
    if (w->input)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: input '%s': the model has more than one input; clremat "
                                 "models take one", w->m->origin, name);
    if (!json_is_array(bs) || json_array_size(bs) < 2 || json_array_size(bs) > CLREMAT_MAX_RANK + 1)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: input '%s' (InputLayer): batch_shape must be [null, d1, ...] "
                                 "with 1 to %d known dimensions", w->m->origin, name, CLREMAT_MAX_RANK);
    shape = json_array();
    for (size_t i = 1; i < json_array_size(bs); i++) {
        json_t *d = json_array_get(bs, i);
        if (!json_is_integer(d) || json_integer_value(d) < 1) {
            json_decref(shape);
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: input '%s' (InputLayer): dimension %zu is not a fixed "
                                     "positive size (clremat needs every per-sample dimension)", w->m->origin, name, i);
        }
        json_array_append(shape, d);
    }
    w->input = json_pack("{so}", "shape", shape);
    if (dt && (strcmp(dt, "int32") == 0 || strcmp(dt, "int64") == 0))
        json_object_set_new(w->input, "dtype", json_string("int32"));
    else if (dt && strcmp(dt, "float32") != 0) {
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: input '%s' (InputLayer): dtype '%s' is not supported "
                                 "(float32, or int32/int64 token ids)", w->m->origin, name, dt);
    }
    return CLREMAT_OK;
}

/* The inbound tensors of a Functional layer: keras_history names, flattened. */
static int collect_args(json_t *a, const char **names, int *n, int max)
{
    if (json_is_array(a)) {
        size_t i;
        json_t *e;
        json_array_foreach(a, i, e)
        {
            int st = collect_args(e, names, n, max);
            if (st)
                return st; /* -2 stays -2: a shared layer's call, named as such */
        }
        return 0;
    }
    if (json_is_object(a) && json_is_string(json_object_get(a, "class_name")) &&
        strcmp(json_string_value(json_object_get(a, "class_name")), "__keras_tensor__") == 0) {
        json_t *h = json_object_get(json_object_get(a, "config"), "keras_history");
        if (!json_is_array(h) || !json_is_string(json_array_get(h, 0)) || *n >= max)
            return -1;
        if (json_integer_value(json_array_get(h, 1)) != 0 || json_integer_value(json_array_get(h, 2)) != 0)
            return -2;
        names[(*n)++] = json_string_value(json_array_get(h, 0));
        return 0;
    }
    return json_is_null(a) ? 0 : -1;
}

static int walk_model(walk *w, json_t *model, const char *path, const char *h5, json_t *out, int top,
                      const char *block_in, char *last_ref, size_t last_len);

static int is_model_class(const char *cls)
{
    return strcmp(cls, "Sequential") == 0 || strcmp(cls, "Functional") == 0 || strcmp(cls, "Model") == 0;
}

/* One layer entry of a model config. */
static int walk_layer(walk *w, json_t *entry, int seq, int top, const char *path, const char *h5, h5names *hn, int base,
                      const char *block_in, json_t *out, char *last_ref, size_t last_len)
{
    const char *cls = json_string_value(json_object_get(entry, "class_name"));
    json_t *cfg = json_object_get(entry, "config");
    const char *name = json_string_value(json_object_get(cfg, "name"));
    const char *ins[8];
    char full[CLREMAT_NAME_LEN * 2], h5me[128], h5pre[512];
    json_t *nodes = json_object_get(entry, "inbound_nodes"), *kwargs = NULL;
    int n_in = 0, st, frozen;

    if (!cls || !name)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: a layer entry has no class_name or config.name", w->m->origin);
    if (strcmp(cls, "InputLayer") == 0) {
        if (!seq)
            h5_name(hn, cls, h5me, sizeof h5me);
        if (top && (st = set_input(w, name, cfg)))
            return st;
        return add_ref(w, name, top ? "@input" : block_in);
    }
    h5_name(hn, cls, h5me, sizeof h5me);
    snprintf(full, sizeof full, "%s%s", path, name);
    snprintf(h5pre, sizeof h5pre, "%slayers/%s/", h5, h5me);
    if ((st = dtype_policy(w, name, cls, cfg)))
        return st;
    frozen = json_is_false(json_object_get(cfg, "trainable"));
    /* Keras runs a frozen BatchNormalization (or one inside a frozen model)
     * in inference mode, normalizing with its moving statistics; clremat's
     * batchnorm always trains with batch statistics, so that is refused. */
    if (strcmp(cls, "BatchNormalization") == 0 && (frozen || w->frozen))
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s' (%s): trainable=False%s is not supported: Keras "
                                 "then normalizes with the moving statistics (inference mode), clremat's batchnorm "
                                 "trains with batch statistics", w->m->origin, name, cls,
                                 frozen ? "" : " (of an enclosing model)");
    if (seq) {
        ins[n_in++] = last_ref[0] ? last_ref : (top ? "@input" : block_in);
    } else {
        const char *names[8];
        int nn = 0;
        json_t *node = json_array_get(nodes, 0);
        if (!json_is_array(nodes) || json_array_size(nodes) != 1)
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s' (%s): called %zu times; clremat maps a layer "
                                     "called exactly once (shared layers are not supported)", w->m->origin, name, cls,
                                     json_is_array(nodes) ? json_array_size(nodes) : 0);
        kwargs = json_object_get(node, "kwargs");
        if ((st = collect_args(json_object_get(node, "args"), names, &nn, 8)))
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s' (%s): %s", w->m->origin, name, cls,
                                     st == -2 ? "reads a tensor of a shared layer or a second output (not supported)"
                                              : "its inbound_nodes are not a list of Keras tensors");
        for (int i = 0; i < nn; i++) {
            if (!(ins[n_in++] = find_ref(w, base, names[i])))
                return clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s' (%s): input '%s' is not a layer listed "
                                         "before it", w->m->origin, name, cls, names[i]);
        }
    }
    if (is_model_class(cls)) {
        json_t *blk, *arr = json_array();
        char sub_path[CLREMAT_NAME_LEN * 2 + 2], inner_last[CLREMAT_NAME_LEN * 2] = "";
        const char *expect = last_ref[0] ? last_ref : (top ? "@input" : block_in);
        if (n_in != 1 || strcmp(ins[0], expect) != 0) {
            json_decref(arr);
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: nested model '%s' (%s): it must read the one tensor "
                                     "produced just before it (a clremat block reads the layer before it)",
                                     w->m->origin, name, cls);
        }
        snprintf(sub_path, sizeof sub_path, "%s/", full);
        blk = json_pack("{ssso}", "block", name, "layers", arr);
        if (frozen)
            json_object_set_new(blk, "trainable", json_false());
        w->frozen += frozen;
        st = walk_model(w, entry, sub_path, h5pre, arr, 0, "@block_input", inner_last, sizeof inner_last);
        w->frozen -= frozen;
        if (st) {
            json_decref(blk);
            return st;
        }
        json_array_append_new(out, blk);
        snprintf(last_ref, last_len, "%s", inner_last);
        return add_ref(w, name, inner_last);
    }
    {
        clremat_keras_map_fn fn = clremat_keras_mapping(cls);
        clremat_keras_call c;
        if (!fn)
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s' (%s): class not supported; supported: %s",
                                     w->m->origin, name, cls, clremat_keras_supported());
        memset(&c, 0, sizeof c);
        c.m = w->m;
        c.cls = cls;
        c.name = name;
        c.config = cfg;
        c.kwargs = kwargs;
        c.build = json_object_get(entry, "build_config");
        c.full = full;
        c.h5 = h5pre;
        c.n_in = n_in;
        for (int i = 0; i < n_in; i++)
            c.in[i] = ins[i];
        c.out = json_pack("{ss}", "name", name);
        c.prev = last_ref[0] ? last_ref : (top ? "@input" : block_in);
        if ((st = fn(&c))) {
            json_decref(c.out);
            return st;
        }
        if (frozen) /* Keras's trainable=False: no gradient, no optimizer state, no update */
            json_object_set_new(c.out, "trainable", json_false());
        json_array_append_new(out, c.out);
        /* a class mapped to a block (SeparableConv2D) names its output */
        snprintf(last_ref, last_len, "%s", c.out_ref[0] ? c.out_ref : full);
        return add_ref(w, name, last_ref);
    }
}

static int walk_model(walk *w, json_t *model, const char *path, const char *h5, json_t *out, int top,
                      const char *block_in, char *last_ref, size_t last_len)
{
    const char *cls = json_string_value(json_object_get(model, "class_name"));
    json_t *cfg = json_object_get(model, "config"), *layers = json_object_get(cfg, "layers"), *e;
    int seq = cls && strcmp(cls, "Sequential") == 0, base = w->n_refs, st;
    h5names *hn;
    size_t i;

    if (!cls || !is_model_class(cls))
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the model's class '%s' is not supported (Sequential or "
                                 "Functional models; a subclassed Model has no layer graph in its config)",
                                 w->m->origin, cls ? cls : "?");
    if (!json_is_array(layers) || json_array_size(layers) == 0)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: model '%s' lists no layers", w->m->origin,
                                 json_string_value(json_object_get(cfg, "name")));
    if (!(hn = calloc(1, sizeof *hn)))
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    if (seq && top && json_is_string(json_object_get(json_array_get(layers, 0), "class_name")) &&
        strcmp(json_string_value(json_object_get(json_array_get(layers, 0), "class_name")), "InputLayer") != 0) {
        free(hn);
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the Sequential model has no InputLayer (build it with "
                                 "keras.Input(shape) first, so its input shape is in the file)", w->m->origin);
    }
    json_array_foreach(layers, i, e) {
        int before = w->m->n_vars;
        if ((st = walk_layer(w, e, seq, top, path, h5, hn, base, block_in, out, last_ref, last_len))) {
            free(hn);
            return st;
        }
        for (int v = before; top && v < w->m->n_vars; v++) /* the top-level layer owning them */
            snprintf(w->m->vars[v].owner, sizeof w->m->vars[v].owner, "%s",
                     json_string_value(json_object_get(json_object_get(e, "config"), "name")));
    }
    free(hn);
    if (!seq) {
        json_t *ol = json_object_get(cfg, "output_layers");
        const char *oname = json_string_value(json_array_get(json_array_get(ol, 0), 0));
        if (json_is_array(json_array_get(ol, 0)) == 0 && json_is_array(ol)) /* a single [name, 0, 0] */
            oname = json_string_value(json_array_get(ol, 0));
        const char *oref = oname ? find_ref(w, base, oname) : NULL;
        if (!oref || strcmp(oref, last_ref) != 0)
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: model '%s': its output must be one tensor, from the last "
                                     "layer listed (clremat models end with their output)", w->m->origin,
                                     json_string_value(json_object_get(cfg, "name")));
    }
    return CLREMAT_OK;
}

/* compile_config: loss and optimizer. */
static int map_loss(clremat_keras_model *m, json_t *loss, const char *override)
{
    const char *s = override ? override : json_string_value(loss);
    const char *cls = json_string_value(json_object_get(loss, "class_name"));
    json_t *lc = json_object_get(loss, "config");
    if (override && strcmp(override, "mse") != 0 && strcmp(override, "mean_squared_error") != 0 &&
        strcmp(override, "sparse_categorical_crossentropy_from_logits") != 0)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--loss %s: unknown loss; valid: mse, "
                                 "sparse_categorical_crossentropy_from_logits", override);
    /* --loss names the loss of a model saved without one; a compiled model's
     * own loss is not replaced behind the user's back */
    if (override && loss && !json_is_null(loss))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--loss %s: %s has a compile config with loss %s, "
                                 "which is the loss used; --loss applies only to a model saved without a compile "
                                 "config", override, m->origin,
                                 json_is_string(loss) ? json_string_value(loss) : cls ? cls : "(unnamed)");
    if (!override && !loss)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the model has no compile config, so no loss: save a compiled "
                                 "model (model.compile(loss=...)) or name the loss (--loss)", m->origin);
    if (s && (strcmp(s, "mse") == 0 || strcmp(s, "mean_squared_error") == 0))
        snprintf(m->loss, sizeof m->loss, "mse");
    else if (s && strcmp(s, "sparse_categorical_crossentropy_from_logits") == 0)
        snprintf(m->loss, sizeof m->loss, "softmax_cross_entropy");
    else if (cls && strcmp(cls, "MeanSquaredError") == 0)
        snprintf(m->loss, sizeof m->loss, "mse");
    else if (cls && strcmp(cls, "SparseCategoricalCrossentropy") == 0 && json_is_true(json_object_get(lc, "from_logits")) &&
             json_is_null(json_object_get(lc, "ignore_class")))
        snprintf(m->loss, sizeof m->loss, "softmax_cross_entropy");
    if (m->loss[0] && (!lc || !json_object_get(lc, "reduction") ||
                       (json_is_string(json_object_get(lc, "reduction")) &&
                        strcmp(json_string_value(json_object_get(lc, "reduction")), "sum_over_batch_size") == 0)))
        return CLREMAT_OK;
    m->loss[0] = 0;
    return clremat_set_error(CLREMAT_ERR_PARSE, "%s: loss %s is not supported; supported: "
                             "SparseCategoricalCrossentropy(from_logits=True) and MeanSquaredError (\"mse\"), reduction "
                             "sum_over_batch_size", m->origin, s ? s : cls ? cls : "?");
}

static int map_optimizer(clremat_keras_model *m, json_t *opt)
{
    const char *cls = json_string_value(json_object_get(opt, "class_name"));
    json_t *c = json_object_get(opt, "config"), *lr = json_object_get(c, "learning_rate");
    static const char *const nulls[] = {"clipnorm", "global_clipnorm", "clipvalue", "loss_scale_factor",
                                        "gradient_accumulation_steps", NULL};
    if (!opt || json_is_null(opt))
        return CLREMAT_OK;
    if (!cls || (strcmp(cls, "SGD") && strcmp(cls, "Adam") && strcmp(cls, "AdamW")))
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: optimizer '%s' is not supported; supported: SGD (momentum), "
                                 "Adam, AdamW", m->origin, cls ? cls : json_string_value(opt) ? json_string_value(opt) : "?");
    for (int i = 0; nulls[i]; i++)
        if (json_object_get(c, nulls[i]) && !json_is_null(json_object_get(c, nulls[i])))
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: optimizer %s: option '%s' is not supported", m->origin,
                                     cls, nulls[i]);
    if (json_is_true(json_object_get(c, "use_ema")) || json_is_true(json_object_get(c, "nesterov")) ||
        json_is_true(json_object_get(c, "amsgrad")))
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: optimizer %s: use_ema, nesterov and amsgrad are not "
                                 "supported", m->origin, cls);
    if (!json_is_number(lr))
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: optimizer %s: learning_rate must be a number (schedules "
                                 "are not supported)", m->origin, cls);
    if (strcmp(cls, "AdamW") && json_is_number(json_object_get(c, "weight_decay")) &&
        json_number_value(json_object_get(c, "weight_decay")) != 0)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: optimizer %s: weight_decay is supported with AdamW only",
                                 m->origin, cls);
    {
        /* the ranges clremat's optimizers take (clremat_opt_check), checked here so that the error names the file
         * and Keras's field: a rate of 0 or below would otherwise read as "not given" and train at the default.
         * The value is checked as the float it becomes (1e-50 is 0, 1e39 is infinite). */
        static const struct {
            const char *key;
            unsigned bit;
        } fields[] = {{"learning_rate", CLREMAT_OPT_SET_LR},   {"momentum", CLREMAT_OPT_SET_MOMENTUM},
                      {"beta_1", CLREMAT_OPT_SET_BETA1},       {"beta_2", CLREMAT_OPT_SET_BETA2},
                      {"epsilon", CLREMAT_OPT_SET_EPS},        {"weight_decay", CLREMAT_OPT_SET_WEIGHT_DECAY}};
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
            json_t *v = json_object_get(c, fields[i].key);
            if (!v || json_is_null(v))
                continue;
            if (!json_is_number(v))
                return clremat_set_error(CLREMAT_ERR_PARSE, "%s: compile_config: optimizer %s: %s must be a number",
                                         m->origin, cls, fields[i].key);
            if (clremat_opt_check(fields[i].bit, (float)json_number_value(v), fields[i].key))
                return clremat_set_error(CLREMAT_ERR_PARSE, "%s: compile_config: optimizer %s: %s", m->origin, cls,
                                         clremat_last_error());
        }
    }
    snprintf(m->optimizer, sizeof m->optimizer, "%s", strcmp(cls, "SGD") == 0 ? "sgd" : strcmp(cls, "Adam") == 0 ? "adam" : "adamw");
    m->lr = json_number_value(lr);
    m->momentum = json_number_value(json_object_get(c, "momentum"));
    m->weight_decay = json_number_value(json_object_get(c, "weight_decay"));
    m->beta1 = json_number_value(json_object_get(c, "beta_1"));
    m->beta2 = json_number_value(json_object_get(c, "beta_2"));
    m->epsilon = json_number_value(json_object_get(c, "epsilon"));
    return CLREMAT_OK;
}

/* Reads the whole regular file path (at most 1 GiB) into a malloc'd *out,
 * NUL-terminated, its size in *len (may be NULL); what names the file in
 * errors. */
static int read_whole(const char *path, const char *what, char **out, size_t *len)
{
    FILE *f;
    uint64_t size;
    int st;
    *out = NULL;
    if ((st = clremat_open_regular(path, what, &f, &size)))
        return st;
    if (size > ((uint64_t)1 << 30) || !(*out = malloc((size_t)size + 1))) {
        fclose(f);
        return clremat_set_error(CLREMAT_ERR_IO, "%s: %s too large (%llu bytes)", path, what, (unsigned long long)size);
    }
    if (fread(*out, 1, (size_t)size, f) != size) {
        fclose(f);
        free(*out);
        *out = NULL;
        return clremat_set_error(CLREMAT_ERR_IO, "%s: reading the %s failed", path, what);
    }
    (*out)[size] = 0;
    if (len)
        *len = (size_t)size;
    fclose(f);
    return CLREMAT_OK;
}

int clremat_keras_read(const char *path, const char *weights_path, const char *loss, clremat_keras_model *out)
{
    size_t len = strlen(path);
    int archive = len > 6 && strcmp(path + len - 6, ".keras") == 0, st;
    json_t *root = NULL, *layers = NULL, *doc = NULL, *cc, *legacy_cc = NULL;
    char *training = NULL;
    json_error_t jerr;
    walk w;
    char last[CLREMAT_NAME_LEN * 2] = "";

    memset(out, 0, sizeof *out);
    memset(&w, 0, sizeof w);
    w.m = out;
    snprintf(out->origin, sizeof out->origin, "%s", path);
    snprintf(out->h5_origin, sizeof out->h5_origin, "%s", weights_path ? weights_path : path);
    if (weights_path && (archive || clremat_keras_is_legacy(path)))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--weights %s: %s is a %s, which holds its own "
                                 "weights; --weights applies only to a model.to_json() file", weights_path, path,
                                 archive ? "Keras archive (.keras)" : "legacy .h5 model");
    if (clremat_keras_is_legacy(path)) {
        if ((st = clremat_keras_legacy_open(path, out, &training)))
            goto fail;
    } else if (archive) {
        size_t n;
        if ((st = clremat_keras_zip_member(path, "config.json", (unsigned char **)&out->config_text, &n)) ||
            (st = clremat_keras_zip_member(path, "metadata.json", (unsigned char **)&out->metadata_text, &n)) ||
            (st = clremat_keras_zip_member(path, "model.weights.h5", &out->h5, &out->h5_len)))
            goto fail;
    } else {
        if ((st = read_whole(path, "Keras model JSON", &out->config_text, NULL)))
            goto fail;
        /* the size read, not the file's again: it may have changed since, or gone */
        if (weights_path &&
            (st = read_whole(weights_path, "Keras weights file", (char **)&out->h5, &out->h5_len)))
            goto fail;
    }
    if (!(root = json_loads(out->config_text, 0, &jerr))) {
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: config: %d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        goto fail;
    }
    cc = json_object_get(root, "compile_config");
    if (training) { /* a legacy file's training_config: loss, optimizer_config */
        json_t *tc = json_loads(training, 0, &jerr);
        if (!tc) {
            st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: training_config: %d:%d: %s", path, jerr.line, jerr.column,
                                   jerr.text);
            goto fail;
        }
        legacy_cc = json_pack("{sOsO}", "loss", json_object_get(tc, "loss") ?: json_null(), "optimizer",
                              json_object_get(tc, "optimizer_config") ?: json_null());
        json_decref(tc);
        if (json_is_null(json_object_get(legacy_cc, "loss")))
            json_object_del(legacy_cc, "loss");
        cc = legacy_cc;
    }
    if ((st = map_loss(out, json_object_get(cc, "loss"), loss)) ||
        (st = map_optimizer(out, json_object_get(cc, "optimizer"))))
        goto fail;
    layers = json_array();
    if ((st = walk_model(&w, root, "", "", layers, 1, "@input", last, sizeof last)))
        goto fail;
    if (!w.input) {
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: the model has no InputLayer", path);
        goto fail;
    }
    if (out->legacy && (st = clremat_keras_legacy_paths(out)))
        goto fail;
    if (w.policy[0] && w.f32_layer[0]) {
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s' (%s): dtype policy 'float32' in a model whose layer "
                               "'%s' has '%s': clremat's precision is one per model (16-bit activations everywhere, "
                               "float32 statistics and loss), so a float32 layer among mixed ones is refused, not "
                               "approximated; give every layer the same policy", path, w.f32_layer, w.f32_class,
                               w.policy_layer, w.policy);
        goto fail;
    }
    json_array_append_new(layers, json_pack("{sssss[s]}", "name", "loss", "type", out->loss, "inputs", last));
    doc = json_pack("{sssOsO}", "name",
                    json_string_value(json_object_get(json_object_get(root, "config"), "name")) ?: "model", "input",
                    w.input, "layers", layers);
    if (doc && w.policy[0]) /* Keras's mixed policy is clremat's precision of the same name */
        json_object_set_new(doc, "precision", json_string(w.policy));
    if (!doc || !(out->json = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER))) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    st = CLREMAT_OK;
fail:
    json_decref(legacy_cc);
    free(training);
    json_decref(doc);
    json_decref(layers);
    json_decref(w.input);
    json_decref(root);
    free(w.refs);
    if (st)
        clremat_keras_free(out);
    return st;
}

/* Offset of layer l's parameter k in the flat parameter vector. */
static int64_t param_offset(const clremat_graph *g, int l, int k)
{
    int64_t off = 0;
    for (int i = 0; i < l; i++)
        for (int j = 0; j < g->layers[i].n_params; j++)
            off += g->layers[i].params[j].elems;
    for (int j = 0; j < k; j++)
        off += g->layers[l].params[j].elems;
    return off;
}

/* Where variable v, of dataset shape sh, goes: its rows/cols and the
 * parameter's offset and stride. */
static int locate(const clremat_keras_model *m, const clremat_graph *g, const clremat_keras_var *v,
                  const clremat_keras_shape *sh, int64_t *rows, int64_t *cols, int64_t *off, int64_t *stride)
{
    int l = clremat_graph_find_layer(g, v->layer);
    int64_t r = 1, c = 1;
    const clremat_param *p;
    if (l < 0 || v->param >= g->layers[l].n_params)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "%s: variable '%s' maps to no parameter of layer '%s'",
                                 m->origin, v->h5path, v->layer);
    p = &g->layers[l].params[v->param];
    *stride = p->shape.dims[p->shape.rank - 1];
    for (int i = 0; i < sh->rank; i++) {
        int64_t *t = i < v->split ? &r : &c, d = sh->dims[i];
        /* no product past the parameter's size (a hostile file's dimensions cannot overflow it) */
        *t = d > 0 && *t > p->elems / d ? p->elems + 1 : *t * d;
    }
    if (r > p->elems || c > p->elems || r * *stride != p->elems || v->col_off + c > *stride)
        return clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: variable '%s' has %lld x %lld values; it does not fit "
                                 "parameter %s/%s (%lld values, rows of %lld)", m->h5_origin, v->h5path, (long long)r,
                                 (long long)c, v->layer, p->name, (long long)p->elems, (long long)*stride);
    *rows = r;
    *cols = c;
    *off = param_offset(g, l, v->param) + v->col_off;
    return CLREMAT_OK;
}

int clremat_keras_var_shapes(const clremat_keras_model *m, clremat_keras_shape **shapes)
{
    const char **paths = calloc((size_t)m->n_vars + 1, sizeof *paths);
    int st;
    *shapes = calloc((size_t)m->n_vars + 1, sizeof **shapes);
    if (!paths || !*shapes) {
        free(paths);
        free(*shapes);
        *shapes = NULL;
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    for (int i = 0; i < m->n_vars; i++)
        paths[i] = m->vars[i].h5path;
    st = clremat_keras_h5_shapes(m->h5, m->h5_len, m->h5_origin, m->n_vars, paths, *shapes);
    free(paths);
    if (st) {
        free(*shapes);
        *shapes = NULL;
    }
    return st;
}

/* Where a variable's values go (locate). */
typedef struct {
    int64_t rows, cols, off, stride;
} var_place;

/* Every variable's place in the parameters (locate), from the shapes read
 * in one child; then all their values in a second: two HDF5 children per
 * import, the values read only once every shape has been checked against
 * its parameter. */
int clremat_keras_params(const clremat_keras_model *m, const clremat_graph *g, float *params)
{
    const int64_t total = clremat_graph_param_elems(g);
    const int n = m->n_vars;
    clremat_keras_shape *shapes = NULL;
    var_place *at = NULL;
    int64_t *counts = NULL, covered = 0, pos = 0;
    const char **paths = NULL;
    float *vals = NULL;
    int st;
    if (!m->h5)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: no Keras weights file to read", m->origin);
    if ((st = clremat_keras_var_shapes(m, &shapes)))
        return st;
    at = calloc((size_t)n + 1, sizeof *at);
    counts = calloc((size_t)n + 1, sizeof *counts);
    paths = calloc((size_t)n + 1, sizeof *paths);
    if (!at || !counts || !paths)
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int i = 0; i < n && !st; i++) {
        var_place *v = &at[i];
        paths[i] = m->vars[i].h5path;
        st = locate(m, g, &m->vars[i], &shapes[i], &v->rows, &v->cols, &v->off, &v->stride);
        counts[i] = v->rows * v->cols; /* at most its parameter's size (locate) */
        covered += counts[i];
    }
    if (!st && covered != total)
        st = clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: the Keras variables cover %lld of the model's %lld "
                               "parameters", m->origin, (long long)covered, (long long)total);
    if (!st && !(vals = malloc(sizeof(float) * (size_t)(covered + 1))))
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory (%lld weights)", (long long)covered);
    if (!st)
        st = clremat_keras_h5_values(m->h5, m->h5_len, m->h5_origin, n, paths, counts, vals);
    for (int i = 0; i < n && !st; i++) {
        for (int64_t r = 0; r < at[i].rows; r++)
            memcpy(params + at[i].off + r * at[i].stride, vals + pos + r * at[i].cols,
                   sizeof(float) * (size_t)at[i].cols);
        pos += counts[i];
    }
    free(vals);
    free(paths);
    free(counts);
    free(at);
    free(shapes);
    return st;
}

int clremat_keras_gather(const clremat_keras_model *m, const clremat_graph *g, int i,
                         const clremat_keras_shape *shape, const float *params, float **out)
{
    int64_t rows, cols, off, stride;
    int st;
    *out = NULL;
    if ((st = locate(m, g, &m->vars[i], shape, &rows, &cols, &off, &stride)))
        return st;
    if (!(*out = malloc(sizeof(float) * (size_t)(rows * cols + 1))))
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int64_t r = 0; r < rows; r++)
        memcpy(*out + r * cols, params + off + r * stride, sizeof(float) * (size_t)cols);
    return CLREMAT_OK;
}
