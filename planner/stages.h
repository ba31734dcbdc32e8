/* stages.h: internal to the budget planner. The graph cut into a chain of
 * stages at single-tensor cut points, the stage operations of the rotor
 * model (forward keeping the input, forward discarding it, forward keeping
 * everything the backward needs, backward) emitted as layer actions by one
 * engine, and each operation's memory profile (peak and net live bytes
 * relative to its start), measured by running that same engine. Pure C. */
#ifndef CLREMAT_STAGES_H
#define CLREMAT_STAGES_H

#include <stdint.h>
#include "plan.h"

/** Memory profile of one operation, relative to its start. */
typedef struct clremat_prof {
    int64_t peak;               /**< highest live bytes above the start (>= 0) */
    int64_t net;                /**< live bytes after it minus before */
} clremat_prof;

/** The chain of stages. Stage i runs layers lo[i]..hi[i]; its input is the
 * output (slot 0) of hi[i-1] (the model input for stage 0), its output the
 * output of hi[i]; no other tensor crosses between stages. */
typedef struct clremat_stages {
    const clremat_plan_input *in;
    int n;                      /**< layers */
    int K;                      /**< stages */
    int *lo, *hi;               /**< per stage */
    int *stage_of;              /**< per layer */
    int *lastfwd;               /**< per layer: last consumer in its own stage, -1 none */
    int *minbwd;                /**< per layer*SLOTS: lowest layer of its stage whose backward reads it, -1 none */
    int *in_lastfwd;            /**< per stage: last layer of the stage consuming the stage input */
    int *in_minbwd;             /**< per stage: lowest layer whose backward reads the stage input, -1 none */
    unsigned char *outneed;     /**< per stage: its own backward reads its output */
    unsigned char *inneed;      /**< per stage: its backward reads its input */
    int64_t *A;                 /**< per stage: bytes of its output (the loss value for the last) */
    double *fcost;              /**< per stage: forward cost (layer_cost or fwd_flops) */
    double total_fcost;         /**< sum of fcost: one forward of the whole graph */
    double *fcleaf;             /**< per [2*i+k]: cost of the layers the leaf forward (fal) reruns */
    /* profiles: [i], or [2*i+k] for k = keep the stage input after the op */
    clremat_prof *fn;           /**< forward, input freed after its last use, internals dropped */
    clremat_prof *fk;           /**< forward, input kept, internals dropped */
    clremat_prof *fac;          /**< forward keeping what the backward needs and the output (chain) */
    clremat_prof *fal;          /**< same, output kept only if the backward reads it (leaf) */
    clremat_prof *bwd;          /**< backward of the stage */
    int64_t unit_gcd;           /**< gcd of every profile quantity (exact discretization unit) */
} clremat_stages;

/** Cuts in->g into stages (at most max_stages: adjacent non-loss stages are
 * merged evenly beyond that) and measures every operation's profile. A
 * layer whose output nothing reads (other than the loss) fails with
 * CLREMAT_ERR_PLAN. */
int clremat_stages_build(const clremat_plan_input *in, int max_stages, clremat_stages *st);

/** Frees the arrays of st. */
void clremat_stages_free(clremat_stages *st);

/** Live bytes that Solve(s, t, keep) leaves behind, relative to its start:
 * the input gradient replaces the input (or joins it when keep), the output
 * gradient goes, the loss value stays when t is the last stage. */
int64_t clremat_stages_net(const clremat_stages *st, int s, int t, int keep);

/** The executor of stage operations: live tensors, gradients and relative
 * live bytes; appends layer actions when emitting. */
typedef struct clremat_sx {
    const clremat_stages *st;
    unsigned char *live, *grad, *ran;
    int64_t bytes, peak;
    double ran_cost;            /**< forward cost of the layers run so far */
    int emit;
    clremat_action *acts;
    int n_acts, cap_acts;
    int err;                    /**< first error (out of host memory) */
} clremat_sx;

/** Sets up an executor over st (emit: keep the actions). */
int clremat_sx_init(clremat_sx *x, const clremat_stages *st, int emit);

/** Frees an executor. */
void clremat_sx_free(clremat_sx *x);

/** Forward of stage i: each layer FORWARD (first run) or RECOMPUTE, then
 * FREE of every tensor no longer needed. all: keep what the stage's backward
 * reads; keep_in: keep the stage input; keep_out: keep the stage output. */
void clremat_sx_forward(clremat_sx *x, int i, int all, int keep_in, int keep_out);

/** Backward of stage i: BACKWARD of its layers in reverse, each followed by
 * FREE_GRAD of its output gradient and FREE of what no later backward of the
 * stage reads (the stage input too unless keep_in). */
void clremat_sx_backward(clremat_sx *x, int i, int keep_in);

/** Appends UPDATE and the final FREE of the loss value. */
void clremat_sx_finish(clremat_sx *x);

/** Dead recomputation removal (prune.c) on a simulated action list
 * (alloc_slots filled): drops the first RECOMPUTE or RECOMPUTE_ACT none of
 * whose allocated slots is read before it is freed, with the FREEs of those
 * slots, and returns the new length (n when there is none). Simulate again
 * and repeat until it returns n. */
int clremat_actions_drop_dead(const clremat_plan_input *in, clremat_action *acts, int n);

/** Whether action a reads slot s of layer L, by the simulator's rules: a
 * forward or recompute reads its inputs' outputs, an activation recompute
 * its source, a backward the slots and inputs its layer's backward needs. */
int clremat_action_reads(const clremat_plan_input *in, const clremat_action *a, int L, int s);

#endif /* CLREMAT_STAGES_H */
