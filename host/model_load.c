/* model_load.c: opens a model file of either kind (clremat JSON or Keras)
 * into a graph, with a Keras model's weights. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "error.h"
#include "keras.h"
#include "model_load.h"

const char *clremat_keras_json_weights(const char *path)
{
    static char buf[4096];
    size_t n = strlen(path);
    if (n < 5 || n + 16 > sizeof buf || strcmp(path + n - 5, ".json") != 0)
        return NULL;
    memcpy(buf, path, n - 5);
    strcpy(buf + n - 5, ".weights.h5");
    return access(buf, R_OK) == 0 ? buf : NULL;
}

int clremat_model_load(const char *path, clremat_graph **g, float **init_params)
{
    clremat_keras_model km;
    int st;
    if (init_params)
        *init_params = NULL;
    if (!clremat_keras_is_keras(path))
        return clremat_graph_load(path, g);
    if ((st = clremat_keras_read(path, clremat_keras_json_weights(path), NULL, &km)))
        return st;
    if ((st = clremat_graph_load_generated(km.json, path, g))) {
        clremat_keras_free(&km);
        return st;
    }
    if (init_params && km.h5) {
        int64_t n = clremat_graph_param_elems(*g);
        float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
        if (!p)
            st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory for %lld parameters", (long long)n);
        else if ((st = clremat_keras_params(&km, *g, p)))
            free(p);
        else
            *init_params = p;
        if (st) {
            clremat_graph_free(*g);
            *g = NULL;
        }
    }
    clremat_keras_free(&km);
    return st;
}

int clremat_model_set_precision(clremat_graph *g, const char *name)
{
    int p;
    if (!name)
        return CLREMAT_OK;
    if ((p = clremat_precision_from_name(name)) < 0)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                 "--precision must be float32, mixed_float16 or mixed_bfloat16, got '%s'", name);
    g->precision = p;
    return CLREMAT_OK;
}
