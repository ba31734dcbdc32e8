/* rng.h: the counter-based generator shared by host code and kernels.cl:
 * a stateless hash of (seed, step, layer, element). Dropout masks are
 * regenerated from it rather than stored, so recomputation reproduces them
 * exactly. kernels.cl carries the same function (clremat_hash). */
#ifndef CLREMAT_RNG_H
#define CLREMAT_RNG_H

#include <stdint.h>

static inline uint32_t clremat_mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/** Hash of the key (seed, step, layer, element) to 32 uniform bits. */
static inline uint32_t clremat_hash(uint64_t seed, uint32_t step, uint32_t layer, uint32_t elem)
{
    uint32_t h = clremat_mix32((uint32_t)seed ^ 0x9e3779b9U);
    h = clremat_mix32(h ^ (uint32_t)(seed >> 32));
    h = clremat_mix32(h ^ step);
    h = clremat_mix32(h ^ layer);
    return clremat_mix32(h ^ elem);
}

/** Uniform float in [0, 1) with 24 random bits. */
static inline float clremat_uniform(uint32_t h) { return (float)(h >> 8) * (1.0f / 16777216.0f); }

#endif
