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
    const char *full;               /**< the clremat layer's full name (block path included) */
    const char *h5;                 /**< its weights group with a trailing '/': "layers/dense/" */
    int n_in;                       /**< inputs (tensors), each a clremat reference */
    const char *in[8];
    json_t *out;                    /**< the clremat layer object to fill ("name" is set) */
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

#endif /* CLREMAT_KERAS_MAP_H */
