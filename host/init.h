/* init.h: seeded host-side initialization of parameters (Glorot uniform,
 * He normal, N(0, 0.02), zeros, ones), reproducible from (seed, layer,
 * parameter) whatever the order of calls. */
#ifndef CLREMAT_INIT_H
#define CLREMAT_INIT_H

#include <stdint.h>
#include "graph.h"

/** Fills out[0..p->elems) for parameter p of layer l of g. */
void clremat_init_param(const clremat_graph *g, int l, int p, uint64_t seed, float *out);

#endif
