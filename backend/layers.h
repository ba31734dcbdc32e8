/* layers.h: per-layer cost model and the forward/backward launchers of every
 * layer type. The cost model says, for a batch size, how many bytes each
 * slot of a layer takes (slot 0 is the output; the others are internals such
 * as a dense layer's pre-activation or attention's score matrices), which
 * slots and inputs the backward needs (the saved tensors), the temporary
 * workspace of the forward and backward launches, and their FLOPs. The
 * planner is given these numbers; the executor allocates exactly these
 * buffers, so predicted and measured live bytes agree to the byte. */
#ifndef CLREMAT_LAYERS_H
#define CLREMAT_LAYERS_H

#include "backend.h"
#include "graph.h"
#include "cost.h"
#include "plan.h"

/** Fills the cost of layer l of finalized graph g at batch size batch. */
int clremat_layer_cost_of(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *out);

/** clremat_layer_cost_of on ctx's GEMM path (ctx NULL: the native path, as
 * clremat_layer_cost_of): under a mixed policy a layer fuses the 16-bit
 * conversion into its kernels only on the native path, and stages it on
 * CLBlast (clremat_layer_cost.mixed_fused). The cost the plan and the
 * launches use. */
int clremat_layer_cost_for(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *out);

/** clremat_layer_cost_for on the GEMM path named, without a context
 * (CLREMAT_GEMM_AUTO: the native path). Layers whose launches differ by
 * path (conv2d: the im2col workspace on CLBlast, the direct kernels'
 * workspace natively) size their workspace for that path only. */
int clremat_layer_cost_on(const clremat_graph *g, int l, int64_t batch, clremat_gemm_path path,
                          clremat_layer_cost *out);

/** Largest element count any one device tensor may hold: the kernels index
 * with 32-bit ints. */
#define CLREMAT_MAX_TENSOR_ELEMS ((int64_t)2147483647)

/** The largest batch of g for which every tensor of a step (the input
 * batch, the labels, every layer's slots and workspaces) holds at most
 * CLREMAT_MAX_TENSOR_ELEMS elements; *layer (may be NULL) gets the layer
 * that bounds it (-1: the input or labels). Returns 0 when the costs cannot
 * be computed (the reason in the last error). */
int64_t clremat_max_batch(const clremat_graph *g, int *layer);

/** Checks batch against clremat_max_batch before anything is sized from
 * it: returns CLREMAT_OK, or CLREMAT_ERR_TOO_LARGE naming the batch, the
 * limit and the tensor that sets it (CLREMAT_ERR_INVALID_ARGUMENT for a
 * batch below 1). */
int clremat_batch_check(const clremat_graph *g, int64_t batch);

