/* attention_flash.c: the memory-efficient mode of the attention layer
 * ("attention": "memory_efficient"). Same parameters, inputs and outputs as
 * the plain layer (layer_attention.c), but the T x T probabilities are never
 * stored: the forward (kernel flash_attn_fwd, the FlashAttention recurrence
 * with an online softmax) keeps per (batch, head, row) only the running
 * maximum m and sum of exponentials l, and the backward recomputes the
 * scores tile by tile from q, k and those statistics, with
 * D_i = rowsum(dO_i * O_i) (flash_attn_bwd_dot, _dkdv, _dq).
 *   qkv = x wqkv + bqkv         slot "qkv"    rows x (H + 2 KVH) dh
 *   stats = (m, l)              slot "stats"  2 x B x H x T
 *   ctx = softmax(q k^T / sqrt(dh) [+ causal]) [* dropout] v   slot "ctx" rows x D
 *   out = ctx wo + bo           slot 0
 * The plain layer's issue-13 fields, laid out exactly as there: with
 * kv_heads = KVH < H (grouped-query; 1 = multi-query) qkv rows are
 * q | k | v of widths H dh, KVH dh, KVH dh and query head h uses kv head
 * h / (H / KVH) (the dk/dv kernel sums a kv head's query heads in head
 * order, in registers: no atomics); use_bias false drops bqkv and bo
 * (parameters wqkv, wo); with rope, q and k are rotated in place in the
 * qkv slot after the projection (layer_rope.h) and dq, dk rotated back
 * before the input projection's backward. Backward workspace:
 * [Dv: B*H*T | dctx: rows*D | dqkv: rows*(H + 2 KVH) dh]. Tiles: local
 * memory and work-group sizes come from the device (attn_flash_tiles). */
#include "layer_seq.h"
#include "layer_rope.h"
#include "colsum.h"
#include "gemm.h"
#include <math.h>
#include <stdlib.h>

/* Sizes of one memory-efficient attention layer at a batch size. */
typedef struct flash_dims {
    int64_t B, T, D, H, KVH, dh, rows, W, S;    /* W = qkv width; S = B*H*T */
    int bias;                                   /* 1: bqkv and bo present */
    int iwo;                                    /* index of wo in the parameters */
} flash_dims;

static int flash_get_dims(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, flash_dims *a)
{
    const clremat_layer *L = &g->layers[l];
    seq_attn_geom q;
    int st;
    if ((st = seq_attn_geom_of(ctx, L, batch, &q)) != CLREMAT_OK) /* the plain layer's shape rules */
        return st;
    a->B = q.B, a->T = q.T, a->D = q.D, a->H = q.H, a->KVH = q.KV, a->dh = q.dh, a->rows = q.rows;
    a->W = q.W;
    a->S = a->B * a->H * a->T;
    a->bias = q.bias;
    a->iwo = q.iwo;
    if ((st = seq_check_int(ctx, L->name, "qkv", a->rows * a->W)) != CLREMAT_OK ||
        (st = seq_check_int(ctx, L->name, "stats", 2 * a->S)) != CLREMAT_OK)
        return st;
    /* the dropout mask is keyed by the flat index into B x H x T x T, as in the plain layer */
    if (L->rate > 0.0)
        return seq_check_int(ctx, L->name, "dropout index (B*H*T*T)", a->S * a->T);
    return CLREMAT_OK;
}

