/* plan.h: remat policies (Keras RematScope modes and beyond), the plan of a
 * training step (which tensors are kept after the forward pass, which units
 * are recomputed, the step as a list of actions) and the memory simulator
 * that predicts live device bytes after every action. Pure C, no OpenCL. */
#ifndef CLREMAT_PLAN_H
#define CLREMAT_PLAN_H

#include <stdint.h>
#include "cost.h"
#include "graph.h"

/** Remat policies. */
typedef enum clremat_policy_kind {
    CLREMAT_POLICY_NONE = 0,        /**< keep everything the backward needs */
    CLREMAT_POLICY_FULL,            /**< every layer and block wrapped, recursively */
    CLREMAT_POLICY_ACTIVATIONS,     /**< activation outputs recomputed by one elementwise pass */
    CLREMAT_POLICY_LARGER_THAN,     /**< layers whose output has > threshold elements (batch included) */
    CLREMAT_POLICY_LIST,            /**< the named layers or blocks */
    CLREMAT_POLICY_BUDGET,          /**< least recompute within budget bytes */
    CLREMAT_POLICY_AUTO,            /**< budget = the memory limit; none when it fits */
    CLREMAT_POLICY_SAVE_DOTS        /**< keep matrix-product outputs, recompute the elementwise work between them */
} clremat_policy_kind;

#define CLREMAT_MAX_POLICY_NAMES 64

/** A parsed --remat MODE. */
typedef struct clremat_policy {
    clremat_policy_kind kind;
    int64_t threshold;              /**< larger_than (default 1024) */
    int n_names;                    /**< list_of_layers */
    char names[CLREMAT_MAX_POLICY_NAMES][CLREMAT_NAME_LEN];
    uint64_t budget;                /**< budget bytes */
    char text[256];                 /**< the mode as written, for reports */
} clremat_policy;

/** Parses "none", "full", "activations", "larger_than[:N]",
 * "list_of_layers:A,B", "save_dots", "budget:BYTES", "auto". Errors name the mode and
 * list the valid ones (clremat_last_error). */
int clremat_policy_parse(const char *text, clremat_policy *out);

/** What one action of the step does. */
typedef enum clremat_action_kind {
    CLREMAT_ACT_FORWARD = 0,        /**< run a layer's forward (first time in the step) */
    CLREMAT_ACT_RECOMPUTE,          /**< rerun a layer's forward for a wrapped unit */
    CLREMAT_ACT_RECOMPUTE_ACT,      /**< recompute an activation output alone (activations mode) */
    CLREMAT_ACT_BACKWARD,           /**< run a layer's backward */
    CLREMAT_ACT_FREE,               /**< release an activation tensor (layer, slot) */
    CLREMAT_ACT_FREE_GRAD,          /**< release the gradient of a layer's output */
    CLREMAT_ACT_UPDATE,             /**< optimizer update of every parameter */
    CLREMAT_ACT_OFFLOAD,            /**< copy a live tensor (layer, slot) to host memory, free it on the device */
    CLREMAT_ACT_FETCH               /**< bring an offloaded tensor back to the device, free its host copy */
} clremat_action_kind;

/** One action with the live bytes the simulator predicts. */
typedef struct clremat_action {
    clremat_action_kind kind;
    int layer;                      /**< -1 for UPDATE */
    int slot;                       /**< FREE: the slot */
    unsigned alloc_slots;           /**< FORWARD/RECOMPUTE(_ACT): slots allocated now (others live) */
    unsigned want_din;              /**< BACKWARD: inputs that receive a gradient */
    unsigned alloc_din;             /**< BACKWARD: of those, gradients created now (the rest accumulate) */
    unsigned fuse_act_in;           /**< BACKWARD: inputs whose discarded activation output is read as
                                         act(its producer's kept pre-activation) inside the GEMM
                                         (bwd_act_fusable_inputs), never materialized */
    uint64_t peak_during;           /**< live bytes at the action's high point */
    uint64_t live_after;            /**< live bytes after it */
    /* overlap (clremat_plan_overlap): which queue runs it and how queues sync */
    unsigned char queue;            /**< 0: compute queue; 1: recompute queue */
    unsigned char marker;           /**< the recompute queue's next run waits for work before this action */
    unsigned char join;             /**< the compute queue waits for the recompute queue before this action */
    uint64_t host_after;            /**< host bytes of offloaded tensors after it (clremat_plan_offload) */
} clremat_action;

