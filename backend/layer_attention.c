/* layer_attention.c: multi-head self-attention over x [T, D] (leading
 * per-sample dims beyond [T, D] act as extra batch), H heads of dh = D / H.
 *   qkv = x wqkv + bqkv            slot "qkv"   rows x 3D (q | k | v, head h at cols h*dh)
 *   probs = softmax(q k^T / sqrt(dh) [+ causal mask])   slot "probs"  B x H x T x T
 *   dropped = probs * keep / (1 - rate), keep = uniform(hash(seed, step, layer,
 *             flat index into probs)) >= rate; regenerated, never stored
 *   ctx = dropped v                slot "ctx"   rows x D (heads concatenated)
 *   out = ctx wo + bo              slot 0
 * Every matrix product goes through clremat_gemm, batched over the batch
 * items, one call per head. Workspace: the forward needs B*H*T*T floats only
 * when rate > 0 (dropped probs); the backward uses one buffer laid out as
 * [R: B*H*T*T | dctx: rows*D | dqkv: rows*3D] where R holds the dropped probs,
 * then dprobs, then dscores.
 * Small language models (issue 13): with kv_heads = KV < H (grouped-query;
 * 1 = multi-query) k and v have KV heads of dh each, so wqkv is
 * [D, D + 2 KV dh] and qkv rows are q | k | v of widths D, KV dh, KV dh;
 * query head h uses kv head h / (H / KV), and the gradients of a kv head
 * are summed over its query heads in head order. use_bias false drops bqkv
 * and bo (parameters wqkv, wo). With rope, q and k are rotated in place in
 * the qkv slot after the projection (layer_rope.h), and dq, dk are rotated
 * back before the input projection's backward. */
#include "layer_attention.h"
#include "layer_seq.h"
#include "layer_rope.h"
#include "colsum.h"
#include "gemm.h"
#include "gemm16.h"
#include "mixed_precision.h"
#include <math.h>

/* Sizes of one attention layer at a batch size. */
typedef struct attn_dims {
    int64_t B, T, D, H, dh, rows, P;    /* P = B*H*T*T */
    int64_t KV, Dkv, W3, grp;           /* kv heads, their width KV*dh, qkv width D + 2 Dkv, H / KV */
    int bias;                           /* 1: bqkv and bo present */
    int iwo;                            /* index of wo in the parameters */
} attn_dims;

int seq_attn_geom_of(clremat_ctx *ctx, const clremat_layer *L, int64_t batch, seq_attn_geom *a)
{
    const clremat_shape *s = &L->in_shape[0];
    if (s->rank < 2 || (L->n_params != 4 && L->n_params != 2) || L->heads <= 0)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "attention %s: needs an input [T, D], heads >= 1 and "
                            "wqkv, bqkv, wo, bo (or wqkv, wo without biases)", L->name);
    a->T = s->dims[s->rank - 2];
    a->D = s->dims[s->rank - 1];
    if (a->T < 1 || a->D < 1)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "attention %s: input [%lld, %lld] is empty", L->name,
                            (long long)a->T, (long long)a->D);
    a->rows = seq_rows(s, batch);
    a->B = a->rows / a->T;
    a->H = L->heads;
    if (a->D % a->H != 0)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "attention %s: width %lld is not a multiple of %lld heads",
                            L->name, (long long)a->D, (long long)a->H);
    a->dh = a->D / a->H;
    a->KV = L->kv_heads > 0 ? L->kv_heads : L->heads;
    if (a->H % a->KV != 0 || (L->rope_theta > 0.0 && a->dh % 2))
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "attention %s: kv_heads %lld does not divide heads %lld, or "
                            "RoPE on an odd head width %lld", L->name, (long long)a->KV, (long long)a->H,
                            (long long)a->dh);
    a->W = a->D + 2 * a->KV * a->dh;
    a->bias = L->n_params == 4;
    a->iwo = a->bias ? 2 : 1;
    if (L->params[0].elems != a->D * a->W || (a->bias && L->params[1].elems != a->W) ||
        L->params[a->iwo].elems != a->D * a->D || (a->bias && L->params[3].elems != a->D))
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "attention %s: parameters do not match width %lld (wqkv "
                            "[D, %lld], bqkv [%lld], wo [D, D], bo [D] expected)", L->name, (long long)a->D,
                            (long long)a->W, (long long)a->W);
    if (L->rate < 0.0 || L->rate >= 1.0)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "attention %s: dropout rate %g outside [0, 1)",
                            L->name, L->rate);
    return CLREMAT_OK;
}

