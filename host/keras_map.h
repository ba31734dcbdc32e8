/* keras_map.h: the table from a Keras layer class to the small function
 * that maps one layer of that class to a clremat layer object and its
 * weights (host/keras_layers.c); used by host/keras_import.c. */
#ifndef CLREMAT_KERAS_MAP_H
#define CLREMAT_KERAS_MAP_H

#include <jansson.h>
#include "keras.h"

/** One Keras layer being mapped. */
typedef struct clremat_keras_call {
    clremat_keras_model *m;
    const char *cls, *name;         /**< Keras class and layer name */
    json_t *config;                 /**< the layer's "config" */
    json_t *kwargs;                 /**< call keyword arguments (Functional), or NULL */
    json_t *build;                  /**< the layer's "build_config" (Keras 3: input shapes), or NULL */
    const char *full;               /**< the clremat layer's full name (block path included) */
    const char *h5;                 /**< its weights group with a trailing '/': "layers/dense/" */
    int n_in;                       /**< inputs (tensors), each a clremat reference */
    const char *in[8];
    json_t *out;                    /**< the clremat layer object to fill ("name" is set) */
    const char *prev;               /**< the tensor produced just before this layer (what a block reads) */
    char out_ref[128];              /**< set by a mapping that emits a block: the reference to its output */
} clremat_keras_call;

typedef int (*clremat_keras_map_fn)(clremat_keras_call *c);

/** The mapping of a Keras class, or NULL when unsupported. */
clremat_keras_map_fn clremat_keras_mapping(const char *cls);

/** The supported layer classes, comma-separated, for messages. */
const char *clremat_keras_supported(void);

/** Refuses c: "FILE: layer 'NAME' (CLASS): <what>" (CLREMAT_ERR_PARSE). */
int clremat_keras_refuse(const clremat_keras_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** The clremat activation of a Keras activation name, or NULL (unsupported). */
const char *clremat_keras_activation(const char *keras_name);

/** Refuses c when any of the NULL-terminated config fields is set (not
 * null/false): regularizers, constraints and the like. */
int clremat_keras_need_null(clremat_keras_call *c, const char *const *fields);

/** Refuses c when boolean config field is present and not want. */
int clremat_keras_need_value(clremat_keras_call *c, const char *field, int want);

/** Refuses c unless it has exactly two inputs of the same shape (Keras's
 * merge layers broadcast, clremat's add and multiply do not): the message
 * names both shapes from the layer's build_config. op names the clremat
 * layer ("add", "multiply"); sets "type" and "inputs". */
int clremat_keras_two_equal_inputs(clremat_keras_call *c, const char *op);

/** Refuses c unless it has exactly one input; sets "inputs" to it. */
int clremat_keras_one_input(clremat_keras_call *c);

/** Maps the activation named by config field into c->out's "activation". */
int clremat_keras_activation_field(clremat_keras_call *c, const char *field);

/** Records variable c->h5 + sub + "vars/" + idx as parameter param of
 * clremat layer `layer` (split and col_off: see clremat_keras_var). */
int clremat_keras_add(clremat_keras_call *c, const char *sub, int idx, const char *layer, int param, int split,
                      int64_t col_off);

/* The convolutional classes (host/keras_layers_conv.c), each mapping one
 * Keras layer (Conv2D, DepthwiseConv2D, SeparableConv2D, MaxPooling2D,
 * AveragePooling2D, GlobalAveragePooling2D, ZeroPadding2D,
 * BatchNormalization, Concatenate, Multiply). */
int clremat_keras_map_conv2d(clremat_keras_call *c);
int clremat_keras_map_depthwise(clremat_keras_call *c);
int clremat_keras_map_separable(clremat_keras_call *c);
int clremat_keras_map_maxpool(clremat_keras_call *c);
int clremat_keras_map_avgpool(clremat_keras_call *c);
int clremat_keras_map_gap(clremat_keras_call *c);
int clremat_keras_map_zeropad(clremat_keras_call *c);
int clremat_keras_map_batchnorm(clremat_keras_call *c);
int clremat_keras_map_concat(clremat_keras_call *c);
int clremat_keras_map_multiply(clremat_keras_call *c);

#endif /* CLREMAT_KERAS_MAP_H */
