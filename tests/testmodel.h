/* testmodel.h: loading a bundled model in a Check test: the one place that
 * knows the models' folder ($CLREMAT_MODELS, else models/ under the current
 * directory, which is where make check runs the suites). */
#ifndef CLREMAT_TESTMODEL_H
#define CLREMAT_TESTMODEL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include "clremat.h"
#include "graph.h"

/* The graph of the bundled model file (e.g. "mlp_deep.json"); a load that
 * fails fails the running test with the path and the loader's message. */
static inline clremat_graph *test_load_model(const char *file)
{
    char path[1024];
    clremat_graph *g = NULL;
    const char *dir = getenv("CLREMAT_MODELS");
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "models", file);
    ck_assert_msg(clremat_graph_load(path, &g) == CLREMAT_OK, "%s: %s", path, clremat_last_error());
    return g;
}

#endif