int clremat_attn_flash_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    flash_dims a;
    double rows, D, P, dh, W, rope, bias;
    int drop;
    int st = flash_get_dims(NULL, g, l, batch, &a);
    if (st != CLREMAT_OK)
        return st;
    rows = (double)a.rows, D = (double)a.D, dh = (double)a.dh, W = (double)a.W;
    /* scores computed: every (row, key) pair, or with the causal mask the
     * T (T + 1) / 2 unmasked ones (whole tiles above the diagonal are skipped) */
    P = g->layers[l].causal ? (double)a.S * (double)(a.T + 1) / 2.0 : (double)a.S * (double)a.T;
    drop = g->layers[l].rate > 0.0;
    /* RoPE on q and k forward, on dq and dk backward (as the plain layer counts it) */
    rope = g->layers[l].rope_theta > 0.0 ? 5.0 * rows * (double)(a.D + a.KVH * a.dh) : 0.0;
    bias = a.bias ? rows * (W + D) : 0.0;
    c->n_slots = 4;
    c->slot_bytes[0] = seq_fbytes(a.rows * a.D);
    c->slot_name[0] = "out";
    c->slot_bytes[1] = seq_fbytes(a.rows * a.W);
    c->slot_name[1] = "qkv";
    c->slot_bytes[2] = seq_fbytes(2 * a.S);
    c->slot_name[2] = "stats";
    c->slot_bytes[3] = seq_fbytes(a.rows * a.D);
    c->slot_name[3] = "ctx";
    c->bwd_needs_inputs = 1u;
    c->bwd_needs_slots = (1u << 1) | (1u << 2) | (1u << 3);
    c->fwd_temp_bytes = 0;
    c->bwd_temp_bytes = seq_fbytes(a.S + a.rows * a.D + a.rows * a.W);
    /* qkv 2*rows*D*W; scores and P v 2*P*dh each; out 2*rows*D*D; biases
     * rows*(W + D); online softmax ~5 per score; dropout 1 per score */
    c->fwd_flops = 2.0 * rows * D * W + 4.0 * P * dh + 2.0 * rows * D * D + bias + 5.0 * P + (drop ? P : 0.0) +
                   rope;
    /* grad wo and dctx 4*rows*D*D; D term 2*rows*D; dk/dv pass: scores,
     * dP, dv, dk 8*P*dh; dq pass: scores, dP, dq 6*P*dh; ~10 per score for
     * the two exponentials and products (+2 dropout); grad wqkv and din
     * 4*rows*D*W; bias sums rows*(W + D) */
    c->bwd_flops = 4.0 * rows * D * D + 2.0 * rows * D + 14.0 * P * dh + 10.0 * P + 4.0 * rows * D * W + bias +
                   (drop ? 2.0 * P : 0.0) + rope;
    c->param_bytes = seq_param_bytes(&g->layers[l]);
    return CLREMAT_OK;
}

/* The limits the tiles depend on, read once per context into ctx->flash:
 * the device's local memory, the smallest of the device's and the three
 * kernels' work-group limits (and 64), and each kernel's own local memory.
 * The kernels' figures come from kernel objects made for the query, with no
 * argument set: a launched kernel's CL_KERNEL_LOCAL_MEM_SIZE counts the
 * __local arguments its last launch set, which once made every call after
 * the first take smaller tiles where local memory is tight (an NVIDIA
 * H200's 48 KiB), and so other bits. */
static int attn_flash_limits(clremat_ctx *ctx, const char *lname)
{
    static const char *const kn[3] = {"flash_attn_fwd", "flash_attn_bwd_dkdv", "flash_attn_bwd_dq"};
    cl_ulong local_mem = 0, used[3] = {0, 0, 0};
    size_t dev_wg = 0, item_max[16] = {0}, wg = 64; /* item sizes: one per dimension (3 or more) */
    cl_int e;
    if (ctx->flash.wg > 0)
        return CLREMAT_OK;
    e = clGetDeviceInfo(ctx->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof dev_wg, &dev_wg, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof item_max, item_max, NULL);
    if (e != CL_SUCCESS)
        return clremat_fail(ctx, e, "attention %s: device limits unreadable: %s", lname, clremat_status_str(e));
    if (dev_wg < wg)
        wg = dev_wg;
    if (item_max[0] && item_max[0] < wg)
        wg = item_max[0];
    for (int k = 0; k < 3; k++) {
        size_t kwg = 0;
        cl_kernel kern = clCreateKernel(ctx->program, kn[k], &e);
        if (e != CL_SUCCESS)
            return clremat_fail(ctx, e, "attention %s: kernel '%s' not found in %s: %s", lname, kn[k],
                                clremat_program_origin(), clremat_status_str(e));
        if (clGetKernelWorkGroupInfo(kern, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL) ==
                CL_SUCCESS && kwg > 0 && kwg < wg)
            wg = kwg;
        if (clGetKernelWorkGroupInfo(kern, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof used[k], &used[k],
                                     NULL) != CL_SUCCESS)
            used[k] = 0;
        clReleaseKernel(kern);
    }
    ctx->flash.local_mem = local_mem;
    for (int k = 0; k < 3; k++)
        ctx->flash.used[k] = used[k];
    ctx->flash.wg = wg > 0 ? wg : 1;
    return CLREMAT_OK;
}

