/* layer_impl.h: the table entry each layer type implements (one file per
 * type, backend/layer_<type>.c), and helpers shared by those files. */
#ifndef CLREMAT_LAYER_IMPL_H
#define CLREMAT_LAYER_IMPL_H

#include "layers.h"

/** One layer type's implementation. recompute_act may be NULL. cost is
 * the layer's cost on the native GEMM path; cost_on_path, where not NULL,
 * is its cost on either path (native: 1, CLBlast: 0) for a layer whose
 * algorithm, and so workspace, depends on the path (conv2d). */
typedef struct clremat_layer_impl {
    int (*cost)(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *out);
    int (*forward)(clremat_layer_call *c);
    int (*backward)(clremat_layer_call *c);
    int (*recompute_act)(clremat_layer_call *c);
    int (*cost_on_path)(const clremat_graph *g, int l, int64_t batch, int native, clremat_layer_cost *out);
} clremat_layer_impl;

extern const clremat_layer_impl clremat_impl_dense;

/** A layer type's launches under a mixed policy with the conversion fused
 * into its kernels (layers without one use the staged launch of
 * mixed_precision.c): cost16 sets the float32 buffers the launches take
 * (fwd_stage_bytes / bwd_stage_bytes) on a cost whose 16-bit slots and
 * inputs are marked; forward16 / backward16 read and write the 16-bit
 * tensors directly, bit for bit the staged launch. Native GEMM path only. */
typedef struct clremat_layer_impl16 {
    int (*fuses)(const clremat_graph *g, int l); /**< NULL: always; else 1 when layer l's shapes fuse */
    void (*cost16)(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c);
    int (*forward16)(clremat_layer_call *c, const clremat_layer_cost *cost);
    int (*backward16)(clremat_layer_call *c, const clremat_layer_cost *cost);
} clremat_layer_impl16;

/** The dense layer's (layer_dense16.c; plain dense only, not tied or LoRA). */
extern const clremat_layer_impl16 clremat_impl16_dense;
/** The elementwise layers' (layer_elem16.c): add without broadcast, dropout, activation, layernorm. */
extern const clremat_layer_impl16 clremat_impl16_add;
extern const clremat_layer_impl16 clremat_impl16_layernorm;
extern const clremat_layer_impl16 clremat_impl16_dropout;
extern const clremat_layer_impl16 clremat_impl16_activation;
/** The attention layer's (layer_attention16.c): 16-bit x, out and din at its projections. */
extern const clremat_layer_impl16 clremat_impl16_attention;
/** The embedding's (layer_embedding.c): 16-bit output and output gradient. */
extern const clremat_layer_impl16 clremat_impl16_embedding;
/** Softmax cross-entropy's (layer_softmax_ce.c): 16-bit logits and their gradient. */
extern const clremat_layer_impl16 clremat_impl16_softmax_ce;
extern const clremat_layer_impl clremat_impl_activation;
extern const clremat_layer_impl clremat_impl_dropout;
extern const clremat_layer_impl clremat_impl_layernorm;
extern const clremat_layer_impl clremat_impl_add;
extern const clremat_layer_impl clremat_impl_embedding;
extern const clremat_layer_impl clremat_impl_attention;
extern const clremat_layer_impl clremat_impl_reshape;
extern const clremat_layer_impl clremat_impl_softmax_ce;
extern const clremat_layer_impl clremat_impl_mse;
/* small language models (issue 13) */
extern const clremat_layer_impl clremat_impl_rmsnorm;
extern const clremat_layer_impl clremat_impl_rope;
extern const clremat_layer_impl clremat_impl_multiply;
extern const clremat_layer_impl clremat_impl_dense_tied; /**< dense with "tie" */
extern const clremat_layer_impl clremat_impl_lora;       /**< dense with a LoRA adapter */

/** clremat_layer_fuses_update for a dense layer. */
int clremat_dense_fuses_update(clremat_ctx *ctx, const clremat_graph *g, int l, int p, int64_t batch);

/** Attention in its memory-efficient mode (backend/attention_flash.c):
 * layers.c sends an attention layer here when clremat_attn_is_mem_eff. */
extern const clremat_layer_impl clremat_impl_attention_flash;
/* convolutional networks */
extern const clremat_layer_impl clremat_impl_conv2d;
extern const clremat_layer_impl clremat_impl_pool; /* max/avg/global-avg pooling, zero padding */
extern const clremat_layer_impl clremat_impl_batchnorm;
extern const clremat_layer_impl clremat_impl_concat;

#endif