/** Everything a launch needs. Buffers not used by a layer type are NULL. */
typedef struct clremat_layer_call {
    clremat_ctx *ctx;
    const clremat_graph *g;
    int layer;                                  /**< index in g */
    int64_t batch;
    uint64_t seed, step;                        /**< dropout key (with layer index and element) */
    clremat_buf *in[CLREMAT_MAX_INPUTS];        /**< forward inputs */
    clremat_buf *slot[CLREMAT_MAX_SLOTS];       /**< slot buffers (slot 0 = output) */
    clremat_buf *param[CLREMAT_MAX_PARAMS];     /**< parameters, in the layer's param order */
    clremat_buf *grad[CLREMAT_MAX_PARAMS];      /**< parameter gradients (backward writes, no accumulate) */
    clremat_buf *dout;                          /**< gradient of slot 0 (backward; may be overwritten) */
    clremat_buf *din[CLREMAT_MAX_INPUTS];       /**< gradients of inputs; NULL: not wanted */
    int din_accumulate[CLREMAT_MAX_INPUTS];     /**< 1: add into din, 0: overwrite */
    clremat_buf *temp;                          /**< workspace (fwd_temp_bytes or bwd_temp_bytes) */
    clremat_buf *labels;                        /**< loss layers: class ids (as float) or targets */
    /** Fused update (backward): bit p set: the backward applies the
     * optimizer update of parameter p itself (grad[p] is NULL, its gradient
     * is never stored), with the optimizer and states of *fused; only for
     * the parameters clremat_layer_fuses_update accepts. */
    unsigned fuse_update;
    const struct clremat_fused_call *fused;
    /** Backward: in_act[i] != 0 (a clremat_act code): in[i] holds the
     * pre-activation of the layer feeding input i, whose discarded
     * activation output the backward reads as act(in[i]) inside its GEMM
     * (clremat_layer_cost.bwd_act_fusable_inputs); 0: in[i] is the input. */
    int in_act[CLREMAT_MAX_INPUTS];
    /** Backward: din_act[i] != 0 (a clremat_act code): the layer feeding
     * input i applies that activation to its output, this backward is its
     * output's only consumer, and din[i] is written already multiplied by
     * act'(din_pre[i]) (its pre-activation; din_accumulate[i] is 0), the
     * first step of that layer's backward (which then gets dout_is_dz).
     * Only layers whose backward supports it get it (dense, float32).
     * Where din_pre[i] is also in[i] (in_act[i], the same activation), the
     * backward may overwrite it with act(din_pre[i]) (its last reader). */
    int din_act[CLREMAT_MAX_INPUTS];
    clremat_buf *din_pre[CLREMAT_MAX_INPUTS];
    /** Backward: dout already holds dZ = dout * act'(pre) (the consuming
     * layer's backward multiplied it: din_act): skip that step. */
    int dout_is_dz;
    /* gradient accumulation (a micro-batch of a larger step's batch; 0: none) */
    int64_t sample0;                            /**< first sample of this call's batch in the step's batch: dropout
                                                     masks are those of the whole batch (element index offset) */
    int64_t loss_batch_div;                     /**< loss layers: the loss and its gradient are divided by this
                                                     batch's count (rows or elements), not c->batch's; 0: c->batch */
    int grad_accumulate[CLREMAT_MAX_PARAMS];    /**< 1: add into grad[p] (a table tied to a later layer's
                                                     kernel, whose backward wrote it first); embedding only */
    /** batchnorm backward: NULL: it updates the moving statistics from this
     * batch; else it adds this batch's statistics into bn_moving_acc (3 C
     * floats, overwritten when bn_moving_first) and leaves the moving
     * statistics alone, for clremat_bn_moving_finish at the step's end
     * (gradient accumulation's micro-batches, data-parallel ranks). */
    clremat_buf *bn_moving_acc;
    int bn_moving_first;
    /* mixed precision (issue 16, backend/precision.c) */
    int64_t alloc_batch;                        /**< the batch the buffers were sized for (0: batch); the
                                                     loss layer of a partial evaluation batch runs at less */
    float loss_scale;                           /**< mixed_float16: a loss layer's backward multiplies the
                                                     gradient it starts by this (0: 1) */
    const char *stage_tag;                      /**< pool tag of the float32 staging (static; NULL: a default) */
} clremat_layer_call;

/** Runs layer c->layer forward: reads in[], param[]; writes every slot.
 * Loss layers write slot 0 = {sum of loss over the batch / count, number of
 * correct predictions (softmax_ce; 0 for mse)} as two floats. */
int clremat_layer_forward(clremat_layer_call *c);

/** Recomputes slot 0 alone from act_source (activations mode). */
int clremat_layer_recompute_activation(clremat_layer_call *c);

/** Runs layer c->layer backward: reads dout and the saved inputs/slots;
 * writes grad[] and din[] (those not NULL). Loss layers ignore dout and
 * start the chain (gradient of the mean loss). */
int clremat_layer_backward(clremat_layer_call *c);

/** The step's one update of batchnorm layer l's moving statistics
 * (params[] its parameters) from acc, where n_batches equal-sized batches
 * added their statistics (clremat_layer_call.bn_moving_acc): the combined
 * batch's mean and biased variance, m = m * momentum + batch * (1 -
 * momentum). */
int clremat_bn_moving_finish(clremat_ctx *ctx, const clremat_graph *g, int l, clremat_buf *acc,
                             clremat_buf *const *params, int64_t n_batches);

