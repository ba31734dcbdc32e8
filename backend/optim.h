/* optim.h: optimizers on the device: SGD with momentum, Adam and AdamW. Each
 * parameter tensor has up to two state tensors of the same size. */
#ifndef CLREMAT_OPTIM_H
#define CLREMAT_OPTIM_H

#include "backend.h"

/* clremat_opt_kind, clremat_opt_config, clremat_opt_defaults, clremat_opt_name,
 * clremat_opt_uses and clremat_opt_apply are public: include/clremat.h. */

/** State tensors per parameter tensor (SGD 1, Adam/AdamW 2). */
int clremat_opt_state_count(clremat_opt_kind kind);

/** One update of n floats of param from grad; t is the 1-based step count
 * (Adam bias correction). state[] holds state_count buffers, zeroed at start. */
int clremat_opt_step(clremat_ctx *ctx, const clremat_opt_config *cfg, int64_t t, clremat_buf *param,
                     const clremat_buf *grad, clremat_buf *const state[2], int64_t n);

/** clremat_opt_step decided on the device: the update runs, or changes
 * nothing, as the int in skip (a counter of clremat_counter_new) is zero
 * or not when the kernel runs; skip NULL: always. mixed_float16's loss
 * scaling enqueues its updates with the count of non-finite gradients,
 * so the host need not wait for the backward to end before enqueueing
 * them. */
int clremat_opt_step_unless(clremat_ctx *ctx, const clremat_opt_config *cfg, int64_t t, clremat_buf *param,
                            const clremat_buf *grad, clremat_buf *const state[2], int64_t n,
                            const clremat_buf *skip);

#endif
