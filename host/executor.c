/* executor.c: runs a plan's actions on the device. Every allocation of a
 * step happens where the plan says, in the order the memory simulator
 * assumed (an action's new tensors, then its workspace), so the pool's
 * measured high-water equals the predicted peak to the byte. */
#include "executor.h"
#include "clock.h"
#include "mixed_precision.h"
#include "fused_update.h"
#include "dp.h"
#include "attn_variants.h"
#include "init.h"
#include "gemm.h"
#include "transfer.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS


/* A batchnorm layer's slot in t->accum: its moving mean's (frozen, so free),
 * which holds the micro-batches' summed statistics. */
#define BN_SUMS(L) ((L)->n_params - 2)

static int costs_with_gemm(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, clremat_layer_cost *costs,
                           size_t *ws_fwd, size_t *ws_bwd)
{
    int st = CLREMAT_OK;
    for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++)
        if ((st = clremat_layer_cost_for(ctx, g, l, batch, &costs[l])) != CLREMAT_OK)
            return clremat_fail(ctx, st, "%s", clremat_last_error());
    for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++) {
        size_t f = 0, b = 0;
        st = clremat_layer_gemm_workspace(ctx, g, l, batch, costs, &f, &b);
        if (ws_fwd)
            ws_fwd[l] = f;
        if (ws_bwd)
            ws_bwd[l] = b;
    }
    for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++) {
        costs[l].fwd_temp_bytes += ws_fwd ? ws_fwd[l] : 0;
        costs[l].bwd_temp_bytes += ws_bwd ? ws_bwd[l] : 0;
    }
    return st;
}

/* Refuses, before anything is planned, a model with a tensor larger than the
 * device's largest single allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE): no
 * remat plan can split one tensor, so no plan could run. Names the tensor,
 * its bytes and the limit. */
static int check_max_alloc(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, const clremat_layer_cost *costs,
                           const size_t *wf, const size_t *wb)
{
    uint64_t max = ctx->info.max_alloc_bytes;
    const char *what = NULL, *layer = NULL;
    uint64_t bytes = 0;
    if (max == 0)
        return CLREMAT_OK;
#define TOO_BIG(b, l, w)                                                                                           \
    do {                                                                                                           \
        if ((uint64_t)(b) > max && (uint64_t)(b) > bytes)                                                          \
            bytes = (uint64_t)(b), layer = (l), what = (w);                                                        \
    } while (0)
    TOO_BIG((uint64_t)batch * (uint64_t)clremat_shape_elems(&g->io.input) * sizeof(float), "", "input batch");
    TOO_BIG((uint64_t)batch * (uint64_t)clremat_shape_elems(&g->io.labels) * sizeof(float), "", "labels");
    for (int l = 0; l < g->n_layers; l++) {
        const clremat_layer *L = &g->layers[l];
        for (int p = 0; p < L->n_params; p++)
            TOO_BIG((uint64_t)L->params[p].elems * sizeof(float), L->name, L->params[p].name);
        for (int s = 0; s < costs[l].n_slots; s++)
            TOO_BIG(costs[l].slot_bytes[s], L->name, costs[l].slot_name[s] ? costs[l].slot_name[s] : "out");
        /* the workspace is one buffer, the GEMM's another; mixed precision's
         * staging is one buffer per tensor, each no larger than a slot's
         * float32 size (checked below) */
        TOO_BIG(costs[l].fwd_temp_bytes > wf[l] + costs[l].fwd_stage_bytes
                    ? costs[l].fwd_temp_bytes - wf[l] - costs[l].fwd_stage_bytes : 0,
                L->name, "forward workspace");
        TOO_BIG(costs[l].bwd_temp_bytes > wb[l] + costs[l].bwd_stage_bytes
                    ? costs[l].bwd_temp_bytes - wb[l] - costs[l].bwd_stage_bytes : 0,
                L->name, "backward workspace");
        for (int s = 0; s < costs[l].n_slots; s++)
            if (costs[l].slot16 >> s & 1u)
                TOO_BIG(2 * costs[l].slot_bytes[s], L->name, "float32 staging");
        TOO_BIG(wf[l] > wb[l] ? wf[l] : wb[l], L->name, "GEMM workspace");
    }
#undef TOO_BIG
    if (!what)
        return CLREMAT_OK;
    return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE,
                        "%s%s%s of %llu bytes at batch %lld is larger than the largest single allocation of device "
                        "'%s' (CL_DEVICE_MAX_MEM_ALLOC_SIZE, %llu bytes); no remat plan splits a tensor: use a "
                        "smaller batch",
                        layer, *layer ? "/" : "", what, (unsigned long long)bytes, (long long)batch, ctx->info.name,
                        (unsigned long long)max);
}

int clremat_plan_input_for(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, int opt_states,
                           const double *layer_cost, clremat_plan_input *in, size_t **ws_fwd_out, size_t **ws_bwd_out)
{
    clremat_layer_cost *costs = calloc((size_t)g->n_layers + 1, sizeof *costs);
    size_t *wf = calloc((size_t)g->n_layers + 1, sizeof *wf), *wb = calloc((size_t)g->n_layers + 1, sizeof *wb);
    int st = CLREMAT_OK;
    memset(in, 0, sizeof *in); /* optional fields (layer_cost) default to NULL */
    if (!costs || !wf || !wb) {
        st = clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
        goto done;
    }
    /* before anything is sized from the batch: no size product may overflow */
    if ((st = clremat_batch_check(g, batch)) != CLREMAT_OK) {
        if (ctx)
            clremat_fail(ctx, st, "%s", clremat_last_error());
        goto done;
    }
    if (ctx) {
        st = costs_with_gemm(ctx, g, batch, costs, wf, wb);
        if (st == CLREMAT_OK)
            st = check_max_alloc(ctx, g, batch, costs, wf, wb);
    } else { /* no device: the native GEMM path, which needs no workspace */
        for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++)
            st = clremat_layer_cost_of(g, l, batch, &costs[l]);
    }
    if (st != CLREMAT_OK)
        goto done;
    in->g = g;
    in->batch = batch;
    in->costs = costs;
    in->opt_states = opt_states & ~CLREMAT_PLAN_FUSED_UPDATE;
    in->fused_update = (opt_states & CLREMAT_PLAN_FUSED_UPDATE) != 0;
    /* activation outputs read through a backward's GEMM: the native path
     * packs operands itself; CLBlast cannot apply a function while packing
     * (layers applying it in their own kernels keep it: bwd_act_fuse_in_gemm) */
    if (ctx && clremat_gemm_resolve(ctx) != CLREMAT_GEMM_NATIVE)
        for (int l = 0; l < g->n_layers; l++)
            if (costs[l].bwd_act_fuse_in_gemm)
                costs[l].bwd_act_fusable_inputs = 0;
    /* the fused update: a gradient the layer's backward cannot consume
     * itself is a scratch of that backward, reused across layers */
    for (int l = 0; in->fused_update && l < g->n_layers; l++)
        costs[l].bwd_temp_bytes += clremat_fused_scratch_bytes(ctx, in, g, l);
    in->scratch_bytes = CLREMAT_SCRATCH_BYTES + clremat_dp_staging_bytes(g); /* data parallel: staging */
    in->replicas = clremat_dp_transport_get() ? clremat_dp_transport_get()->nranks : 1;
    in->layer_cost = layer_cost;
    costs = NULL;
    if (ws_fwd_out) {
        *ws_fwd_out = wf;
        wf = NULL;
    }
    if (ws_bwd_out) {
        *ws_bwd_out = wb;
        wb = NULL;
    }
done:
    free(costs);
    free(wf);
    free(wb);
    return st;
}

int clremat_plan_for_ctx(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, const clremat_policy *p,
                         int opt_states, uint64_t limit, const double *layer_cost, int overlap, clremat_plan *out,
                         clremat_layer_cost **costs_out, size_t **ws_fwd_out, size_t **ws_bwd_out)
{
    return clremat_plan_for_accum(ctx, g, batch, 1, p, opt_states, limit, layer_cost, overlap, out, costs_out,
                                  ws_fwd_out, ws_bwd_out);
}

int clremat_plan_for_accum(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, int accumulate,
                           const clremat_policy *p, int opt_states, uint64_t limit, const double *layer_cost,
                           int overlap, clremat_plan *out, clremat_layer_cost **costs_out, size_t **ws_fwd_out,
                           size_t **ws_bwd_out)
{
    return clremat_plan_for_offload(ctx, g, batch, accumulate, p, opt_states, limit, layer_cost, overlap, NULL, out,
                                    costs_out, ws_fwd_out, ws_bwd_out);
}