/** Elementwise kernels used by the executor and optimizers. */
int clremat_op_add_inplace(clremat_ctx *ctx, clremat_buf *dst, const clremat_buf *src, int64_t n);

/** dx = dy * act'(x) (acc 0) or dx += dy * act'(x) (acc != 0), n
 * floats, dx may be dy (in place): an activation's backward, through
 * clremat_act_bwdw (clremat_act_bwd8 where the device is not 16 lanes
 * wide). Fails naming n past 2^31 - 1 elements. */
int clremat_op_act_backward(clremat_ctx *ctx, int act, int64_t n, const clremat_buf *x, const clremat_buf *dy,
                            clremat_buf *dx, int acc);

/** y = act(x), n floats, y may be x (in place): an activation recomputed
 * as a pass, through clremat_act_fwdw (clremat_act_fwd8 where the device is
 * not 16 lanes wide), the bits of the forward's activation. Fails naming n
 * past 2^31 - 1 elements. */
int clremat_op_act_forward(clremat_ctx *ctx, int act, int64_t n, const clremat_buf *x, clremat_buf *y);

/** dst = src (acc 0) or dst += src (acc != 0), n floats: gradient
 * accumulation over micro-batches. */
int clremat_op_copy_acc(clremat_ctx *ctx, clremat_buf *dst, const clremat_buf *src, int64_t n, int acc);

/** Counts non-finite values in buf's first n floats (blocking). */
int clremat_op_count_nonfinite(clremat_ctx *ctx, const clremat_buf *buf, int64_t n, int64_t *count);

/** A device counter (4 bytes from the pool, tag "nonfinite_count") set to
 * 0, for counting over several buffers with one read. */
int clremat_counter_new(clremat_ctx *ctx, clremat_buf **cnt);

/** Reads the counter into *count (blocking) and releases it. */
int clremat_counter_take(clremat_ctx *ctx, clremat_buf *cnt, int64_t *count);

/** Adds the non-finite values among buf's first n floats to the counter
 * (no read, no wait). */
int clremat_op_count_nonfinite_add(clremat_ctx *ctx, const clremat_buf *buf, int64_t n, clremat_buf *cnt);

/** The global size of a counting kernel over n elements: work-groups of
 * 256, at most 1024 of them (the kernels stride over the rest). */
size_t clremat_count_global(int64_t n);

/** C = alpha * op(A) op(B) + beta * C, row-major, op = transpose when tA/tB;
 * A is MxK (or KxM), B is KxN (or NxK); offsets and leading dims in floats.
 * batch > 1 repeats it with strides sa, sb, sc between matrices. */
int clremat_gemm(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                 const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa,
                 const clremat_buf *B, int64_t offB, int64_t ldb, int64_t sb, float beta,
                 clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch);

/** 1 when layer l's backward at batch can apply the optimizer update of its
 * parameter p itself on the context's GEMM path (ctx NULL: the native
 * path without a device), so that its gradient is never stored: a dense
 * layer's kernel (the weight-gradient GEMM's epilogue, clremat_gemm_update,
 * where clremat_gemm_update_fits) and bias (the column-sum reduction fused
 * with the update). 0 for every other parameter: the executor then gives
 * the backward a gradient scratch and updates right after it. */
int clremat_layer_fuses_update(clremat_ctx *ctx, const clremat_graph *g, int l, int p, int64_t batch);

/** Bytes of the gradient scratch layer l's backward takes from its
 * workspace under the fused update: the parameters the plan does not keep a
 * gradient for (clremat_fused_update_param of in) whose update the layer's
 * backward cannot apply itself (clremat_layer_fuses_update on ctx's GEMM
 * path at in->batch); 0 without the fused update. Every cost of layer l
 * the planner sees (the plain one, an attention variant's) adds it. */
size_t clremat_fused_scratch_bytes(clremat_ctx *ctx, const clremat_plan_input *in, const clremat_graph *g, int l);

#endif /* CLREMAT_LAYERS_H */
