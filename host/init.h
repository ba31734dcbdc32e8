/* init.h: seeded host-side initialization of parameters (Glorot uniform,
 * He normal, N(0, 0.02), zeros, ones), reproducible from (seed, layer,
 * parameter) whatever the order of calls. */
#ifndef CLREMAT_INIT_H
#define CLREMAT_INIT_H

#include <stdint.h>
#include "graph.h"

/** Fills out[0..elems) for parameter p of layer l of g by its init scheme.
 * Element e is drawn from clremat_hash(seed, tag | p, l, e), so it depends
 * only on (seed, l, p, e). Fans as in Keras: [in, out] gives fan_in = in,
 * fan_out = out (wqkv [D, 3D]: D and 3D); a vector [n] gives n and n; leading
 * dims of higher ranks multiply both. Normals use Box-Muller on two hashes.
 * Invalid g, l or p: nothing is written. */
void clremat_init_param(const clremat_graph *g, int l, int p, uint64_t seed, float *out);

#endif
