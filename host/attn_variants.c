/* attn_variants.c: the memory-efficient alternative of "attention": "auto"
 * layers for budget:/auto (see attn_variants.h): its costs on the
 * context's GEMM path, the planner's choice (planner/variants.c), and the
 * graph copy with the choice written into the layers. */
#include "attn_variants.h"
#include "fused_update.h"
#include "gemm.h"
#include "layers.h"
#include <stdlib.h>
#include <string.h>

static int is_auto_attn(const clremat_layer *L)
{
    return L->type == CLREMAT_ATTENTION && L->attn_mode == CLREMAT_ATTN_AUTO;
}

int clremat_attn_choice_applies(const clremat_graph *g, const clremat_policy *p)
{
    if (!g || !p || (p->kind != CLREMAT_POLICY_BUDGET && p->kind != CLREMAT_POLICY_AUTO))
        return 0;
    for (int l = 0; l < g->n_layers; l++)
        if (is_auto_attn(&g->layers[l]))
            return 1;
    return 0;
}

/* A copy of g's layers and blocks (the rest of the struct by value). */
static clremat_graph *graph_copy(const clremat_graph *g)
{
    clremat_graph *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    *c = *g;
    c->layers = malloc(sizeof *c->layers * (size_t)(g->n_layers + 1));
    c->blocks = malloc(sizeof *c->blocks * (size_t)(g->n_blocks + 1));
    if (!c->layers || !c->blocks) {
        free(c->layers);
        free(c->blocks);
        free(c);
        return NULL;
    }
    memcpy(c->layers, g->layers, sizeof *c->layers * (size_t)g->n_layers);
    if (g->n_blocks > 0)
        memcpy(c->blocks, g->blocks, sizeof *c->blocks * (size_t)g->n_blocks);
    c->cap_layers = g->n_layers + 1;
    c->cap_blocks = g->n_blocks + 1;
    return c;
}

clremat_graph *clremat_attn_resolved_graph(const clremat_graph *g, const clremat_plan *plan)
{
    clremat_graph *c = graph_copy(g);
    for (int l = 0; c && l < c->n_layers; l++)
        if (is_auto_attn(&c->layers[l]))
            c->layers[l].attn_mode = plan->variant && plan->variant[l] ? CLREMAT_ATTN_MEMORY_EFFICIENT
                                                                       : CLREMAT_ATTN_PLAIN;
    return c;
}

int clremat_attn_plan_choose(clremat_ctx *ctx, const clremat_plan_input *in, const clremat_policy *p,
                             uint64_t limit, size_t *ws_fwd, size_t *ws_bwd, clremat_plan *out)
{
    const clremat_graph *g = in->g;
    clremat_graph *ag = graph_copy(g);
    clremat_layer_cost *alt = calloc((size_t)g->n_layers + 1, sizeof *alt);
    size_t *af = calloc((size_t)g->n_layers + 1, sizeof *af), *ab = calloc((size_t)g->n_layers + 1, sizeof *ab);
    int st = CLREMAT_OK;
    memset(out, 0, sizeof *out);
    if (!ag || !alt || !af || !ab) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        goto done;
    }
    for (int l = 0; l < g->n_layers; l++)
        if (is_auto_attn(&ag->layers[l]))
            ag->layers[l].attn_mode = CLREMAT_ATTN_MEMORY_EFFICIENT;
    /* the alternatives' costs, with their GEMM workspace on ctx's path
     * (the dry run reads the costs of every layer of the graph) */
    for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++)
        st = clremat_layer_cost_for(ctx, ag, l, in->batch, &alt[l]);
    for (int l = 0; l < g->n_layers && st == CLREMAT_OK && ctx; l++)
        if (is_auto_attn(&g->layers[l]) &&
            (st = clremat_layer_gemm_workspace(ctx, ag, l, in->batch, alt, &af[l], &ab[l])) == CLREMAT_OK) {
            alt[l].fwd_temp_bytes += af[l];
            alt[l].bwd_temp_bytes += ab[l];
        }
    /* the fused update's gradient scratch, as the plain costs have it */
    for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++)
        if (is_auto_attn(&g->layers[l]))
            alt[l].bwd_temp_bytes += clremat_fused_scratch_bytes(ctx, in, ag, l);
    if (st != CLREMAT_OK)
        goto done;
    for (int l = 0; l < g->n_layers; l++)
        if (!is_auto_attn(&g->layers[l]))
            alt[l].n_slots = 0; /* no alternative */
    if ((st = clremat_plan_variants(in, alt, p, limit, out)) != CLREMAT_OK)
        goto done;
    for (int l = 0; out->variant && l < g->n_layers; l++)
        if (out->variant[l]) {
            ((clremat_layer_cost *)in->costs)[l] = alt[l];
            if (ws_fwd)
                ws_fwd[l] = af[l];
            if (ws_bwd)
                ws_bwd[l] = ab[l];
        }
done:
    clremat_graph_free(ag);
    free(alt);
    free(af);
    free(ab);
    return st;
}