/* Tile sizes of the three tiled kernels on ctx's device for head width dh:
 * one tile t (BR = BC = t, the work-group size), the largest power of two
 * <= 64 and <= the work-group limits of the device and of each kernel
 * whose local memory (with the kernel's own) fits the device's local
 * memory; no larger than T needs; at most $CLREMAT_ATTN_TILE when set.
 * Deterministic per device and setting, whatever ran before, so every
 * rerun gives the same bits. */
static int attn_flash_tiles(clremat_ctx *ctx, const char *lname, int64_t T, int64_t dh, int *tile)
{
    const cl_ulong *used = ctx->flash.used;
    cl_ulong local_mem;
    size_t wg;
    int64_t t;
    int st = attn_flash_limits(ctx, lname);
    if (st != CLREMAT_OK)
        return st;
    local_mem = ctx->flash.local_mem;
    wg = ctx->flash.wg;
    { /* CLREMAT_ATTN_TILE caps the tile (tests: many tiles on short sequences) */
        const char *env = getenv("CLREMAT_ATTN_TILE");
        long cap = env ? strtol(env, NULL, 10) : 0;
        if (cap >= 1 && (size_t)cap < wg)
            wg = (size_t)cap;
    }
    for (t = 64; t > 1 && (t > (int64_t)wg || t / 2 >= T); t /= 2)
        ;
    for (; t >= 1; t /= 2) {
        /* floats of local memory: fwd 2t*dh + 2t*dh + t*t, dkdv 4t*dh + 2t*dh + 3t, dq 3t*dh + 2t*dh */
        uint64_t need[3] = {(uint64_t)(4 * t * dh + t * t), (uint64_t)(6 * t * dh + 3 * t),
                            (uint64_t)(5 * t * dh)};
        int fits = 1;
        for (int k = 0; k < 3; k++)
            fits &= need[k] * sizeof(float) + used[k] <= local_mem;
        if (fits)
            break;
    }
    if (t < 1)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "attention %s: memory-efficient mode needs %llu bytes of "
                            "local memory for one row of head width %lld, the device has %llu", lname,
                            (unsigned long long)((6 * dh + 3) * sizeof(float) + used[1]), (long long)dh,
                            (unsigned long long)local_mem);
    *tile = (int)t;
    return CLREMAT_OK;
}

/* Geometry and dropout-key arguments shared by the tiled kernels (reads the
 * layer call c in scope for the key): T, H, KVH, dh, qkv width, q/k/v column
 * offsets, ldo, causal, scale, BR, BC, rate, seed, step, layer, the first
 * element's index in the step's batch (dropout keys: sample0, as the plain
 * layer), B*H. */
#define FLASH_GEOM(a, L, sc, t)                                                                              \
    SEQ_I((a).T), SEQ_I((a).H), SEQ_I((a).KVH), SEQ_I((a).dh), SEQ_I((a).W), SEQ_I(0), SEQ_I((a).H * (a).dh), \
        SEQ_I(((a).H + (a).KVH) * (a).dh), SEQ_I((a).D), SEQ_I((L)->causal != 0), SEQ_F(sc), SEQ_I(t),         \
        SEQ_I(t), SEQ_F((L)->rate), SEQ_U(c->seed & 0xffffffffu), SEQ_U(c->seed >> 32), SEQ_U(c->step),       \
        SEQ_U(c->layer), SEQ_U((cl_uint)(c->sample0 * (a).H * (a).T * (a).T)), SEQ_I((a).B * (a).H)
#define FLASH_LOCAL(n) (size_t)((n) * sizeof(float)), (const void *)NULL

