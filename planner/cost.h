/* cost.h: the per-layer numbers the planner works from (pure C, no
 * OpenCL): bytes of each slot (slot 0 is the layer's output, the others its
 * internals), what the backward needs, workspace, FLOPs. The backend's cost
 * model (backend/layers.h) fills them; the executor allocates exactly these. */
#ifndef CLREMAT_COST_H
#define CLREMAT_COST_H

#include <stddef.h>
#include "graph.h"

/** Sizes and costs of one layer at a batch size. */
typedef struct clremat_layer_cost {
    int n_slots;                                  /**< >= 1; slot 0 = output */
    size_t slot_bytes[CLREMAT_MAX_SLOTS];
    const char *slot_name[CLREMAT_MAX_SLOTS];     /**< "out", "preact", "qkv", "probs", "ctx", "stats" */
    unsigned bwd_needs_inputs;                    /**< bit i: backward reads forward input i */
    unsigned bwd_needs_slots;                     /**< bit s: backward reads slot s */
    size_t fwd_temp_bytes;                        /**< workspace of the forward launch (0: none) */
    size_t bwd_temp_bytes;                        /**< workspace of the backward launch (0: none) */
    double fwd_flops, bwd_flops;
    /** Activations mode: slot 0 is an activation output that can be
     * recomputed alone by one elementwise pass from act_source (an input
     * index if act_from_input, else a slot index); -1 when not applicable. */
    int act_source;
    int act_from_input;
    size_t param_bytes;                           /**< all parameters of the layer */
    /** Bit i: the backward reads forward input i only as a GEMM operand
     * that can apply an activation while packing it, so a discarded
     * activation output feeding it is read as act(pre-activation) of its
     * producer instead of being recomputed by a pass of its own (a dense
     * layer's x in dW = x^T dZ, on the native GEMM path). */
    unsigned bwd_act_fusable_inputs;
    /** 1: those reads go through the native GEMM's operand packing, so a
     * GEMM path that cannot apply a function while packing (CLBlast) drops
     * them; 0: the layer's own kernels apply the activation (multiply,
     * layernorm), on every path. */
    int bwd_act_fuse_in_gemm;
    /* mixed precision (issue 16; all 0 at float32): bit s of slot16: slot s
     * is stored in 16 bits (slot_bytes already halved); bit i of in16: input
     * i arrives in 16 bits. The launch converts them at the layer boundary
     * into float32 staging buffers of fwd_stage_bytes / bwd_stage_bytes,
     * which fwd_temp_bytes / bwd_temp_bytes include (the executor allocates
     * the rest of the workspace; the staging is taken by the launch). */
    unsigned slot16, in16;
    size_t fwd_stage_bytes, bwd_stage_bytes;
    /** 1: the conversion is fused into the layer's kernels (the native GEMM
     * packs 16-bit operands and rounds in its epilogue): no float32 copies;
     * fwd_stage_bytes / bwd_stage_bytes then hold only the float32 buffers
     * those kernels need (a GEMM's partial sums across k-blocks, a
     * gradient read by several kernels), taken by the launch the same way.
     * 0: the staged conversion at the layer boundary. */
    int mixed_fused;
} clremat_layer_cost;

#endif /* CLREMAT_COST_H */
