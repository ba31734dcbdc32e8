/* attn_variants.h: budget:/auto plans that may switch attention layers
 * marked "attention": "auto" to their memory-efficient mode (the device-side
 * half of planner/variants.c: the alternative costs, GEMM workspace
 * included, and the graph the executor then runs). */
#ifndef CLREMAT_ATTN_VARIANTS_H
#define CLREMAT_ATTN_VARIANTS_H

#include "backend.h"
#include "plan.h"

/** 1 when policy p may choose attention modes for g: p is budget or auto
 * and some attention layer of g says "attention": "auto". */
int clremat_attn_choice_applies(const clremat_graph *g, const clremat_policy *p);

/** Plans p (budget or auto; limit for auto) through clremat_plan_variants
 * with the memory-efficient cost of every "auto" attention layer as its
 * alternative (on ctx's GEMM path when ctx is not NULL). Where the plan
 * switches a layer, its entries of in->costs (owned by the caller, written
 * through) and of ws_fwd / ws_bwd (GEMM workspace per layer; either may be
 * NULL) are replaced by the memory-efficient ones. */
int clremat_attn_plan_choose(clremat_ctx *ctx, const clremat_plan_input *in, const clremat_policy *p,
                             uint64_t limit, size_t *ws_fwd, size_t *ws_bwd, clremat_plan *out);

/** A copy of g (free with clremat_graph_free) whose "auto" attention layers
 * carry the plan's choice: memory_efficient where plan->variant is set,
 * plain elsewhere. NULL when out of host memory. */
clremat_graph *clremat_attn_resolved_graph(const clremat_graph *g, const clremat_plan *plan);

#endif
