/* keras_util.c: the pieces every Keras layer mapping uses (host/keras_layers.c,
 * host/keras_layers_conv.c): the refusal message, option checks, the
 * activation table, the single input and the variable record. Apart from the
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
