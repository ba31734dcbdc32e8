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
    CLREMAT_POLICY_AUTO             /**< budget = the memory limit; none when it fits */
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
 * "list_of_layers:A,B", "budget:BYTES", "auto". Errors name the mode and
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
    CLREMAT_ACT_UPDATE              /**< optimizer update of every parameter */
} clremat_action_kind;

/** One action with the live bytes the simulator predicts. */
typedef struct clremat_action {
    clremat_action_kind kind;
    int layer;                      /**< -1 for UPDATE */
    int slot;                       /**< FREE: the slot */
    unsigned alloc_slots;           /**< FORWARD/RECOMPUTE(_ACT): slots allocated now (others live) */
    unsigned want_din;              /**< BACKWARD: inputs that receive a gradient */
    unsigned alloc_din;             /**< BACKWARD: of those, gradients created now (the rest accumulate) */
    uint64_t peak_during;           /**< live bytes at the action's high point */
    uint64_t live_after;            /**< live bytes after it */
} clremat_action;

/** What the planner needs besides the graph. */
typedef struct clremat_plan_input {
    const clremat_graph *g;
    int64_t batch;
    const clremat_layer_cost *costs;    /**< per layer, at this batch */
    int opt_states;                     /**< optimizer state tensors per parameter */
    uint64_t scratch_bytes;             /**< executor's small fixed scratch */
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
    uint64_t fixed_bytes;           /**< params, grads, optimizer state, batch, labels, scratch */
    uint64_t param_bytes;
    uint64_t peak_bytes;            /**< predicted high-water of live bytes, fixed included */
    uint64_t kept_act_bytes;        /**< activation bytes live at the end of the forward pass */
    double step_flops;              /**< forward + backward (+ recompute) FLOPs */
    double recompute_flops;
    int n_recompute_actions;
} clremat_plan;

/** Builds the plan of policy p (not budget/auto: see clremat_plan_budget).
 * Unknown names in list_of_layers fail with CLREMAT_ERR_PLAN listing the
 * names that exist. */
int clremat_plan_build(const clremat_plan_input *in, const clremat_policy *p, clremat_plan *out);

/** Frees a plan's arrays. */
void clremat_plan_free(clremat_plan *plan);

/** Plans from explicit per-layer and per-block wrap flags (used by the
 * policies and by the budget optimizer). act_discard may be NULL. */
int clremat_plan_from_flags(const clremat_plan_input *in, const unsigned char *wrap_layer,
                            const unsigned char *wrap_block, const unsigned char *act_discard,
                            clremat_plan *out);

/** Human name of an action kind. */
const char *clremat_action_name(clremat_action_kind k);

#endif /* CLREMAT_PLAN_H */