int clremat_plan_for_offload(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, int accumulate,
                             const clremat_policy *p, int opt_states, uint64_t limit, const double *layer_cost,
                             int overlap, const char *offload, clremat_plan *out, clremat_layer_cost **costs_out,
                             size_t **ws_fwd_out, size_t **ws_bwd_out)
{
    clremat_plan_input in;
    int st;
    memset(out, 0, sizeof *out);
    if ((st = clremat_plan_input_for(ctx, g, batch, opt_states, layer_cost, &in, ws_fwd_out, ws_bwd_out)))
        return st;
    in.accumulate = accumulate;
    /* budget and auto weigh offload against recomputation where it frees
     * real device memory: a device whose memory is not the host's, at the
     * transfer cost measured there (cached); not under mixed precision,
     * whose staging lives on one queue (clremat_trainer_new refuses offload) */
    if (ctx && !ctx->info.host_unified && !overlap && g->precision == CLREMAT_PREC_FLOAT32 &&
        (p->kind == CLREMAT_POLICY_BUDGET || p->kind == CLREMAT_POLICY_AUTO)) {
        clremat_transfer_calibration tc;
        if (clremat_transfer_calibrate(ctx, &tc) == CLREMAT_OK)
            in.offload_cost_per_byte = clremat_transfer_cost_per_byte(&tc, layer_cost != NULL);
    }
    if (clremat_attn_choice_applies(g, p)) {
        /* "attention": "auto" layers: the planner also chooses their mode */
        st = clremat_attn_plan_choose(ctx, &in, p, limit, ws_fwd_out ? *ws_fwd_out : NULL,
                                      ws_bwd_out ? *ws_bwd_out : NULL, out);
    } else if (p->kind == CLREMAT_POLICY_AUTO) {
        if (limit == 0)
            st = clremat_set_error(CLREMAT_ERR_PLAN, "--remat auto needs a memory limit (a device or --memory-limit)");
        else if ((st = clremat_plan_auto(&in, limit, out)) == CLREMAT_OK && in.offload_cost_per_byte > 0 &&
                 out->recompute_flops > 0) { /* none did not fit: recompute or offload */
            clremat_plan_free(out);
            st = clremat_plan_budget_offload(&in, limit, out);
        }
        if (st == CLREMAT_OK)
            out->policy = *p;
    } else if (p->kind == CLREMAT_POLICY_BUDGET && in.offload_cost_per_byte > 0) {
        if ((st = clremat_plan_budget_offload(&in, p->budget, out)) == CLREMAT_OK)
            out->policy = *p;
    } else {
        st = clremat_plan_build(&in, p, out);
    }
    if (st == CLREMAT_OK && offload) {
        unsigned char *want = calloc((size_t)g->n_layers, 1);
        if (!want)
            st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
        else if (overlap)
            st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--offload does not go with --overlap");
        else if ((st = clremat_offload_parse(g, offload, want)) == CLREMAT_OK)
            st = clremat_plan_offload(&in, out, want);
        free(want);
    }
    if (st == CLREMAT_OK && overlap)
        st = clremat_plan_overlap(&in, out);
    if (st != CLREMAT_OK) {
        clremat_plan_free(out);
        if (ctx)
            clremat_fail(ctx, st, "%s", clremat_last_error());
        if (ws_fwd_out) {
            free(*ws_fwd_out);
            *ws_fwd_out = NULL;
        }
        if (ws_bwd_out) {
            free(*ws_bwd_out);
            *ws_bwd_out = NULL;
        }
    }
    if (st != CLREMAT_OK || !costs_out)
        free((void *)in.costs);
    else
        *costs_out = (clremat_layer_cost *)in.costs;
    return st;
}

int clremat_plan_for(const clremat_graph *g, int64_t batch, const clremat_policy *p, int opt_states,
                     uint64_t limit, const double *layer_cost, clremat_plan *out, clremat_layer_cost **costs_out)
{
    return clremat_plan_for_ctx(NULL, g, batch, p, opt_states, limit, layer_cost, 0, out, costs_out, NULL, NULL);
}

/* A copy of g for evaluation: dropout rates set to zero, batchnorm on its
 * moving statistics. */
static clremat_graph *eval_copy(const clremat_graph *g)
{
    clremat_graph *e = malloc(sizeof *e);
    if (!e)
        return NULL;
    *e = *g;
    e->layers = malloc(sizeof *e->layers * (size_t)g->n_layers);
    e->blocks = malloc(sizeof *e->blocks * (size_t)(g->n_blocks + 1));
    if (!e->layers || !e->blocks) {
        free(e->layers);
        free(e->blocks);
        free(e);
        return NULL;
    }
    memcpy(e->layers, g->layers, sizeof *e->layers * (size_t)g->n_layers);
    if (g->n_blocks > 0) /* g->blocks is NULL in a graph without blocks */
        memcpy(e->blocks, g->blocks, sizeof *e->blocks * (size_t)g->n_blocks);
    e->cap_layers = g->n_layers;
    e->cap_blocks = g->n_blocks + 1;
    for (int l = 0; l < e->n_layers; l++) {
        e->layers[l].rate = 0.0;
        e->layers[l].bn_eval = 1;
    }
    return e;
}

/* Releases the n buffers *bs[i] (NULL ones skipped). While an overlap
 * window is open, kernels on the active queue may still use them and the
 * other queue may be handed them next: they carry a fence, one marker event
 * enqueued after their last use (clremat_pool_release_fenced). Where the
 * marker cannot be made, the queue is finished instead. */
static void release_many(clremat_trainer *t, clremat_buf **bs[], int n)
{
    clremat_pool *pool = t->ctx->pool;
    cl_event ev = NULL;
    int any = 0;
    for (int i = 0; i < n; i++)
        any |= *bs[i] != NULL;
    if (any && t->window && clEnqueueMarkerWithWaitList(t->ctx->active_queue, 0, NULL, &ev) != CL_SUCCESS) {
        ev = NULL;
        clFinish(t->ctx->active_queue);
    }
    for (int i = 0; i < n; i++) {
        if (*bs[i] && ev) {
            clRetainEvent(ev);
            clremat_pool_release_fenced(pool, *bs[i], ev);
        } else {
            clremat_pool_release(pool, *bs[i]);
        }
        *bs[i] = NULL;
    }
    if (ev)
        clReleaseEvent(ev);
}

static void release(clremat_trainer *t, clremat_buf **b)
{
    clremat_buf **bs[1] = {b};
    release_many(t, bs, 1);
}

/* Fence operations of overlapped trainers: fences are OpenCL events, queues
 * command queues. A queue that waits on another's event flushes that queue
 * first (see switch_queues). Stateless: every trainer of a context shares them. */
static int fence_done(void *user, void *fence)
{
    cl_int s = CL_QUEUED;
    (void)user;
    return clGetEventInfo((cl_event)fence, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof s, &s, NULL) == CL_SUCCESS &&
           s == CL_COMPLETE;
}

static int fence_wait(void *user, void *fence, void *fence_queue, void *queue)
{
    cl_event ev = (cl_event)fence;
    cl_int err = CL_SUCCESS;
    (void)user;
    if (fence_queue)
        err = clFlush((cl_command_queue)fence_queue);
    if (err == CL_SUCCESS)
        err = clEnqueueBarrierWithWaitList((cl_command_queue)queue, 1, &ev, NULL);
    return err;
}

static void fence_release(void *user, void *fence)
{
    (void)user;
    clReleaseEvent((cl_event)fence);
}

static const clremat_fence_ops cl_fence_ops = {fence_done, fence_wait, fence_release, NULL};

/* A float32 dense layer, neither LoRA nor tied (layer_dense.c's backward,
 * which takes din_act and dout_is_dz). */
static int plain_dense(const clremat_graph *g, int l)
{
    const clremat_layer *L = &g->layers[l];
    return g->precision == CLREMAT_PREC_FLOAT32 && L->type == CLREMAT_DENSE && L->lora_rank == 0 && !L->tie;
}

/* fusable[P] = 1 for each plain dense layer P with an activation whose
 * output has exactly one consumer, a plain dense layer, through one input. */
static void mark_act_grad_fusable(const clremat_graph *g, unsigned char *fusable)
{
    int *uses = calloc((size_t)g->n_layers, sizeof *uses), *user = calloc((size_t)g->n_layers, sizeof *user);
    if (!uses || !user) { /* nothing fused: the unfused backward */
        free(uses);
        free(user);
        return;
    }
    for (int l = 0; l < g->n_layers; l++)
        for (int i = 0; i < g->layers[l].n_inputs; i++)
            if (g->layers[l].inputs[i] >= 0) {
                uses[g->layers[l].inputs[i]]++;
                user[g->layers[l].inputs[i]] = l;
            }
    for (int P = 0; P < g->n_layers; P++)
        fusable[P] = plain_dense(g, P) && g->layers[P].act != CLREMAT_ACT_NONE && uses[P] == 1 &&
                     plain_dense(g, user[P]) && g->layers[user[P]].n_inputs == 1;
    free(uses);
    free(user);
}

/* Releases every tensor of a step (after a failure mid-step), host copies
 * of offloaded tensors included once the copy queue is done with them. */
static void release_step_tensors(clremat_trainer *t)
{
    if (t->copy_queue) {
        clFinish(t->copy_queue);
        clremat_pool_clear_fences(t->ctx->pool);
        for (int i = 0; t->host && i < t->g->n_layers * S; i++)
            if (t->host[i]) {
                clremat_pool_host_free(t->ctx->pool, t->host[i], t->costs[i / S].slot_bytes[i % S]);
                t->host[i] = NULL;
            }
    }
    for (int i = 0; i < t->g->n_layers * S; i++)
        release(t, &t->act[i]);
    for (int l = 0; t->dgrad && l < t->g->n_layers; l++)
        release(t, &t->dgrad[l]);
    release(t, &t->temp);
    release(t, &t->gemm_ws);
    t->ctx->gemm_ws = NULL;
}

/* Closes an overlap window whatever happened: the recompute queue finished,
 * launches back on the compute queue, no fence left in the pool. */
static void close_window(clremat_trainer *t)
{
    if (!t->side_queue)
        return;
    clFinish(t->side_queue);
    t->ctx->active_queue = t->ctx->queue;
    t->window = 0;
    clremat_pool_set_queue(t->ctx->pool, t->ctx->queue);
    clremat_pool_clear_fences(t->ctx->pool);
}

void clremat_trainer_free(clremat_trainer *t)
{
    if (!t)
        return;
    clremat_dp_detach(t);
    if (t->act)
        release_step_tensors(t);
    for (int l = 0; t->params && l < t->g->n_layers; l++) {
        for (int p = 0; p < CLREMAT_MAX_PARAMS; p++) {
            release(t, &t->params[l][p]);
            release(t, &t->grads[l][p]);
            release(t, &t->state[l][2 * p]);
            release(t, &t->state[l][2 * p + 1]);
        }
        free(t->params[l]);
        free(t->grads[l]);
        free(t->state[l]);
    }
    for (int l = 0; t->accum && l < t->g->n_layers; l++) {
        for (int p = 0; t->accum[l] && p < CLREMAT_MAX_PARAMS; p++)
            release(t, &t->accum[l][p]);
        free(t->accum[l]);
    }
    free(t->accum);
    free(t->params);
    free(t->grads);
    free(t->state);
    release(t, &t->x);
    release(t, &t->labels);
    release(t, &t->scratch);
    free(t->act);
    free(t->dgrad);
    free(t->act_grad_fusable);
    free(t->dz_ready);
    free(t->costs);
    free(t->eval_costs);
    free(t->gemm_ws_fwd);
    free(t->gemm_ws_bwd);
    free(t->eval_gemm_ws);
    free(t->kprof);
    free(t->profile);
    free(t->tags);
    free(t->layer_cost);
    if (t->marker)
        clReleaseEvent(t->marker);
    if (t->side_queue) {
        close_window(t);
        clReleaseCommandQueue(t->side_queue);
    }
    if (t->copy_queue) {
        clFinish(t->copy_queue);
        clremat_pool_clear_fences(t->ctx->pool);
        clReleaseCommandQueue(t->copy_queue);
    }
    free(t->host);
    clremat_plan_free(&t->plan);
    if (t->eval_g) {
        free(t->eval_g->layers);
        free(t->eval_g->blocks);
        free(t->eval_g);
    }
    clremat_graph_free(t->own_g);
    free(t);
}

