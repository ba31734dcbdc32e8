/* keras_model.c: the clremat_keras_model record: adding a variable's
 * mapping (called by the class mappings of keras_layers.c) and freeing it.
 * Apart from keras_import.c so the files' call graph has no cycle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "error.h"
#include "keras.h"

int clremat_keras_add_var(clremat_keras_model *m, const char *h5path, const char *layer, int param, int split,
                          int64_t col_off)
{
    clremat_keras_var *v;
    if (m->n_vars == m->cap_vars) {
        int cap = m->cap_vars ? 2 * m->cap_vars : 32;
        void *p = realloc(m->vars, sizeof *m->vars * (size_t)cap);
        if (!p)
            return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
        m->vars = p;
        m->cap_vars = cap;
    }
    v = &m->vars[m->n_vars++];
    memset(v, 0, sizeof *v);
    snprintf(v->h5path, sizeof v->h5path, "%s", h5path);
    snprintf(v->layer, sizeof v->layer, "%s", layer);
    v->param = param;
    v->split = split;
    v->col_off = col_off;
    return CLREMAT_OK;
}

void clremat_keras_free(clremat_keras_model *m)
{
    if (!m)
        return;
    free(m->json);
    free(m->vars);
    free(m->h5);
    free(m->config_text);
    free(m->metadata_text);
    memset(m, 0, sizeof *m);
}
