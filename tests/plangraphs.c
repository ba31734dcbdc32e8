/* plangraphs.c: test graphs and hand-written costs for the planner tests
 * (see plangraphs.h). */
#include "plangraphs.h"
#include <check.h>
#include <stdio.h>
#include <string.h>

uint64_t pg_next(pg_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int pg_int(pg_rng *r, int lo, int hi)
{
    return lo + (int)(pg_next(r) % (uint64_t)(hi - lo + 1));
}

clremat_layer pg_dense(const char *name, int64_t units, clremat_act act)
{
    clremat_layer l;
    memset(&l, 0, sizeof l);
    snprintf(l.name, sizeof l.name, "%s", name);
    l.type = CLREMAT_DENSE;
    l.units = units;
    l.act = act;
    l.use_bias = 1;
    return l;
}

clremat_layer pg_simple(const char *name, clremat_layer_type type)
{
    clremat_layer l;
    memset(&l, 0, sizeof l);
    snprintf(l.name, sizeof l.name, "%s", name);
    l.type = type;
    l.act = type == CLREMAT_ACTIVATION ? CLREMAT_ACT_RELU : CLREMAT_ACT_NONE;
    if (type == CLREMAT_DROPOUT)
        l.rate = 0.1;
    return l;
}

clremat_layer pg_addl(const char *name, int a, int b)
{
    clremat_layer l = pg_simple(name, CLREMAT_ADD);
    l.n_inputs = 2;
    l.inputs[0] = a;
    l.inputs[1] = b;
    return l;
}

void pg_add(clremat_graph *g, clremat_layer l)
{
    ck_assert_msg(clremat_graph_add_layer(g, &l) == CLREMAT_OK, "add %s: %s", l.name, g->error);
}

void pg_fake_costs(const clremat_graph *g, int64_t batch, clremat_layer_cost *c)
{
    for (int l = 0; l < g->n_layers; l++) {
        const clremat_layer *L = &g->layers[l];
        size_t out = (size_t)(batch * clremat_shape_elems(&L->out_shape)) * 4;
        memset(&c[l], 0, sizeof c[l]);
        c[l].n_slots = 1;
        c[l].slot_bytes[0] = out ? out : 8;
        c[l].act_source = -1;
        c[l].fwd_flops = (double)out;
        c[l].bwd_flops = 2.0 * (double)out;
        switch (L->type) {
        case CLREMAT_DENSE:
            c[l].bwd_needs_inputs = 1;
            if (L->act != CLREMAT_ACT_NONE) {
                c[l].n_slots = 2;
                c[l].slot_bytes[1] = out;
                c[l].bwd_needs_slots = 2;
                c[l].act_source = 1;
            }
            break;
        case CLREMAT_ACTIVATION:
            c[l].bwd_needs_inputs = 1;
            c[l].act_source = 0;
            c[l].act_from_input = 1;
            break;
        case CLREMAT_SOFTMAX_CE:
        case CLREMAT_MSE:
            c[l].slot_bytes[0] = 8;
            c[l].bwd_needs_inputs = 1;
            c[l].fwd_temp_bytes = (size_t)batch * 4;
            break;
        default:
            break;
        }
    }
}

void pg_workspace_costs(const clremat_graph *g, int64_t batch, clremat_layer_cost *c)
{
    for (int l = 0; l < g->n_layers - 1; l++) {
        c[l].bwd_temp_bytes = (size_t)((l % 3 + 1) * 16 * batch);
        if (g->layers[l].type == CLREMAT_DENSE && l % 2 == 0)
            c[l].fwd_temp_bytes = (size_t)(8 * batch);
    }
}

static clremat_graph *start(const char *name, int64_t in_dim)
{
    clremat_graph *g = clremat_graph_new(name);
    clremat_shape in = {1, {in_dim}};
    ck_assert_ptr_nonnull(g);
    clremat_graph_set_input(g, &in, 0);
    return g;
}

static clremat_graph *finish(clremat_graph *g)
{
    ck_assert_msg(clremat_graph_finalize(g) == CLREMAT_OK, "%s", g->error);
    return g;
}

clremat_graph *pg_chain(void)
{
    clremat_graph *g = start("chain", 16);
    pg_add(g, pg_dense("d0", 32, CLREMAT_ACT_GELU_TANH));
    pg_add(g, pg_dense("d1", 32, CLREMAT_ACT_GELU_TANH));
    pg_add(g, pg_dense("d2", 32, CLREMAT_ACT_GELU_TANH));
    pg_add(g, pg_dense("d3", 4, CLREMAT_ACT_NONE));
    pg_add(g, pg_simple("loss", CLREMAT_SOFTMAX_CE));
    return finish(g);
}

clremat_graph *pg_acts(void)
{
    clremat_graph *g = start("acts", 16);
    pg_add(g, pg_dense("d0", 32, CLREMAT_ACT_GELU_TANH));
    pg_add(g, pg_dense("d1", 32, CLREMAT_ACT_NONE));
    pg_add(g, pg_simple("act", CLREMAT_ACTIVATION));
    pg_add(g, pg_dense("d2", 4, CLREMAT_ACT_NONE));
    pg_add(g, pg_simple("loss", CLREMAT_SOFTMAX_CE));
    return finish(g);
}

clremat_graph *pg_boundary(void)
{
    clremat_graph *g = start("boundary", 8);
    pg_add(g, pg_dense("d_eq", 40, CLREMAT_ACT_RELU));
    pg_add(g, pg_dense("d_more", 41, CLREMAT_ACT_RELU));
    pg_add(g, pg_dense("d_out", 3, CLREMAT_ACT_NONE));
    pg_add(g, pg_simple("loss", CLREMAT_SOFTMAX_CE));
    return finish(g);
}

clremat_graph *pg_nested(int inner_remat)
{
    clremat_graph *g = start("nested", 8);
    pg_add(g, pg_dense("pre", 16, CLREMAT_ACT_RELU));
    ck_assert_int_eq(clremat_graph_begin_block(g, "outer", 0), CLREMAT_OK);
    pg_add(g, pg_dense("d_a", 16, CLREMAT_ACT_RELU));
    ck_assert_int_eq(clremat_graph_begin_block(g, "inner", inner_remat), CLREMAT_OK);
    pg_add(g, pg_dense("d_b", 16, CLREMAT_ACT_RELU));
    pg_add(g, pg_dense("d_c", 16, CLREMAT_ACT_RELU));
    ck_assert_int_eq(clremat_graph_end_block(g), CLREMAT_OK);
    pg_add(g, pg_dense("d_d", 16, CLREMAT_ACT_RELU));
    ck_assert_int_eq(clremat_graph_end_block(g), CLREMAT_OK);
    pg_add(g, pg_dense("head", 3, CLREMAT_ACT_NONE));
    pg_add(g, pg_simple("loss", CLREMAT_SOFTMAX_CE));
    return finish(g);
}

clremat_graph *pg_deep(int n, int64_t w)
{
    clremat_graph *g = start("deep", w);
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "d%d", i);
        pg_add(g, pg_dense(name, w, CLREMAT_ACT_GELU_TANH));
    }
    pg_add(g, pg_dense("head", 4, CLREMAT_ACT_NONE));
    pg_add(g, pg_simple("loss", CLREMAT_SOFTMAX_CE));
    return finish(g);
}

