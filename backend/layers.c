/* layers.c: dispatches cost, forward, backward and activation recompute to
 * the implementation of each layer type. */
#include "layer_impl.h"
#include "mixed_precision.h"
#include "gemm.h"
#include <string.h>

static const clremat_layer_impl *const impls[CLREMAT_LAYER_TYPE_COUNT] = {
    [CLREMAT_DENSE] = &clremat_impl_dense,
    [CLREMAT_ACTIVATION] = &clremat_impl_activation,
    [CLREMAT_DROPOUT] = &clremat_impl_dropout,
    [CLREMAT_LAYERNORM] = &clremat_impl_layernorm,
    [CLREMAT_ADD] = &clremat_impl_add,
    [CLREMAT_EMBEDDING] = &clremat_impl_embedding,
    [CLREMAT_ATTENTION] = &clremat_impl_attention,
    [CLREMAT_RESHAPE] = &clremat_impl_reshape,
    [CLREMAT_SOFTMAX_CE] = &clremat_impl_softmax_ce,
    [CLREMAT_MSE] = &clremat_impl_mse,
    [CLREMAT_RMSNORM] = &clremat_impl_rmsnorm,
    [CLREMAT_ROPE] = &clremat_impl_rope,
    [CLREMAT_MULTIPLY] = &clremat_impl_multiply,
    [CLREMAT_CONV2D] = &clremat_impl_conv2d,
    [CLREMAT_MAX_POOL2D] = &clremat_impl_pool,
    [CLREMAT_AVG_POOL2D] = &clremat_impl_pool,
    [CLREMAT_GLOBAL_AVG_POOL2D] = &clremat_impl_pool,
    [CLREMAT_ZERO_PAD2D] = &clremat_impl_pool,
    [CLREMAT_BATCHNORM] = &clremat_impl_batchnorm,
    [CLREMAT_CONCAT] = &clremat_impl_concat,
};

static const clremat_layer_impl *impl_of(const clremat_graph *g, int l)
{
    if (!g || l < 0 || l >= g->n_layers || (unsigned)g->layers[l].type >= CLREMAT_LAYER_TYPE_COUNT)
        return NULL;
    if (clremat_attn_is_mem_eff(&g->layers[l]))
        return &clremat_impl_attention_flash;
    /* dense variants of issue 13: tied to an embedding's table, LoRA adapter */
    if (g->layers[l].type == CLREMAT_DENSE && g->layers[l].tie)
        return &clremat_impl_dense_tied;
    if (g->layers[l].type == CLREMAT_DENSE && g->layers[l].lora_rank > 0)
        return &clremat_impl_lora;
    return impls[g->layers[l].type];
}

/* The fused 16-bit launches of layer l, NULL when it stages. */
static const clremat_layer_impl16 *impl16_of(const clremat_graph *g, int l)
{
    const clremat_layer_impl *im = impl_of(g, l);
    const clremat_layer_impl16 *f = im == &clremat_impl_dense        ? &clremat_impl16_dense
                                    : im == &clremat_impl_add        ? &clremat_impl16_add
                                    : im == &clremat_impl_dropout    ? &clremat_impl16_dropout
                                    : im == &clremat_impl_activation ? &clremat_impl16_activation
                                    : im == &clremat_impl_layernorm  ? &clremat_impl16_layernorm
                                    : im == &clremat_impl_attention  ? &clremat_impl16_attention
                                    : im == &clremat_impl_embedding  ? &clremat_impl16_embedding
                                    : im == &clremat_impl_softmax_ce ? &clremat_impl16_softmax_ce
                                                                     : NULL;
    return f && (!f->fuses || f->fuses(g, l)) ? f : NULL;
}

/* The cost on a GEMM path (native: 1): mixed precision fused into the
 * layer's kernels where it has them, the path is native and fusion is not
 * switched off; otherwise staged. */
