/* layer_attention.h: the attention layer's forward and backward on given
 * buffers, shared by its float32 launch (layer_attention.c) and its 16-bit
 * launch under a mixed policy (layer_attention16.c). */
#ifndef CLREMAT_LAYER_ATTENTION_H
#define CLREMAT_LAYER_ATTENTION_H

#include "layers.h"

/** The tensors of one attention launch; formats as CLREMAT_FMT_* (0:
 * float32, else 16-bit). Parameters, gradients and the workspace are c's. */
typedef struct clremat_attn_io {
    const clremat_buf *x;           /**< the input [rows, D], format fx */
    int fx;
    clremat_buf *qkv, *probs, *ctx; /**< the inner slots: float32 in the forward (fslots 16-bit: the staging
                                         the slots are rounded from), format fslots in the backward */
    int fslots;
    clremat_buf *qkv16, *probs16, *ctx16; /**< forward, fslots 16-bit: the 16-bit slots */
    clremat_buf *out;               /**< forward: the output [rows, D], format fout */
    int fout;
    clremat_buf *out_scratch;       /**< fout 16-bit: rows x D floats for the projection's partial sums */
    const clremat_buf *dout;        /**< backward: the gradient of the output, format fdout */
    int fdout;
    clremat_buf *din;               /**< backward: the input's gradient (NULL: none), format fdin */
    int fdin;
    int din_acc;                    /**< add to din (16-bit: rounded old + new) instead of overwriting it */
    clremat_buf *din_scratch;       /**< fdin 16-bit: rows x D floats for the partial sums */
} clremat_attn_io;

/** The forward of c's attention layer on io's buffers: qkv, probs, ctx
 * and out computed as layer_attention.c describes; a 16-bit x is widened
 * while the input projection packs it, a 16-bit out rounded in the output
 * projection's epilogue (gemm16.h); with fslots 16-bit, qkv16, probs16
 * and ctx16 receive the rounded float32 slots in the epilogues of the
 * kernels that compute them (with RoPE, qkv16 in a conversion after the
 * rotation). */
int clremat_attn_forward_io(clremat_layer_call *c, const clremat_attn_io *io);

/** The backward of c's attention layer on io's buffers: the parameter
 * gradients into c->grad, din from dout; 16-bit x, qkv, probs, ctx and
 * dout are widened where they are read (GEMM packing, the softmax
 * backward, the dropout mask, the bias sums), a 16-bit din rounded in the
 * epilogue. Only the workspace's tensors are float32. */
int clremat_attn_backward_io(clremat_layer_call *c, const clremat_attn_io *io);

#endif /* CLREMAT_LAYER_ATTENTION_H */
