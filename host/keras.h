/* keras.h: Keras 3 import and export. A `.keras` archive (zip: config.json,
 * model.weights.h5, metadata.json) or a `model.to_json()` file with its
 * `.weights.h5` becomes a clremat model (JSON text, docs/model-format.md)
 * and its parameters in clremat's layout; trained parameters go back into
 * Keras 3's weights layout (`.weights.h5`, `.keras`). docs/keras.md lists
 * what is mapped and how. */
#ifndef CLREMAT_KERAS_H
#define CLREMAT_KERAS_H

#include <stddef.h>
#include <stdint.h>
#include "graph.h"

/** One Keras variable (an HDF5 dataset) and where it lives in a clremat
 * parameter: the variable seen as a [rows, cols] matrix (its first `split`
 * dimensions are the rows, the others the columns) is the column block
 * [col_off, col_off + cols) of the parameter viewed as [rows, last dim]. */
typedef struct clremat_keras_var {
    char h5path[256];               /**< dataset path in the weights file ("layers/dense/vars/0") */
    char layer[CLREMAT_NAME_LEN];   /**< clremat layer (full name) */
    int param;                      /**< its parameter index */
    int split;                      /**< leading dimensions forming the rows */
    int64_t col_off;                /**< first column in the parameter */
    int state;                      /**< 1: non-trainable state (BatchNormalization's moving statistics) */
    char owner[128];                /**< the top-level Keras layer it belongs to (a legacy .h5 groups by it) */
} clremat_keras_var;

/** A Keras model read and mapped. */
typedef struct clremat_keras_model {
    char *json;                     /**< the clremat model (JSON text) */
    clremat_keras_var *vars;        /**< every Keras variable mapped, n_vars */
    int n_vars, cap_vars;
    unsigned char *h5;              /**< the weights file's bytes (NULL: no weights) */
    size_t h5_len;
    char *config_text;              /**< the Keras config (config.json, or the to_json file) */
    char *metadata_text;            /**< metadata.json of an archive, else NULL */
    char optimizer[16];             /**< compile config: "sgd", "adam", "adamw", or "" when absent */
    double lr, momentum, weight_decay, beta1, beta2, epsilon; /**< its settings (those it has) */
    char loss[32];                  /**< the clremat loss chosen ("softmax_cross_entropy", "mse") */
    char origin[512];               /**< the file, for messages */
    char h5_origin[512];            /**< the weights' file, for messages: origin, or a to_json model's
                                         weights file */
    int legacy;                     /**< 1: a legacy Keras 2 style HDF5 model (`model.save("m.h5")`) */
} clremat_keras_model;

/** 1 when path names a Keras model: a `.keras` file, or a JSON file whose top
 * level is a Keras config (has "class_name" and "config"). */
int clremat_keras_is_keras(const char *path);

/** 1 when path names a legacy HDF5 model file: ends in ".h5" or ".hdf5"
 * but not ".weights.h5". */
int clremat_keras_is_legacy(const char *path);

/** 1 when `--save save_path` of a run on model_path goes through
 * clremat_keras_save: a ".weights.h5" or ".keras" target, or any ".h5"
 * target of a legacy .h5 model. */
int clremat_keras_save_path(const char *model_path, const char *save_path);

/** Refuses (CLREMAT_ERR_INVALID_ARGUMENT, a message naming both) a
 * `--save` target that model_path's weights cannot be written to: a
 * legacy .h5 model into .weights.h5 or .keras, and any other model into a
 * legacy .h5 name. Checked before training. */
int clremat_keras_save_check(const char *model_path, const char *save_path);

/** Reads a Keras model: a `.keras` archive, a legacy `.h5` model, or a to_json file with weights
 * from weights_path (NULL: none; the model then loads without weights).
 * loss (NULL: from the compile config) names the Keras loss when the file
 * has none. Anything unsupported is refused naming the layer, its class,
 * the file and what is supported (CLREMAT_ERR_PARSE / CLREMAT_ERR_IO, the
 * message in clremat_last_error()). Free with clremat_keras_free. */