/* 1 when parameter p of layer l is updated by (or right after) its layer's
 * backward: no fixed gradient (clremat_fused_update_param). */
static int fused_param(const clremat_trainer *t, int l, int p)
{
    clremat_plan_input in;
    memset(&in, 0, sizeof in);
    in.g = t->g;
    in.fused_update = t->fused;
    return clremat_fused_update_param(&in, l, p);
}

static int alloc_fixed(clremat_trainer *t)
{
    clremat_pool *pool = t->ctx->pool;
    const clremat_graph *g = t->g;
    int nstate = clremat_opt_state_count(t->opt.kind), st = CLREMAT_OK;
    float *host = NULL;
    size_t host_cap = 0;

    t->params = calloc((size_t)g->n_layers, sizeof *t->params);
    t->grads = calloc((size_t)g->n_layers, sizeof *t->grads);
    t->state = calloc((size_t)g->n_layers, sizeof *t->state);
    t->act = calloc((size_t)g->n_layers * S, sizeof *t->act);
    t->dgrad = calloc((size_t)g->n_layers, sizeof *t->dgrad);
    t->profile = calloc((size_t)g->n_layers + 1, sizeof *t->profile);
    t->act_grad_fusable = calloc((size_t)g->n_layers, 1);
    t->dz_ready = calloc((size_t)g->n_layers, 1);
    if (!t->params || !t->grads || !t->state || !t->act || !t->dgrad || !t->profile || !t->act_grad_fusable ||
        !t->dz_ready)
        return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    mark_act_grad_fusable(g, t->act_grad_fusable);
    for (int l = 0; l < g->n_layers; l++) {
        t->params[l] = calloc(CLREMAT_MAX_PARAMS, sizeof(clremat_buf *));
        t->grads[l] = calloc(CLREMAT_MAX_PARAMS, sizeof(clremat_buf *));
        t->state[l] = calloc(2 * CLREMAT_MAX_PARAMS, sizeof(clremat_buf *));
        if (!t->params[l] || !t->grads[l] || !t->state[l])
            return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    }
    for (int l = 0; l < g->n_layers; l++) {
        const clremat_layer *L = &g->layers[l];
        for (int p = 0; p < L->n_params; p++) {
            size_t bytes = (size_t)L->params[p].elems * sizeof(float);
            if ((st = clremat_pool_alloc(pool, bytes, "parameter", &t->params[l][p])) ||
                (!L->params[p].frozen && !fused_param(t, l, p) &&
                 (st = clremat_pool_alloc(pool, bytes, "parameter gradient", &t->grads[l][p]))))
                goto pool_fail;
            for (int k = 0; k < nstate && !L->params[p].frozen; k++) { /* frozen: no gradient, no state */
                if ((st = clremat_pool_alloc(pool, bytes, "optimizer state", &t->state[l][2 * p + k])))
                    goto pool_fail;
                if ((st = clremat_zero(t->ctx, t->state[l][2 * p + k])))
                    goto fail;
            }
            if (bytes > host_cap) {
                float *n = realloc(host, bytes);
                if (!n) {
                    st = clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
                    goto fail;
                }
                host = n;
                host_cap = bytes;
            }
            clremat_init_param(g, l, p, t->seed, host);
            if ((st = clremat_write(t->ctx, t->params[l][p], 0, bytes, host)))
                goto fail;
        }
    }
    /* the accumulation buffer (plan.accum_bytes): one float per trainable parameter with accumulation, and
     * batchnorm's statistics sums with several batches a step (micro-batches or data-parallel ranks) */
    if (t->accumulate > 1 || clremat_dp_transport_get()) {
        if (!(t->accum = calloc((size_t)g->n_layers, sizeof *t->accum))) {
            st = clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
            goto fail;
        }
        for (int l = 0; l < g->n_layers; l++) {
            if (!(t->accum[l] = calloc(CLREMAT_MAX_PARAMS, sizeof(clremat_buf *)))) {
                st = clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
                goto fail;
            }
            for (int p = 0; t->accumulate > 1 && p < g->layers[l].n_params; p++)
                if (!g->layers[l].params[p].frozen && /* frozen: no gradient to sum */
                    (st = clremat_pool_alloc(pool, (size_t)g->layers[l].params[p].elems * sizeof(float),
                                             "accumulated gradient", &t->accum[l][p])))
                    goto pool_fail;
            /* batchnorm: the micro-batches' statistics, summed for the step's one update of the moving
             * statistics, in the (frozen, gradient-free) moving mean's place (clremat_bn_moving_sums_floats) */
            if (g->layers[l].type == CLREMAT_BATCHNORM &&
                (st = clremat_pool_alloc(pool, (size_t)clremat_bn_moving_sums_floats(&g->layers[l]) * sizeof(float),
                                         "moving-statistics sums", &t->accum[l][BN_SUMS(&g->layers[l])])))
                goto pool_fail;
        }
    }
    if ((st = clremat_pool_alloc(pool, (size_t)(t->batch * clremat_shape_elems(&g->io.input)) * sizeof(float),
                                 "input batch", &t->x)) ||
        (st = clremat_pool_alloc(pool, (size_t)(t->batch * clremat_shape_elems(&g->io.labels)) * sizeof(float),
                                 "labels", &t->labels)) ||
        (st = clremat_pool_alloc(pool, CLREMAT_SCRATCH_BYTES, "scratch", &t->scratch)))
        goto pool_fail;
    free(host);
    return CLREMAT_OK;
pool_fail:
    clremat_fail(t->ctx, st, "%s", clremat_pool_last_error(pool));
fail:
    free(host);
    return st;
}

int clremat_trainer_fused(const clremat_opt_config *opt, int accumulate, const clremat_graph *g)
{
    clremat_fused_query q = {0};
    q.loss_scaling = g && g->precision == CLREMAT_PREC_MIXED_FLOAT16;
    q.opt_kind = (int)opt->kind;
    q.disabled = opt->no_fused_update != 0;
    q.accumulate = accumulate;
    q.replicas = clremat_dp_transport_get() ? clremat_dp_transport_get()->nranks : 1; /* data parallel */
    return clremat_fused_update_applies(&q);
}

/* The opt_states argument of the planner for t: its optimizer's state
 * count, with CLREMAT_PLAN_FUSED_UPDATE when the update is fused. */
static int opt_states_arg(const clremat_trainer *t)
{
    return clremat_opt_state_count(t->opt.kind) | (t->fused ? CLREMAT_PLAN_FUSED_UPDATE : 0);
}

/* Writes into buf the policies that would fit limit, cheapest recompute first. */
static void suggest(const clremat_trainer *t, uint64_t limit, char *buf, size_t len)
{
    static const char *const modes[] = {"none", "activations", "larger_than", "full", "auto"};
    struct { const char *m; double flops; uint64_t peak; } fit[8];
    /* auto is the budget planner for this limit: the cheapest plan that fits */
    int nfit = 0;
    size_t off = 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        clremat_policy p;
        clremat_plan pl;
        if (clremat_policy_parse(modes[i], &p) ||
            clremat_plan_for_accum(t->ctx, t->g, t->batch, t->accumulate, &p, opt_states_arg(t),
                                   limit, NULL, 0, &pl, NULL, NULL, NULL))
            continue;
        if (pl.peak_bytes <= limit) {
            int j = nfit++;
            while (j > 0 && fit[j - 1].flops > pl.recompute_flops) {
                fit[j] = fit[j - 1];
                j--;
            }
            fit[j].m = modes[i];
            fit[j].flops = pl.recompute_flops;
            fit[j].peak = pl.peak_bytes;
        }
        clremat_plan_free(&pl);
    }
    buf[0] = 0;
    if (nfit == 0) {
        snprintf(buf, len, "; no remat mode fits: try a smaller --batch");
        return;
    }
    off += (size_t)snprintf(buf, len, "; modes that fit, cheapest recompute first:");
    for (int i = 0; i < nfit && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, " %s (peak %llu bytes, %.3g recompute FLOPs)%s", fit[i].m,
                                (unsigned long long)fit[i].peak, fit[i].flops, i + 1 < nfit ? "," : "");
}

#define TAG_KINDS (CLREMAT_MAX_SLOTS + 3)
#define TAG_LEN (CLREMAT_NAME_LEN + 32)

const char *clremat_trainer_tag(const clremat_trainer *t, int l, int k)
{
    return t->tags + ((size_t)l * TAG_KINDS + (size_t)k) * TAG_LEN;
}

void clremat_tensor_name(char *buf, size_t len, const clremat_graph *g, const clremat_layer_cost *costs, int l, int k)
{
    const char *name = g->layers[l].name;
    if (k < S)
        snprintf(buf, len, "%s/%s", name, costs[l].slot_name[k] ? costs[l].slot_name[k] : k == 0 ? "out" : "internal");
    else if (k == CLREMAT_TAG_GRADIENT)
        snprintf(buf, len, "%s (gradient)", name);
    else if (k == CLREMAT_TAG_WORKSPACE)
        snprintf(buf, len, "%s (workspace)", name);
    else
        snprintf(buf, len, "%s (GEMM workspace)", name);
}

/* Names every tensor of every layer for the pool's timeline. */
static int make_tags(clremat_trainer *t)
{
    const clremat_graph *g = t->g;
    t->tags = calloc((size_t)g->n_layers * TAG_KINDS, TAG_LEN);
    if (!t->tags)
        return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    for (int l = 0; l < g->n_layers; l++)
        for (int k = 0; k < TAG_KINDS; k++)
            clremat_tensor_name(t->tags + ((size_t)l * TAG_KINDS + (size_t)k) * TAG_LEN, TAG_LEN, g, t->costs, l, k);
    return CLREMAT_OK;
}