/** What the planner needs besides the graph. */
typedef struct clremat_plan_input {
    const clremat_graph *g;
    int64_t batch;
    const clremat_layer_cost *costs;    /**< per layer, at this batch */
    int opt_states;                     /**< optimizer state tensors per parameter */
    uint64_t scratch_bytes;             /**< executor's small fixed scratch */
    /** Optional per-layer forward cost (e.g. measured milliseconds) the
     * budget planner minimizes; NULL: the cost model's fwd_flops. Put it
     * last so positional initializers of the fields above stay valid. */
    const double *layer_cost;
    /** 1: the optimizer update runs inside the backward (the fused update):
     * the gradients of the parameters clremat_fused_update_param accepts
     * are not fixed bytes (a layer's gradient scratch, where its backward
     * needs one, is in its costs' bwd_temp_bytes). 0: every gradient is. */
    int fused_update;
    /** Gradient accumulation: micro-batches per step (batch above is the
     * micro-batch); > 1 adds an accumulation buffer of one float per
     * parameter to the fixed bytes (planner/accumulate.c). 0 or 1: none. */
    int accumulate;
    /** Data-parallel ranks whose batches make one step (0 or 1: one): > 1
     * (like accumulate > 1) adds batchnorm's statistics sums to the
     * accumulation buffer (clremat_bn_moving_sums_floats). */
    int replicas;
    /** Offload to host for budget: and auto: what copying one byte to the
     * host and back costs, in the units of the recompute cost (FLOPs, or
     * the unit of layer_cost); 0: offload is not a choice (a host-unified
     * device, where it frees nothing real, or no measurement). */
    double offload_cost_per_byte;
} clremat_plan_input;

/** A plan of one training step. */
typedef struct clremat_plan {
    clremat_policy policy;
    int n_layers;
    unsigned char *wrapped_layer;   /**< per layer: 1 if inside a wrapped unit (its forward is rerun) */
    unsigned char *wrapped_block;   /**< per block: 1 if wrapped */
    unsigned char *kept;            /**< per tensor layer*CLREMAT_MAX_SLOTS+slot: kept after the forward pass */
    unsigned char *act_discard;     /**< per layer: activation output recomputed (activations mode) */
    int *recomputes;                /**< per layer: forward reruns (RECOMPUTE + RECOMPUTE_ACT) */
    clremat_action *actions;
    int n_actions, cap_actions;
    uint64_t fixed_bytes;           /**< params, grads (not with the fused update), optimizer state, batch, labels, scratch */
    uint64_t param_bytes;
    uint64_t peak_bytes;            /**< predicted high-water of live bytes, fixed included */
    uint64_t kept_act_bytes;        /**< activation bytes live at the end of the forward pass */
    double step_flops;              /**< forward + backward (+ recompute) FLOPs */
    double recompute_flops;
    int n_recompute_actions;
    int n_fused_act_reads;          /**< activation recomputations fused into a backward's GEMM (fuse_act_in bits) */
    int overlap;                    /**< recomputation overlaps backward on a second queue */
    int n_overlapped;               /**< recompute runs moved to the second queue */
    int accumulate;                 /**< micro-batches per step (1: no accumulation) */
    uint64_t accum_bytes;           /**< accumulation buffer, included in fixed_bytes (0 when accumulate is 1) */
    uint64_t host_peak_bytes;       /**< predicted high-water of host bytes holding offloaded tensors */
    uint64_t offload_bytes;         /**< bytes copied to the host per step (and as many back) */
    int n_offloads;                 /**< OFFLOAD actions (each with its FETCH) */
    /** Per layer: 1 where the plan runs the layer's alternative (for an
     * attention layer with "attention": "auto", memory_efficient) and was
     * planned with its alternative cost; NULL: none (clremat_plan_variants). */
    unsigned char *variant;
} clremat_plan;

/** Builds the plan of policy p: a fixed mode through clremat_plan_fixed,
 * budget:BYTES through clremat_plan_budget. auto needs the device's memory
 * limit: plan it with clremat_plan_auto (CLREMAT_ERR_PLAN here). */
int clremat_plan_build(const clremat_plan_input *in, const clremat_policy *p, clremat_plan *out);

/** Builds the plan of a fixed policy (none, full, activations, larger_than,
 * list_of_layers), the Keras RematScope modes. Unknown names in
 * list_of_layers fail with CLREMAT_ERR_PLAN listing the names that exist;
 * budget and auto fail with CLREMAT_ERR_PLAN (they are searched, not fixed). */
int clremat_plan_fixed(const clremat_plan_input *in, const clremat_policy *p, clremat_plan *out);

/** Frees a plan's arrays. */
void clremat_plan_free(clremat_plan *plan);

/** Plans from explicit per-layer and per-block wrap flags (used by the
 * policies and by the budget optimizer). act_discard may be NULL. */
