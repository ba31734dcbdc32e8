/* optim.h: optimizers on the device: SGD with momentum, Adam and AdamW. Each
 * parameter tensor has up to two state tensors of the same size. */
#ifndef CLREMAT_OPTIM_H
#define CLREMAT_OPTIM_H

#include "backend.h"

typedef enum clremat_opt_kind {
    CLREMAT_OPT_SGD = 0,    /**< v = momentum * v + g; p -= lr * v */
    CLREMAT_OPT_ADAM,       /**< Adam with bias correction; weight decay added to g (L2) */
    CLREMAT_OPT_ADAMW       /**< Adam with decoupled weight decay: p -= lr * wd * p */
} clremat_opt_kind;

typedef struct clremat_opt_config {
    clremat_opt_kind kind;
    float lr;               /**< learning rate */
    float momentum;         /**< SGD (default 0.9) */
    float beta1, beta2;     /**< Adam (0.9, 0.999) */
    float eps;              /**< Adam (1e-8) */
    float weight_decay;     /**< Adam: L2; AdamW: decoupled (default 0.01 for adamw, 0 otherwise) */
} clremat_opt_config;

/** Defaults for a kind ("sgd", "adam", "adamw"); returns -1 for an unknown name. */
int clremat_opt_defaults(const char *name, clremat_opt_config *out);

/** State tensors per parameter tensor (SGD 1, Adam/AdamW 2). */
int clremat_opt_state_count(clremat_opt_kind kind);

/** One update of n floats of param from grad; t is the 1-based step count
 * (Adam bias correction). state[] holds state_count buffers, zeroed at start. */
int clremat_opt_step(clremat_ctx *ctx, const clremat_opt_config *cfg, int64_t t, clremat_buf *param,
                     const clremat_buf *grad, clremat_buf *const state[2], int64_t n);

#endif