int clremat_trainer_new(clremat_ctx *ctx, clremat_graph *g, int64_t batch, const clremat_policy *p,
                        const clremat_opt_config *opt, uint64_t seed, clremat_trainer **out)
{
    return clremat_trainer_new_costs(ctx, g, batch, p, opt, seed, NULL, 0, out);
}

int clremat_trainer_new_costs(clremat_ctx *ctx, clremat_graph *g, int64_t batch, const clremat_policy *p,
                              const clremat_opt_config *opt, uint64_t seed, const double *layer_cost,
                              int overlap, clremat_trainer **out)
{
    return clremat_trainer_new_accum(ctx, g, batch, 1, p, opt, seed, layer_cost, overlap, NULL, out);
}

int clremat_trainer_new_accum(clremat_ctx *ctx, clremat_graph *g, int64_t batch, int accumulate,
                              const clremat_policy *p, const clremat_opt_config *opt, uint64_t seed,
                              const double *layer_cost, int overlap, const char *offload, clremat_trainer **out)
{
    clremat_trainer *t = calloc(1, sizeof *t);
    uint64_t limit = clremat_pool_get_stats(ctx->pool).limit;
    uint64_t live = clremat_pool_get_stats(ctx->pool).live_bytes;
    int st;
    *out = NULL;
    if (!t)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    t->ctx = ctx;
    t->g = g;
    t->batch = batch;
    t->seed = seed;
    t->opt = *opt;
    if (batch <= 0) {
        st = clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "batch size must be positive, got %lld",
                          (long long)batch);
        goto fail;
    }
    if ((st = clremat_accumulate_split(batch, accumulate, &t->batch)) != CLREMAT_OK) {
        clremat_fail(ctx, st, "%s", clremat_last_error());
        goto fail;
    }
    t->accumulate = accumulate;
    if (layer_cost) {
        if (!(t->layer_cost = malloc(sizeof *t->layer_cost * (size_t)g->n_layers))) {
            st = clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
            goto fail;
        }
        memcpy(t->layer_cost, layer_cost, sizeof *t->layer_cost * (size_t)g->n_layers);
    }
    t->fused = clremat_trainer_fused(opt, accumulate, g);
    t->fuse_act_grad = !(getenv("CLREMAT_NO_FUSED_ACT_GRAD") && !strcmp(getenv("CLREMAT_NO_FUSED_ACT_GRAD"), "1"));
    t->loss_scale = g->precision == CLREMAT_PREC_MIXED_FLOAT16 ? CLREMAT_LOSS_SCALE_INITIAL : 1.0f;
    if (g->precision != CLREMAT_PREC_FLOAT32) {
        /* the layer-boundary staging is released without a fence: one queue only */
        const char *what = overlap ? "overlapped recomputation (--overlap)"
                           : offload ? "offloading to the host (--offload)"
                           : clremat_dp_transport_get() && clremat_dp_transport_get()->nranks > 1
                               ? "data-parallel training" : NULL;
        if (!clremat_precision_name(g->precision)) {
            st = clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "model '%s': unknown precision %d", g->name,
                              g->precision);
            goto fail;
        }
        if (what) {
            st = clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                              "model '%s': precision %s does not run with %s; use --precision float32 or drop it",
                              g->name, clremat_precision_name(g->precision), what);
            goto fail;
        }
    }
    st = clremat_plan_for_offload(ctx, g, t->batch, accumulate, p, opt_states_arg(t),
                                  limit ? limit - live : 0, layer_cost, overlap, offload, &t->plan, &t->costs,
                                  &t->gemm_ws_fwd, &t->gemm_ws_bwd);
    if (st != CLREMAT_OK)
        goto fail;
    if (t->plan.n_offloads > 0) { /* a queue of its own for the copies */
        int fell = 0;
        if (!(t->host = calloc((size_t)g->n_layers * S, sizeof *t->host))) {
            st = clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
            goto fail;
        }
        if ((st = clremat_ctx_open_queue(ctx, 0, &t->copy_queue, &fell)))
            goto fail;
    }
    if (clremat_attn_choice_applies(g, p)) { /* run the attention modes the plan chose */
        if (!(t->own_g = clremat_attn_resolved_graph(g, &t->plan))) {
            st = clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
            goto fail;
        }
        t->g = t->own_g;
    }
    if (overlap) {
        int fell = 0;
        if ((st = clremat_ctx_open_queue(ctx, CL_QUEUE_PROFILING_ENABLE, &t->side_queue, &fell)))
            goto fail;
        clremat_pool_set_fence_ops(ctx->pool, &cl_fence_ops);
    }
    if (limit && live + t->plan.peak_bytes > limit) {
        char hint[1024];
        char acc[96] = "";
        if (accumulate > 1)
            snprintf(acc, sizeof acc, " (%d micro-batches of %lld)", accumulate, (long long)t->batch);
        suggest(t, limit - live, hint, sizeof hint);
        clremat_error_set_bytes(t->plan.peak_bytes, limit - live);
        st = clremat_fail(ctx, CLREMAT_ERR_OUT_OF_MEMORY,
                          "remat mode '%s' at batch %lld%s needs %llu bytes of device memory but %llu bytes are "
                          "available (limit %llu)%s",
                          p->text, (long long)batch, acc, (unsigned long long)t->plan.peak_bytes,
                          (unsigned long long)(limit - live), (unsigned long long)limit, hint);
        goto fail;
    }
    t->eval_g = eval_copy(t->g);
    t->eval_costs = calloc((size_t)g->n_layers, sizeof *t->eval_costs);
    t->eval_gemm_ws = calloc((size_t)g->n_layers, sizeof *t->eval_gemm_ws);
    if (!t->eval_g || !t->eval_costs || !t->eval_gemm_ws) {
        st = clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
        goto fail;
    }
    if ((st = costs_with_gemm(ctx, t->eval_g, batch, t->eval_costs, t->eval_gemm_ws, NULL)) != CLREMAT_OK)
        goto fail;
    if ((st = make_tags(t)) != CLREMAT_OK)
        goto fail;
    st = alloc_fixed(t);
    if (st == CLREMAT_OK)
        st = clremat_dp_attach(t); /* data parallel: the gradient staging buffers */
    if (st != CLREMAT_OK)
        goto fail;
    *out = t;
    return CLREMAT_OK;
fail:
    clremat_trainer_free(t);
    return st;
}

/* Fills the launch description of layer l for the graph/cost in use. */
static void make_call(clremat_trainer *t, const clremat_graph *g, int l, clremat_layer_call *c)
{
    const clremat_layer *L = &g->layers[l];
    memset(c, 0, sizeof *c);
    c->ctx = t->ctx;
    c->g = g;
    c->layer = l;
    /* a partial evaluation batch: the loss counts its first loss_batch samples only */
    c->batch = l == g->n_layers - 1 && t->loss_batch > 0 ? t->loss_batch : t->batch;
    c->seed = t->seed;
    c->step = (uint64_t)t->step;
    for (int i = 0; i < L->n_inputs; i++)
        c->in[i] = L->inputs[i] >= 0 ? t->act[L->inputs[i] * S] : t->x;
    for (int s = 0; s < S; s++)
        c->slot[s] = t->act[l * S + s];
    for (int p = 0; p < L->n_params; p++) {
        c->param[p] = t->params[l][p];
        c->grad[p] = t->grads[l][p]; /* NULL when frozen */
    }
    if (L->type == CLREMAT_DENSE && L->tie) { /* tied: the embedding's table and its gradient */
        c->param[0] = t->params[L->tie - 1][0];
        c->grad[0] = t->grads[L->tie - 1][0];
    }
    /* a tied table's gradient: the tying layer's backward (always earlier in
     * the backward pass) writes it, the embedding's adds to it */
    if (L->type == CLREMAT_EMBEDDING && clremat_graph_tied_user(g, l) >= 0)
        c->grad_accumulate[0] = 1;
    c->labels = t->labels;
    c->temp = t->temp;
    /* dropout keys the element of the global batch: data parallel, this
     * rank's shard starts rank * (its samples) in; accumulation, the
     * micro-batch starts sample0 into the shard */
    c->sample0 = t->sample0 + (t->dp ? (int64_t)clremat_dp_rank(t) * t->batch * t->accumulate : 0);
    /* several micro-batches a step: batchnorm sums their statistics, one moving update at the end */
    if (L->type == CLREMAT_BATCHNORM && t->accum && t->accum[l]) {
        c->bn_moving_acc = t->accum[l][BN_SUMS(L)];
        c->bn_moving_first = t->sample0 == 0;
    }
    if (l == g->n_layers - 1)
        c->loss_batch_div = t->loss_div;
    /* mixed precision: buffers sized at the trainer's batch, the loss scale */
    c->alloc_batch = t->batch;
    c->loss_scale = t->loss_scale;
    c->stage_tag = clremat_trainer_tag(t, l, CLREMAT_TAG_WORKSPACE);
}

static int alloc_tensor(clremat_trainer *t, size_t bytes, const char *tag, clremat_buf **out)
{
    int st = clremat_pool_alloc(t->ctx->pool, bytes, tag, out);
    if (st != CLREMAT_OK)
        return clremat_fail(t->ctx, st, "%s", clremat_pool_last_error(t->ctx->pool));
    return CLREMAT_OK;
}

/* Allocates an action's workspace: temp_bytes in all, of which gemm_bytes
 * are the GEMM workspace (a buffer of its own, handed to clremat_gemm
 * through the context) and the rest the layer's own workspace. */
static int alloc_workspace(clremat_trainer *t, int l, size_t temp_bytes, size_t gemm_bytes)
{
    int st = CLREMAT_OK;
    if (temp_bytes > gemm_bytes &&
        (st = alloc_tensor(t, temp_bytes - gemm_bytes, clremat_trainer_tag(t, l, CLREMAT_TAG_WORKSPACE), &t->temp)))
        return st;
    if (gemm_bytes &&
        (st = alloc_tensor(t, gemm_bytes, clremat_trainer_tag(t, l, CLREMAT_TAG_GEMM_WORKSPACE), &t->gemm_ws)))
        return st;
    t->ctx->gemm_ws = t->gemm_ws;
    return CLREMAT_OK;
}

static void release_workspace(clremat_trainer *t)
{
    clremat_buf **bs[2] = {&t->temp, &t->gemm_ws};
    release_many(t, bs, 2); /* one fence for both */
    t->ctx->gemm_ws = NULL;
}