static int attn_get_dims(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, attn_dims *a)
{
    const clremat_layer *L = &g->layers[l];
    seq_attn_geom q;
    int st;
    if ((st = seq_attn_geom_of(ctx, L, batch, &q)) != CLREMAT_OK)
        return st;
    a->B = q.B, a->T = q.T, a->D = q.D, a->H = q.H, a->dh = q.dh, a->rows = q.rows;
    a->P = a->B * a->H * a->T * a->T;
    a->KV = q.KV;
    a->grp = a->H / a->KV;
    a->Dkv = a->KV * a->dh;
    a->W3 = q.W;
    a->bias = q.bias;
    a->iwo = q.iwo;
    if ((st = seq_check_int(ctx, L->name, "qkv", a->rows * a->W3)) != CLREMAT_OK)
        return st;
    return seq_check_int(ctx, L->name, "probs", a->P);
}

static int attn_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    attn_dims a;
    double rows, D, P, dh, W3, rope;
    int st = attn_get_dims(NULL, g, l, batch, &a);
    if (st != CLREMAT_OK)
        return st;
    rows = (double)a.rows, D = (double)a.D, P = (double)a.P, dh = (double)a.dh, W3 = (double)a.W3;
    rope = g->layers[l].rope_theta > 0.0 ? 5.0 * rows * (double)(a.D + a.Dkv) : 0.0;
    c->n_slots = 4;
    c->slot_bytes[0] = seq_fbytes(a.rows * a.D);
    c->slot_name[0] = "out";
    c->slot_bytes[1] = seq_fbytes(a.rows * a.W3);
    c->slot_name[1] = "qkv";
    c->slot_bytes[2] = seq_fbytes(a.P);
    c->slot_name[2] = "probs";
    c->slot_bytes[3] = seq_fbytes(a.rows * a.D);
    c->slot_name[3] = "ctx";
    c->bwd_needs_inputs = 1u;
    c->bwd_needs_slots = (1u << 1) | (1u << 2) | (1u << 3);
    c->fwd_temp_bytes = g->layers[l].rate > 0.0 ? seq_fbytes(a.P) : 0;
    c->bwd_temp_bytes = seq_fbytes(a.P + a.rows * a.D + a.rows * a.W3);
    /* GEMMs: qkv 2*rows*D*3D, scores and ctx 2*P*dh each, out 2*rows*D*D;
     * biases rows*4D; softmax ~5 per score (max, exp, sum, divide);
     * dropout 1 per score */
    c->fwd_flops = 2.0 * rows * D * W3 + 4.0 * P * dh + 2.0 * rows * D * D + (a.bias ? rows * (D + W3) : 0.0) +
                   5.0 * P + (g->layers[l].rate > 0.0 ? P : 0.0) + rope;
    /* GEMMs: grad wo and dctx 2*rows*D*D each, dprobs, dv, dq, dk 2*P*dh
     * each, grad wqkv and din 2*rows*D*3D each; bias sums rows*4D; softmax
     * backward ~5 per score (+ dropout mask twice) */
    c->bwd_flops = 4.0 * rows * D * D + 8.0 * P * dh + 4.0 * rows * D * W3 + (a.bias ? rows * (D + W3) : 0.0) +
                   5.0 * P + (g->layers[l].rate > 0.0 ? 2.0 * P : 0.0) + rope;
    c->param_bytes = seq_param_bytes(&g->layers[l]);
    return CLREMAT_OK;
}

/* Writes dst[e] = probs[e] * keep(e) / (1 - rate) for every element (probs
 * in format fmt, dst float32). */
