/* keras_layers.c: one small function per Keras layer class, mapping a
 * layer's config to a clremat layer object and its variables to clremat
 * parameters (docs/keras.md). Every option clremat cannot do exactly is
 * refused here, never approximated. */
#include <stdio.h>
#include <string.h>
#include "error.h"
#include "keras_map.h"

static const char *const dense_null[] = {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                                         "kernel_constraint", "bias_constraint", "lora_rank", "quantization_config",
                                         NULL};

static int map_dense(clremat_keras_call *c)
{
    json_t *units = json_object_get(c->config, "units");
    json_t *ub = json_object_get(c->config, "use_bias");
    int st, bias = !ub || json_is_true(ub);
    if ((st = clremat_keras_need_null(c, dense_null)) || (st = clremat_keras_one_input(c)) || (st = clremat_keras_activation_field(c, "activation")))
        return st;
    if (!json_is_integer(units) || json_integer_value(units) < 1)
        return clremat_keras_refuse(c, "'units' must be a positive integer");
    json_object_set_new(c->out, "type", json_string("dense"));
    json_object_set(c->out, "units", units);
    json_object_set_new(c->out, "use_bias", json_boolean(bias));
    if ((st = clremat_keras_add(c, "", 0, c->full, 0, 1, 0)))
        return st;
    return bias ? clremat_keras_add(c, "", 1, c->full, 1, 0, 0) : CLREMAT_OK;
}

static int map_activation(clremat_keras_call *c)
{
    int st;
    if ((st = clremat_keras_one_input(c)) || (st = clremat_keras_activation_field(c, "activation")))
        return st;
    json_object_set_new(c->out, "type", json_string("activation"));
    return CLREMAT_OK;
}

static int map_relu(clremat_keras_call *c)
{
    static const char *const nums[] = {"max_value", "negative_slope", "threshold"};
    int st;
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(c->config, nums[i]);
        if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0.0))
            return clremat_keras_refuse(c, "option '%s' must be unset or 0 (plain relu)", nums[i]);
    }
    if ((st = clremat_keras_one_input(c)))
        return st;
    json_object_set_new(c->out, "type", json_string("activation"));
    json_object_set_new(c->out, "activation", json_string("relu"));
    return CLREMAT_OK;
}

static int map_dropout(clremat_keras_call *c)
{
    static const char *const nulls[] = {"noise_shape", NULL};
    json_t *rate = json_object_get(c->config, "rate");
    int st;
    if ((st = clremat_keras_need_null(c, nulls)) || (st = clremat_keras_one_input(c)))
        return st;
    if (!json_is_number(rate) || json_number_value(rate) < 0 || json_number_value(rate) >= 1)
        return clremat_keras_refuse(c, "'rate' must be a number in [0, 1)");
    json_object_set_new(c->out, "type", json_string("dropout"));
    json_object_set_new(c->out, "rate", json_real(json_number_value(rate)));
    return CLREMAT_OK;
}

static int last_axis(json_t *axis)
{
    if (json_is_integer(axis))
        return json_integer_value(axis) == -1;
    return json_is_array(axis) && json_array_size(axis) == 1 && json_is_integer(json_array_get(axis, 0)) &&
           json_integer_value(json_array_get(axis, 0)) == -1;
}

static int map_layernorm(clremat_keras_call *c)
{
    static const char *const nulls[] = {"beta_regularizer", "gamma_regularizer", "beta_constraint",
                                        "gamma_constraint", "rms_scaling", NULL};
    json_t *eps = json_object_get(c->config, "epsilon");
    int st;
    if ((st = clremat_keras_need_null(c, nulls)) || (st = clremat_keras_need_value(c, "center", 1)) || (st = clremat_keras_need_value(c, "scale", 1)) ||
        (st = clremat_keras_one_input(c)))
        return st;
    if (json_object_get(c->config, "axis") && !last_axis(json_object_get(c->config, "axis")))
        return clremat_keras_refuse(c, "only axis -1 (the last dimension) is supported");
    json_object_set_new(c->out, "type", json_string("layernorm"));
    json_object_set_new(c->out, "eps", json_real(json_is_number(eps) ? json_number_value(eps) : 1e-3));
    if ((st = clremat_keras_add(c, "", 0, c->full, 0, 0, 0)))
        return st;
    return clremat_keras_add(c, "", 1, c->full, 1, 0, 0);
}