static int run_forward(clremat_trainer *t, const clremat_graph *g, const clremat_layer_cost *costs,
                       const size_t *gemm_ws, int l, unsigned alloc_slots, int phase)
{
    clremat_layer_call c;
    int st = CLREMAT_OK;
    for (int s = 0; s < costs[l].n_slots; s++)
        if ((alloc_slots >> s & 1u) &&
            (st = alloc_tensor(t, costs[l].slot_bytes[s], clremat_trainer_tag(t, l, s), &t->act[l * S + s])))
            return st;
    /* the mixed-precision staging (part of the workspace) is taken by the launch */
    if ((st = alloc_workspace(t, l, costs[l].fwd_temp_bytes - costs[l].fwd_stage_bytes, gemm_ws[l])) != CLREMAT_OK)
        return st;
    clremat_ctx_set_label(t->ctx, l, phase);
    make_call(t, g, l, &c);
    st = clremat_layer_forward(&c);
    release_workspace(t);
    return st;
}

/* The fused update around layer l's backward: the parameters the layer
 * updates itself (bits in *self), those that get a gradient scratch (bits
 * in *scratch) and the scratch's bytes. */
static size_t fused_split(const clremat_trainer *t, int l, unsigned *self, unsigned *scratch)
{
    const clremat_layer *L = &t->g->layers[l];
    size_t bytes = 0;
    *self = *scratch = 0;
    for (int p = 0; t->fused && p < L->n_params; p++) {
        if (!fused_param(t, l, p))
            continue;
        if (clremat_layer_fuses_update(t->ctx, t->g, l, p, t->batch)) {
            *self |= 1u << p;
        } else {
            *scratch |= 1u << p;
            bytes += (size_t)L->params[p].elems * sizeof(float);
        }
    }
    return bytes;
}

/* The optimizer's step number of the running step: steps whose update was
 * skipped (mixed_float16, non-finite gradients) do not count, as the
 * optimizer inside Keras's LossScaleOptimizer does not see them. */
static int64_t opt_step_no(const clremat_trainer *t)
{
    return t->step + 1 - t->skipped_steps;
}

/* The updates of the parameters whose gradients went to scratch, then the
 * scratch given back. */
static int update_from_scratch(clremat_trainer *t, int l, unsigned scratch, int st)
{
    const clremat_layer *L = &t->g->layers[l];
    clremat_buf **bs[CLREMAT_MAX_PARAMS];
    int n = 0;
    for (int p = 0; p < L->n_params; p++) {
        if (!(scratch >> p & 1u))
            continue;
        if (st == CLREMAT_OK && t->upd_scratch[p]) {
            clremat_buf *const state[2] = {t->state[l][2 * p], t->state[l][2 * p + 1]};
            clremat_ctx_set_label(t->ctx, l, CLREMAT_PHASE_UPDATE);
            st = clremat_opt_step(t->ctx, &t->opt, opt_step_no(t), t->params[l][p], t->upd_scratch[p], state,
                                  L->params[p].elems);
        }
        bs[n++] = &t->upd_scratch[p];
    }
    if (n)
        release_many(t, bs, n);
    return st;
}

static int run_backward(clremat_trainer *t, const clremat_action *a)
{
    const clremat_layer *L = &t->g->layers[a->layer];
    const clremat_layer_cost *cost = &t->costs[a->layer];
    clremat_layer_call c;
    clremat_fused_call fc;
    unsigned self = 0, scratch = 0;
    const size_t scratch_bytes = fused_split(t, a->layer, &self, &scratch);
    int st;
    for (int i = 0; i < L->n_inputs; i++)
        if ((a->alloc_din >> i & 1u) &&
            (st = alloc_tensor(t, t->costs[L->inputs[i]].slot_bytes[0],
                               clremat_trainer_tag(t, L->inputs[i], CLREMAT_TAG_GRADIENT), &t->dgrad[L->inputs[i]])))
            return st;
    if ((st = alloc_workspace(t, a->layer, cost->bwd_temp_bytes - scratch_bytes - cost->bwd_stage_bytes,
                              t->gemm_ws_bwd[a->layer])) !=
        CLREMAT_OK)
        return st;
    for (int p = 0; p < L->n_params; p++)
        if ((scratch >> p & 1u) &&
            (st = alloc_tensor(t, (size_t)L->params[p].elems * sizeof(float),
                               clremat_trainer_tag(t, a->layer, CLREMAT_TAG_WORKSPACE), &t->upd_scratch[p])))
            return update_from_scratch(t, a->layer, scratch, st);
    clremat_ctx_set_label(t->ctx, a->layer, CLREMAT_PHASE_BACKWARD);
    make_call(t, t->g, a->layer, &c);
    if (self) {
        if ((st = clremat_fused_opt_make(t->ctx, &t->opt, opt_step_no(t), &fc.opt)) != CLREMAT_OK)
            return update_from_scratch(t, a->layer, scratch, st);
        for (int k = 0; k < 2 * CLREMAT_MAX_PARAMS; k++)
            fc.state[k] = t->state[a->layer][k];
        c.fuse_update = self;
        c.fused = &fc;
    }
    for (int p = 0; p < L->n_params; p++)
        if (scratch >> p & 1u)
            c.grad[p] = t->upd_scratch[p];
    for (int i = 0; i < L->n_inputs; i++)
        if (a->fuse_act_in >> i & 1u) { /* the producer's pre-activation, activated inside the GEMM or kernel */
            const int P = L->inputs[i];
            c.in[i] = t->act[P * S + t->costs[P].act_source];
            c.in_act[i] = (int)t->g->layers[P].act;
        }
    c.dout = t->dgrad[a->layer];
    c.dout_is_dz = t->dz_ready[a->layer];
    t->dz_ready[a->layer] = 0;
    for (int i = 0; i < L->n_inputs; i++)
        if (a->want_din >> i & 1u) {
            const int P = L->inputs[i];
            c.din[i] = t->dgrad[P];
            c.din_accumulate[i] = !(a->alloc_din >> i & 1u);
            /* P's activation backward in this GEMM: P's pre-activation
             * resident now on the one queue (the in-order queue has
             * computed it), the gradient written here alone */
            if (t->fuse_act_grad && P >= 0 && t->act_grad_fusable[P] && !c.din_accumulate[i] && !t->side_queue &&
                t->plan.n_offloads == 0 && t->act[P * S + t->costs[P].act_source]) {
                c.din_act[i] = (int)t->g->layers[P].act;
                c.din_pre[i] = t->act[P * S + t->costs[P].act_source];
            }
        }
    st = clremat_layer_backward(&c);
    for (int i = 0; st == CLREMAT_OK && i < L->n_inputs; i++)
        if (c.din_act[i])
            t->dz_ready[L->inputs[i]] = 1;
    st = update_from_scratch(t, a->layer, scratch, st);
    release_workspace(t);
    return st;
}

static int run_update(clremat_trainer *t, const clremat_buf *skip)
{
    int st = CLREMAT_OK;
    clremat_ctx_set_label(t->ctx, -1, CLREMAT_PHASE_UPDATE);
    for (int l = 0; l < t->g->n_layers && st == CLREMAT_OK; l++) {
        const clremat_layer *L = &t->g->layers[l];
        clremat_ctx_set_label(t->ctx, l, CLREMAT_PHASE_UPDATE);
        for (int p = 0; p < L->n_params && st == CLREMAT_OK; p++) {
            clremat_buf *const state[2] = {t->state[l][2 * p], t->state[l][2 * p + 1]};
            if (L->params[p].frozen || fused_param(t, l, p)) /* frozen: no update; fused: in its backward */
                continue;
            /* with accumulation, the gradient summed over the micro-batches */
            st = clremat_opt_step_unless(t->ctx, &t->opt, opt_step_no(t), t->params[l][p],
                                         t->accumulate > 1 ? t->accum[l][p] : t->grads[l][p], state,
                                         L->params[p].elems, skip);
        }
    }
    return st;
}

/* Reads layer l's output into out as floats (a 16-bit output widened). */
static int read_output(clremat_trainer *t, const clremat_graph *g, const clremat_layer_cost *costs, int l,
                       float *out)
{
    const size_t bytes = costs[l].slot_bytes[0];
    uint16_t *h;
    int st;
    if (!(costs[l].slot16 & 1u))
        return clremat_read(t->ctx, t->act[l * S], 0, bytes, out);
    if (!(h = malloc(bytes ? bytes : 1)))
        return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    if ((st = clremat_read(t->ctx, t->act[l * S], 0, bytes, h)) == CLREMAT_OK)
        for (size_t i = 0; i < bytes / 2; i++)
            out[i] = g->precision == CLREMAT_PREC_MIXED_FLOAT16 ? clremat_half_to_float(h[i])
                                                                 : clremat_bf16_to_float(h[i]);
    free(h);
    return st;
}

/* mixed_float16's update: the step's parameter gradients (scaled by the
 * loss scale) are checked and unscaled in place in one pass, eight
 * gradients a launch (clremat_op_unscale_check), into one count of
 * non-finite values, and the
 * updates are enqueued behind them with that count as their skip
 * (clremat_opt_step_unless: the device skips them when it is not zero), so
 * the host enqueues the whole update without waiting for the backward;
 * then one blocking read of the count. All finite: the scale doubles after
 * CLREMAT_LOSS_SCALE_GROWTH_STEPS finite steps in a row; else the update
 * was skipped (the unscaled gradients are discarded), the step is counted
 * as skipped and the scale halves. */
