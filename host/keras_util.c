/* keras_util.c: the pieces every Keras layer mapping uses (host/keras_layers.c,
 * host/keras_layers_conv.c): the refusal message, option checks, the
 * activation table, the single input, the two equal inputs of a merge and
 * the variable record. Apart from the
 * mapping files so their call graph has no cycle. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "error.h"
#include "keras_map.h"

int clremat_keras_refuse(const clremat_keras_call *c, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s' (%s): %s", c->m->origin, c->name, c->cls, what);
}

static const struct {
    const char *keras, *clremat;
} acts[] = {
    {"linear", "linear"}, {"relu", "relu"}, {"gelu", "gelu_exact"}, /* Keras' gelu: approximate=False */
    {"tanh", "tanh"},     {"sigmoid", "sigmoid"}, {"silu", "silu"}, {"swish", "silu"},
};

const char *clremat_keras_activation(const char *keras_name)
{
    for (size_t i = 0; keras_name && i < sizeof acts / sizeof acts[0]; i++)
        if (strcmp(acts[i].keras, keras_name) == 0)
            return acts[i].clremat;
    return NULL;
}

/* Fields that must be null (or absent): regularizers, constraints, LoRA,
 * quantization change what training does. */
int clremat_keras_need_null(clremat_keras_call *c, const char *const *fields)
{
    for (int i = 0; fields[i]; i++) {
        json_t *v = json_object_get(c->config, fields[i]);
        if (v && !json_is_null(v) && !(json_is_false(v)))
            return clremat_keras_refuse(c, "option '%s' is set; clremat supports it only when null/unset", fields[i]);
    }
    return CLREMAT_OK;
}

int clremat_keras_need_value(clremat_keras_call *c, const char *field, int want)
{
    json_t *v = json_object_get(c->config, field);
    if (v && !(json_is_boolean(v) && json_boolean_value(v) == want))
        return clremat_keras_refuse(c, "option '%s' must be %s for clremat", field, want ? "true" : "false");
    return CLREMAT_OK;
}

/* "[4, 6]" for a build_config shape [null, 4, 6] (the batch left out). */
static void shape_text(json_t *shape, char *buf, size_t len)
{
    size_t i, n = 0;
    json_t *d;
    n += (size_t)snprintf(buf, len, "[");
    json_array_foreach(shape, i, d) {
        if (i == 0)
            continue;
        if (n < len)
            n += (size_t)snprintf(buf + n, len - n, "%s%lld", i > 1 ? ", " : "",
                                  json_is_integer(d) ? (long long)json_integer_value(d) : -1LL);
    }
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

int clremat_keras_two_equal_inputs(clremat_keras_call *c, const char *op)
{
    json_t *shapes = json_object_get(c->build, "input_shape");
    if (c->n_in != 2)
        return clremat_keras_refuse(c, "takes %d tensors; clremat's %s takes exactly 2 of equal shape", c->n_in, op);
    if (json_is_array(shapes) && json_array_size(shapes) == 2 &&
        !json_equal(json_array_get(shapes, 0), json_array_get(shapes, 1))) {
        char a[128], b[128];
        shape_text(json_array_get(shapes, 0), a, sizeof a);
        shape_text(json_array_get(shapes, 1), b, sizeof b);
        return clremat_keras_refuse(c, "inputs of shapes %s and %s: Keras broadcasts them, clremat's %s needs "
                                    "equal shapes (broadcast explicitly before this layer)", a, b, op);
    }
    json_object_set_new(c->out, "type", json_string(op));
    json_object_set_new(c->out, "inputs", json_pack("[ss]", c->in[0], c->in[1]));
    return CLREMAT_OK;
}

int clremat_keras_one_input(clremat_keras_call *c)
{
    if (c->n_in != 1)
        return clremat_keras_refuse(c, "takes %d inputs; this class is mapped with exactly one", c->n_in);
    json_object_set_new(c->out, "inputs", json_pack("[s]", c->in[0]));
    return CLREMAT_OK;
}

int clremat_keras_activation_field(clremat_keras_call *c, const char *field)
{
    json_t *a = json_object_get(c->config, field);
    const char *name = json_is_string(a) ? json_string_value(a) : NULL;
    const char *mapped = clremat_keras_activation(name ? name : "linear");
    if (a && !name)
        return clremat_keras_refuse(c, "activation is not a plain name; supported: linear, relu, gelu, tanh, "
                                       "sigmoid, silu, swish");
    if (!mapped)
        return clremat_keras_refuse(c, "activation '%s' is not supported; supported: linear, relu, gelu, tanh, "
                                       "sigmoid, silu, swish", name);
    json_object_set_new(c->out, "activation", json_string(mapped));
    return CLREMAT_OK;
}

int clremat_keras_add(clremat_keras_call *c, const char *sub, int idx, const char *layer, int param, int split,
               int64_t col_off)
{
    char path[256];
    snprintf(path, sizeof path, "%s%svars/%d", c->h5, sub, idx);
    return clremat_keras_add_var(c->m, path, layer, param, split, col_off);
}
