/* executor.c: runs a plan's actions on the device. Every allocation of a
 * step happens where the plan says, in the order the memory simulator
 * assumed (an action's new tensors, then its workspace), so the pool's
 * measured high-water equals the predicted peak to the byte. */
#include "executor.h"
#include "init.h"
#include "gemm.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS


static int costs_with_gemm(clremat_ctx *ctx, const clremat_graph *g, int64_t batch, clremat_layer_cost *costs,
                           size_t *ws_fwd, size_t *ws_bwd)
{
    int st = CLREMAT_OK;
    for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++)
        if ((st = clremat_layer_cost_of(g, l, batch, &costs[l])) != CLREMAT_OK)
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
        TOO_BIG(costs[l].fwd_temp_bytes > wf[l] ? costs[l].fwd_temp_bytes - wf[l] : 0, L->name, "forward workspace");
        TOO_BIG(costs[l].bwd_temp_bytes > wb[l] ? costs[l].bwd_temp_bytes - wb[l] : 0, L->name,
                "backward workspace");
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
    in->opt_states = opt_states;
    in->scratch_bytes = CLREMAT_SCRATCH_BYTES;
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
    clremat_plan_input in;
    int st;
    memset(out, 0, sizeof *out);
    if ((st = clremat_plan_input_for(ctx, g, batch, opt_states, layer_cost, &in, ws_fwd_out, ws_bwd_out)))
        return st;
    if (p->kind == CLREMAT_POLICY_AUTO) {
        if (limit == 0)
            st = clremat_set_error(CLREMAT_ERR_PLAN, "--remat auto needs a memory limit (a device or --memory-limit)");
        else
            st = clremat_plan_auto(&in, limit, out);
        if (st == CLREMAT_OK)
            out->policy = *p;
    } else {
        st = clremat_plan_build(&in, p, out);
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

/* Releases every tensor of a step (after a failure mid-step). */
static void release_step_tensors(clremat_trainer *t)
{
    for (int i = 0; i < t->g->n_layers * S; i++)
        release(t, &t->act[i]);
    for (int l = 0; l < t->g->n_layers; l++)
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
    free(t->params);
    free(t->grads);
    free(t->state);
    release(t, &t->x);
    release(t, &t->labels);
    release(t, &t->scratch);
    free(t->act);
    free(t->dgrad);
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
    clremat_plan_free(&t->plan);
    if (t->eval_g) {
        free(t->eval_g->layers);
        free(t->eval_g->blocks);
        free(t->eval_g);
    }
    free(t);
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
    if (!t->params || !t->grads || !t->state || !t->act || !t->dgrad || !t->profile)
        return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
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
                (st = clremat_pool_alloc(pool, bytes, "parameter gradient", &t->grads[l][p])))
                goto pool_fail;
            for (int k = 0; k < nstate; k++) {
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
            clremat_plan_for_ctx(t->ctx, t->g, t->batch, &p, clremat_opt_state_count(t->opt.kind), limit, NULL, 0,
                                 &pl, NULL, NULL, NULL))
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
    if (layer_cost) {
        if (!(t->layer_cost = malloc(sizeof *t->layer_cost * (size_t)g->n_layers))) {
            st = clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
            goto fail;
        }
        memcpy(t->layer_cost, layer_cost, sizeof *t->layer_cost * (size_t)g->n_layers);
    }
    st = clremat_plan_for_ctx(ctx, g, batch, p, clremat_opt_state_count(opt->kind), limit ? limit - live : 0,
                              layer_cost, overlap, &t->plan, &t->costs, &t->gemm_ws_fwd, &t->gemm_ws_bwd);
    if (st != CLREMAT_OK)
        goto fail;
    if (overlap) {
        int fell = 0;
        if ((st = clremat_ctx_open_queue(ctx, CL_QUEUE_PROFILING_ENABLE, &t->side_queue, &fell)))
            goto fail;
        clremat_pool_set_fence_ops(ctx->pool, &cl_fence_ops);
    }
    if (limit && live + t->plan.peak_bytes > limit) {
        char hint[1024];
        suggest(t, limit - live, hint, sizeof hint);
        st = clremat_fail(ctx, CLREMAT_ERR_OUT_OF_MEMORY,
                          "remat mode '%s' at batch %lld needs %llu bytes of device memory but %llu bytes are "
                          "available (limit %llu)%s",
                          p->text, (long long)batch, (unsigned long long)t->plan.peak_bytes,
                          (unsigned long long)(limit - live), (unsigned long long)limit, hint);
        goto fail;
    }
    t->eval_g = eval_copy(g);
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
        c->grad[p] = t->grads[l][p];
    }
    c->labels = t->labels;
    c->temp = t->temp;
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
    if ((st = alloc_workspace(t, l, costs[l].fwd_temp_bytes, gemm_ws[l])) != CLREMAT_OK)
        return st;
    clremat_ctx_set_label(t->ctx, l, phase);
    make_call(t, g, l, &c);
    st = clremat_layer_forward(&c);
    release_workspace(t);
    return st;
}

