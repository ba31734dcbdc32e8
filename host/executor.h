/* executor.h: runs training steps of a graph on a device by following a
 * plan's action list: forward, free, recompute, backward, update, each
 * allocation taken from the context's pool exactly as the plan predicts. */
#ifndef CLREMAT_EXECUTOR_H
#define CLREMAT_EXECUTOR_H

#include "backend.h"
#include "graph.h"
#include "layers.h"
#include "optim.h"
#include "plan.h"

/** Bytes of the executor's fixed scratch (the non-finite counter). */
#define CLREMAT_SCRATCH_BYTES 8

/** Per layer and phase device time of the last profiled step (ns). */
typedef struct clremat_layer_profile {
    double ns[CLREMAT_PHASE_COUNT];     /**< device time per phase */
    int launches[CLREMAT_PHASE_COUNT];  /**< kernel launches per phase */
} clremat_layer_profile;

/** Device time of one kernel (by name) over the last profiled step. */
typedef struct clremat_kernel_profile {
    char name[40];
    double ns;
    int launches;
} clremat_kernel_profile;

typedef struct clremat_trainer {
    clremat_ctx *ctx;
    clremat_graph *g;               /**< training graph (owned elsewhere) */
    clremat_graph *eval_g;          /**< copy with dropout off, for evaluation (owned) */
    int64_t batch;
    int64_t loss_batch;             /**< > 0 while evaluating a partial batch: the samples the loss counts */
    int capture_layer;              /**< forward_output: the layer whose output is copied */
    float *capture_out;             /**< forward_output: where it goes (NULL: no copy) */
    uint64_t seed;
    int64_t step;                   /**< steps done (the next step's dropout key; Adam's count is step + 1) */
    int64_t data_position;          /**< training samples drawn: each successful step adds batch (the
                                         training loop draws the next batch from here; saved and restored
                                         with the optimizer state) */
    clremat_opt_config opt;
    clremat_layer_cost *costs;      /**< per layer at batch (training graph) */
    clremat_layer_cost *eval_costs; /**< per layer at batch (eval graph) */
    clremat_plan plan;              /**< the training step */
    clremat_plan eval_plan;         /**< forward only, nothing kept */
    clremat_buf ***params;          /**< [layer][param] */
    clremat_buf ***grads;
    clremat_buf ***state;           /**< [layer][param * 2 + k] */
    clremat_buf *x, *labels, *scratch;
    clremat_buf **act;              /**< [layer * CLREMAT_MAX_SLOTS + slot] while live */
    clremat_buf **dgrad;            /**< [layer] gradient of the output while live */
    clremat_buf *temp;              /**< workspace of the running action */
    clremat_layer_profile *profile; /**< per layer, filled when profiling */
    int profiling;
    cl_command_queue side_queue;    /**< recompute queue of an overlapped plan (else NULL) */
    cl_event marker;                /**< compute-queue marker the next recompute run waits for */
    int window;                     /**< overlap window open: releases carry fences (marker to join) */
    /* GEMM workspace per layer (included in costs[l].fwd/bwd_temp_bytes) */
    size_t *gemm_ws_fwd, *gemm_ws_bwd;  /**< training graph, per layer */
    size_t *eval_gemm_ws;               /**< eval graph forward, per layer */
    clremat_buf *gemm_ws;               /**< GEMM workspace of the running action */
    clremat_kernel_profile *kprof;      /**< per kernel name, last profiled step, by time (descending) */
    int n_kprof;
    double profile_wall_ns;             /**< host wall time of the last profiled step */
    double profile_device_ns;           /**< its kernels' device time, summed (every layer and phase) */
    char *tags;                         /**< per layer, the pool tags of its tensors (clremat_trainer_tag) */
    double *layer_cost;                 /**< a copy of the budget planner's per-layer costs (NULL: FLOPs), for replans */
    int update_started;                 /**< the last step reached the optimizer update (with the fused
                                             update: its backward, which updates as it goes) */
    int fused;                          /**< the update runs inside the backward (clremat_trainer_fused) */
    /** 1 (the default; $CLREMAT_NO_FUSED_ACT_GRAD=1 sets 0): a dense
     * layer's activation backward runs in the GEMM of its only consumer's
     * input gradient (layers.h, din_act), where act_grad_fusable allows it
     * and the pre-activation is resident then (no overlap, no offload). */
    int fuse_act_grad;
    unsigned char *act_grad_fusable;    /**< [layer]: a float32 dense layer with an activation whose output's
                                             only consumer is a float32 dense layer (neither LoRA nor tied) */
    unsigned char *dz_ready;            /**< [layer]: its dgrad already holds dZ (the consumer fused it) */
    clremat_buf *upd_scratch[CLREMAT_MAX_PARAMS]; /**< gradient scratch of the running backward (fused update,
                                             parameters its layer cannot update itself) */
    int replans;                        /**< steps replanned and retried after running out of device memory */
    int64_t replan_step;                /**< the step of the last replan */
    uint64_t replan_from, replan_to;    /**< predicted peaks before and after it */
    char replan_reason[512];            /**< the failure that caused it */
    /* gradient accumulation: batch above is the micro-batch; a step runs accumulate of them */
    int accumulate;                     /**< micro-batches per step (1: none) */
    clremat_buf ***accum;               /**< [layer][param] accumulated gradients (accumulate > 1) */
    int64_t sample0;                    /**< first sample of the running micro-batch in the step's batch */
    int64_t loss_div;                   /**< > 0 while stepping with accumulation: the step's batch, which
                                             divides each micro-batch's loss and gradient */
    /* offload to host (plan.n_offloads > 0) */
    cl_command_queue copy_queue;        /**< the queue of the copies to and from the host */
    void **host;                        /**< [layer * CLREMAT_MAX_SLOTS + slot] host copy while offloaded */
    struct clremat_dp_state *dp;        /**< data-parallel gradient averaging (host/dp.h); NULL: one process */
    clremat_graph *own_g;               /**< g with the plan's attention modes resolved (owned; NULL: none) */
    /* mixed_float16 dynamic loss scaling (Keras LossScaleOptimizer) */
    float loss_scale;                   /**< the current scale (1 when not mixed_float16) */
    int64_t scale_good_steps;           /**< finite steps since the scale last changed */
    int64_t skipped_steps;              /**< steps whose update was skipped (non-finite gradients) */
    int last_skipped;                   /**< 1: the last step's update was skipped */
} clremat_trainer;