static int map_embedding(clremat_keras_call *c)
{
    static const char *const nulls[] = {"embeddings_regularizer", "activity_regularizer", "embeddings_constraint",
                                        "mask_zero", "lora_rank", "quantization_config", "weights", NULL};
    json_t *vocab = json_object_get(c->config, "input_dim"), *dim = json_object_get(c->config, "output_dim");
    int st;
    if ((st = clremat_keras_need_null(c, nulls)) || (st = clremat_keras_one_input(c)))
        return st;
    if (!json_is_integer(vocab) || !json_is_integer(dim))
        return clremat_keras_refuse(c, "'input_dim' and 'output_dim' must be integers");
    if (strcmp(c->in[0], "@input") != 0)
        return clremat_keras_refuse(c, "must read the model's (integer) input directly");
    json_object_set_new(c->out, "type", json_string("embedding"));
    json_object_set(c->out, "vocab", vocab);
    json_object_set(c->out, "dim", dim);
    return clremat_keras_add(c, "", 0, c->full, 0, 1, 0);
}

static int map_mha(clremat_keras_call *c)
{
    static const char *const nulls[] = {"output_shape", "sliding_window", "kernel_regularizer", "bias_regularizer",
                                        "activity_regularizer", "kernel_constraint", "bias_constraint",
                                        "use_gate", NULL};
    json_t *heads = json_object_get(c->config, "num_heads"), *kd = json_object_get(c->config, "key_dim");
    json_t *vd = json_object_get(c->config, "value_dim"), *axes = json_object_get(c->config, "attention_axes");
    json_t *rate = json_object_get(c->config, "dropout");
    json_t *qs = json_object_get(json_object_get(json_object_get(c->config, "__build__"), "shapes_dict"),
                                 "query_shape");
    const char *key;
    json_t *v;
    int st, causal = 0;
    int64_t D;
    (void)qs;
    if ((st = clremat_keras_need_null(c, nulls)) || (st = clremat_keras_need_value(c, "use_bias", 1)))
        return st;
    if (c->n_in < 1 || c->n_in > 3)
        return clremat_keras_refuse(c, "called with %d tensors; self-attention mha(x, x) is supported", c->n_in);
    for (int i = 1; i < c->n_in; i++)
        if (strcmp(c->in[i], c->in[0]) != 0)
            return clremat_keras_refuse(c, "query, value and key are different tensors; only self-attention "
                                           "(mha(x, x)) is supported");
    json_object_foreach(c->kwargs, key, v) {
        if (strcmp(key, "use_causal_mask") == 0 && json_is_boolean(v))
            causal = json_is_true(v);
        else if (!json_is_null(v) && !(json_is_false(v) && strcmp(key, "return_attention_scores") == 0) &&
                 !(strcmp(key, "training") == 0))
            return clremat_keras_refuse(c, "call argument '%s' is not supported (only use_causal_mask)", key);
    }
    if (!json_is_integer(heads) || !json_is_integer(kd) || (vd && !json_is_null(vd) && !json_equal(vd, kd)))
        return clremat_keras_refuse(c, "needs integer num_heads and key_dim, and value_dim equal to key_dim");
    if (axes && !json_is_null(axes) &&
        !(json_is_array(axes) && json_array_size(axes) == 1 && json_integer_value(json_array_get(axes, 0)) == 1))
        return clremat_keras_refuse(c, "attention_axes must be null or [1] (attention over a [T, D] sequence)");
    D = json_integer_value(heads) * json_integer_value(kd);
    json_object_set_new(c->out, "type", json_string("attention"));
    json_object_set(c->out, "heads", heads);
    json_object_set_new(c->out, "causal", json_boolean(causal));
    json_object_set_new(c->out, "rate", json_real(json_is_number(rate) ? json_number_value(rate) : 0.0));
    json_object_set_new(c->out, "inputs", json_pack("[s]", c->in[0]));
    /* EinsumDense kernels: query/key/value [D, heads, dh] are column blocks
     * of wqkv, their biases [heads, dh] of bqkv; output [heads, dh, D] is wo */
    if ((st = clremat_keras_add(c, "query_dense/", 0, c->full, 0, 1, 0)) || (st = clremat_keras_add(c, "query_dense/", 1, c->full, 1, 0, 0)) ||
        (st = clremat_keras_add(c, "key_dense/", 0, c->full, 0, 1, D)) || (st = clremat_keras_add(c, "key_dense/", 1, c->full, 1, 0, D)) ||
        (st = clremat_keras_add(c, "value_dense/", 0, c->full, 0, 1, 2 * D)) ||
        (st = clremat_keras_add(c, "value_dense/", 1, c->full, 1, 0, 2 * D)) || (st = clremat_keras_add(c, "output_dense/", 0, c->full, 2, 2, 0)))
        return st;
    return clremat_keras_add(c, "output_dense/", 1, c->full, 3, 0, 0);
}