int clremat_plan_from_flags(const clremat_plan_input *in, const unsigned char *wrap_layer,
                            const unsigned char *wrap_block, const unsigned char *act_discard,
                            clremat_plan *out);

/** Wrap decisions for clremat_plan_from_flagset. Per layer: wrap_layer
 * (the layer is a wrapped unit), act_discard (its activation output is
 * recomputed by one elementwise pass), pin (bit s: slot s is kept for the
 * backward even inside a wrapped unit, whose recomputation then skips it);
 * per block: wrap_block. act_discard and pin may be NULL (all zero). */
typedef struct clremat_flagset {
    const unsigned char *wrap_layer;
    const unsigned char *wrap_block;
    const unsigned char *act_discard;
    const unsigned char *pin;
} clremat_flagset;

/** Plans from a flag set (clremat_plan_from_flags with pinned slots). */
int clremat_plan_from_flagset(const clremat_plan_input *in, const clremat_flagset *f, clremat_plan *out);

/** The flags of save_dots (planner/policies.c) into caller arrays of
 * n_layers (wl, ad, pin) and n_blocks (wb) entries. */
void clremat_save_dots_flags(const clremat_plan_input *in, unsigned char *wl, unsigned char *wb, unsigned char *ad,
                             unsigned char *pin);

/** Overlap (planner/overlap.c): lets each recomputation run on a second
 * queue while the previous segment's backward runs. The order of actions,
 * hence every allocation and free and the predicted peak, stays that of the
 * sequential plan; only the actions' queue, marker and join flags are set.
 * The executor makes the overlap safe with fenced releases (a buffer freed
 * by the running backward is handed to the recomputation only after a wait
 * for its last use). Pairs where the recomputation would rewrite a live
 * tensor the backward reads stay sequential. Changes *plan in place. */
int clremat_plan_overlap(const clremat_plan_input *in, clremat_plan *plan);

/** 1 when layer N's backward can read its input i, the activation output
 * of the layer P feeding it, as act(P's kept pre-activation) inside its
 * GEMM instead of the materialized output: N marks input i in
 * bwd_act_fusable_inputs and P's activation output is recomputable from
 * one of its own slots (act_source >= 0, not from an input). The schedule
 * then fuses the read whenever P's output is not live and that slot is. */
int clremat_plan_act_fusable(const clremat_layer_cost *costs, const clremat_graph *g, int N, int i);

/** Human name of an action kind. */
const char *clremat_action_name(clremat_action_kind k);

/* ------------------------------------------------------- fused update */

/** What decides whether the optimizer update runs inside the backward
 * (planner/fused.c). Zero-initialize it and set what is known. */
typedef struct clremat_fused_query {
    int opt_kind;       /**< clremat_opt_kind */
    int disabled;       /**< the user turned it off (--no-fused-update) */
    int accumulate;     /**< gradient accumulation steps per update (0 or 1: none) */
    int replicas;       /**< data-parallel replicas whose gradients are reduced (0 or 1: none) */
    int loss_scaling;   /**< mixed_float16: a step with non-finite gradients skips its update */
} clremat_fused_query;

/** 1 when the step's update runs inside the backward: SGD with momentum,
 * Adam or AdamW, not disabled, no gradient accumulation, no data
 * parallelism, no loss scaling (the step's update may only run once every
 * gradient is known finite). The one predicate the trainer, `clremat plan` and the
 * advisor ask; a new condition (gradient clipping by global norm, which
 * needs every gradient before any update) belongs here. */
int clremat_fused_update_applies(const clremat_fused_query *q);

/** Layers whose backward contributes to the gradient of parameter p of
 * layer l: 1 for a parameter of one layer, 2 for an embedding table tied to
 * a dense layer ("tie"), 0 for a frozen parameter (no gradient) or an
 * invalid (l, p). */
int clremat_param_uses(const clremat_graph *g, int l, int p);

/** 1 when in->fused_update and parameter p of layer l has one use: its
 * update runs right after (or inside) that layer's backward, and its
 * gradient is not a fixed tensor. */
int clremat_fused_update_param(const clremat_plan_input *in, int l, int p);

/** Bytes of the parameter gradients a plan keeps as fixed memory: those of
 * every trained (not frozen) parameter without the fused update, those
 * clremat_fused_update_param refuses with it. */
uint64_t clremat_plan_grad_bytes(const clremat_plan_input *in);

/** Flag or'ed into the opt_states argument of clremat_plan_for_ctx and
 * clremat_plan_input_for: plan with the fused update (in->fused_update). */
