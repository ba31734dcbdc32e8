/* layercheck.h: reusable gradient-check harness for layer launchers. Given a
 * graph (finalized, or a hand-built one: see lc_graph_of_layer), a layer
 * index, and host references in double precision, it checks
 *   (a) device forward (slot 0) against the reference forward, bitwise
 *       determinism of the forward, and, where the cost says slot 0 can be
 *       recomputed (act_source >= 0), a bit-identical recomputation;
 *   (b) device backward with a random dout against the reference backward,
 *       for din_accumulate 0 (din pre-filled with NaN: must be overwritten)
 *       and 1 (din pre-filled with random values: must be added to), and
 *       with every din NULL (parameter gradients alone);
 *   (c) central finite differences of L = sum(dout * out): in double on the
 *       reference (validates the reference backward) and in float on the
 *       device forward (step fd_step, loose tolerance) on a subset of the
 *       coordinates of every input and parameter.
 * Loss layers (spec.loss = 1): slot 0 is {loss, correct}; dout is {1, 0} and
 * L = loss. Failures are reported with ck_assert_msg naming the layer, the
 * tensor and the coordinate. Use inside a Check test (it opens no context). */
#ifndef CLREMAT_LAYERCHECK_H
#define CLREMAT_LAYERCHECK_H

#include "layers.h"

/** What the host references see: the layer, the batch, the dropout key and
 * every tensor in double. in[i] has batch * elems(in_shape[i]) values,
 * param[p] has params[p].elems values; labels may be NULL. */
typedef struct lc_io {
    const clremat_graph *g;
    int layer;
    int64_t batch;
    uint64_t seed, step;
    const double *in[CLREMAT_MAX_INPUTS];
    const double *param[CLREMAT_MAX_PARAMS];
    const double *labels;
} lc_io;

/** The layer a reference is asked about. */
static inline const clremat_layer *lc_layer(const lc_io *io) { return &io->g->layers[io->layer]; }

/** Rows of a tensor of shape s at batch: the batch times every dimension but the last. */
static inline int64_t lc_rows(const clremat_shape *s, int64_t batch)
{
    for (int i = 0; i + 1 < s->rank; i++)
        batch *= s->dims[i];
    return batch;
}

/** The last dimension of s (the one row-wise layers normalize or project over). */
static inline int lc_last_dim(const clremat_shape *s) { return (int)s->dims[s->rank - 1]; }

/** Reference forward: writes slot 0 (lc_out_elems values) into out. */
typedef void (*lc_ref_forward)(const lc_io *io, double *out);

/** Reference backward for dout (slot 0's gradient): overwrites din[i] (when
 * not NULL) and grad[p] (always given) with the gradients of sum(dout * out). */
typedef void (*lc_ref_backward)(const lc_io *io, const double *dout, double *din[], double *grad[]);

/** One check. Fields left 0 take the defaults in brackets. */
typedef struct lc_spec {
    const clremat_graph *g;
    int layer;
    int64_t batch;                            /**< [2] */
    uint64_t seed, step;                      /**< dropout key */
    lc_ref_forward fwd;
    lc_ref_backward bwd;
    int loss;                                 /**< 1: a loss layer (see above) */
    /** Inputs given as is (e.g. token ids), not perturbed and no din
     * checked; NULL: uniform in [-in_scale, in_scale]. */
    const float *in_fixed[CLREMAT_MAX_INPUTS];
    const float *param_fixed[CLREMAT_MAX_PARAMS];  /**< NULL: uniform in [-param_scale, param_scale] */
    const float *labels;                      /**< copied to the labels buffer when not NULL */
    int64_t n_labels;                         /**< floats in labels */
    double in_scale, param_scale;             /**< [1, 1] */
    double rtol, atol;                        /**< device vs reference: |d-r| <= rtol|r| + atol*max(1,max|r|) [1e-4, 1e-5] */
    double fd_step;                           /**< device finite-difference step [1e-2] */
    double fd_rtol, fd_atol;                  /**< device FD tolerance [5e-2, 1e-2] */
    int fd_coords;                            /**< coordinates checked per tensor [8] */
    unsigned rng;                             /**< data seed [1] */
} lc_spec;

/** Floats of slot 0 of the layer at the spec's batch (2 for loss layers). */
int64_t lc_out_elems(const lc_spec *s);

/** Runs every check of the spec; fails the running Check test on a mismatch. */
void lc_check_layer(clremat_ctx *ctx, const lc_spec *spec);

/** Wraps one hand-built layer into a one-layer graph (layers = layer,
 * finalized = 1) for tests that do not go through clremat_graph_finalize.
 * The caller fills the layer's in_shape, out_shape and params. */
void lc_graph_of_layer(clremat_graph *g, clremat_layer *layer);

/** Fills a shape from rank dims (helper for hand-built layers). */
clremat_shape lc_shape(int rank, const int64_t *dims);

/** Sets parameter p of a hand-built layer: name, shape, elems. */
void lc_set_param(clremat_layer *l, int p, const char *name, int rank, const int64_t *dims);

/** Gives ctx a small loop budget (loop_budget.h), as if the device ended a
 * work-item's loops after `budget` iterations, so that the launchers split
 * their row sums into several launches on any device; the native GEMM keeps
 * no budget (its own split is test_gemm_split's). Resolves the GEMM path
 * first, so that its calibration runs without the budget. */
void lc_small_loop_budget(clremat_ctx *ctx, int64_t budget);

#endif
