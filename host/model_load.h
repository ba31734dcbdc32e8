/* model_load.h: the one entry the commands use to open a model: a clremat
 * model JSON file, or a Keras model (.keras archive, or a to_json file with
 * its .weights.h5 beside it) imported through host/keras.h with its
 * weights. */
#ifndef CLREMAT_MODEL_LOAD_H
#define CLREMAT_MODEL_LOAD_H

#include "graph.h"

/** Loads path into a finalized graph. For a Keras model, *init_params (when
 * init_params is non-NULL) receives its weights in clremat's parameter
 * layout (malloc'd; NULL when the file has no weights), else NULL. */
int clremat_model_load(const char *path, clremat_graph **g, float **init_params);

/** Sets g's precision to the one named (--precision; NULL: keeps the model
 * file's). An unknown name is CLREMAT_ERR_INVALID_ARGUMENT naming the three
 * valid ones. */
int clremat_model_set_precision(clremat_graph *g, const char *name);

/** The weights file of a Keras to_json file: PATH with ".json" replaced by
 * ".weights.h5" when that file exists, else NULL (static buffer). */
const char *clremat_keras_json_weights(const char *path);

#endif