int clremat_keras_read(const char *path, const char *weights_path, const char *loss, clremat_keras_model *out);

/** Frees what clremat_keras_read allocated. */
void clremat_keras_free(clremat_keras_model *m);

/** Fills params (clremat_graph_param_elems(g) floats, the order of
 * clremat_trainer_get_params) from the Keras weights; every parameter must
 * be covered exactly once and every variable's shape must match. */
int clremat_keras_params(const clremat_keras_model *m, const clremat_graph *g, float *params);

/** Writes params back into Keras 3's layout: the original weights file with
 * every mapped variable replaced. A path ending in ".keras" gets the whole
 * archive (the original config.json and metadata.json, the new weights);
 * anything else gets the weights file alone (".weights.h5"). Atomic. */
int clremat_keras_save(const clremat_keras_model *m, const clremat_graph *g, const float *params, const char *path);

/* ---- pieces shared by the keras_*.c files (not for other callers) ---- */

/** Reads a zip member into a NUL-terminated malloc'd buffer (*len without the NUL). */
int clremat_keras_zip_member(const char *path, const char *member, unsigned char **data, size_t *len);

/** A dataset's shape: rank 0 to 8 and its dimensions (unused ones 0). */
typedef struct clremat_keras_shape {
    int32_t rank;
    int64_t dims[8];
} clremat_keras_shape;

/** Reads the shapes of the n float32 datasets named in paths from the
 * weights image, the file opened once. The HDF5 library runs in a child
 * process (h5_guard.h): a file that crashes or hangs it gives
 * CLREMAT_ERR_PARSE naming origin and the datasets; a missing dataset or
 * one that is not float32 is CLREMAT_ERR_PARSE naming it. */
int clremat_keras_h5_shapes(const unsigned char *img, size_t len, const char *origin, int n,
                            const char *const *paths, clremat_keras_shape *shapes);

/** Reads the values of the n float32 datasets named in paths, counts[i]
 * of dataset i (which must hold exactly that many: else
 * CLREMAT_ERR_MISMATCH naming it), into out one after the other, in one
 * child process as clremat_keras_h5_shapes, whose output is read straight
 * into out (on an error out's contents are unspecified). */
int clremat_keras_h5_values(const unsigned char *img, size_t len, const char *origin, int n,
                            const char *const *paths, const int64_t *counts, float *out);

/** The shapes of every variable of m in its weights file (one child
 * process), a malloc'd array of m->n_vars in *shapes. */
int clremat_keras_var_shapes(const clremat_keras_model *m, clremat_keras_shape **shapes);

/** Copies the weights image (of the model file origin) into a new file at
 * tmp_path and overwrites the n datasets named in paths with the float32
 * data in vals[i]; HDF5 runs in a child process, as for the reads, and a
 * crash or hang there is an error naming origin and tmp_path. */
int clremat_keras_h5_write(const char *origin, const unsigned char *img, size_t len, const char *tmp_path,
                           const char *const *paths, const float *const *vals, int n);

/** Legacy .h5 model: reads the whole file into m->h5, its `model_config`
 * attribute into m->config_text and its `training_config` attribute into
 * *training (malloc'd, NULL when absent). */
int clremat_keras_legacy_open(const char *path, clremat_keras_model *m, char **training);

/** Legacy .h5 model: points every variable of m at its dataset. Keras
 * writes a top-level layer's weights under `model_weights/LAYER/`, named by
 * the layer group's `weight_names` attribute, trainable ones first (in
 * layer order, nested models included), then the non-trainable ones. */
int clremat_keras_legacy_paths(clremat_keras_model *m);

/** Gathers variable i of m, whose dataset has shape (clremat_keras_var_shapes),
 * from params into a new malloc'd array (*out). */
int clremat_keras_gather(const clremat_keras_model *m, const clremat_graph *g, int i,
                         const clremat_keras_shape *shape, const float *params, float **out);

/** Adds a variable mapping to m. */
int clremat_keras_add_var(clremat_keras_model *m, const char *h5path, const char *layer, int param, int split,
                          int64_t col_off);

#endif /* CLREMAT_KERAS_H */