static int attn_dropout(clremat_layer_call *c, const attn_dims *a, const clremat_buf *probs, int fmt,
                        clremat_buf *dst)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    if (fmt)
        return clremat_run1d(c->ctx, "attn_dropout_fwd16", a->P, SEQ_I(a->P), SEQ_F(L->rate),
                             SEQ_U(c->seed & 0xffffffffu), SEQ_U(c->seed >> 32), SEQ_U(c->step), SEQ_U(c->layer),
                             SEQ_I(fmt), SEQ_M(probs), SEQ_M(dst), SEQ_U(c->sample0 * (a->P / c->batch)), SEQ_END);
    return clremat_run1d(c->ctx, "attn_dropout_fwd", a->P, SEQ_I(a->P), SEQ_F(L->rate),
                         SEQ_U(c->seed & 0xffffffffu), SEQ_U(c->seed >> 32), SEQ_U(c->step), SEQ_U(c->layer),
                         SEQ_M(probs), SEQ_M(dst), SEQ_U(c->sample0 * (a->P / c->batch)), SEQ_END);
}

int clremat_attn_forward_io(clremat_layer_call *c, const clremat_attn_io *io)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    clremat_ctx *ctx = c->ctx;
    attn_dims a;
    int64_t T, D, dh, D3, TT, HTT;
    const clremat_buf *pd;
    const int fs = io->fslots, rope = L->rope_theta > 0.0;
    int st = attn_get_dims(ctx, c->g, c->layer, c->batch, &a);
    if (st != CLREMAT_OK)
        return st;
    T = a.T, D = a.D, dh = a.dh, D3 = a.W3, TT = a.T * a.T, HTT = a.H * a.T * a.T;
    if ((st = clremat_check_buf_fmt(ctx, L->name, "input", io->x, a.rows * D, io->fx)) != CLREMAT_OK ||
        (st = clremat_check_buf_fmt(ctx, L->name, "out", io->out, a.rows * D, io->fout)) != CLREMAT_OK ||
        (io->fout &&
         (st = clremat_check_buf(ctx, L->name, "out scratch", io->out_scratch, a.rows * D)) != CLREMAT_OK) ||
        (st = clremat_check_buf(ctx, L->name, "qkv", io->qkv, a.rows * D3)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "probs", io->probs, a.P)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "ctx", io->ctx, a.rows * D)) != CLREMAT_OK ||
        (fs && ((st = clremat_check_buf_fmt(ctx, L->name, "qkv slot", io->qkv16, a.rows * D3, fs)) != CLREMAT_OK ||
                (st = clremat_check_buf_fmt(ctx, L->name, "probs slot", io->probs16, a.P, fs)) != CLREMAT_OK ||
                (st = clremat_check_buf_fmt(ctx, L->name, "ctx slot", io->ctx16, a.rows * D, fs)) != CLREMAT_OK)) ||
        (st = clremat_check_buf(ctx, L->name, "wqkv", c->param[0], D * D3)) != CLREMAT_OK ||
        (a.bias && (st = clremat_check_buf(ctx, L->name, "bqkv", c->param[1], D3)) != CLREMAT_OK) ||
        (st = clremat_check_buf(ctx, L->name, "wo", c->param[a.iwo], D * D)) != CLREMAT_OK ||
        (a.bias && (st = clremat_check_buf(ctx, L->name, "bo", c->param[3], D)) != CLREMAT_OK))
        return st;
    if (L->rate > 0.0 && (st = clremat_check_buf(ctx, L->name, "forward workspace", c->temp, a.P)) != CLREMAT_OK)
        return st;

    /* qkv = x wqkv + bqkv (bias fused into the GEMM on the native path; a
     * 16-bit x widened while packing; the 16-bit slot rounded in the
     * epilogue unless RoPE still rotates it) */
    if (io->fx || (fs && !rope)) {
        clremat_gemm16_call g = {0};
        g.M = a.rows, g.N = D3, g.K = D;
        g.A = io->x, g.fA = io->fx, g.B = c->param[0], g.C = io->qkv, g.bias = a.bias ? c->param[1] : NULL;
        if (fs && !rope)
            g.C = io->qkv16, g.fC = fs, g.scratch = io->qkv, g.keep = 1;
        st = clremat_gemm16(ctx, &g);
    } else {
        st = clremat_gemm_dense(ctx, a.rows, D, D3, io->x, c->param[0], a.bias ? c->param[1] : NULL, 0, io->qkv,
                                NULL);
    }
    /* RoPE: q and k (adjacent: H + KV chunks of dh) rotated in place */
    if (st == CLREMAT_OK && rope)
        st = clremat_rope_run(ctx, a.rows, T, a.H + a.KV, dh, L->rope_theta, 0, 0, io->qkv, 0, D3, io->qkv, 0, D3);
    if (st == CLREMAT_OK && rope && fs)
        st = clremat_op_convert(ctx, io->qkv, CLREMAT_FMT_F32, io->qkv16, fs, a.rows * D3, 0, 1.0f, 0);
    /* scores of head h for every batch item: q_h k_g^T / sqrt(dh), g = h / grp */
    for (int64_t h = 0; h < a.H && st == CLREMAT_OK; h++)
        st = clremat_gemm(ctx, 0, 1, T, T, dh, (float)(1.0 / sqrt((double)dh)), io->qkv, h * dh, D3, T * D3,
                          io->qkv, D + h / a.grp * dh, D3, T * D3, 0.0f, io->probs, h * TT, T, HTT, a.B);
    if (st == CLREMAT_OK && fs)
        st = clremat_run1d(ctx, "attn_softmax_fwd16", a.B * a.H * T, SEQ_I(a.B * a.H * T), SEQ_I(T),
                           SEQ_I(L->causal != 0), SEQ_M(io->probs), SEQ_I(fs), SEQ_M(io->probs16), SEQ_END);
    else if (st == CLREMAT_OK)
        st = clremat_run1d(ctx, "attn_softmax_fwd", a.B * a.H * T, SEQ_I(a.B * a.H * T), SEQ_I(T),
                           SEQ_I(L->causal != 0), SEQ_M(io->probs), SEQ_END);
    pd = io->probs;
    if (st == CLREMAT_OK && L->rate > 0.0) {
        st = attn_dropout(c, &a, io->probs, 0, c->temp);
        pd = c->temp;
    }
    /* ctx_h = dropped_h v_g (and its 16-bit slot rounded in the epilogue) */
    for (int64_t h = 0; h < a.H && st == CLREMAT_OK; h++)
        st = fs ? clremat_gemm_round_copy(ctx, 0, 0, T, dh, T, 1.0f, pd, h * TT, T, HTT, io->qkv,
                                          D + a.Dkv + h / a.grp * dh, D3, T * D3, 0.0f, io->ctx, h * dh, D, T * D,
                                          a.B, io->ctx16, fs)
                : clremat_gemm(ctx, 0, 0, T, dh, T, 1.0f, pd, h * TT, T, HTT, io->qkv, D + a.Dkv + h / a.grp * dh,
                               D3, T * D3, 0.0f, io->ctx, h * dh, D, T * D, a.B);
    /* out = ctx wo + bo (a 16-bit out rounded in the epilogue) */
    if (st == CLREMAT_OK && io->fout) {
        clremat_gemm16_call g = {0};
        g.M = a.rows, g.N = D, g.K = D;
        g.A = io->ctx, g.B = c->param[a.iwo], g.C = io->out, g.fC = io->fout, g.scratch = io->out_scratch;
        g.bias = a.bias ? c->param[3] : NULL;
        st = clremat_gemm16(ctx, &g);
    } else if (st == CLREMAT_OK) {
        st = clremat_gemm_dense(ctx, a.rows, D, D, io->ctx, c->param[a.iwo], a.bias ? c->param[3] : NULL, 0, io->out,
                                NULL);
    }
    return st;
}

