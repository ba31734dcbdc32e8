/* layer_seq.h: helpers shared by the sequence-model layer launchers
 * (layernorm, embedding, attention, softmax cross-entropy, mse): kernel
 * argument shorthands for clremat_run/clremat_run1d and size checks. */
#ifndef CLREMAT_LAYER_SEQ_H
#define CLREMAT_LAYER_SEQ_H

#include "layer_impl.h"
#include "kernel_run.h"
#include "loop_budget.h"

/** Kernel argument pairs for clremat_run: an int, a float, a uint, a buffer
 * (NULL buffer allowed: passes a NULL cl_mem), and the terminator. */
#define SEQ_I(x) sizeof(cl_int), (const void *)&(cl_int){(cl_int)(x)}
#define SEQ_F(x) sizeof(cl_float), (const void *)&(cl_float){(cl_float)(x)}
#define SEQ_U(x) sizeof(cl_uint), (const void *)&(cl_uint){(cl_uint)(x)}
#define SEQ_M(b) sizeof(cl_mem), (const void *)&(cl_mem){(b) ? clremat_mem(b) : NULL}
#define SEQ_END (size_t)0

/** Largest element count a kernel index may reach (kernels use int). */
#define SEQ_INT_MAX 2147483647LL

/** The loss result (kernels.cl, seq_loss_finish): out[0] = sum of part[0,
 * n) / divisor, out[1] = sum of part[n, 2n) when has_correct, else 0, in
 * index order: one launch, or under a loop budget (loop_budget.h) several
 * over consecutive ranges, each continuing the sums (the same bits). */
static inline int seq_loss_finish(clremat_ctx *ctx, int64_t n, int has_correct, float divisor, clremat_buf *part,
                                  clremat_buf *out)
{
    const int64_t chunk = clremat_loop_chunk(ctx, 2, 2, n);
    int st = CLREMAT_OK;
    for (int64_t i0 = 0, i1 = -1; st == CLREMAT_OK && clremat_loop_next(n, chunk, &i0, &i1);)
        st = clremat_run1d(ctx, "seq_loss_finish", 1, SEQ_I(n), SEQ_I(has_correct), SEQ_F(divisor), SEQ_M(part),
                           SEQ_M(out), SEQ_I(i0), SEQ_I(i1), SEQ_END);
    return st;
}

/** Number of rows of a tensor of per-sample shape s at batch size batch:
 * batch times every dimension but the last. */
static inline int64_t seq_rows(const clremat_shape *s, int64_t batch)
{
    int64_t r = batch;
    for (int i = 0; i + 1 < s->rank; i++)
        r *= s->dims[i];
    return r;
}

/** Fails (CLREMAT_ERR_TOO_LARGE, naming layer and what) when n elements do
 * not fit the int indices of the kernels; ctx may be NULL. */
static inline int seq_check_int(clremat_ctx *ctx, const char *layer, const char *what, int64_t n)
{
    if (n < 0 || n > SEQ_INT_MAX)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "layer %s: %s has %lld elements, above the 2^31-1 "
                            "limit of the kernels", layer, what, (long long)n);
    return CLREMAT_OK;
}

/** Bytes of n floats. */
static inline size_t seq_fbytes(int64_t n) { return (size_t)n * sizeof(float); }

/** Sum of the parameter bytes of layer L. */
static inline size_t seq_param_bytes(const clremat_layer *L)
{
    size_t b = 0;
    for (int i = 0; i < L->n_params; i++)
        b += seq_fbytes(L->params[i].elems);
    return b;
}

/** Shape of an attention layer at a batch, shared by its plain
 * (layer_attention.c) and memory-efficient (attention_flash.c) modes. */
typedef struct seq_attn_geom {
    int64_t B, T, D, H, KV, dh, rows;   /* KV: key/value heads (kv_heads, 0 meaning H) */
    int64_t W;                          /* qkv width: (H + 2 KV) dh = D + 2 KV dh */
    int bias;                           /* 1: bqkv and bo present */
    int iwo;                            /* index of wo in the parameters */
} seq_attn_geom;

/** Fills *a for attention layer L at batch and checks what both modes need
 * (input [T, D], 4 or 2 parameters of matching sizes, heads and kv_heads
 * dividing, an even head width with RoPE, a dropout rate in [0, 1)); a
 * failure is a shape or argument error naming the layer (on ctx if any).
 * Defined in layer_attention.c. */
int seq_attn_geom_of(clremat_ctx *ctx, const clremat_layer *L, int64_t batch, seq_attn_geom *a);

#endif