/** Initial loss scale and growth interval of mixed_float16 (Keras's
 * LossScaleOptimizer defaults: 2^15, doubled after 2000 finite steps). */
#define CLREMAT_LOSS_SCALE_INITIAL 32768.0f
#define CLREMAT_LOSS_SCALE_GROWTH_STEPS 2000

/** Kinds of a layer's tensors for clremat_trainer_tag, after its slots. */
#define CLREMAT_TAG_GRADIENT CLREMAT_MAX_SLOTS           /**< the gradient of its output */
#define CLREMAT_TAG_WORKSPACE (CLREMAT_MAX_SLOTS + 1)    /**< an action's own workspace */
#define CLREMAT_TAG_GEMM_WORKSPACE (CLREMAT_MAX_SLOTS + 2) /**< an action's GEMM workspace */

/** Writes the name of layer l's tensor kind k (a slot 0 .. CLREMAT_MAX_SLOTS-1
 * or a CLREMAT_TAG_ kind) into buf: "dense1/preact", "dense1 (gradient)",
 * "dense1 (workspace)", "dense1 (GEMM workspace)"; the names of the pool's
 * tags and of the planned memory trace. */
void clremat_tensor_name(char *buf, size_t len, const clremat_graph *g, const clremat_layer_cost *costs, int l, int k);

/** The pool tag of layer l's tensor kind k (a slot 0 .. CLREMAT_MAX_SLOTS-1
 * or a CLREMAT_TAG_ kind): "dense1/preact", "dense1 (gradient)",
 * "dense1 (workspace)", so the pool's timeline names every tensor
 * (`clremat train --memory-trace`). Lives as long as the trainer. */
const char *clremat_trainer_tag(const clremat_trainer *t, int l, int k);

/** 1 when a trainer of g (NULL: float32) with optimizer opt and accumulate
 * micro-batches per step (0 or 1: none) runs the update inside the backward
 * (clremat_fused_update_applies of the planner for opt's kind and
 * no_fused_update; no gradient accumulation, no data parallelism, no
 * mixed_float16 loss scaling). */
int clremat_trainer_fused(const clremat_opt_config *opt, int accumulate, const clremat_graph *g);

/** Plans (policy p at batch), allocates the fixed memory (parameters,
 * gradients, optimizer state, batch, labels, scratch) and initializes the
 * parameters from seed. A plan whose predicted peak exceeds the pool's limit
 * is refused with CLREMAT_ERR_OUT_OF_MEMORY before anything is allocated,
 * naming bytes needed and available. */
int clremat_trainer_new(clremat_ctx *ctx, clremat_graph *g, int64_t batch, const clremat_policy *p,
                        const clremat_opt_config *opt, uint64_t seed, clremat_trainer **out);

/** Same as clremat_trainer_new, with measured per-layer forward costs for
 * the budget planner (NULL: FLOPs), and overlap != 0 to run recomputation
 * on a second queue overlapping the previous segment's backward
 * (clremat_plan_overlap; the prediction includes its memory). */