static int attn_forward(clremat_layer_call *c)
{
    clremat_attn_io io = {0};
    io.x = c->in[0], io.qkv = c->slot[1], io.probs = c->slot[2], io.ctx = c->slot[3], io.out = c->slot[0];
    return clremat_attn_forward_io(c, &io);
}

int clremat_attn_backward_io(clremat_layer_call *c, const clremat_attn_io *io)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    clremat_ctx *ctx = c->ctx;
    attn_dims a;
    int64_t T, D, dh, D3, TT, HTT, off_dctx, off_dqkv;
    const clremat_buf *pd;
    clremat_buf *W;
    const int fs = io->fslots, fo = io->fdout;
    int fpd;
    int st = attn_get_dims(ctx, c->g, c->layer, c->batch, &a);
    if (st != CLREMAT_OK)
        return st;
    T = a.T, D = a.D, dh = a.dh, D3 = a.W3, TT = a.T * a.T, HTT = a.H * a.T * a.T;
    off_dctx = a.P;
    off_dqkv = a.P + a.rows * D;
    W = c->temp;
    if ((st = clremat_check_buf_fmt(ctx, L->name, "input", io->x, a.rows * D, io->fx)) != CLREMAT_OK ||
        (st = clremat_check_buf_fmt(ctx, L->name, "dout", io->dout, a.rows * D, fo)) != CLREMAT_OK ||
        (st = clremat_check_buf_fmt(ctx, L->name, "qkv", io->qkv, a.rows * D3, fs)) != CLREMAT_OK ||
        (st = clremat_check_buf_fmt(ctx, L->name, "probs", io->probs, a.P, fs)) != CLREMAT_OK ||
        (st = clremat_check_buf_fmt(ctx, L->name, "ctx", io->ctx, a.rows * D, fs)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "wqkv", c->param[0], D * D3)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "wo", c->param[a.iwo], D * D)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "backward workspace", W, off_dqkv + a.rows * D3)) != CLREMAT_OK)
        return st;
    if (io->din && ((st = clremat_check_buf_fmt(ctx, L->name, "din", io->din, a.rows * D, io->fdin)) != CLREMAT_OK ||
                    (io->fdin && (st = clremat_check_buf(ctx, L->name, "din scratch", io->din_scratch,
                                                         a.rows * D)) != CLREMAT_OK)))
        return st;
    for (int i = 0; i < L->n_params; i++) {
        static const char *const names[4] = {"grad wqkv", "grad bqkv", "grad wo", "grad bo"};
        if (c->grad[i] &&
            (st = clremat_check_buf(ctx, L->name, names[a.bias || i == 0 ? i : 2], c->grad[i],
                                    L->params[i].elems)) != CLREMAT_OK)
            return st;
    }

    /* output projection: grad bo, grad wo = ctx^T dout, dctx = dout wo^T */
    if (a.bias && c->grad[3] &&
        (st = clremat_colsum(ctx, L->name, a.rows, D, D, 0, io->dout, fo, c->grad[3])) != CLREMAT_OK)
        return st;
    if (c->grad[a.iwo] && (st = clremat_gemm_fmt(ctx, 1, 0, D, D, a.rows, 1.0f, io->ctx, fs, 0, D, 0, io->dout, fo,
                                                 0, D, 0, 0.0f, c->grad[a.iwo], 0, D, 0, 1)) != CLREMAT_OK)
        return st;
    st = clremat_gemm_fmt(ctx, 0, 1, a.rows, D, D, 1.0f, io->dout, fo, 0, D, 0, c->param[a.iwo], 0, 0, D, 0, 0.0f, W,
                          off_dctx, D, 0, 1);
    /* dv_h = dropped_h^T dctx_h (dropped probs regenerated into R) */
    pd = io->probs, fpd = fs;
    if (st == CLREMAT_OK && L->rate > 0.0) {
        st = attn_dropout(c, &a, io->probs, fs, W);
        pd = W, fpd = 0;
    }
    /* (dv_g sums its query heads h in order: the first overwrites, the rest add) */
    for (int64_t h = 0; h < a.H && st == CLREMAT_OK; h++)
        st = clremat_gemm_fmt(ctx, 1, 0, T, dh, T, 1.0f, pd, fpd, h * TT, T, HTT, W, 0, off_dctx + h * dh, D, T * D,
                              h % a.grp ? 1.0f : 0.0f, W, off_dqkv + D + a.Dkv + h / a.grp * dh, D3, T * D3, a.B);
    /* R = d(dropped probs)_h = dctx_h v_g^T */
    for (int64_t h = 0; h < a.H && st == CLREMAT_OK; h++)
        st = clremat_gemm_fmt(ctx, 0, 1, T, T, dh, 1.0f, W, 0, off_dctx + h * dh, D, T * D, io->qkv, fs,
                              D + a.Dkv + h / a.grp * dh, D3, T * D3, 0.0f, W, h * TT, T, HTT, a.B);
    /* R = dscores (through the dropout mask, the softmax and the 1/sqrt(dh)) */
    if (st == CLREMAT_OK && fs)
        st = clremat_run1d(ctx, "attn_softmax_bwd16", a.B * a.H * T, SEQ_I(a.B * a.H * T), SEQ_I(T),
                           SEQ_F(L->rate), SEQ_U(c->seed & 0xffffffffu), SEQ_U(c->seed >> 32), SEQ_U(c->step),
                           SEQ_U(c->layer), SEQ_F(1.0 / sqrt((double)dh)), SEQ_I(fs), SEQ_M(io->probs), SEQ_M(W),
                           SEQ_U(c->sample0 * (a.P / c->batch)), SEQ_END);
    else if (st == CLREMAT_OK)
        st = clremat_run1d(ctx, "attn_softmax_bwd", a.B * a.H * T, SEQ_I(a.B * a.H * T), SEQ_I(T),
                           SEQ_F(L->rate), SEQ_U(c->seed & 0xffffffffu), SEQ_U(c->seed >> 32), SEQ_U(c->step),
                           SEQ_U(c->layer), SEQ_F(1.0 / sqrt((double)dh)), SEQ_M(io->probs), SEQ_M(W),
                           SEQ_U(c->sample0 * (a.P / c->batch)), SEQ_END);
    /* dq_h = dS_h k_g, dk_g = sum over its heads h of dS_h^T q_h */
    for (int64_t h = 0; h < a.H && st == CLREMAT_OK; h++) {
        st = clremat_gemm_fmt(ctx, 0, 0, T, dh, T, 1.0f, W, 0, h * TT, T, HTT, io->qkv, fs, D + h / a.grp * dh, D3,
                              T * D3, 0.0f, W, off_dqkv + h * dh, D3, T * D3, a.B);
        if (st == CLREMAT_OK)
            st = clremat_gemm_fmt(ctx, 1, 0, T, dh, T, 1.0f, W, 0, h * TT, T, HTT, io->qkv, fs, h * dh, D3, T * D3,
                                  h % a.grp ? 1.0f : 0.0f, W, off_dqkv + D + h / a.grp * dh, D3, T * D3, a.B);
    }
    /* RoPE: dq and dk rotated back (the rotation's transpose) */
    if (st == CLREMAT_OK && L->rope_theta > 0.0)
        st = clremat_rope_run(ctx, a.rows, T, a.H + a.KV, dh, L->rope_theta, 1, 0, W, off_dqkv, D3, W, off_dqkv,
                              D3);
    if (st != CLREMAT_OK)
        return st;
    /* input projection: grad bqkv, grad wqkv = x^T dqkv, din = dqkv wqkv^T */
    if (a.bias && c->grad[1] &&
        (st = clremat_colsum(ctx, L->name, a.rows, D3, D3, off_dqkv, W, 0, c->grad[1])) != CLREMAT_OK)
        return st;
    if (c->grad[0] && io->fx) { /* x widened while packing */
        clremat_gemm16_call g = {0};
        g.tA = 1, g.M = D, g.N = D3, g.K = a.rows;
        g.A = io->x, g.fA = io->fx, g.B = W, g.offB = off_dqkv, g.C = c->grad[0];
        st = clremat_gemm16(ctx, &g);
    } else if (c->grad[0]) {
        st = clremat_gemm(ctx, 1, 0, D, D3, a.rows, 1.0f, io->x, 0, D, 0, W, off_dqkv, D3, 0, 0.0f, c->grad[0], 0, D3,
                          0, 1);
    }
    if (st != CLREMAT_OK || !io->din)
        return st;
    if (io->fdin) { /* din rounded (old + new where it accumulates) in the epilogue */
        clremat_gemm16_call g = {0};
        g.tB = 1, g.M = a.rows, g.N = D, g.K = D3;
        g.A = W, g.offA = off_dqkv, g.B = c->param[0], g.C = io->din, g.fC = io->fdin, g.acc = io->din_acc;
        g.scratch = io->din_scratch;
        return clremat_gemm16(ctx, &g);
    }
    return clremat_gemm(ctx, 0, 1, a.rows, D, D3, 1.0f, W, off_dqkv, D3, 0, c->param[0], 0, D3, 0,
                        io->din_acc ? 1.0f : 0.0f, io->din, 0, D, 0, 1);
}

static int attn_backward(clremat_layer_call *c)
{
    clremat_attn_io io = {0};
    io.x = c->in[0], io.qkv = c->slot[1], io.probs = c->slot[2], io.ctx = c->slot[3], io.dout = c->dout;
    io.din = c->din[0], io.din_acc = c->din_accumulate[0];
    return clremat_attn_backward_io(c, &io);
}

const clremat_layer_impl clremat_impl_attention = {attn_cost, attn_forward, attn_backward, NULL, NULL};
