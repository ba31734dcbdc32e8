/* mixed_precision.h: mixed precision at the layer boundary (issue 16). Under a
 * mixed policy every activation slot and activation gradient is stored in
 * 16 bits (IEEE binary16 or bfloat16); a layer's launch converts its 16-bit
 * inputs, slots and gradients into float32 staging buffers, runs the
 * float32 kernels, and rounds its outputs back to 16 bits (to nearest
 * even). Parameters, their gradients, optimizer states, normalization
 * statistics and loss layers stay float32. The staging is part of the
 * layer's workspace in its cost, so the plan counts every byte. */
#ifndef CLREMAT_PRECISION_H
#define CLREMAT_PRECISION_H

#include "layers.h"

/** Storage formats of a device tensor (the kernels' fmt argument). */
enum { CLREMAT_FMT_F32 = 0, CLREMAT_FMT_F16 = 1, CLREMAT_FMT_BF16 = 2 };

/** 1 when slot s (named name) of layer l of g is stored in 16 bits: g is
 * mixed, l is not a loss layer and the slot is not a statistics slot
 * ("stats", "rstd"). */
int clremat_mixed_slot16(const clremat_graph *g, int l, int s, const char *name);

/** 1 when input i of layer l of g arrives in 16 bits (it is the output of a
 * layer whose slot 0 is stored in 16 bits; the model input stays float32). */
int clremat_mixed_input16(const clremat_graph *g, int l, int i);

/** Turns cost c of layer l at batch (its float32 cost) into its cost under
 * g's mixed policy: halves the 16-bit slots, sets slot16 / in16, adds the
 * staging to the workspaces and clears bwd_act_fusable_inputs (the
 * activation applied inside a GEMM would not round as a stored one).
 * Nothing changes at float32. cost16 non-NULL: the layer's launches fuse
 * the conversion (cost16 sets the float32 buffers they take, mixed_fused
 * is set) instead of staging; bwd_act_fusable_inputs is cleared alike. */
void clremat_mixed_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c,
                        void (*cost16)(const clremat_graph *, int, int64_t, clremat_layer_cost *));

/** The 16-bit storage format (CLREMAT_FMT_F16 or _BF16) of g's mixed
 * policy; g's precision must not be float32. */
int clremat_mixed_fmt(const clremat_graph *g);

/** A cost16 (layer_impl.h) for fused launches that need no float32
 * buffers: zero staging bytes both ways. */
void clremat_mixed_no_buffers(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c);

/** 1 unless $CLREMAT_MIXED_STAGED is set to a non-empty value other than
 * "0": then every layer converts at its boundary (the staged launch), the
 * reference the fused kernels are tested against bit for bit. */
int clremat_mixed_fusion_enabled(void);

/** Takes a float32 buffer of elems floats from the pool for the duration
 * of a mixed launch (tagged as its staging; part of the layer's planned
 * fwd_stage_bytes / bwd_stage_bytes); the caller releases it. */
int clremat_mixed_take(clremat_layer_call *c, int64_t elems, clremat_buf **out);

/** The launch of c's layer under a mixed policy: converts, runs fn (the
 * layer's float32 forward / backward) on float32 staging, converts back.
 * cost is the layer's mixed cost at c->alloc_batch (or c->batch). */
int clremat_mixed_forward(clremat_layer_call *c, const clremat_layer_cost *cost, int (*fn)(clremat_layer_call *));
int clremat_mixed_backward(clremat_layer_call *c, const clremat_layer_cost *cost, int (*fn)(clremat_layer_call *));

/** Activations mode under a mixed policy: slot 0 = round(act(source)) by the
 * one kernel that also writes it after the forward, so both round alike. */
int clremat_mixed_recompute_act(clremat_layer_call *c, const clremat_layer_cost *cost);

/** dst (format dfmt) = act(src (format sfmt)) * scale over n elements (acc:
 * added to dst's value, in float32); act 0 is the identity. */
int clremat_op_convert(clremat_ctx *ctx, const clremat_buf *src, int sfmt, clremat_buf *dst, int dfmt, int64_t n,
                       int act, float scale, int acc);

/** Whether b holds n elements of storage format fmt (0 float32, else 16-bit). */
int clremat_buf_holds(const clremat_buf *b, int64_t n, int fmt);

/** z (format fz; acc: old + new) = dy * act'(x) over n elements, dy of
 * format fdy and x of fx: clremat_act_bwd8's floats. */
int clremat_op_mul_dact(clremat_ctx *ctx, int64_t n, int act, const clremat_buf *x, int fx, const clremat_buf *dy,
                        int fdy, clremat_buf *z, int fz, int acc);

/** float16 loss scaling, one pass over count float32 gradients (g[i] of
 * n[i] floats; n[i] <= 0: skipped), eight gradients a launch: adds the
 * count of their non-finite values to the pool counter cnt
 * (clremat_counter_new) and multiplies each in place by inv (one float32
 * product an element), whatever the count. */
int clremat_op_unscale_check(clremat_ctx *ctx, clremat_buf *const *g, const int64_t *n, int count, float inv,
                             clremat_buf *cnt);

/** clremat_op_count_nonfinite over n elements of format fmt. */
int clremat_op_count_nonfinite_fmt(clremat_ctx *ctx, const clremat_buf *buf, int64_t n, int fmt, int64_t *count);

#endif