int clremat_trainer_new_costs(clremat_ctx *ctx, clremat_graph *g, int64_t batch, const clremat_policy *p,
                              const clremat_opt_config *opt, uint64_t seed, const double *layer_cost,
                              int overlap, clremat_trainer **out);

/** clremat_trainer_new_costs with gradient accumulation and offload
 * (offload: NULL none, else as clremat_plan_for_offload; the copies run on
 * a queue of their own, the host copies counted in the pool's host bytes):
 * batch is the
 * step's batch, split into accumulate micro-batches of batch / accumulate
 * (a batch not divisible by accumulate is refused naming both, see
 * clremat_accumulate_split). The plan is made per micro-batch, with the
 * accumulation buffer (one float per parameter, accumulate > 1) in its
 * fixed bytes; t->batch is the micro-batch. A step (clremat_trainer_step)
 * then takes batch samples: each micro-batch's loss and gradients are those
 * of the whole batch's mean restricted to its samples (dropout masks
 * included), the gradients are summed in micro-batch order and the
 * optimizer updates once. accumulate 1 is clremat_trainer_new_costs. */
int clremat_trainer_new_accum(clremat_ctx *ctx, clremat_graph *g, int64_t batch, int accumulate,
                              const clremat_policy *p, const clremat_opt_config *opt, uint64_t seed,
                              const double *layer_cost, int overlap, const char *offload, clremat_trainer **out);

/** Measures each layer's forward device time (ms) with a profiled step on
 * batch x, y after a warm-up step, under whatever plan fits (*out malloc'ed,
 * n_layers values; free it). The steps train a throw-away copy of the
 * parameters: the caller's trainer is not touched. */
int clremat_measure_layer_ms(clremat_ctx *ctx, clremat_graph *g, int64_t batch, const clremat_opt_config *opt,
                             uint64_t seed, const float *x, const float *y, double **out);

/** Frees everything the trainer allocated; NULL is ignored. */
void clremat_trainer_free(clremat_trainer *t);

/** Fills a planner input for g at batch from the cost model; in->costs is
 * malloc'ed (free it). opt_states may carry CLREMAT_PLAN_FUSED_UPDATE
 * (plan.h): the fused update, where a layer's backward that cannot update
 * a parameter itself (clremat_layer_fuses_update) gets that gradient as
 * backward workspace (a scratch reused across layers). With a context the costs include the GEMM workspace
 * its GEMM path needs (per layer in *ws_fwd_out / *ws_bwd_out when not NULL,
 * malloc'd); without one, the native path's (none). */
int clremat_plan_input_for(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, int opt_states,
                           const double *layer_cost, clremat_plan_input *in, size_t **ws_fwd_out, size_t **ws_bwd_out);

/** Plans policy p for graph g at batch without a device; costs filled from
 * the cost model (*costs_out, if not NULL, gets them; free() it). limit is
 * the bytes available, used by `auto` (0: none known, auto fails). layer_cost,
 * if not NULL, holds measured per-layer costs for the budget planner. Used by
 * `clremat plan`, `compare` and the trainer. */
int clremat_plan_for(const clremat_graph *g, int64_t batch, const clremat_policy *p, int opt_states,
                     uint64_t limit, const double *layer_cost, clremat_plan *out, clremat_layer_cost **costs_out);

/** clremat_plan_for on a context (NULL: no device): the cost of every
 * layer also includes the GEMM workspace the context's GEMM path needs, so
 * the plan's peak stays exact on every path; overlap != 0 moves
 * recomputation to a second queue (clremat_plan_overlap). */
int clremat_plan_for_ctx(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, const clremat_policy *p,
                         int opt_states, uint64_t limit, const double *layer_cost, int overlap, clremat_plan *out,
                         clremat_layer_cost **costs_out, size_t **ws_fwd_out, size_t **ws_bwd_out);

/** clremat_plan_for_ctx with gradient accumulation: batch is the
 * micro-batch and accumulate (>= 1) the micro-batches of a step; the plan's
 * fixed bytes include the accumulation buffer when accumulate > 1. */
int clremat_plan_for_accum(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, int accumulate,
                           const clremat_policy *p, int opt_states, uint64_t limit, const double *layer_cost,
                           int overlap, clremat_plan *out, clremat_layer_cost **costs_out, size_t **ws_fwd_out,
                           size_t **ws_bwd_out);

/** clremat_plan_for_accum, then offload (NULL: none; "all" or layer names,
 * clremat_offload_parse): the chosen outputs are copied to host memory
 * between their forward and backward uses (clremat_plan_offload), the plan
 * predicting device and host bytes. Refused with overlap. */