static int cost_on(const clremat_graph *g, int l, int64_t batch, int native, clremat_layer_cost *out)
{
    const clremat_layer_impl *im = impl_of(g, l);
    const clremat_layer_impl16 *f16 = impl16_of(g, l);
    int st;
    if (!im || batch <= 0)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "cost of layer %d: bad layer or batch %lld",
                                 l, (long long)batch);
    memset(out, 0, sizeof *out);
    out->act_source = -1;
    st = im->cost_on_path ? im->cost_on_path(g, l, batch, native, out) : im->cost(g, l, batch, out);
    if (st == CLREMAT_OK) /* mixed precision: 16-bit slots, fused conversion or float32 staging */
        clremat_mixed_cost(g, l, batch, out,
                           native && f16 && clremat_mixed_fusion_enabled() ? f16->cost16 : NULL);
    return st;
}

int clremat_layer_cost_of(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *out)
{
    return cost_on(g, l, batch, 1, out);
}

int clremat_layer_cost_on(const clremat_graph *g, int l, int64_t batch, clremat_gemm_path path,
                          clremat_layer_cost *out)
{
    return cost_on(g, l, batch, path != CLREMAT_GEMM_CLBLAST, out);
}

int clremat_layer_cost_for(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *out)
{
    return cost_on(g, l, batch, !ctx || clremat_gemm_resolve(ctx) == CLREMAT_GEMM_NATIVE, out);
}

/* The mixed cost of the layer of c at the batch its buffers were sized for. */
static int call_cost(clremat_layer_call *c, clremat_layer_cost *cost)
{
    int st = clremat_layer_cost_for(c->ctx, c->g, c->layer, c->alloc_batch > 0 ? c->alloc_batch : c->batch, cost);
    return st == CLREMAT_OK ? st : clremat_fail(c->ctx, st, "%s", clremat_last_error());
}

/* Per-sample elements of a byte count measured at batch 1, of elements of
 * elem_bytes bytes each (4: float32; 2: a 16-bit slot under mixed
 * precision); never 0. */
static int64_t per_sample_of(size_t bytes_at_1, size_t elem_bytes)
{
    int64_t e = (int64_t)((bytes_at_1 + elem_bytes - 1) / elem_bytes);
    return e > 0 ? e : 1;
}

static int64_t per_sample(size_t bytes_at_1) { return per_sample_of(bytes_at_1, sizeof(float)); }

/* The most elements per sample of any tensor of a step; *layer the layer
 * holding it (-1: input or labels). 0 when a cost cannot be computed. */
static int64_t worst_per_sample(const clremat_graph *g, int *layer)
{
    int64_t worst = 1, e;
    int who = -1;
    *layer = -1;
    if (!g)
        return 0;
    /* every tensor of a step grows linearly with the batch, so its size at
     * batch 1 is its per-sample size (a fixed part, such as a loss scalar,
     * only makes the bound tighter, never loose) */
    e = clremat_shape_elems(&g->io.input);
    worst = e > worst ? e : worst;
    e = clremat_shape_elems(&g->io.labels);
    worst = e > worst ? e : worst;
    /* on both GEMM paths: a layer's workspace may differ by path (conv2d) */
    for (int l = 0; l < g->n_layers; l++)
        for (int native = 0; native < 2; native++) {
            clremat_layer_cost c;
            if (cost_on(g, l, 1, native, &c) != CLREMAT_OK)
                return 0;
            for (int s = 0; s < c.n_slots && s < CLREMAT_MAX_SLOTS; s++)
                if ((e = per_sample_of(c.slot_bytes[s], c.slot16 >> s & 1u ? 2 : sizeof(float))) > worst) {
                    worst = e;
                    who = l;
                }
            if ((e = per_sample(c.fwd_temp_bytes)) > worst) {
                worst = e;
                who = l;
            }
            if ((e = per_sample(c.bwd_temp_bytes)) > worst) {
                worst = e;
                who = l;
            }
        }
    *layer = who;
    return worst;
}

int64_t clremat_max_batch(const clremat_graph *g, int *layer)
{
    int who;
    int64_t worst = worst_per_sample(g, &who);
    if (layer)
        *layer = who;
    return worst > 0 ? CLREMAT_MAX_TENSOR_ELEMS / worst : 0;
}

