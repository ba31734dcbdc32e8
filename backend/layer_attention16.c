/* layer_attention16.c: the attention layer's launches under a mixed policy
 * with the conversion fused into its kernels (issue 16): the input
 * projection and the weight gradient widen the 16-bit x while packing it,
 * the output projection rounds the 16-bit out in its epilogue and the
 * input projection's transpose the 16-bit din (old + new where it
 * accumulates). The forward computes qkv, probs and ctx into float32
 * buffers (the staged forward reads them unrounded) and rounds each into
 * its 16-bit slot in the kernel that computes it (with RoPE, qkv in one
 * conversion after the rotation); the backward reads the 16-bit slots
 * and dout where it uses them (GEMM packing, softmax backward, dropout
 * mask, bias sums: layer_attention.c). Bit for bit the staged launch (mixed_precision.c around
 * layer_attention.c): a widening is exact and every rounding is the one the
 * staging does. Buffers are taken from the pool for the launch and planned
 * in the layer's cost (attn16_cost). */
#include "layer_impl.h"
#include "layer_attention.h"
#include "mixed_precision.h"

enum { S_OUT, S_QKV, S_PROBS, S_CTX, N_SLOTS };

/* Elements of slot s (16-bit after clremat_mixed_cost halved its bytes). */
static int64_t slot_elems(const clremat_layer_cost *c, int s)
{
    return (int64_t)(c->slot_bytes[s] / 2);
}

static void attn16_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const size_t out = (size_t)slot_elems(c, S_OUT) * sizeof(float);
    const size_t inner = (size_t)(slot_elems(c, S_QKV) + slot_elems(c, S_PROBS) + slot_elems(c, S_CTX)) *
                         sizeof(float);
    (void)g, (void)l, (void)batch;
    /* forward: the float32 qkv, probs, ctx and the output projection's
     * partial sums; backward (reading the 16-bit slots and dout where they
     * are used): when x is 16-bit (it then has a gradient), din's partial
     * sums ([rows, D] like out) */
    c->fwd_stage_bytes = inner + out;
    c->bwd_stage_bytes = (c->in16 & 1u) ? out : 0;
}

static void release_all(clremat_ctx *ctx, clremat_buf **b, int n)
{
    for (int i = 0; i < n; i++)
        if (b[i])
            clremat_pool_release(ctx->pool, b[i]);
}

/* The launch's slots are the four 16-bit ones attn16_cost planned. */
static int check_slots(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    if (cost->slot16 != (1u << N_SLOTS) - 1 || cost->n_slots != N_SLOTS)
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "attention %s: the 16-bit launch expects four 16-bit slots",
                            c->g->layers[c->layer].name);
    return CLREMAT_OK;
}

/* Takes float32 buffers of the inner slots (qkv, probs, ctx) into f[1..3]. */
static int take_inner(clremat_layer_call *c, const clremat_layer_cost *cost, clremat_buf **f)
{
    int st = check_slots(c, cost);
    for (int s = S_QKV; s <= S_CTX && st == CLREMAT_OK; s++)
        st = clremat_mixed_take(c, slot_elems(cost, s), &f[s]);
    return st;
}

static int attn16_forward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    const int fmt = clremat_mixed_fmt(c->g);
    clremat_buf *f[N_SLOTS] = {NULL}; /* f[S_OUT]: the output projection's scratch */
    clremat_attn_io io = {0};
    int st = take_inner(c, cost, f);
    if (st == CLREMAT_OK)
        st = clremat_mixed_take(c, slot_elems(cost, S_OUT), &f[S_OUT]);
    if (st == CLREMAT_OK) {
        io.x = c->in[0], io.fx = (cost->in16 & 1u) ? fmt : CLREMAT_FMT_F32;
        io.qkv = f[S_QKV], io.probs = f[S_PROBS], io.ctx = f[S_CTX], io.fslots = fmt;
        io.qkv16 = c->slot[S_QKV], io.probs16 = c->slot[S_PROBS], io.ctx16 = c->slot[S_CTX];
        io.out = c->slot[S_OUT], io.fout = fmt, io.out_scratch = f[S_OUT];
        st = clremat_attn_forward_io(c, &io);
    }
    release_all(c->ctx, f, N_SLOTS);
    return st;
}

static int attn16_backward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    const int fmt = clremat_mixed_fmt(c->g), fx = (cost->in16 & 1u) ? fmt : CLREMAT_FMT_F32;
    clremat_buf *scr = NULL; /* din's partial sums */
    clremat_attn_io io = {0};
    int st = check_slots(c, cost);
    if (st == CLREMAT_OK && (c->in_act[0] || c->fuse_update))
        st = clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "attention %s: a fused read or update the 16-bit path "
                          "was not planned for", c->g->layers[c->layer].name);
    if (st == CLREMAT_OK && fx)
        st = clremat_mixed_take(c, slot_elems(cost, S_OUT), &scr);
    if (st == CLREMAT_OK) {
        io.x = c->in[0], io.fx = fx;
        io.qkv = c->slot[S_QKV], io.probs = c->slot[S_PROBS], io.ctx = c->slot[S_CTX], io.fslots = fmt;
        io.dout = c->dout, io.fdout = fmt;
        io.din = c->din[0], io.fdin = fx, io.din_acc = c->din_accumulate[0], io.din_scratch = scr;
        st = clremat_attn_backward_io(c, &io);
    }
    if (scr)
        clremat_pool_release(c->ctx->pool, scr);
    return st;
}

const clremat_layer_impl16 clremat_impl16_attention = {NULL, attn16_cost, attn16_forward, attn16_backward};