#define CLREMAT_PLAN_FUSED_UPDATE 0x100

/* ------------------------------------------------ gradient accumulation */

/** Largest --accumulate accepted. */
#define CLREMAT_MAX_ACCUMULATE 65536

/** Splits batch into accumulate micro-batches (*micro = batch / accumulate).
 * A batch not divisible by accumulate fails with
 * CLREMAT_ERR_INVALID_ARGUMENT naming both numbers, the remainder and the
 * nearest multiples; so does accumulate outside [1, CLREMAT_MAX_ACCUMULATE]. */
int clremat_accumulate_split(int64_t batch, int64_t accumulate, int64_t *micro);

/** Floats a batchnorm layer L sums its micro-batches' statistics in for the
 * step's one update of its moving statistics (3 per channel), 0 for any
 * other layer. */
int64_t clremat_bn_moving_sums_floats(const clremat_layer *L);

/** Bytes of the accumulation buffer of in: one float per trainable
 * parameter when in->accumulate > 1, plus clremat_bn_moving_sums_floats of
 * every batchnorm layer when in->accumulate > 1 or in->replicas > 1 (several
 * batches a step); counted in clremat_plan_fixed_bytes. */
uint64_t clremat_accum_bytes(const clremat_plan_input *in);

/** Sets out->accumulate and out->accum_bytes from in (the planners call it
 * where they set the fixed bytes). */
void clremat_plan_set_accumulate(const clremat_plan_input *in, clremat_plan *out);

/* ------------------------------------------------------ offload to host */

/** Offload (planner/offload.c): for every layer L with want[L] (n_layers
 * entries) whose output (slot 0) is live at the end of the forward pass and
 * read again in the backward pass, an OFFLOAD action right after the last
 * forward-pass action that touches it (L's own run or a reader's) and a
 * FETCH right before the first backward-pass action that touches it. The
 * loss layer and outputs nothing reads in the backward pass are left alone.
 * The new list goes through the simulator (clremat_plan_from_actions), so
 * device bytes (an offloaded tensor is not live there) and host bytes
 * (host_peak_bytes, each action's host_after) are predicted exactly.
 * Replaces *plan (its policy kept). Not with an overlapped plan. An explicit
 * choice: no planner picks offload by itself (see docs/ARCHITECTURE.md). */
int clremat_plan_offload(const clremat_plan_input *in, clremat_plan *plan, const unsigned char *want);

/** budget:BYTES with offload as a third choice beside keep and recompute:
 * clremat_plan_budget's plan, against plans that offload kept outputs of
 * the none plan and of that plan (largest first, until the peak is within
 * budget), each costing its recomputation plus offload_bytes times
 * in->offload_cost_per_byte; the cheapest that fits wins (ties: the plan
 * without offload). With offload_cost_per_byte 0 it is clremat_plan_budget. */
int clremat_plan_budget_offload(const clremat_plan_input *in, uint64_t budget, clremat_plan *out);

/** Parses --offload NAMES ("all", or layer names separated by commas) into
 * want (n_layers entries of g). An unknown name fails with
 * CLREMAT_ERR_PLAN naming it and listing the layers there are. */
int clremat_offload_parse(const clremat_graph *g, const char *names, unsigned char *want);

/* ------------------------------------------------------ budget planner */

/** Fixed device bytes of a step (parameters, their gradients unless the
 * update is fused, clremat_plan_grad_bytes, optimizer state, input batch,
 * labels, scratch, and the gradient accumulation buffer when
 * in->accumulate > 1), as schedule.c counts them; the
 * parameter bytes alone go to *param_bytes (may be NULL). */
uint64_t clremat_plan_fixed_bytes(const clremat_plan_input *in, uint64_t *param_bytes);

/** The memory simulator on its own (planner/simulate.c): takes a bare action
 * list (kind, layer, slot; the other fields are ignored and recomputed),
 * checks that the executor can follow it (forward inputs live; FORWARD only
 * the first time a layer runs, RECOMPUTE after; a backward's saved tensors
 * and output gradient live; backwards in reverse layer order, each layer
 * exactly once; FREE of live tensors only, the loss value only after the
 * UPDATE; FREE_GRAD after the layer's backward; one UPDATE after every
 * backward; nothing but fixed bytes live at the end) and fills out as
 * clremat_plan_from_flags would: alloc_slots, want_din, alloc_din, live bytes
 * and peaks, kept (live after the last FORWARD and the frees right after
 * it), recomputes, recompute_flops (fwd_flops per RECOMPUTE, slot-0 floats
 * per RECOMPUTE_ACT), step_flops, kept_act_bytes, wrapped_layer (layers
 * RECOMPUTEd at least once), act_discard (layers with a RECOMPUTE_ACT) and
 * wrapped_block (blocks all of whose layers are RECOMPUTEd). p may be NULL.
 * An invalid list fails with CLREMAT_ERR_PLAN naming the action index, its
 * kind and layer; out is then left empty. */