static int flash_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    clremat_ctx *ctx = c->ctx;
    flash_dims a;
    int t = 1;
    float scale;
    int st = flash_get_dims(ctx, c->g, c->layer, c->batch, &a);
    if (st != CLREMAT_OK)
        return st;
    if ((st = clremat_check_buf(ctx, L->name, "input", c->in[0], a.rows * a.D)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "out", c->slot[0], a.rows * a.D)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "qkv", c->slot[1], a.rows * a.W)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "stats", c->slot[2], 2 * a.S)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "ctx", c->slot[3], a.rows * a.D)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "wqkv", c->param[0], a.D * a.W)) != CLREMAT_OK ||
        (a.bias && (st = clremat_check_buf(ctx, L->name, "bqkv", c->param[1], a.W)) != CLREMAT_OK) ||
        (st = clremat_check_buf(ctx, L->name, "wo", c->param[a.iwo], a.D * a.D)) != CLREMAT_OK ||
        (a.bias && (st = clremat_check_buf(ctx, L->name, "bo", c->param[3], a.D)) != CLREMAT_OK))
        return st;
    scale = (float)(1.0 / sqrt((double)a.dh));
    /* qkv = x wqkv + bqkv */
    st = clremat_gemm_dense(ctx, a.rows, a.D, a.W, c->in[0], c->param[0], a.bias ? c->param[1] : NULL, 0,
                            c->slot[1], NULL);
    /* RoPE: q and k (adjacent: H + KVH chunks of dh) rotated in place */
    if (st == CLREMAT_OK && L->rope_theta > 0.0)
        st = clremat_rope_run(ctx, a.rows, a.T, a.H + a.KVH, a.dh, L->rope_theta, 0, 0, c->slot[1], 0, a.W,
                              c->slot[1], 0, a.W);
    if (st == CLREMAT_OK && !ctx->dry_run)
        st = attn_flash_tiles(ctx, L->name, a.T, a.dh, &t);
    if (st == CLREMAT_OK) {
        size_t global[2] = {(size_t)((a.T + t - 1) / t * t), (size_t)(a.B * a.H)}, local[2] = {(size_t)t, 1};
        st = clremat_run(ctx, "flash_attn_fwd", 2, global, local, FLASH_GEOM(a, L, scale, t), SEQ_M(c->slot[1]),
                         SEQ_M(c->slot[3]), SEQ_M(c->slot[2]), FLASH_LOCAL(t * a.dh), FLASH_LOCAL(t * a.dh),
                         FLASH_LOCAL(t * a.dh), FLASH_LOCAL(t * t), FLASH_LOCAL(t * a.dh), SEQ_END);
    }
    /* out = ctx wo + bo */
    if (st == CLREMAT_OK)
        st = clremat_gemm_dense(ctx, a.rows, a.D, a.D, c->slot[3], c->param[a.iwo], a.bias ? c->param[3] : NULL, 0,
                                c->slot[0], NULL);
    return st;
}