clremat_graph *pg_residual(int n, int64_t w)
{
    clremat_graph *g = start("residual", w);
    char name[32];
    pg_add(g, pg_dense("d_in", w, CLREMAT_ACT_NONE));
    for (int i = 0; i < n; i++) {
        int in = g->n_layers - 1;
        snprintf(name, sizeof name, "res_%d", i);
        ck_assert_int_eq(clremat_graph_begin_block(g, name, 0), CLREMAT_OK);
        snprintf(name, sizeof name, "a_%d", i);
        pg_add(g, pg_dense(name, 2 * w, CLREMAT_ACT_GELU_TANH));
        snprintf(name, sizeof name, "b_%d", i);
        pg_add(g, pg_dense(name, w, CLREMAT_ACT_NONE));
        snprintf(name, sizeof name, "add_%d", i);
        pg_add(g, pg_addl(name, g->n_layers - 1, in));
        ck_assert_int_eq(clremat_graph_end_block(g), CLREMAT_OK);
    }
    pg_add(g, pg_dense("head", 4, CLREMAT_ACT_NONE));
    pg_add(g, pg_simple("loss", CLREMAT_SOFTMAX_CE));
    return finish(g);
}

/* Appends random units of width w inside the current block, depth-limited. */
static void random_units(pg_rng *r, clremat_graph *g, int w, int depth, int *id)
{
    int units = pg_int(r, 1, 3);
    char name[32];
    for (int u = 0; u < units; u++) {
        int kind = pg_int(r, 0, depth < 2 ? 5 : 3);
        snprintf(name, sizeof name, "l%d", (*id)++);
        switch (kind) {
        case 0:
            pg_add(g, pg_dense(name, w, CLREMAT_ACT_GELU_TANH));
            break;
        case 1:
            pg_add(g, pg_dense(name, w, CLREMAT_ACT_NONE));
            break;
        case 2:
            pg_add(g, pg_simple(name, CLREMAT_ACTIVATION));
            break;
        case 3:
            pg_add(g, pg_simple(name, CLREMAT_DROPOUT));
            break;
        case 4: { /* residual block */
            int in = g->n_layers - 1;
            snprintf(name, sizeof name, "res%d", (*id)++);
            ck_assert_int_eq(clremat_graph_begin_block(g, name, pg_int(r, 0, 4) == 0), CLREMAT_OK);
            random_units(r, g, w, depth + 1, id);
            snprintf(name, sizeof name, "l%d", (*id)++);
            pg_add(g, pg_addl(name, g->n_layers - 1, in));
            ck_assert_int_eq(clremat_graph_end_block(g), CLREMAT_OK);
            break;
        }
        default: /* plain nested block */
            snprintf(name, sizeof name, "blk%d", (*id)++);
            ck_assert_int_eq(clremat_graph_begin_block(g, name, pg_int(r, 0, 4) == 0), CLREMAT_OK);
            random_units(r, g, w, depth + 1, id);
            ck_assert_int_eq(clremat_graph_end_block(g), CLREMAT_OK);
            break;
        }
    }
}

