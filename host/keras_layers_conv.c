/* keras_layers_conv.c: the Keras convolutional and merging classes mapped to
 * clremat layers (docs/keras.md): Conv2D, DepthwiseConv2D, SeparableConv2D
 * (a block of a depthwise and a pointwise conv2d under the layer's name),
 * MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, ZeroPadding2D,
 * BatchNormalization, Concatenate and Multiply. channels_last only; every
 * option clremat cannot compute exactly is refused. */
#include <stdio.h>
#include <string.h>
#include "error.h"
#include "keras_map.h"

static int channels_last(clremat_keras_call *c)
{
    json_t *df = json_object_get(c->config, "data_format");
    if (df && !json_is_null(df) && !(json_is_string(df) && strcmp(json_string_value(df), "channels_last") == 0))
        return clremat_keras_refuse(c, "data_format '%s' is not supported (channels_last only: clremat images are "
                                       "[H, W, C])", json_is_string(df) ? json_string_value(df) : "?");
    return CLREMAT_OK;
}

/* A size field (an integer or [h, w], each at least lo) copied to c->out as
 * [h, w]; absent: def when def > 0, else refused. */
static int pair(clremat_keras_call *c, const char *field, const char *out_field, int64_t def, int64_t lo)
{
    json_t *v = json_object_get(c->config, field);
    int64_t a, b;
    if (!v || json_is_null(v)) {
        if (def <= 0)
            return clremat_keras_refuse(c, "'%s' is missing", field);
        a = b = def;
    } else if (json_is_integer(v)) {
        a = b = json_integer_value(v);
    } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(json_array_get(v, 0)) &&
               json_is_integer(json_array_get(v, 1))) {
        a = json_integer_value(json_array_get(v, 0));
        b = json_integer_value(json_array_get(v, 1));
    } else {
        return clremat_keras_refuse(c, "'%s' must be an integer or two integers", field);
    }
    if (a < lo || b < lo)
        return clremat_keras_refuse(c, "'%s' must be at least %lld", field, (long long)lo);
    json_object_set_new(c->out, out_field, json_pack("[II]", (json_int_t)a, (json_int_t)b));
    return CLREMAT_OK;
}

static int padding(clremat_keras_call *c, json_t *obj)
{
    json_t *p = json_object_get(c->config, "padding");
    const char *s = json_string_value(p);
    if (p && !(s && (strcmp(s, "valid") == 0 || strcmp(s, "same") == 0)))
        return clremat_keras_refuse(c, "padding '%s' is not supported (valid, same)", s ? s : "?");
    json_object_set_new(obj, "padding", json_string(s ? s : "valid"));
    return CLREMAT_OK;
}

static const char *const conv_null[] = {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                                        "kernel_constraint", "bias_constraint", "lora_rank", "quantization_config",
                                        NULL};
static const char *const dw_null[] = {"depthwise_regularizer", "bias_regularizer", "activity_regularizer",
                                      "depthwise_constraint", "bias_constraint", NULL};
static const char *const sep_null[] = {"depthwise_regularizer", "pointwise_regularizer", "bias_regularizer",
                                       "activity_regularizer", "depthwise_constraint", "pointwise_constraint",
                                       "bias_constraint", NULL};

static int use_bias(clremat_keras_call *c)
{
    json_t *ub = json_object_get(c->config, "use_bias");
    return !ub || json_is_true(ub);
}

