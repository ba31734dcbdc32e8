/* plangraphs.h: hand-built graphs and hand-written costs shared by the
 * planner tests that need no device (test_planner, test_simulate,
 * test_budget): small hand-built graphs, residual chains, deep chains, and a seeded
 * random generator of graphs (blocks, nesting, residual adds) and of chain
 * costs. Costs are written from the layer semantics, independent of
 * backend/. */
#ifndef CLREMAT_PLANGRAPHS_H
#define CLREMAT_PLANGRAPHS_H

#include <stdint.h>
#include "plan.h"

/** A seeded generator (splitmix64). */
typedef struct pg_rng {
    uint64_t s;
} pg_rng;

/** Next 64 random bits. */
uint64_t pg_next(pg_rng *r);

/** Uniform integer in [lo, hi]. */
int pg_int(pg_rng *r, int lo, int hi);

/** A dense layer (bias on) reading the previous layer. */
clremat_layer pg_dense(const char *name, int64_t units, clremat_act act);

/** A layer of a type without settings (activation: relu) reading the previous layer. */
clremat_layer pg_simple(const char *name, clremat_layer_type type);

/** An add layer of layers a and b. */
clremat_layer pg_addl(const char *name, int a, int b);

/** Appends a layer, failing the test on error. */
void pg_add(clremat_graph *g, clremat_layer l);

/** Hand-written costs (test_planner's expectations rely on them): output
 * bytes batch*elems*4, dense with activation keeps its pre-activation (slot 1), losses 8 bytes with a
 * batch*4 forward workspace, FLOPs = output bytes (backward twice that). */
void pg_fake_costs(const clremat_graph *g, int64_t batch, clremat_layer_cost *c);

/** Adds workspace to costs (after pg_fake_costs): a backward workspace on
 * every layer but the loss, of a size that differs from layer to layer
 * ((l % 3 + 1) * 16 * batch bytes), and a forward workspace on every other
 * dense layer (8 * batch), so that the simulators' accounting of workspace
 * during forward, recompute and backward actions is exercised. */
void pg_workspace_costs(const clremat_graph *g, int64_t batch, clremat_layer_cost *c);

/** Hand-built graphs: chain (d0..d2 gelu, d3, loss), acts
 * (dense gelu, dense, activation, dense, loss), boundary (larger_than), and
 * nested (pre, outer{d_a, inner{d_b, d_c}, d_d}, head, loss). */
clremat_graph *pg_chain(void);
clremat_graph *pg_acts(void);
clremat_graph *pg_boundary(void);
clremat_graph *pg_nested(int inner_remat);

/** n dense gelu layers of width w, a head of 4 units and a loss. */
clremat_graph *pg_deep(int n, int64_t w);

/** in -> d_in -> n residual blocks res_i { a (gelu), b, add(b, block input) } -> head -> loss. */
clremat_graph *pg_residual(int n, int64_t w);

/** A random finalized graph: dense (with or without activation), activation,
 * dropout layers, residual blocks, nested blocks, some marked remat. */
clremat_graph *pg_random(pg_rng *r);

/** A chain input -> d_0 .. d_{n-1} -> loss (each dense its own stage). */
clremat_graph *pg_dense_chain(int n);

/** Random costs for pg_dense_chain: slot sizes multiples of 64, random
 * activation slots, workspaces, FLOPs (integers); with own_out, some layers'
 * backward reads their own output. act_source is -1 everywhere. */
void pg_random_chain_costs(pg_rng *r, const clremat_graph *g, clremat_layer_cost *c, int own_out);

#endif