static int run_backward(clremat_trainer *t, const clremat_action *a)
{
    const clremat_layer *L = &t->g->layers[a->layer];
    const clremat_layer_cost *cost = &t->costs[a->layer];
    clremat_layer_call c;
    int st;
    for (int i = 0; i < L->n_inputs; i++)
        if ((a->alloc_din >> i & 1u) &&
            (st = alloc_tensor(t, t->costs[L->inputs[i]].slot_bytes[0],
                               clremat_trainer_tag(t, L->inputs[i], CLREMAT_TAG_GRADIENT), &t->dgrad[L->inputs[i]])))
            return st;
    if ((st = alloc_workspace(t, a->layer, cost->bwd_temp_bytes, t->gemm_ws_bwd[a->layer])) != CLREMAT_OK)
        return st;
    clremat_ctx_set_label(t->ctx, a->layer, CLREMAT_PHASE_BACKWARD);
    make_call(t, t->g, a->layer, &c);
    c.dout = t->dgrad[a->layer];
    for (int i = 0; i < L->n_inputs; i++)
        if (a->want_din >> i & 1u) {
            c.din[i] = t->dgrad[L->inputs[i]];
            c.din_accumulate[i] = !(a->alloc_din >> i & 1u);
        }
    st = clremat_layer_backward(&c);
    release_workspace(t);
    return st;
}

static int run_update(clremat_trainer *t)
{
    int st = CLREMAT_OK;
    clremat_ctx_set_label(t->ctx, -1, CLREMAT_PHASE_UPDATE);
    for (int l = 0; l < t->g->n_layers && st == CLREMAT_OK; l++) {
        const clremat_layer *L = &t->g->layers[l];
        clremat_ctx_set_label(t->ctx, l, CLREMAT_PHASE_UPDATE);
        for (int p = 0; p < L->n_params && st == CLREMAT_OK; p++) {
            clremat_buf *const state[2] = {t->state[l][2 * p], t->state[l][2 * p + 1]};
            if (L->params[p].frozen) /* non-trainable state (batchnorm's moving statistics) */
                continue;
            st = clremat_opt_step(t->ctx, &t->opt, t->step + 1, t->params[l][p], t->grads[l][p], state,
                                  L->params[p].elems);
        }
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
        if (st == CLREMAT_OK && check) {
            int64_t cnt = 0;
            st = clremat_op_count_nonfinite(t->ctx, t->act[l * S], (int64_t)(costs[l].slot_bytes[0] / sizeof(float)),
                                            &cnt);
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
    in.scratch_bytes = CLREMAT_SCRATCH_BYTES;
    in.layer_cost = t->layer_cost;
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

int clremat_trainer_step(clremat_trainer *t, const float *x, const float *y, float *loss, float *correct)
{
    int st = upload(t, x, y), nonfinite = 0;
    float result[2] = {0, 0};
    const clremat_graph *g = t->g;

    t->update_started = 0;
    t->ctx->profiling = t->profiling;
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
            st = run_backward(t, a);
            break;
        case CLREMAT_ACT_FREE:
            release(t, &t->act[a->layer * S + a->slot]);
            break;
        case CLREMAT_ACT_FREE_GRAD:
            release(t, &t->dgrad[a->layer]);
            break;
        case CLREMAT_ACT_UPDATE:
            st = clremat_read(t->ctx, t->act[(g->n_layers - 1) * S], 0, sizeof result, result);
            if (st == CLREMAT_OK && !(isfinite(result[0]) && isfinite(result[1])))
                nonfinite = 1;
            else if (st == CLREMAT_OK) {
                t->update_started = 1;
                st = run_update(t);
            }
            break;
        }
    }
    close_window(t); /* back to one queue, whatever happened */
    if (st != CLREMAT_OK) {
        release_step_tensors(t);
        drop_profile(t->ctx);
        t->ctx->profiling = 0;
        return st;
    }
    if (t->profiling)
        collect_profile(t);
    t->ctx->profiling = 0;
    *loss = result[0];
    *correct = result[1];
    if (nonfinite) {
        int bad = -1;
        float r[2];
        st = forward_only(t, g, t->costs, t->gemm_ws_fwd, r, 1, &bad);
        if (st != CLREMAT_OK)
            return st;
        return clremat_fail(t->ctx, CLREMAT_ERR_NONFINITE,
                            "step %lld: the loss is not finite (%g); first layer whose output is non-finite: '%s'",
                            (long long)(t->step + 1), (double)result[0], bad >= 0 ? g->layers[bad].name : g->layers[g->n_layers - 1].name);
    }
    t->step++;
    t->data_position += t->batch;
    return CLREMAT_OK;
}

int clremat_trainer_eval(clremat_trainer *t, const float *x, const float *y, float *loss, float *correct)
{
    return clremat_trainer_eval_n(t, x, y, t->batch, loss, correct);
}

int clremat_trainer_eval_n(clremat_trainer *t, const float *x, const float *y, int64_t n, float *loss,
                           float *correct)
{
    float r[2];
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
        st = forward_only(t, t->eval_g, t->eval_costs, t->eval_gemm_ws, r, 0, NULL);
    t->loss_batch = 0;
    if (st == CLREMAT_OK) {
        *loss = r[0];
        *correct = r[1];
    }
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
    clremat_policy_parse("auto", &p); /* whatever fits: the forward times do not depend on the plan */
    st = clremat_trainer_new(ctx, g, batch, &p, opt, seed, &t);
    for (int s = 0; s < 2 && st == CLREMAT_OK; s++) { /* a warm-up step, then a profiled one */
        clremat_trainer_set_profiling(t, s == 1);
        st = clremat_trainer_step(t, x, y, &loss, &correct);
    }
    if (st == CLREMAT_OK)
        for (int l = 0; l < g->n_layers; l++) /* a floor keeps every layer's cost positive */
            ms[l] = (t->profile[l].ns[CLREMAT_PHASE_FORWARD] > 0 ? t->profile[l].ns[CLREMAT_PHASE_FORWARD] : 1e3) / 1e6;
    clremat_trainer_free(t);
    if (st != CLREMAT_OK) {
        free(ms);
        return st;
    }
    *out = ms;
    return CLREMAT_OK;
}
