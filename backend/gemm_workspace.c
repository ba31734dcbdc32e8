/* gemm_workspace.c: the GEMM workspace of a layer on the context's GEMM
 * path, for the cost model. The layer's own forward and backward launchers
 * run in a dry run (ctx->dry_run: nothing is enqueued, clremat_gemm only
 * records the workspace each call would need) over placeholder buffers of
 * the sizes the cost model gives, with every gradient wanted, so the result
 * covers every GEMM any action of the layer makes. The executor adds it to
 * fwd_temp_bytes / bwd_temp_bytes before planning and allocates it from the
 * pool for each action, so the plan still predicts the peak to the byte. */
#include "gemm.h"
#include "kernel_run.h"
#include <stdio.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS

/* Placeholder buffers: sizes only, no cl_mem. */
typedef struct dry_bufs {
    clremat_buf in[CLREMAT_MAX_INPUTS], slot[S], param[CLREMAT_MAX_PARAMS], grad[CLREMAT_MAX_PARAMS];
    clremat_buf dout, din[CLREMAT_MAX_INPUTS], temp, labels;
} dry_bufs;

static clremat_buf fake(size_t bytes) { return (clremat_buf){NULL, bytes, bytes, "dry run"}; }

int clremat_layer_gemm_workspace(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch,
                                 const clremat_layer_cost *costs, size_t *fwd, size_t *bwd)
{
    const clremat_layer *L = &g->layers[l];
    const clremat_layer_cost *c = &costs[l];
    clremat_layer_call call;
    dry_bufs b;
    int st;
    *fwd = *bwd = 0;
    if (clremat_gemm_resolve(ctx) != CLREMAT_GEMM_CLBLAST && ctx->loop_budget <= 0)
        return CLREMAT_OK;
    memset(&b, 0, sizeof b);
    memset(&call, 0, sizeof call);
    call.ctx = ctx;
    call.g = g;
    call.layer = l;
    call.batch = batch;
    for (int i = 0; i < L->n_inputs && i < CLREMAT_MAX_INPUTS; i++) {
        size_t bytes = L->inputs[i] >= 0 ? costs[L->inputs[i]].slot_bytes[0]
                                         : (size_t)(batch * clremat_shape_elems(&g->io.input)) * sizeof(float);
        b.in[i] = fake(bytes);
        b.din[i] = fake(bytes);
        call.in[i] = &b.in[i];
        call.din[i] = &b.din[i];
    }
    for (int s = 0; s < c->n_slots && s < S; s++) {
        b.slot[s] = fake(c->slot_bytes[s]);
        call.slot[s] = &b.slot[s];
    }
    for (int p = 0; p < L->n_params && p < CLREMAT_MAX_PARAMS; p++) {
        b.param[p] = fake((size_t)L->params[p].elems * sizeof(float));
        b.grad[p] = b.param[p];
        call.param[p] = &b.param[p];
        call.grad[p] = &b.grad[p];
    }
    if (L->type == CLREMAT_DENSE && L->tie >= 1 && L->tie <= g->n_layers) { /* the tied table */
        b.param[0] = fake((size_t)g->layers[L->tie - 1].params[0].elems * sizeof(float));
        b.grad[0] = b.param[0];
        call.param[0] = &b.param[0];
        call.grad[0] = &b.grad[0];
    }
    b.dout = fake(c->slot_bytes[0]);
    b.labels = fake((size_t)(batch * clremat_shape_elems(&g->io.labels)) * sizeof(float));
    call.dout = &b.dout;
    call.labels = &b.labels;
    ctx->dry_run = 1;
    ctx->dry_ws = 0;
    b.temp = fake(c->fwd_temp_bytes);
    call.temp = c->fwd_temp_bytes ? &b.temp : NULL;
    st = clremat_layer_forward(&call);
    *fwd = ctx->dry_ws;
    if (st == CLREMAT_OK) {
        ctx->dry_ws = 0;
        b.temp = fake(c->bwd_temp_bytes);
        call.temp = c->bwd_temp_bytes ? &b.temp : NULL;
        st = clremat_layer_backward(&call);
        *bwd = ctx->dry_ws;
    }
    ctx->dry_run = 0;
    ctx->dry_ws = 0;
    if (st != CLREMAT_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", clremat_ctx_last_error(ctx));
        return clremat_fail(ctx, st, "layer %s (%s): %s", L->name, clremat_layer_type_name(L->type), why);
    }
    return CLREMAT_OK;
}