static int flash_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    clremat_ctx *ctx = c->ctx;
    flash_dims a;
    int64_t D, off_dctx, off_dqkv;
    clremat_buf *Wk;
    int t = 1;
    float scale;
    int st = flash_get_dims(ctx, c->g, c->layer, c->batch, &a);
    if (st != CLREMAT_OK)
        return st;
    D = a.D;
    off_dctx = a.S;
    off_dqkv = a.S + a.rows * D;
    Wk = c->temp;
    if ((st = clremat_check_buf(ctx, L->name, "input", c->in[0], a.rows * D)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "dout", c->dout, a.rows * D)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "qkv", c->slot[1], a.rows * a.W)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "stats", c->slot[2], 2 * a.S)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "ctx", c->slot[3], a.rows * D)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "wqkv", c->param[0], D * a.W)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "wo", c->param[a.iwo], D * D)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, L->name, "backward workspace", Wk, off_dqkv + a.rows * a.W)) != CLREMAT_OK)
        return st;
    if (c->din[0] && (st = clremat_check_buf(ctx, L->name, "din", c->din[0], a.rows * D)) != CLREMAT_OK)
        return st;
    for (int i = 0; i < L->n_params; i++) {
        static const char *const names[4] = {"grad wqkv", "grad bqkv", "grad wo", "grad bo"};
        if (c->grad[i] &&
            (st = clremat_check_buf(ctx, L->name, names[a.bias || i == 0 ? i : 2], c->grad[i],
                                    L->params[i].elems)) != CLREMAT_OK)
            return st;
    }
    scale = (float)(1.0 / sqrt((double)a.dh));

    /* output projection: grad bo, grad wo = ctx^T dout, dctx = dout wo^T */
    if (a.bias && c->grad[3] &&
        (st = clremat_colsum(ctx, c->g->layers[c->layer].name, a.rows, D, D, 0, c->dout, 0, c->grad[3])) !=
            CLREMAT_OK)
        return st;
    if (c->grad[a.iwo] && (st = clremat_gemm(ctx, 1, 0, D, D, a.rows, 1.0f, c->slot[3], 0, D, 0, c->dout, 0, D, 0,
                                             0.0f, c->grad[a.iwo], 0, D, 0, 1)) != CLREMAT_OK)
        return st;
    st = clremat_gemm(ctx, 0, 1, a.rows, D, D, 1.0f, c->dout, 0, D, 0, c->param[a.iwo], 0, D, 0, 0.0f, Wk, off_dctx,
                      D, 0, 1);
    if (st == CLREMAT_OK && !ctx->dry_run)
        st = attn_flash_tiles(ctx, L->name, a.T, a.dh, &t);
    /* Dv = rowsum(dctx * ctx), then dk, dv and dq from recomputed tiles;
     * the three parts of the workspace go to the kernels as offsets */
    if (st == CLREMAT_OK)
        st = clremat_run1d(ctx, "flash_attn_bwd_dot", a.S, SEQ_I(a.S), SEQ_I(a.T), SEQ_I(a.H), SEQ_I(a.dh),
                           SEQ_I(D), SEQ_I(off_dctx), SEQ_I(0), SEQ_M(Wk), SEQ_M(c->slot[3]), SEQ_M(Wk), SEQ_END);
    if (st == CLREMAT_OK) {
        size_t global[2] = {(size_t)((a.T + t - 1) / t * t), (size_t)(a.B * a.KVH)}, local[2] = {(size_t)t, 1};
        st = clremat_run(ctx, "flash_attn_bwd_dkdv", 2, global, local, FLASH_GEOM(a, L, scale, t),
                         SEQ_I(off_dctx), SEQ_I(0), SEQ_I(off_dqkv), SEQ_M(c->slot[1]), SEQ_M(Wk),
                         SEQ_M(c->slot[2]), SEQ_M(Wk), SEQ_M(Wk), FLASH_LOCAL(t * a.dh), FLASH_LOCAL(t * a.dh),
                         FLASH_LOCAL(t * a.dh), FLASH_LOCAL(t * a.dh), FLASH_LOCAL(t * a.dh), FLASH_LOCAL(t * a.dh),
                         FLASH_LOCAL(3 * t), SEQ_END);
    }
    if (st == CLREMAT_OK) {
        size_t global[2] = {(size_t)((a.T + t - 1) / t * t), (size_t)(a.B * a.H)}, local[2] = {(size_t)t, 1};
        st = clremat_run(ctx, "flash_attn_bwd_dq", 2, global, local, FLASH_GEOM(a, L, scale, t), SEQ_I(off_dctx),
                         SEQ_I(0), SEQ_I(off_dqkv), SEQ_M(c->slot[1]), SEQ_M(Wk), SEQ_M(c->slot[2]), SEQ_M(Wk),
                         SEQ_M(Wk), FLASH_LOCAL(t * a.dh), FLASH_LOCAL(t * a.dh), FLASH_LOCAL(t * a.dh),
                         FLASH_LOCAL(t * a.dh), FLASH_LOCAL(t * a.dh), SEQ_END);
    }
    /* RoPE: dq and dk rotated back (the rotation's transpose) */
    if (st == CLREMAT_OK && L->rope_theta > 0.0)
        st = clremat_rope_run(ctx, a.rows, a.T, a.H + a.KVH, a.dh, L->rope_theta, 1, 0, Wk, off_dqkv, a.W, Wk,
                              off_dqkv, a.W);
    if (st != CLREMAT_OK)
        return st;
    /* input projection: grad bqkv, grad wqkv = x^T dqkv, din = dqkv wqkv^T */
    if (a.bias && c->grad[1] &&
        (st = clremat_colsum(ctx, c->g->layers[c->layer].name, a.rows, a.W, a.W, off_dqkv, Wk, 0, c->grad[1])) !=
            CLREMAT_OK)
        return st;
    if (c->grad[0] && (st = clremat_gemm(ctx, 1, 0, D, a.W, a.rows, 1.0f, c->in[0], 0, D, 0, Wk, off_dqkv, a.W, 0,
                                         0.0f, c->grad[0], 0, a.W, 0, 1)) != CLREMAT_OK)
        return st;
    if (c->din[0])
        st = clremat_gemm(ctx, 0, 1, a.rows, D, a.W, 1.0f, Wk, off_dqkv, a.W, 0, c->param[0], 0, a.W, 0,
                          c->din_accumulate[0] ? 1.0f : 0.0f, c->din[0], 0, D, 0, 1);
    return st;
}

const clremat_layer_impl clremat_impl_attention_flash = {clremat_attn_flash_cost, flash_forward, flash_backward,
                                                         NULL, NULL};