int clremat_batch_check(const clremat_graph *g, int64_t batch)
{
    int who = -1;
    int64_t max, worst;
    if (batch < 1)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "batch size must be at least 1, got %lld",
                                 (long long)batch);
    worst = worst_per_sample(g, &who);
    if (worst == 0)
        return CLREMAT_ERR_INVALID_ARGUMENT; /* the reason is in the last error */
    max = CLREMAT_MAX_TENSOR_ELEMS / worst;
    if (batch > max)
        return clremat_set_error(CLREMAT_ERR_TOO_LARGE,
                                 "batch %lld is too large for model '%s': the largest is %lld (%s%s%s holds %lld "
                                 "elements per sample, and no device tensor may hold more than %lld elements)",
                                 (long long)batch, g->name, (long long)max, who >= 0 ? "layer '" : "",
                                 who >= 0 ? g->layers[who].name : "the input or labels", who >= 0 ? "'" : "",
                                 (long long)worst,
                                 (long long)CLREMAT_MAX_TENSOR_ELEMS);
    return CLREMAT_OK;
}

int clremat_layer_forward(clremat_layer_call *c)
{
    const clremat_layer_impl *im = impl_of(c->g, c->layer);
    if (!im)
        return clremat_fail(c->ctx, CLREMAT_ERR_INVALID_ARGUMENT, "forward: bad layer %d", c->layer);
    if (c->g->precision != CLREMAT_PREC_FLOAT32) {
        clremat_layer_cost cost;
        int st = call_cost(c, &cost);
        if (st == CLREMAT_OK && cost.mixed_fused)
            return impl16_of(c->g, c->layer)->forward16(c, &cost);
        return st == CLREMAT_OK ? clremat_mixed_forward(c, &cost, im->forward) : st;
    }
    return im->forward(c);
}

int clremat_layer_backward(clremat_layer_call *c)
{
    const clremat_layer_impl *im = impl_of(c->g, c->layer);
    if (!im)
        return clremat_fail(c->ctx, CLREMAT_ERR_INVALID_ARGUMENT, "backward: bad layer %d", c->layer);
    if (c->g->precision != CLREMAT_PREC_FLOAT32) {
        clremat_layer_cost cost;
        int st = call_cost(c, &cost);
        if (st == CLREMAT_OK && cost.mixed_fused)
            return impl16_of(c->g, c->layer)->backward16(c, &cost);
        return st == CLREMAT_OK ? clremat_mixed_backward(c, &cost, im->backward) : st;
    }
    return im->backward(c);
}

int clremat_layer_recompute_activation(clremat_layer_call *c)
{
    const clremat_layer_impl *im = impl_of(c->g, c->layer);
    if (im && c->g->precision != CLREMAT_PREC_FLOAT32) {
        clremat_layer_cost cost;
        int st = call_cost(c, &cost);
        return st == CLREMAT_OK ? clremat_mixed_recompute_act(c, &cost) : st;
    }
    if (!im || !im->recompute_act)
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "layer %s has no separate activation to recompute",
                            c->g->layers[c->layer].name);
    return im->recompute_act(c);
}

int clremat_layer_fuses_update(clremat_ctx *ctx, const clremat_graph *g, int l, int p, int64_t batch)
{
    if (!g || l < 0 || l >= g->n_layers || p < 0 || p >= g->layers[l].n_params)
        return 0;
    /* the plain dense backward alone has the update epilogue; its tied and
     * LoRA variants (issue 13) use a gradient scratch and the step kernel */
    if (g->layers[l].type == CLREMAT_DENSE && !g->layers[l].tie && g->layers[l].lora_rank == 0)
        return clremat_dense_fuses_update(ctx, g, l, p, batch);
    return 0;
}

size_t clremat_fused_scratch_bytes(clremat_ctx *ctx, const clremat_plan_input *in, const clremat_graph *g, int l)
{
    size_t bytes = 0;
    for (int p = 0; in->fused_update && p < g->layers[l].n_params; p++)
        if (clremat_fused_update_param(in, l, p) && !clremat_layer_fuses_update(ctx, g, l, p, in->batch))
            bytes += (size_t)g->layers[l].params[p].elems * sizeof(float);
    return bytes;
}