static int loss_scaled_update(clremat_trainer *t)
{
    clremat_buf *cnt, **grads;
    int64_t *elems, bad = 0;
    const float inv = 1.0f / t->loss_scale;
    int st, count = 0;
    grads = malloc(sizeof *grads * (size_t)t->g->n_layers * CLREMAT_MAX_PARAMS);
    elems = malloc(sizeof *elems * (size_t)t->g->n_layers * CLREMAT_MAX_PARAMS);
    if (!grads || !elems) {
        free(grads);
        free(elems);
        return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    }
    for (int l = 0; l < t->g->n_layers; l++)
        for (int p = 0; p < t->g->layers[l].n_params; p++) {
            clremat_buf *gb = t->accumulate > 1 ? t->accum[l][p] : t->grads[l][p];
            if (!t->g->layers[l].params[p].frozen && gb) {
                grads[count] = gb;
                elems[count++] = t->g->layers[l].params[p].elems;
            }
        }
    if ((st = clremat_counter_new(t->ctx, &cnt)) == CLREMAT_OK) {
        st = clremat_op_unscale_check(t->ctx, grads, elems, count, inv, cnt);
        if (st == CLREMAT_OK)
            st = run_update(t, cnt);
    }
    free(grads);
    free(elems);
    if (st != CLREMAT_OK) {
        if (cnt)
            clremat_pool_release(t->ctx->pool, cnt);
        return st;
    }
    if ((st = clremat_counter_take(t->ctx, cnt, &bad)) != CLREMAT_OK)
        return st;
    if (bad) {
        t->last_skipped = 1;
        t->skipped_steps++;
        t->scale_good_steps = 0;
        t->loss_scale *= 0.5f;
        return CLREMAT_OK;
    }
    if (++t->scale_good_steps >= CLREMAT_LOSS_SCALE_GROWTH_STEPS) {
        t->loss_scale *= 2.0f;
        t->scale_good_steps = 0;
    }
    return st;
}

/* Forward only over graph g with costs, freeing each tensor after its last
 * consumer. With check, stops at the first layer whose output has a
 * non-finite value and stores it in *bad (-1 if none). */
static int forward_only(clremat_trainer *t, const clremat_graph *g, const clremat_layer_cost *costs,
                        const size_t *gemm_ws, float result[2], int check, int *bad)
{
    int n = g->n_layers, st = CLREMAT_OK;
    int *last_use = malloc(sizeof(int) * (size_t)n);
    if (!last_use)
        return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    if (bad)
        *bad = -1;
    for (int l = 0; l < n; l++)
        last_use[l] = l;
    for (int l = 0; l < n; l++)
        for (int i = 0; i < g->layers[l].n_inputs; i++)
            if (g->layers[l].inputs[i] >= 0)
                last_use[g->layers[l].inputs[i]] = l;
    for (int l = 0; l < n && st == CLREMAT_OK; l++) {
        st = run_forward(t, g, costs, gemm_ws, l, (1u << costs[l].n_slots) - 1, CLREMAT_PHASE_OTHER);
        if (st == CLREMAT_OK && t->capture_out && l == t->capture_layer)
            st = read_output(t, g, costs, l, t->capture_out);
        if (st == CLREMAT_OK && check) {
            int64_t cnt = 0;
            st = (costs[l].slot16 & 1u)
                     ? clremat_op_count_nonfinite_fmt(t->ctx, t->act[l * S], (int64_t)(costs[l].slot_bytes[0] / 2),
                                                      g->precision, &cnt)
                     : clremat_op_count_nonfinite(t->ctx, t->act[l * S],
                                                  (int64_t)(costs[l].slot_bytes[0] / sizeof(float)), &cnt);
            if (st == CLREMAT_OK && cnt > 0) {
                *bad = l;
                break;
            }
        }
        for (int s = 1; s < S; s++)
            release(t, &t->act[l * S + s]);
        for (int p = 0; p <= l; p++)
            if (last_use[p] == l && p != n - 1)
                release(t, &t->act[p * S]);
    }
    if (st == CLREMAT_OK && (!bad || *bad < 0))
        st = clremat_read(t->ctx, t->act[(n - 1) * S], 0, 2 * sizeof(float), result);
    release_step_tensors(t);
    free(last_use);
    return st;
}

static int upload(clremat_trainer *t, const float *x, const float *y)
{
    int st = clremat_write(t->ctx, t->x, 0, t->x->bytes, x);
    if (st == CLREMAT_OK)
        st = clremat_write(t->ctx, t->labels, 0, t->labels->bytes, y);
    return st;
}

/* Adds ns of one launch of kernel name to the per-kernel table. */
static void kprof_add(clremat_trainer *t, const char *name, double ns)
{
    int i;
    for (i = 0; i < t->n_kprof; i++)
        if (strcmp(t->kprof[i].name, name) == 0)
            break;
    if (i == t->n_kprof) {
        clremat_kernel_profile *n = realloc(t->kprof, sizeof *n * (size_t)(t->n_kprof + 1));
        if (!n)
            return;
        t->kprof = n;
        memset(&t->kprof[i], 0, sizeof t->kprof[i]);
        snprintf(t->kprof[i].name, sizeof t->kprof[i].name, "%s", name);
        t->n_kprof++;
    }
    t->kprof[i].ns += ns;
    t->kprof[i].launches++;
}

static int kprof_cmp(const void *a, const void *b)
{
    double x = ((const clremat_kernel_profile *)a)->ns, y = ((const clremat_kernel_profile *)b)->ns;
    return (x < y) - (x > y);
}

static void collect_profile(clremat_trainer *t)
{
    clremat_ctx *ctx = t->ctx;
    memset(t->profile, 0, sizeof *t->profile * (size_t)(t->g->n_layers + 1));
    t->n_kprof = 0;
    clFinish(ctx->queue);
    for (size_t i = 0; i < ctx->n_prof; i++) {
        cl_ulong a = 0, b = 0;
        int l = ctx->prof[i].layer;
        t->profile[l >= 0 ? l : t->g->n_layers].launches[ctx->prof[i].phase]++;
        if (clGetEventProfilingInfo(ctx->prof[i].event, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL) ==
                CL_SUCCESS &&
            clGetEventProfilingInfo(ctx->prof[i].event, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL) == CL_SUCCESS &&
            b >= a) {
            t->profile[l >= 0 ? l : t->g->n_layers].ns[ctx->prof[i].phase] += (double)(b - a);
            kprof_add(t, ctx->prof[i].kname, (double)(b - a));
        }
        clReleaseEvent(ctx->prof[i].event);
    }
    ctx->n_prof = 0;
    if (t->n_kprof > 1)
        qsort(t->kprof, (size_t)t->n_kprof, sizeof *t->kprof, kprof_cmp);
    t->profile_device_ns = 0;
    for (int l = 0; l <= t->g->n_layers; l++)
        for (int p = 0; p < CLREMAT_PHASE_COUNT; p++)
            t->profile_device_ns += t->profile[l].ns[p];
}

/* Releases the launch events of a step that failed: its profile is not
 * collected, and the next profiled step must not count them. */
static void drop_profile(clremat_ctx *ctx)
{
    for (size_t i = 0; i < ctx->n_prof; i++)
        clReleaseEvent(ctx->prof[i].event);
    ctx->n_prof = 0;
}

/* Overlapped plans: a marker on the compute queue opens a window; recompute
 * actions go to the side queue, which first waits for the marker; a join
 * makes the compute queue wait for the side queue and closes the window.
 * Inside the window buffers are released with a fence (release_many) and
 * the pool makes a queue wait for the other queue's fence before reusing
 * its buffer; at the join every fence is settled. A queue is flushed after
 * enqueuing an event the other queue waits on: OpenCL requires it for
 * cross-queue waits, and implementations that do not submit unflushed work
 * on their own (Mesa's rusticl) otherwise deadlock at the next blocking
 * call. */
static int switch_queues(clremat_trainer *t, const clremat_action *a)
{
    clremat_ctx *ctx = t->ctx;
    cl_int err = CL_SUCCESS;
    if (a->join) {
        cl_event e = NULL;
        err = clEnqueueMarkerWithWaitList(t->side_queue, 0, NULL, &e);
        /* an event another queue waits on must be submitted: flush its queue */
        if (err == CL_SUCCESS)
            err = clFlush(t->side_queue);
        if (err == CL_SUCCESS)
            err = clEnqueueBarrierWithWaitList(ctx->queue, 1, &e, NULL);
        if (e)
            clReleaseEvent(e);
        if (err == CL_SUCCESS) { /* everything after this on either queue follows every release before */
            t->window = 0;
            clremat_pool_clear_fences(ctx->pool);
        }
    }
    if (err == CL_SUCCESS && a->marker) {
        if (t->marker)
            clReleaseEvent(t->marker);
        t->marker = NULL;
        err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &t->marker);
        if (err == CL_SUCCESS)
            err = clFlush(ctx->queue);
        t->window = 1;
    }
    if (err == CL_SUCCESS && a->queue == 1 && ctx->active_queue != t->side_queue) {
        err = clEnqueueBarrierWithWaitList(t->side_queue, t->marker ? 1 : 0, t->marker ? &t->marker : NULL, NULL);
        ctx->active_queue = t->side_queue;
    } else if (a->queue == 0) {
        ctx->active_queue = ctx->queue;
    }
    clremat_pool_set_queue(ctx->pool, ctx->active_queue);
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "synchronizing the recompute queue failed: %s", clremat_status_str(err));
    return CLREMAT_OK;
}

/* 1 for the failures a smaller plan may avoid: device memory or resources. */
static int out_of_memory(int st)
{
    return st == CLREMAT_ERR_OUT_OF_MEMORY || st == CL_MEM_OBJECT_ALLOCATION_FAILURE || st == CL_OUT_OF_RESOURCES;
}

/* Replaces the plan by a budget plan for less memory (three quarters of its
 * activation bytes, else seven eighths, else just below its peak; fixed
 * bytes unchanged), overlapped if the old one was. */
static int replan_smaller(clremat_trainer *t, const char *why)
{
    clremat_plan_input in;
    clremat_plan np;
    uint64_t fixed = t->plan.fixed_bytes, old = t->plan.peak_bytes;
    /* three quarters of the activation bytes, else seven eighths, else
     * anything below the failed peak */
    const uint64_t act = old - fixed, budgets[3] = {fixed + act / 4 * 3, fixed + act / 8 * 7, old - 1};
    int st = CLREMAT_ERR_PLAN;
    memset(&in, 0, sizeof in);
    in.g = t->g;
    in.batch = t->batch;
    in.costs = t->costs;
    in.opt_states = clremat_opt_state_count(t->opt.kind);
    in.fused_update = t->fused;
    in.scratch_bytes = CLREMAT_SCRATCH_BYTES + (t->dp ? clremat_dp_staging_bytes(t->g) : 0);
    in.layer_cost = t->layer_cost;
    in.accumulate = t->accumulate;
    in.replicas = t->dp ? clremat_dp_nranks(t) : 1;
    for (int k = 0; k < 3 && st != CLREMAT_OK; k++)
        if (act > 0 && (k == 0 || budgets[k] != budgets[k - 1]))
            st = clremat_plan_budget(&in, budgets[k], &np);
    if (st != CLREMAT_OK)
        return clremat_fail(t->ctx, st, "%s; no plan below %llu bytes: %s", why, (unsigned long long)old,
                            clremat_last_error());
    if (t->side_queue && (st = clremat_plan_overlap(&in, &np)) != CLREMAT_OK) {
        clremat_plan_free(&np);
        return clremat_fail(t->ctx, st, "%s; overlapping the new plan failed: %s", why, clremat_last_error());
    }
    np.policy = t->plan.policy;
    clremat_plan_free(&t->plan);
    t->plan = np;
    /* the measured peak from here on is the new plan's */
    clremat_pool_reset_peaks(t->ctx->pool);
    t->replans++;
    t->replan_step = t->step;
    t->replan_from = old;
    t->replan_to = np.peak_bytes;
    snprintf(t->replan_reason, sizeof t->replan_reason, "%s", why);
    return CLREMAT_OK;
}