static int map_flatten(clremat_keras_call *c)
{
    json_t *df = json_object_get(c->config, "data_format");
    int st;
    if (df && json_is_string(df) && strcmp(json_string_value(df), "channels_last") != 0)
        return clremat_keras_refuse(c, "data_format '%s' is not supported (channels_last only)", json_string_value(df));
    if ((st = clremat_keras_one_input(c)))
        return st;
    json_object_set_new(c->out, "type", json_string("flatten"));
    return CLREMAT_OK;
}

static int map_reshape(clremat_keras_call *c)
{
    json_t *ts = json_object_get(c->config, "target_shape");
    int st;
    if ((st = clremat_keras_one_input(c)))
        return st;
    if (!json_is_array(ts) || json_array_size(ts) < 1 || json_array_size(ts) > CLREMAT_MAX_RANK)
        return clremat_keras_refuse(c, "'target_shape' must list 1 to %d dimensions", CLREMAT_MAX_RANK);
    json_object_set_new(c->out, "type", json_string("reshape"));
    json_object_set(c->out, "shape", ts);
    return CLREMAT_OK;
}

static int map_add(clremat_keras_call *c) { return clremat_keras_two_equal_inputs(c, "add"); }

static const struct {
    const char *cls;
    clremat_keras_map_fn fn;
} table[] = {
    {"Dense", map_dense},
    {"Activation", map_activation},
    {"ReLU", map_relu},
    {"Dropout", map_dropout},
    {"LayerNormalization", map_layernorm},
    {"Embedding", map_embedding},
    {"MultiHeadAttention", map_mha},
    {"Flatten", map_flatten},
    {"Reshape", map_reshape},
    {"Add", map_add},
    {"Conv2D", clremat_keras_map_conv2d},
    {"DepthwiseConv2D", clremat_keras_map_depthwise},
    {"SeparableConv2D", clremat_keras_map_separable},
    {"MaxPooling2D", clremat_keras_map_maxpool},
    {"AveragePooling2D", clremat_keras_map_avgpool},
    {"GlobalAveragePooling2D", clremat_keras_map_gap},
    {"ZeroPadding2D", clremat_keras_map_zeropad},
    {"BatchNormalization", clremat_keras_map_batchnorm},
    {"Concatenate", clremat_keras_map_concat},
    {"Multiply", clremat_keras_map_multiply},
};

clremat_keras_map_fn clremat_keras_mapping(const char *cls)
{
    for (size_t i = 0; cls && i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].cls, cls) == 0)
            return table[i].fn;
    return NULL;
}

const char *clremat_keras_supported(void)
{
    return "InputLayer, Sequential, Functional (nested models become blocks), Dense, Activation, ReLU, Dropout, "
           "LayerNormalization, Embedding, MultiHeadAttention, Flatten, Reshape, Add, Conv2D, DepthwiseConv2D, "
           "SeparableConv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, ZeroPadding2D, "
           "BatchNormalization, Concatenate, Multiply";
}
