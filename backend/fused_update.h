/* fused_update.h: the optimizer update applied inside the backward (no
 * parameter gradient stored): the hyperparameters as the kernels take them,
 * and the bias gradient's column sums consumed by the update. The weight
 * gradient's GEMM with the update as its epilogue is clremat_gemm_update
 * (gemm.h). docs/ARCHITECTURE.md, "The fused update". */
#ifndef CLREMAT_FUSED_UPDATE_H
#define CLREMAT_FUSED_UPDATE_H

#include "backend.h"
#include "graph.h"

/** The update the fused kernels apply: kind (0 SGD, 1 Adam, 2 AdamW) and
 * hyperparameters hp as clremat_opt8 of kernels.cl takes them (lr,
 * momentum or beta1, beta2, eps, weight decay, the bias corrections
 * 1 - beta1^t and 1 - beta2^t, computed on the host in double as
 * clremat_opt_step does). */
typedef struct clremat_fused_opt {
    int kind;
    float hp[8];
} clremat_fused_opt;

/** Fills *out for cfg at 1-based step t (Adam: t >= 1). */
int clremat_fused_opt_make(clremat_ctx *ctx, const clremat_opt_config *cfg, int64_t t, clremat_fused_opt *out);

/** The parameters a layer's backward updates itself (bits of
 * clremat_layer_call.fuse_update): the update of parameter p with its
 * states state[2 * p] (and state[2 * p + 1] for Adam). */
typedef struct clremat_fused_call {
    clremat_fused_opt opt;
    clremat_buf *state[2 * CLREMAT_MAX_PARAMS];
} clremat_fused_call;

/** Bias update from the column sums of x (rows x cols, format fmt:
 * CLREMAT_FMT_*, a 16-bit x widened as it is read): g[c] = sum over r in
 * order of x[r][c] (the sums of clremat_colsum8, bit for bit), then the
 * update of p[c] and its states by g[c]; g is never stored. */
int clremat_colsum_update(clremat_ctx *ctx, int64_t rows, int64_t cols, const clremat_buf *x, int fmt,
                          clremat_buf *p, clremat_buf *s0, clremat_buf *s1, const clremat_fused_opt *opt);

#endif