int clremat_trainer_step_replan(clremat_trainer *t, const float *x, const float *y, float *loss, float *correct)
{
    int st = clremat_trainer_step(t, x, y, loss, correct);
    if (out_of_memory(st) && !t->update_started) {
        char why[512];
        snprintf(why, sizeof why, "step %lld ran out of device memory with a plan of %llu bytes: %s",
                 (long long)t->step, (unsigned long long)t->plan.peak_bytes, clremat_ctx_last_error(t->ctx));
        if ((st = replan_smaller(t, why)) == CLREMAT_OK)
            st = clremat_trainer_step(t, x, y, loss, correct);
    }
    return st;
}

/* OFFLOAD: the copy queue waits for the compute queue's work so far and
 * reads the tensor into host memory; the host waits for the read, then the
 * device buffer goes back to the pool. FETCH: a device buffer from the pool,
 * the copy queue writes the host copy into it after the compute queue's work
 * so far, the host waits for the write and frees the host copy, and the
 * compute queue waits for the write. (An earlier version read without
 * waiting and released the buffer fenced by the read: faults injected in
 * the middle of a step then corrupted rusticl's heap; the copies are
 * synchronous until that is understood.) */
static int run_offload(clremat_trainer *t, const clremat_action *a)
{
    clremat_ctx *ctx = t->ctx;
    const int i = a->layer * S + a->slot;
    const size_t bytes = t->costs[a->layer].slot_bytes[a->slot];
    cl_event m = NULL, ev = NULL;
    cl_int err;
    int st;
    if (a->kind == CLREMAT_ACT_FETCH &&
        (st = alloc_tensor(t, bytes, clremat_trainer_tag(t, a->layer, a->slot), &t->act[i])))
        return st;
    if (a->kind == CLREMAT_ACT_OFFLOAD && (st = clremat_pool_host_alloc(ctx->pool, bytes, &t->host[i])))
        return clremat_fail(ctx, st, "%s", clremat_pool_last_error(ctx->pool));
    err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &m);
    if (err == CL_SUCCESS)
        err = clFlush(ctx->queue); /* the copy queue waits for it: submit it */
    if (err == CL_SUCCESS && a->kind == CLREMAT_ACT_OFFLOAD)
        err = clEnqueueReadBuffer(t->copy_queue, (cl_mem)t->act[i]->mem, CL_FALSE, 0, bytes, t->host[i], 1, &m, &ev);
    if (err == CL_SUCCESS && a->kind == CLREMAT_ACT_OFFLOAD) {
        err = clFlush(t->copy_queue);
        if (err == CL_SUCCESS)
            err = clWaitForEvents(1, &ev);
    }
    else if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(t->copy_queue, (cl_mem)t->act[i]->mem, CL_FALSE, 0, bytes, t->host[i], 1, &m,
                                   &ev);
    if (err == CL_SUCCESS)
        err = clFlush(t->copy_queue);
    if (m)
        clReleaseEvent(m);
    if (err != CL_SUCCESS) {
        if (ev)
            clReleaseEvent(ev);
        return clremat_fail(ctx, err, "%s of %s (%zu bytes) failed: %s",
                            a->kind == CLREMAT_ACT_OFFLOAD ? "offload" : "fetch",
                            clremat_trainer_tag(t, a->layer, a->slot), bytes, clremat_status_str(err));
    }
    if (a->kind == CLREMAT_ACT_OFFLOAD) { /* read: the device buffer is free */
        clReleaseEvent(ev);
        clremat_pool_release(ctx->pool, t->act[i]);
        t->act[i] = NULL;
        return CLREMAT_OK;
    }
    /* the host copy is freed once written; the compute queue waits for the write */
    err = clWaitForEvents(1, &ev);
    if (err == CL_SUCCESS)
        err = clEnqueueBarrierWithWaitList(ctx->queue, 1, &ev, NULL);
    clReleaseEvent(ev);
    clremat_pool_host_free(ctx->pool, t->host[i], bytes);
    t->host[i] = NULL;
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "fetch of %s failed: %s", clremat_trainer_tag(t, a->layer, a->slot),
                            clremat_status_str(err));
    return CLREMAT_OK;
}

/* Gradient accumulation after micro-batch m's backward: the accumulation
 * buffer takes its gradients (m == 0) or adds them (m > 0), in micro-batch
 * order, so the sum does not depend on the plan. */
static int accumulate_grads(clremat_trainer *t, int m)
{
    int st = CLREMAT_OK;
    clremat_ctx_set_label(t->ctx, -1, CLREMAT_PHASE_UPDATE);
    for (int l = 0; l < t->g->n_layers && st == CLREMAT_OK; l++)
        for (int p = 0; p < t->g->layers[l].n_params && st == CLREMAT_OK; p++)
            if (!t->g->layers[l].params[p].frozen)
                st = clremat_op_copy_acc(t->ctx, t->accum[l][p], t->grads[l][p], t->g->layers[l].params[p].elems,
                                         m > 0);
    return st;
}

/* The step's one update of every batchnorm layer's moving statistics from
 * the sums of its accumulate micro-batches (after the last one), on every
 * data-parallel rank from all ranks' sums. */
static int bn_moving_finish_all(clremat_trainer *t)
{
    int st = CLREMAT_OK;
    for (int l = 0; l < t->g->n_layers && st == CLREMAT_OK; l++) {
        const clremat_layer *L = &t->g->layers[l];
        if (L->type != CLREMAT_BATCHNORM)
            continue;
        /* data parallel: every rank's sums, added in rank order, on every rank */
        if (t->dp)
            st = clremat_dp_sum_buffer(t, t->accum[l][BN_SUMS(L)], clremat_bn_moving_sums_floats(L));
        if (st == CLREMAT_OK)
            st = clremat_bn_moving_finish(t->ctx, t->g, l, t->accum[l][BN_SUMS(L)], t->params[l],
                                          (int64_t)t->accumulate * (t->dp ? clremat_dp_nranks(t) : 1));
    }
    return st;
}

/* Runs the plan's actions once on micro-batch m (already uploaded): the
 * loss layer's result goes to result; a non-finite one sets *nonfinite and
 * skips the gradient accumulation and the update. The last micro-batch
 * (or the only one) runs the optimizer update. */
static int run_actions(clremat_trainer *t, int m, float result[2], int *nonfinite)
{
    const clremat_graph *g = t->g;
    int st = CLREMAT_OK;
    /* no dZ handed over from an earlier pass (a plan that skipped the
     * producer's backward, or one replanned since) */
    memset(t->dz_ready, 0, (size_t)t->g->n_layers);
    for (int i = 0; i < t->plan.n_actions && st == CLREMAT_OK; i++) {
        const clremat_action *a = &t->plan.actions[i];
        if (t->side_queue && (st = switch_queues(t, a)) != CLREMAT_OK)
            break;
        switch (a->kind) {
        case CLREMAT_ACT_FORWARD:
        case CLREMAT_ACT_RECOMPUTE:
            st = run_forward(t, g, t->costs, t->gemm_ws_fwd, a->layer, a->alloc_slots,
                             a->kind == CLREMAT_ACT_FORWARD ? CLREMAT_PHASE_FORWARD : CLREMAT_PHASE_RECOMPUTE);
            break;
        case CLREMAT_ACT_RECOMPUTE_ACT: {
            clremat_layer_call c;
            st = alloc_tensor(t, t->costs[a->layer].slot_bytes[0], clremat_trainer_tag(t, a->layer, 0),
                              &t->act[a->layer * S]);
            if (st == CLREMAT_OK) {
                clremat_ctx_set_label(t->ctx, a->layer, CLREMAT_PHASE_RECOMPUTE);
                make_call(t, g, a->layer, &c);
                st = clremat_layer_recompute_activation(&c);
            }
            break;
        }
        case CLREMAT_ACT_BACKWARD:
            if (t->fused && !t->update_started) {
                /* the fused update changes parameters from the first
                 * backward on: the loss is checked before it, as the
                 * unfused step checks it before its update */
                st = clremat_read(t->ctx, t->act[(g->n_layers - 1) * S], 0, 2 * sizeof(float), result);
                if (st != CLREMAT_OK)
                    break;
                if (!(isfinite(result[0]) && isfinite(result[1]))) {
                    *nonfinite = 1;
                    release_step_tensors(t);
                    i = t->plan.n_actions; /* skip the rest of the step */
                    break;
                }
                t->update_started = 1;
            }
            st = run_backward(t, a);
            if (st == CLREMAT_OK && t->dp) /* data parallel: stage a finished bucket */
                st = clremat_dp_after_backward(t, a->layer);
            break;
        case CLREMAT_ACT_FREE:
            release(t, &t->act[a->layer * S + a->slot]);
            break;
        case CLREMAT_ACT_FREE_GRAD:
            release(t, &t->dgrad[a->layer]);
            break;
        case CLREMAT_ACT_OFFLOAD:
        case CLREMAT_ACT_FETCH:
            st = run_offload(t, a);
            break;
        case CLREMAT_ACT_UPDATE:
            if (t->dp) /* data parallel: average the gradients across ranks */
                st = clremat_dp_reduce(t);
            if (st == CLREMAT_OK)
                st = clremat_read(t->ctx, t->act[(g->n_layers - 1) * S], 0, 2 * sizeof(float), result);
            if (st == CLREMAT_OK && t->dp)
                st = clremat_dp_reduce_result(t, result);
            if (st == CLREMAT_OK && !(isfinite(result[0]) && isfinite(result[1])))
                *nonfinite = 1;
            else if (st == CLREMAT_OK) {
                if (t->accumulate > 1)
                    st = accumulate_grads(t, m);
                if (st == CLREMAT_OK && m == t->accumulate - 1) {
                    t->update_started = 1;
                    if (g->precision == CLREMAT_PREC_MIXED_FLOAT16) /* check, unscale, update unless not finite */
                        st = loss_scaled_update(t);
                    else
                        st = run_update(t, NULL);
                    /* the moving statistics move even on a skipped step, as without
                     * accumulation (there the backward moves them) */
                    if (st == CLREMAT_OK && t->accum) /* several batches a step */
                        st = bn_moving_finish_all(t);
                }
            }
            break;
        }
    }
    close_window(t); /* back to one queue, whatever happened */
    if (t->copy_queue) { /* every copy done: no fence left */
        cl_int err = clFinish(t->copy_queue);
        clremat_pool_clear_fences(t->ctx->pool);
        if (st == CLREMAT_OK && err != CL_SUCCESS)
            st = clremat_fail(t->ctx, err, "the copy queue failed: %s", clremat_status_str(err));
    }
    return st;
}