clremat_graph *pg_random(pg_rng *r)
{
    int w = 4 * pg_int(r, 1, 6), id = 0;
    clremat_graph *g = start("random", w);
    pg_add(g, pg_dense("first", w, CLREMAT_ACT_NONE));
    for (int i = pg_int(r, 1, 3); i > 0; i--)
        random_units(r, g, w, 0, &id);
    pg_add(g, pg_dense("head", 3, CLREMAT_ACT_NONE));
    pg_add(g, pg_simple("loss", CLREMAT_SOFTMAX_CE));
    return finish(g);
}

clremat_graph *pg_dense_chain(int n)
{
    clremat_graph *g = start("dense_chain", 4);
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "d%d", i);
        pg_add(g, pg_dense(name, i == n - 1 ? 3 : 4, CLREMAT_ACT_GELU_TANH));
    }
    pg_add(g, pg_simple("loss", CLREMAT_SOFTMAX_CE));
    return finish(g);
}

void pg_random_chain_costs(pg_rng *r, const clremat_graph *g, clremat_layer_cost *c, int own_out)
{
    for (int l = 0; l < g->n_layers; l++) {
        memset(&c[l], 0, sizeof c[l]);
        c[l].act_source = -1;
        c[l].n_slots = 1;
        c[l].slot_bytes[0] = 64 * (size_t)pg_int(r, 1, 16);
        c[l].fwd_flops = pg_int(r, 1, 100);
        c[l].bwd_flops = pg_int(r, 1, 200);
        c[l].bwd_needs_inputs = pg_int(r, 0, 3) != 0;
        if (l == g->n_layers - 1) { /* the loss */
            c[l].slot_bytes[0] = 64;
            c[l].bwd_needs_inputs = 1;
            c[l].fwd_temp_bytes = 64 * (size_t)pg_int(r, 0, 2);
            continue;
        }
        if (pg_int(r, 0, 2) != 0) {
            c[l].n_slots = 2;
            c[l].slot_bytes[1] = 64 * (size_t)pg_int(r, 1, 16);
            c[l].bwd_needs_slots = 2;
        }
        if (own_out && pg_int(r, 0, 2) == 0)
            c[l].bwd_needs_slots |= 1;
        if (pg_int(r, 0, 2) == 0)
            c[l].fwd_temp_bytes = 64 * (size_t)pg_int(r, 1, 8);
        if (pg_int(r, 0, 2) == 0)
            c[l].bwd_temp_bytes = 64 * (size_t)pg_int(r, 1, 8);
    }
}