int clremat_plan_from_actions(const clremat_plan_input *in, const clremat_action *acts, int n,
                              const clremat_policy *p, clremat_plan *out);

/** Recompute cost of a plan in the units the budget planner minimizes: with
 * in->layer_cost, the sum of layer_cost over RECOMPUTE actions (a
 * RECOMPUTE_ACT counts layer_cost scaled by its elementwise share, slot-0
 * floats / fwd_flops, at most 1, and so does each activation a backward
 * recomputes inside its GEMM, fuse_act_in); without, plan->recompute_flops. */
double clremat_plan_recompute_cost(const clremat_plan_input *in, const clremat_plan *plan);

/** budget:BYTES (planner/budget.c): the plan with the least recompute cost
 * whose predicted peak (fixed bytes included) is at most budget. The graph
 * is cut into a chain of stages at single-tensor cut points and the optimal
 * persistent checkpointing schedule for heterogeneous chains (Beaumont et
 * al., rotor) is computed; see docs/ARCHITECTURE.md for the memory model,
 * the discretization and the fallbacks. When the none plan fits it is
 * returned (zero recompute). A budget below the smallest peak the planner
 * can reach fails with CLREMAT_ERR_PLAN naming that peak in bytes. */
int clremat_plan_budget(const clremat_plan_input *in, uint64_t budget, clremat_plan *out);

/** auto: the none plan when its peak fits within limit, else
 * clremat_plan_budget(in, limit, out). */
int clremat_plan_auto(const clremat_plan_input *in, uint64_t limit, clremat_plan *out);

/** Chen et al.'s sqrt(n) baseline over the same stages: segments of about
 * sqrt(#stages) stages, segment inputs kept, every segment recomputed once
 * (keeping everything) just before its backward. */
int clremat_plan_sqrt(const clremat_plan_input *in, clremat_plan *out);

/** One point of a Pareto sweep. */
typedef struct clremat_pareto_point {
    uint64_t budget;                /**< the smallest budget swept that gave this plan */
    uint64_t peak_bytes;            /**< predicted peak of the plan */
    double recompute_cost;          /**< clremat_plan_recompute_cost of the plan */
} clremat_pareto_point;

/** Sweeps `points` (>= 2) budgets evenly from the smallest feasible peak to
 * the none plan's peak, plus the peaks of the flag search's front, and
 * returns the distinct plans found, sorted by peak,
 * each strictly cheaper than every point with a smaller peak (a monotone
 * front). *out is malloc'ed (free it); *n its length. */
int clremat_plan_pareto(const clremat_plan_input *in, int points, clremat_pareto_point **out, int *n);

/** A labelled point of a Pareto plot (a Keras-style mode). */
typedef struct clremat_pareto_mark {
    char label[96];                 /**< e.g. "none", "list_of_layers:block_0" */
    uint64_t peak_bytes;
    double recompute_cost;
} clremat_pareto_mark;

/** The Keras-style modes as labelled points: none, full, activations,
 * larger_than (threshold 1024), save_dots, and list_of_layers:B for each top-level
 * block B. *out is malloc'ed (free it); *n its length. */
int clremat_pareto_marks(const clremat_plan_input *in, clremat_pareto_mark **out, int *n);

/* ------------------------------------------------ per-layer variants */

/** budget:BYTES or auto (policy p; limit: the memory limit auto fits) with
 * a choice per layer (planner/variants.c): alt[l] is layer l's cost when it
 * runs its alternative (for attention with "attention": "auto", the
 * memory-efficient mode), alt[l].n_slots == 0 where the layer has none.
 * Tries the plain costs and growing sets of alternatives, the layers that
 * save the most bytes first, and returns the plan whose recompute cost plus
 * the alternatives' extra cost (their extra forward and backward FLOPs, or
 * in->layer_cost scaled by them) is least within the budget; ties keep
 * fewer alternatives. out->variant marks the layers switched (NULL: none);
 * the plan was simulated with their alt costs, so the executor must
 * allocate and run those. Other policies plan as clremat_plan_build. */
int clremat_plan_variants(const clremat_plan_input *in, const clremat_layer_cost *alt, const clremat_policy *p,
                          uint64_t limit, clremat_plan *out);

#endif /* CLREMAT_PLAN_H */