int clremat_trainer_step(clremat_trainer *t, const float *x, const float *y, float *loss, float *correct)
{
    const clremat_graph *g = t->g;
    const int64_t xs = t->batch * clremat_shape_elems(&g->io.input), ys = t->batch * clremat_shape_elems(&g->io.labels);
    int st = CLREMAT_OK, nonfinite = 0, m;
    float result[2] = {0, 0}, sum[2] = {0, 0};

    const double started_ns = t->profiling ? 1e9 * clremat_now_s() : 0;

    t->update_started = 0;
    t->last_skipped = 0;
    t->ctx->profiling = t->profiling;
    t->loss_div = t->accumulate > 1 ? t->batch * t->accumulate : 0;
    for (m = 0; m < t->accumulate && st == CLREMAT_OK && !nonfinite; m++) {
        t->sample0 = (int64_t)m * t->batch;
        st = upload(t, x + m * xs, y + m * ys);
        if (st == CLREMAT_OK)
            st = run_actions(t, m, result, &nonfinite);
        sum[0] += result[0]; /* in micro-batch order */
        sum[1] += result[1];
    }
    t->loss_div = 0;
    if (st != CLREMAT_OK) {
        t->sample0 = 0;
        clremat_dp_reset(t);
        release_step_tensors(t);
        drop_profile(t->ctx);
        t->ctx->profiling = 0;
        return st;
    }
    if (t->profiling) {
        collect_profile(t); /* waits for the queue: the wall time ends after it */
        t->profile_wall_ns = 1e9 * clremat_now_s() - started_ns;
    }
    t->ctx->profiling = 0;
    *loss = sum[0];
    *correct = sum[1];
    if (nonfinite) {
        int bad = -1;
        float r[2];
        char micro[64] = "";
        /* the failing micro-batch is still uploaded; sample0 keeps its dropout masks */
        st = forward_only(t, g, t->costs, t->gemm_ws_fwd, r, 1, &bad);
        t->sample0 = 0;
        if (st != CLREMAT_OK)
            return st;
        if (t->accumulate > 1)
            snprintf(micro, sizeof micro, " (micro-batch %d of %d)", m, t->accumulate);
        return clremat_fail(t->ctx, CLREMAT_ERR_NONFINITE,
                            "step %lld%s: the loss is not finite (%g); first layer whose output is non-finite: '%s'",
                            (long long)(t->step + 1), micro, (double)result[0],
                            bad >= 0 ? g->layers[bad].name : g->layers[g->n_layers - 1].name);
    }
    t->sample0 = 0;
    t->step++;
    t->data_position += t->batch * t->accumulate;
    return CLREMAT_OK;
}

int clremat_trainer_eval(clremat_trainer *t, const float *x, const float *y, float *loss, float *correct)
{
    return clremat_trainer_eval_n(t, x, y, t->batch, loss, correct);
}

/* Forward only on n samples of x and y (zero padding after them); check:
 * count each layer's non-finite outputs and stop at the first layer with
 * any (*bad, else -1). */
static int eval_samples(clremat_trainer *t, const float *x, const float *y, int64_t n, float r[2], int check,
                        int *bad)
{
    int st;
    if (n < 1 || n > t->batch)
        return clremat_fail(t->ctx, CLREMAT_ERR_INVALID_ARGUMENT, "evaluation of %lld samples at batch %lld",
                            (long long)n, (long long)t->batch);
    if (n == t->batch) {
        st = upload(t, x, y);
    } else { /* zero padding after the n samples */
        size_t xb = (size_t)(n * clremat_shape_elems(&t->g->io.input)) * sizeof(float);
        size_t yb = (size_t)(n * clremat_shape_elems(&t->g->io.labels)) * sizeof(float);
        st = clremat_zero(t->ctx, t->x);
        if (st == CLREMAT_OK)
            st = clremat_zero(t->ctx, t->labels);
        if (st == CLREMAT_OK)
            st = clremat_write(t->ctx, t->x, 0, xb, x);
        if (st == CLREMAT_OK)
            st = clremat_write(t->ctx, t->labels, 0, yb, y);
        t->loss_batch = n;
    }
    if (st == CLREMAT_OK)
        st = forward_only(t, t->eval_g, t->eval_costs, t->eval_gemm_ws, r, check, bad);
    t->loss_batch = 0;
    return st;
}

int clremat_trainer_eval_n(clremat_trainer *t, const float *x, const float *y, int64_t n, float *loss,
                           float *correct)
{
    float r[2];
    int st = eval_samples(t, x, y, n, r, 0, NULL);
    if (st == CLREMAT_OK) {
        *loss = r[0];
        *correct = r[1];
    }
    return st;
}

int clremat_trainer_eval_nonfinite_layer(clremat_trainer *t, const float *x, const float *y, int64_t n,
                                         const char **layer)
{
    float r[2];
    int bad = -1, st = eval_samples(t, x, y, n, r, 1, &bad);
    *layer = st == CLREMAT_OK && bad >= 0 ? t->eval_g->layers[bad].name : NULL;
    return st;
}

int clremat_trainer_forward_output(clremat_trainer *t, const float *x, const float *y, int layer, float *out)
{
    float r[2];
    int st;
    if (!t || !x || !y || !out || layer < 0 || layer >= t->g->n_layers - 1)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "forward_output: bad argument (layer %d)", layer);
    st = upload(t, x, y);
    t->capture_layer = layer;
    t->capture_out = out;
    if (st == CLREMAT_OK)
        st = forward_only(t, t->eval_g, t->eval_costs, t->eval_gemm_ws, r, 0, NULL);
    t->capture_out = NULL;
    return st;
}

static int copy_params(clremat_trainer *t, float *host, int to_device)
{
    size_t off = 0;
    for (int l = 0; l < t->g->n_layers; l++)
        for (int p = 0; p < t->g->layers[l].n_params; p++) {
            size_t n = (size_t)t->g->layers[l].params[p].elems;
            int st = to_device ? clremat_write(t->ctx, t->params[l][p], 0, n * sizeof(float), host + off)
                               : clremat_read(t->ctx, t->params[l][p], 0, n * sizeof(float), host + off);
            if (st != CLREMAT_OK)
                return st;
            off += n;
        }
    return CLREMAT_OK;
}

int clremat_trainer_get_params(clremat_trainer *t, float *out) { return copy_params(t, out, 0); }

int clremat_trainer_set_params(clremat_trainer *t, const float *in) { return copy_params(t, (float *)in, 1); }

void clremat_trainer_set_profiling(clremat_trainer *t, int on) { t->profiling = on; }

int clremat_trainer_profile_usable(const clremat_trainer *t)
{
    return t->profile_wall_ns > 0 && t->profile_device_ns >= CLREMAT_PROFILE_MIN_SHARE * t->profile_wall_ns;
}

void clremat_trainer_profile_problem(const clremat_trainer *t, char *buf, size_t len)
{
    snprintf(buf, len,
             "the device '%s' reports no usable kernel times: its profiling events add up to %.6g ms in a step "
             "of %.6g ms wall time (below %g of it)",
             clremat_ctx_device(t->ctx)->name, t->profile_device_ns / 1e6, t->profile_wall_ns / 1e6,
             CLREMAT_PROFILE_MIN_SHARE);
}

int clremat_measure_layer_ms(clremat_ctx *ctx, clremat_graph *g, int64_t batch, const clremat_opt_config *opt,
                             uint64_t seed, const float *x, const float *y, double **out)
{
    clremat_policy p;
    clremat_trainer *t = NULL;
    double *ms = calloc((size_t)g->n_layers, sizeof *ms);
    float loss, correct;
    int st;
    *out = NULL;
    if (!ms)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    const clremat_dp_transport *dp = clremat_dp_suspend(); /* a throw-away trainer exchanges nothing */
    clremat_policy_parse("auto", &p); /* whatever fits: the forward times do not depend on the plan */
    st = clremat_trainer_new(ctx, g, batch, &p, opt, seed, &t);
    for (int s = 0; s < 2 && st == CLREMAT_OK; s++) { /* a warm-up step, then a profiled one */
        clremat_trainer_set_profiling(t, s == 1);
        st = clremat_trainer_step(t, x, y, &loss, &correct);
    }
    if (st == CLREMAT_OK && !clremat_trainer_profile_usable(t)) {
        char why[512];
        clremat_trainer_profile_problem(t, why, sizeof why);
        st = clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "%s; plan with FLOP costs instead (--costs flops)",
                          why);
    }
    if (st == CLREMAT_OK)
        for (int l = 0; l < g->n_layers; l++) /* a floor keeps every layer's cost positive */
            ms[l] = (t->profile[l].ns[CLREMAT_PHASE_FORWARD] > 0 ? t->profile[l].ns[CLREMAT_PHASE_FORWARD] : 1e3) / 1e6;
    clremat_trainer_free(t);
    clremat_dp_resume(dp);
    if (st != CLREMAT_OK) {
        free(ms);
        return st;
    }
    *out = ms;
    return CLREMAT_OK;
}
