/* init.c: seeded parameter initialization. Every element is a pure function
 * of (seed, layer index, parameter index, element index) through the
 * counter-based clremat_hash, so the result does not depend on the order in
 * which parameters are initialized. */
#include "init.h"
#include "rng.h"
#include <math.h>

/* Tags in the hash's step field keep initialization streams apart from the
 * training-step streams (dropout) that use small step numbers. */
#define INIT_TAG_A 0x494e0000u /* "IN" */
#define INIT_TAG_B 0x494e8000u

/* Uniform in [0, 1) for element e of parameter p of layer l. */
static double uniform_at(uint64_t seed, uint32_t tag, int l, int p, int64_t e)
{
    uint64_t s = seed ^ ((uint64_t)e >> 32) * 0x9e3779b97f4a7c15ULL;
    return clremat_uniform(clremat_hash(s, tag | (uint32_t)p, (uint32_t)l, (uint32_t)e));
}

/* Standard normal by Box-Muller from two independent hashes. */
static double normal_at(uint64_t seed, int l, int p, int64_t e)
{
    double u1 = 1.0 - uniform_at(seed, INIT_TAG_A, l, p, e); /* (0, 1] */
    double u2 = uniform_at(seed, INIT_TAG_B, l, p, e);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Keras' fans: [in, out] for matrices; leading dims multiply both (receptive field). */
static void fans(const clremat_shape *s, double *fan_in, double *fan_out)
{
    if (s->rank <= 0) {
        *fan_in = *fan_out = 1;
    } else if (s->rank == 1) {
        *fan_in = *fan_out = (double)s->dims[0];
    } else {
        double receptive = 1;
        for (int i = 0; i < s->rank - 2; i++)
            receptive *= (double)s->dims[i];
        *fan_in = (double)s->dims[s->rank - 2] * receptive;
        *fan_out = (double)s->dims[s->rank - 1] * receptive;
    }
    if (*fan_in < 1)
        *fan_in = 1;
    if (*fan_out < 1)
        *fan_out = 1;
}

void clremat_init_param(const clremat_graph *g, int l, int p, uint64_t seed, float *out)
{
    const clremat_param *par;
    double fan_in, fan_out, a;
    if (!g || !out || l < 0 || l >= g->n_layers || p < 0 || p >= g->layers[l].n_params)
        return;
    par = &g->layers[l].params[p];
    fans(&par->shape, &fan_in, &fan_out);
    switch (par->init) {
    case CLREMAT_INIT_ONES:
        for (int64_t e = 0; e < par->elems; e++)
            out[e] = 1.0f;
        break;
    case CLREMAT_INIT_GLOROT_UNIFORM:
        a = sqrt(6.0 / (fan_in + fan_out));
        for (int64_t e = 0; e < par->elems; e++)
            out[e] = (float)((2.0 * uniform_at(seed, INIT_TAG_A, l, p, e) - 1.0) * a);
        break;
    case CLREMAT_INIT_HE_NORMAL:
        a = sqrt(2.0 / fan_in);
        for (int64_t e = 0; e < par->elems; e++)
            out[e] = (float)(normal_at(seed, l, p, e) * a);
        break;
    case CLREMAT_INIT_NORMAL_002:
        for (int64_t e = 0; e < par->elems; e++)
            out[e] = (float)(normal_at(seed, l, p, e) * 0.02);
        break;
    case CLREMAT_INIT_NORMAL_LORA:
        a = 1.0 / fan_out;
        for (int64_t e = 0; e < par->elems; e++)
            out[e] = (float)(normal_at(seed, l, p, e) * a);
        break;
    case CLREMAT_INIT_ZEROS:
    default:
        for (int64_t e = 0; e < par->elems; e++)
            out[e] = 0.0f;
        break;
    }
}