int clremat_plan_for_offload(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, int accumulate,
                             const clremat_policy *p, int opt_states, uint64_t limit, const double *layer_cost,
                             int overlap, const char *offload, clremat_plan *out, clremat_layer_cost **costs_out,
                             size_t **ws_fwd_out, size_t **ws_bwd_out);

/** One training step on batch x (batch * accumulate * input elems floats;
 * batch is t->batch, the micro-batch) and labels y. With accumulation the
 * micro-batches run in order through the plan, each uploaded in turn, and
 * the loss is the sum of the micro-batches' losses (each divided by the
 * step's batch). Returns the mean loss and the correct count of the batch. A non-finite
 * loss skips the update and returns CLREMAT_ERR_NONFINITE naming the first
 * layer whose output went non-finite. On any failure every tensor of the
 * step is given back; t->update_started says whether the update had begun
 * (before it, parameters and optimizer state are untouched). With the fused
 * update (t->fused) the update begins with the first backward, after the
 * loss was read and found finite. */
int clremat_trainer_step(clremat_trainer *t, const float *x, const float *y, float *loss, float *correct);

/** clremat_trainer_step, and when the device runs out of memory or
 * resources in the middle of it, before the update began: the step is
 * replanned with the budget planner for three quarters of the failed plan's
 * activation bytes (fixed bytes unchanged; where no plan is that small,
 * seven eighths, else anything below the failed peak) and run again once from the same
 * batch and step number, so its result is what it would have been (remat
 * changes no number). t->replans, replan_step, replan_from, replan_to and
 * replan_reason say what happened; the new plan stays for later steps and
 * the pool's peaks restart with it. A failure of the retry, of the replan,
 * or during the update is returned. The training loop steps with this. */
int clremat_trainer_step_replan(clremat_trainer *t, const float *x, const float *y, float *loss, float *correct);

/** Forward only (dropout off) on a batch: mean loss and correct count. */
int clremat_trainer_eval(clremat_trainer *t, const float *x, const float *y, float *loss, float *correct);

/** clremat_trainer_eval on the first n samples (1 <= n <= batch) of x and
 * y, which hold n samples: the rest of the device batch is zero padding
 * that every layer computes (samples are independent in every layer type:
 * no layer mixes samples) and the loss layer leaves out, so *loss is the
 * mean over the n samples' labels and *correct counts theirs alone. The
 * shapes, and so every allocation, are those of a full batch: a partial
 * batch needs no memory a full one does not. */
int clremat_trainer_eval_n(clremat_trainer *t, const float *x, const float *y, int64_t n, float *loss,
                           float *correct);

/** The first layer (in order) whose output holds a NaN or an infinity when
 * the n samples of x and y run forward as in clremat_trainer_eval_n: *layer
 * is its name (owned by the trainer), or NULL when every output is finite.
 * For the error of an evaluation whose loss is not finite. */
int clremat_trainer_eval_nonfinite_layer(clremat_trainer *t, const float *x, const float *y, int64_t n,
                                         const char **layer);

/** Forward only (dropout off) on a full batch x, y, copying the output
 * (slot 0) of layer layer (not the loss) into out (batch x out_shape
 * floats): the logits of an output layer, for comparisons with other
 * libraries. */
int clremat_trainer_forward_output(clremat_trainer *t, const float *x, const float *y, int layer, float *out);

/** Copies every parameter to host memory: out holds plan.param_bytes. */
int clremat_trainer_get_params(clremat_trainer *t, float *out);

/** Sets every parameter from host memory (same layout as get_params). */
int clremat_trainer_set_params(clremat_trainer *t, const float *in);

/** Turns per-launch profiling on or off (the profile of the next step). */
void clremat_trainer_set_profiling(clremat_trainer *t, int on);

/** Share of the profiled step's wall time its summed kernel times must
 * reach to be taken as device time (see clremat_trainer_profile_usable). */
#define CLREMAT_PROFILE_MIN_SHARE 1e-3

/** Whether the last profiled step's kernel times are real: their sum is at
 * least CLREMAT_PROFILE_MIN_SHARE of the step's wall time. A device whose
 * events carry no timing fails it (Mesa's rusticl 22.3 stamps every command
 * queued 0, submitted 1, started 2, ended 3 ns). 0 before any profiled step. */
int clremat_trainer_profile_usable(const clremat_trainer *t);

/** The message for a profile that is not usable: the device, its summed
 * kernel time and the step's wall time (buf of len bytes). */
void clremat_trainer_profile_problem(const clremat_trainer *t, char *buf, size_t len);

#endif /* CLREMAT_EXECUTOR_H */