static int positive(clremat_keras_call *c, const char *field, int64_t def, int64_t *out)
{
    json_t *v = json_object_get(c->config, field);
    if (!v || json_is_null(v)) {
        *out = def;
        return def > 0 ? CLREMAT_OK : clremat_keras_refuse(c, "'%s' is missing", field);
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return clremat_keras_refuse(c, "'%s' must be a positive integer", field);
    *out = json_integer_value(v);
    return CLREMAT_OK;
}

/* The window fields shared by Conv2D, DepthwiseConv2D and SeparableConv2D. */
static int window(clremat_keras_call *c, json_t *obj)
{
    json_t *save = c->out;
    int st;
    c->out = obj;
    st = pair(c, "kernel_size", "kernel_size", 0, 1);
    if (!st)
        st = pair(c, "strides", "strides", 1, 1);
    if (!st)
        st = pair(c, "dilation_rate", "dilation_rate", 1, 1);
    if (!st)
        st = padding(c, obj);
    c->out = save;
    return st;
}

int clremat_keras_map_conv2d(clremat_keras_call *c)
{
    int64_t filters, groups;
    int st, bias = use_bias(c);
    if ((st = clremat_keras_need_null(c, conv_null)) || (st = channels_last(c)) || (st = clremat_keras_one_input(c)) ||
        (st = positive(c, "filters", 0, &filters)) || (st = positive(c, "groups", 1, &groups)))
        return st;
    json_object_set_new(c->out, "type", json_string("conv2d"));
    json_object_set_new(c->out, "filters", json_integer((json_int_t)filters));
    if ((st = window(c, c->out)))
        return st;
    json_object_set_new(c->out, "groups", json_integer((json_int_t)groups));
    if ((st = clremat_keras_activation_field(c, "activation")))
        return st;
    json_object_set_new(c->out, "use_bias", json_boolean(bias));
    /* kernel [kh, kw, C/groups, F] is clremat's layout as it is */
    if ((st = clremat_keras_add(c, "", 0, c->full, 0, 3, 0)))
        return st;
    return bias ? clremat_keras_add(c, "", 1, c->full, 1, 0, 0) : CLREMAT_OK;
}

int clremat_keras_map_depthwise(clremat_keras_call *c)
{
    int64_t mult;
    int st, bias = use_bias(c);
    if ((st = clremat_keras_need_null(c, dw_null)) || (st = channels_last(c)) || (st = clremat_keras_one_input(c)) ||
        (st = positive(c, "depth_multiplier", 1, &mult)))
        return st;
    json_object_set_new(c->out, "type", json_string("conv2d"));
    json_object_set_new(c->out, "depth_multiplier", json_integer((json_int_t)mult));
    if ((st = window(c, c->out)) || (st = clremat_keras_activation_field(c, "activation")))
        return st;
    json_object_set_new(c->out, "use_bias", json_boolean(bias));
    /* Keras [kh, kw, C, m] has the memory order of clremat's [kh, kw, 1, C*m] */
    if ((st = clremat_keras_add(c, "", 0, c->full, 0, 2, 0)))
        return st;
    return bias ? clremat_keras_add(c, "", 1, c->full, 1, 0, 0) : CLREMAT_OK;
}

/* Which input a block's first layer names: none when the block reads the
 * tensor just before it (a block's default), else the tensor itself. */
static int block_input(clremat_keras_call *c, json_t *first)
{
    if (c->prev && strcmp(c->in[0], c->prev) == 0)
        return CLREMAT_OK;
    if (strcmp(c->in[0], "@block_input") == 0)
        return clremat_keras_refuse(c, "reads its enclosing model's input but is not the first layer of it (mapped "
                                       "as a clremat block, it must then read the layer before it)");
    json_object_set_new(first, "inputs", json_pack("[s]", c->in[0]));
    return CLREMAT_OK;
}

/* SeparableConv2D: a block named as the layer, holding "depthwise" (no
 * bias, the layer's window) and "pointwise" (1x1, bias and activation). */
int clremat_keras_map_separable(clremat_keras_call *c)
{
    int64_t mult, filters;
    int st, bias = use_bias(c);
    char dw[160], pw[160];
    json_t *d, *p, *blk;
    if ((st = clremat_keras_need_null(c, sep_null)) || (st = channels_last(c)) ||
        (st = positive(c, "depth_multiplier", 1, &mult)) || (st = positive(c, "filters", 0, &filters)))
        return st;
    if (c->n_in != 1)
        return clremat_keras_refuse(c, "takes %d inputs; this class is mapped with exactly one", c->n_in);
    d = json_pack("{sssssI}", "name", "depthwise", "type", "conv2d", "depth_multiplier", (json_int_t)mult);
    p = json_pack("{sssssIsIsb}", "name", "pointwise", "type", "conv2d", "filters", (json_int_t)filters,
                  "kernel_size", (json_int_t)1, "use_bias", bias);
    blk = json_pack("{sss[oo]}", "block", c->name, "layers", d, p);
    if ((st = window(c, d)) || (st = block_input(c, d))) {
        json_decref(blk);
        return st;
    }
    json_object_set_new(d, "use_bias", json_false());
    json_decref(c->out);
    c->out = p; /* the activation goes on the pointwise conv */
    st = clremat_keras_activation_field(c, "activation");
    c->out = blk;
    if (st)
        return st;
    if (snprintf(dw, sizeof dw, "%s/depthwise", c->full) >= (int)sizeof c->out_ref ||
        snprintf(pw, sizeof pw, "%s/pointwise", c->full) >= (int)sizeof c->out_ref)
        return clremat_keras_refuse(c, "the name '%s/depthwise' is too long", c->full);
    memcpy(c->out_ref, pw, strlen(pw) + 1);
    /* depthwise_kernel [kh, kw, C, m], pointwise_kernel [1, 1, C*m, F], bias [F] */
    if ((st = clremat_keras_add(c, "", 0, dw, 0, 2, 0)) || (st = clremat_keras_add(c, "", 1, pw, 0, 3, 0)))
        return st;
    return bias ? clremat_keras_add(c, "", 2, pw, 1, 0, 0) : CLREMAT_OK;
}

static int pool(clremat_keras_call *c, const char *type)
{
    int st;
    if ((st = channels_last(c)) || (st = clremat_keras_one_input(c)))
        return st;
    json_object_set_new(c->out, "type", json_string(type));
    if ((st = pair(c, "pool_size", "pool_size", 2, 1)))
        return st;
    /* Keras saves strides resolved (null means pool_size) */
    if (json_is_null(json_object_get(c->config, "strides")) || !json_object_get(c->config, "strides"))
        json_object_set(c->out, "strides", json_object_get(c->out, "pool_size"));
    else if ((st = pair(c, "strides", "strides", 0, 1)))
        return st;
    return padding(c, c->out);
}

int clremat_keras_map_maxpool(clremat_keras_call *c) { return pool(c, "max_pool2d"); }
int clremat_keras_map_avgpool(clremat_keras_call *c) { return pool(c, "avg_pool2d"); }

/* GlobalAveragePooling2D: keepdims=True becomes a block of the pooling and
 * a reshape to [1, 1, C] under the layer's name. */
int clremat_keras_map_gap(clremat_keras_call *c)
{
    json_t *kd = json_object_get(c->config, "keepdims"), *blk, *first;
    int st;
    if ((st = channels_last(c)) || (st = clremat_keras_one_input(c)))
        return st;
    json_object_set_new(c->out, "type", json_string("global_avg_pool2d"));
    if (!json_is_true(kd))
        return CLREMAT_OK;
    first = json_pack("{ssss}", "name", "pool", "type", "global_avg_pool2d");
    blk = json_pack("{sss[o{sssss[iii]}]}", "block", c->name, "layers", first, "name", "keepdims", "type", "reshape",
                    "shape", 1, 1, -1);
    if ((st = block_input(c, first))) {
        json_decref(blk);
        return st;
    }
    json_decref(c->out);
    c->out = blk;
    if (snprintf(c->out_ref, sizeof c->out_ref, "%s/keepdims", c->full) >= (int)sizeof c->out_ref)
        return clremat_keras_refuse(c, "the name '%s/keepdims' is too long", c->full);
    return CLREMAT_OK;
}

int clremat_keras_map_zeropad(clremat_keras_call *c)
{
    json_t *p = json_object_get(c->config, "padding");
    int st;
    if ((st = channels_last(c)) || (st = clremat_keras_one_input(c)))
        return st;
    json_object_set_new(c->out, "type", json_string("zero_pad2d"));
    if (json_is_integer(p) ||
        (json_is_array(p) && json_array_size(p) == 2 &&
         ((json_is_integer(json_array_get(p, 0)) && json_is_integer(json_array_get(p, 1))) ||
          (json_is_array(json_array_get(p, 0)) && json_is_array(json_array_get(p, 1)))))) {
        json_object_set(c->out, "padding", p); /* clremat reads the same three forms */
        return CLREMAT_OK;
    }
    return clremat_keras_refuse(c, "'padding' must be p, [ph, pw] or [[top, bottom], [left, right]]");
}

static int last_axis(json_t *axis)
{
    if (json_is_integer(axis))
        return json_integer_value(axis) == -1;
    return json_is_array(axis) && json_array_size(axis) == 1 && json_is_integer(json_array_get(axis, 0)) &&
           json_integer_value(json_array_get(axis, 0)) == -1;
}

/* BatchNormalization: gamma, beta, moving_mean, moving_variance (Keras's
 * vars/0.. in that order, gamma without scale and beta without center
 * absent) are clremat's batchnorm parameters in the same order; the moving
 * statistics are its non-trainable state. */
int clremat_keras_map_batchnorm(clremat_keras_call *c)
{
    static const char *const nulls[] = {"beta_regularizer", "gamma_regularizer", "beta_constraint",
                                        "gamma_constraint", "synchronized", "renorm", "renorm_clipping", NULL};
    json_t *mom = json_object_get(c->config, "momentum"), *eps = json_object_get(c->config, "epsilon");
    json_t *sc = json_object_get(c->config, "scale"), *ce = json_object_get(c->config, "center");
    int st, scale = !sc || json_is_true(sc), center = !ce || json_is_true(ce), k = 0;
    if ((st = clremat_keras_need_null(c, nulls)) || (st = clremat_keras_one_input(c)))
        return st;
    if (json_object_get(c->config, "axis") && !last_axis(json_object_get(c->config, "axis")))
        return clremat_keras_refuse(c, "only axis -1 (the channels of channels_last) is supported");
    if ((mom && !json_is_number(mom)) || (eps && !json_is_number(eps)))
        return clremat_keras_refuse(c, "'momentum' and 'epsilon' must be numbers");
    json_object_set_new(c->out, "type", json_string("batchnorm"));
    json_object_set_new(c->out, "momentum", json_real(mom ? json_number_value(mom) : 0.99));
    json_object_set_new(c->out, "epsilon", json_real(eps ? json_number_value(eps) : 1e-3));
    json_object_set_new(c->out, "center", json_boolean(center));
    json_object_set_new(c->out, "scale", json_boolean(scale));
    for (int i = 0; i < scale + center + 2; i++, k++) {
        if ((st = clremat_keras_add(c, "", i, c->full, k, 0, 0)))
            return st;
        if (i >= scale + center) /* moving_mean, moving_variance */
            c->m->vars[c->m->n_vars - 1].state = 1;
    }
    return CLREMAT_OK;
}

int clremat_keras_map_concat(clremat_keras_call *c)
{
    json_t *ins;
    if (json_object_get(c->config, "axis") && !last_axis(json_object_get(c->config, "axis")))
        return clremat_keras_refuse(c, "only axis -1 (the last dimension) is supported");
    if (c->n_in < 2 || c->n_in > 8)
        return clremat_keras_refuse(c, "joins %d tensors; clremat's concat takes 2 to 8", c->n_in);
    ins = json_array();
    for (int i = 0; i < c->n_in; i++)
        json_array_append_new(ins, json_string(c->in[i]));
    json_object_set_new(c->out, "type", json_string("concat"));
    json_object_set_new(c->out, "inputs", ins);
    return CLREMAT_OK;
}

int clremat_keras_map_multiply(clremat_keras_call *c) { return clremat_keras_two_equal_inputs(c, "multiply"); }
