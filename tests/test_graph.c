/* test_graph.c: the layer graph IR and the JSON model loader, without any
 * device: graphs built through the C API and from model text (shapes,
 * parameters, io, repeat naming, @block_input, name resolution), every kind
 * of malformed model (status, FILE:LINE:COL and the words of the message),
 * robustness against hostile input, and the bundled models/ files. */
#include "testutil.h"
#include "graph.h"
#include "data.h"
#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

static clremat_layer mk(const char *name, clremat_layer_type t)
{
    clremat_layer L;
    memset(&L, 0, sizeof L);
    snprintf(L.name, sizeof L.name, "%s", name);
    L.type = t;
    L.use_bias = 1;
    L.eps = 1e-5;
    return L;
}

static clremat_layer mk_dense(const char *name, int64_t units, clremat_act act)
{
    clremat_layer L = mk(name, CLREMAT_DENSE);
    L.units = units;
    L.act = act;
    return L;
}

static clremat_layer with_inputs(clremat_layer L, int a, int b)
{
    L.n_inputs = b == -9 ? 1 : 2;
    L.inputs[0] = a;
    L.inputs[1] = b == -9 ? 0 : b;
    return L;
}

static clremat_shape shp(int rank, int64_t a, int64_t b, int64_t c)
{
    clremat_shape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    s.dims[0] = a;
    s.dims[1] = b;
    s.dims[2] = c;
    return s;
}

#define ASSERT_SHAPE(s, r, a, b)                                                   \
    do {                                                                           \
        char buf_[64];                                                             \
        ck_assert_msg((s).rank == (r) && (r < 1 || (s).dims[0] == (a)) &&          \
                          (r < 2 || (s).dims[1] == (b)),                           \
                      "shape %s, wanted rank %d [%lld, %lld]",                     \
                      clremat_shape_str(&(s), buf_, sizeof buf_), (r), (long long)(a), (long long)(b)); \
    } while (0)

#define ASSERT_OK(expr)                                                            \
    do {                                                                           \
        int st_ = (expr);                                                          \
        ck_assert_msg(st_ == CLREMAT_OK, "%s -> %s: %s", #expr, clremat_status_str(st_), \
                      clremat_last_error());                                       \
    } while (0)

/* Line and column (1-based) where the nth (0-based) occurrence of needle starts in text. */
static void pos_of(const char *text, const char *needle, int nth, int *line, int *col)
{
    const char *p = text;
    for (int i = 0; i <= nth; i++) {
        p = strstr(p, needle);
        ck_assert_msg(p != NULL, "test bug: '%s' not found %d times", needle, nth + 1);
        if (i < nth)
            p++;
    }
    *line = 1;
    *col = 1;
    for (const char *q = text; q < p; q++) {
        if (*q == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Loads text, expecting status st with the message starting "t.json:L:C: "
 * (L:C where the nth occurrence of at starts) and holding every word. */
static void expect_err_at(int src_line, const char *text, int st, const char *at, int nth, const char *w1,
                          const char *w2, const char *w3)
{
    clremat_graph *g = (clremat_graph *)1;
    char prefix[64];
    const char *msg;
    int line, col, got = clremat_graph_load_string(text, "t.json", &g);
    const char *words[3] = {w1, w2, w3};
    msg = clremat_last_error();
    ck_assert_msg(got == st, "case at line %d: status %s, wanted %s; message: %s", src_line,
                  clremat_status_str(got), clremat_status_str(st), msg);
    ck_assert_msg(g == NULL, "case at line %d: graph not NULL on error", src_line);
    pos_of(text, at, nth, &line, &col);
    snprintf(prefix, sizeof prefix, "t.json:%d:%d: ", line, col);
    ck_assert_msg(strncmp(msg, prefix, strlen(prefix)) == 0, "case at line %d: message '%s' does not start with '%s'",
                  src_line, msg, prefix);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(!words[i] || strstr(msg, words[i]), "case at line %d: message '%s' lacks '%s'", src_line, msg,
                      words[i]);
}
#define EXPECT_ERR(text, st, at, nth, w1, w2, w3) expect_err_at(__LINE__, text, st, at, nth, w1, w2, w3)

/* Loads text, expecting status st and word in the message (position not checked). */
static void expect_st(int src_line, const char *text, int st, const char *word)
{
    clremat_graph *g = (clremat_graph *)1;
    int got = clremat_graph_load_string(text, "t.json", &g);
    ck_assert_msg(got == st, "case at line %d: status %s, wanted %s; message: %s", src_line,
                  clremat_status_str(got), clremat_status_str(st), clremat_last_error());
    ck_assert_ptr_null(g);
    ck_assert_msg(strncmp(clremat_last_error(), "t.json:", 7) == 0 && strstr(clremat_last_error(), word),
                  "case at line %d: message '%s' lacks '%s'", src_line, clremat_last_error(), word);
}
#define EXPECT_ST(text, st, word) expect_st(__LINE__, text, st, word)

static clremat_graph *load_ok(const char *text)
{
    clremat_graph *g = NULL;
    int st = clremat_graph_load_string(text, "t.json", &g);
    ck_assert_msg(st == CLREMAT_OK, "load: %s: %s", clremat_status_str(st), clremat_last_error());
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->finalized, 1);
    return g;
}

static int layer(const clremat_graph *g, const char *name)
{
    int l = clremat_graph_find_layer(g, name);
    ck_assert_msg(l >= 0, "no layer '%s'", name);
    return l;
}

#define HEAD "{\"input\": {\"shape\": [8]}, \"layers\": [\n"
#define TAIL "\n]}"
#define LOSS ",\n{\"name\": \"loss\", \"type\": \"mse\"}"

/* --------------------------------------------------------------- C API */

START_TEST(test_names_and_shapes)
{
    static const char *types[] = {"dense", "activation", "dropout", "layernorm", "add", "embedding", "attention",
                                  "reshape", "softmax_cross_entropy", "mse", "rmsnorm", "rope", "multiply",
                                  /* convolutional networks */
                                  "conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool2d", "zero_pad2d",
                                  "batchnorm", "concat"};
    static const char *acts[] = {"linear", "relu", "gelu", "gelu_exact", "tanh", "sigmoid", "silu"};
    char buf[64];
    clremat_shape s = shp(3, 2, 3, 5), z = shp(0, 0, 0, 0);
    for (int t = 0; t < CLREMAT_LAYER_TYPE_COUNT; t++) {
        ck_assert_str_eq(clremat_layer_type_name((clremat_layer_type)t), types[t]);
        ck_assert_int_eq(clremat_layer_type_from_name(types[t]), t);
    }
    ck_assert_int_eq(clremat_layer_type_from_name("flatten"), CLREMAT_RESHAPE);
    ck_assert_int_eq(clremat_layer_type_from_name("conv3d"), -1);
    for (int a = 0; a < CLREMAT_ACT_COUNT; a++) {
        ck_assert_str_eq(clremat_act_name((clremat_act)a), acts[a]);
        ck_assert_int_eq(clremat_act_from_name(acts[a]), a);
    }
    ck_assert_int_eq(clremat_act_from_name("none"), CLREMAT_ACT_NONE);
    ck_assert_int_eq(clremat_act_from_name("gelu"), CLREMAT_ACT_GELU_TANH);
    ck_assert_int_eq(clremat_act_from_name("swish"), -1);
    ck_assert_str_eq(clremat_shape_str(&s, buf, sizeof buf), "[2, 3, 5]");
    ck_assert_str_eq(clremat_shape_str(&z, buf, sizeof buf), "[]");
    ck_assert_int_eq(clremat_shape_elems(&s), 30);
    ck_assert_int_eq(clremat_shape_elems(&z), 1);
}
END_TEST

START_TEST(test_c_api_mlp)
{
    clremat_graph *g = clremat_graph_new("mlp");
    clremat_shape in = shp(1, 64, 0, 0);
    clremat_layer d1 = mk_dense("d1", 128, CLREMAT_ACT_RELU), dr = mk("drop", CLREMAT_DROPOUT),
                  d2 = mk_dense("d2", 10, CLREMAT_ACT_NONE), loss = mk("loss", CLREMAT_SOFTMAX_CE);
    dr.rate = 0.25;
    ASSERT_OK(clremat_graph_set_input(g, &in, 0));
    ASSERT_OK(clremat_graph_add_layer(g, &d1));
    ASSERT_OK(clremat_graph_add_layer(g, &dr));
    ASSERT_OK(clremat_graph_add_layer(g, &d2));
    ASSERT_OK(clremat_graph_add_layer(g, &loss));
    ASSERT_OK(clremat_graph_finalize(g));
    ck_assert_int_eq(g->n_layers, 4);
    ck_assert_int_eq(g->layers[0].inputs[0], -1);
    ck_assert_int_eq(g->layers[2].inputs[0], 1);
    ck_assert_int_eq(g->layers[2].n_inputs, 1);
    ASSERT_SHAPE(g->layers[0].in_shape[0], 1, 64, 0);
    ASSERT_SHAPE(g->layers[0].out_shape, 1, 128, 0);
    ASSERT_SHAPE(g->layers[1].out_shape, 1, 128, 0);
    ASSERT_SHAPE(g->layers[2].out_shape, 1, 10, 0);
    ASSERT_SHAPE(g->layers[3].out_shape, 0, 0, 0);
    /* parameters: relu dense gets He normal, linear dense Glorot */
    ck_assert_int_eq(g->layers[0].n_params, 2);
    ck_assert_str_eq(g->layers[0].params[0].name, "kernel");
    ASSERT_SHAPE(g->layers[0].params[0].shape, 2, 64, 128);
    ck_assert_int_eq(g->layers[0].params[0].elems, 64 * 128);
    ck_assert_int_eq(g->layers[0].params[0].init, CLREMAT_INIT_HE_NORMAL);
    ck_assert_str_eq(g->layers[0].params[1].name, "bias");
    ASSERT_SHAPE(g->layers[0].params[1].shape, 1, 128, 0);
    ck_assert_int_eq(g->layers[0].params[1].init, CLREMAT_INIT_ZEROS);
    ck_assert_int_eq(g->layers[2].params[0].init, CLREMAT_INIT_GLOROT_UNIFORM);
    ck_assert_int_eq(g->layers[1].n_params, 0);
    ck_assert_int_eq(clremat_graph_param_elems(g), 64 * 128 + 128 + 128 * 10 + 10);
    /* io */
    ASSERT_SHAPE(g->io.input, 1, 64, 0);
    ck_assert_int_eq(g->io.input_ids, 0);
    ck_assert_int_eq(g->io.labels.rank, 0);
    ck_assert_int_eq(g->io.labels_ids, 1);
    ck_assert_int_eq(g->io.classes, 10);
    ck_assert_int_eq(g->finalized, 1);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_c_api_shapes_add_reshape_mse)
{
    /* input [4, 6] -> x dense 16 [4,16] -> flat [64] -> y dense 16 [16] -> add(x, y): suffix broadcast
     * -> ln -> r reshape [8, -1] -> mse */
    clremat_graph *g = clremat_graph_new("shapes");
    clremat_shape in = shp(2, 4, 6, 0);
    clremat_layer x = mk_dense("x", 16, CLREMAT_ACT_TANH), flat = mk("flat", CLREMAT_RESHAPE),
                  y = mk_dense("y", 16, CLREMAT_ACT_NONE), sum = mk("sum", CLREMAT_ADD),
                  ln = mk("ln", CLREMAT_LAYERNORM), r = mk("r", CLREMAT_RESHAPE), loss = mk("loss", CLREMAT_MSE);
    flat.target = shp(1, -1, 0, 0);
    y.use_bias = 0;
    r.target = shp(2, 8, -1, 0);
    ASSERT_OK(clremat_graph_set_input(g, &in, 0));
    ASSERT_OK(clremat_graph_add_layer(g, &x));
    ASSERT_OK(clremat_graph_add_layer(g, &flat));
    ASSERT_OK(clremat_graph_add_layer(g, &y));
    sum = with_inputs(sum, 0, 2);
    ASSERT_OK(clremat_graph_add_layer(g, &sum));
    ASSERT_OK(clremat_graph_add_layer(g, &ln));
    ASSERT_OK(clremat_graph_add_layer(g, &r));
    ASSERT_OK(clremat_graph_add_layer(g, &loss));
    ASSERT_OK(clremat_graph_finalize(g));
    ASSERT_SHAPE(g->layers[0].out_shape, 2, 4, 16);
    ck_assert_int_eq(g->layers[0].params[0].shape.dims[0], 6);
    ASSERT_SHAPE(g->layers[1].out_shape, 1, 64, 0);
    ASSERT_SHAPE(g->layers[2].out_shape, 1, 16, 0);
    ck_assert_int_eq(g->layers[2].n_params, 1); /* no bias */
    ASSERT_SHAPE(g->layers[3].in_shape[0], 2, 4, 16);
    ASSERT_SHAPE(g->layers[3].in_shape[1], 1, 16, 0);
    ASSERT_SHAPE(g->layers[3].out_shape, 2, 4, 16);
    ck_assert_str_eq(g->layers[4].params[0].name, "gamma");
    ck_assert_int_eq(g->layers[4].params[0].init, CLREMAT_INIT_ONES);
    ASSERT_SHAPE(g->layers[4].params[1].shape, 1, 16, 0);
    ck_assert_int_eq(g->layers[4].params[1].init, CLREMAT_INIT_ZEROS);
    ASSERT_SHAPE(g->layers[5].out_shape, 2, 8, 8);
    ASSERT_SHAPE(g->io.labels, 2, 8, 8);
    ck_assert_int_eq(g->io.labels_ids, 0);
    ck_assert_int_eq(g->io.classes, 0);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_c_api_embedding_attention_blocks)
{
    clremat_graph *g = clremat_graph_new("tiny_transformer");
    clremat_shape in = shp(1, 8, 0, 0);
    clremat_layer emb = mk("emb", CLREMAT_EMBEDDING), att = mk("att", CLREMAT_ATTENTION),
                  res = mk("res", CLREMAT_ADD), out = mk_dense("out", 10, CLREMAT_ACT_NONE),
                  loss = mk("loss", CLREMAT_SOFTMAX_CE), ln = mk("ln", CLREMAT_LAYERNORM);
    emb.vocab = 10;
    emb.dim = 12;
    emb.positions = 1;
    att.heads = 3;
    att.causal = 1;
    att.rate = 0.1;
    ASSERT_OK(clremat_graph_set_input(g, &in, 1));
    ASSERT_OK(clremat_graph_add_layer(g, &emb));
    ASSERT_OK(clremat_graph_begin_block(g, "outer", 1));
    ASSERT_OK(clremat_graph_begin_block(g, "inner", 0));
    ASSERT_OK(clremat_graph_add_layer(g, &ln));
    ASSERT_OK(clremat_graph_add_layer(g, &att));
    ASSERT_OK(clremat_graph_end_block(g));
    res = with_inputs(res, 2, 0);
    ASSERT_OK(clremat_graph_add_layer(g, &res));
    ASSERT_OK(clremat_graph_end_block(g));
    ASSERT_OK(clremat_graph_add_layer(g, &out));
    ASSERT_OK(clremat_graph_add_layer(g, &loss));
    ASSERT_OK(clremat_graph_finalize(g));
    ASSERT_SHAPE(g->layers[0].out_shape, 2, 8, 12);
    ck_assert_int_eq(g->layers[0].n_params, 2);
    ck_assert_str_eq(g->layers[0].params[0].name, "table");
    ASSERT_SHAPE(g->layers[0].params[0].shape, 2, 10, 12);
    ck_assert_str_eq(g->layers[0].params[1].name, "pos_table");
    ASSERT_SHAPE(g->layers[0].params[1].shape, 2, 8, 12);
    ck_assert_int_eq(g->layers[0].params[1].init, CLREMAT_INIT_NORMAL_002);
    ck_assert_int_eq(g->layers[2].n_params, 4);
    ck_assert_str_eq(g->layers[2].params[0].name, "wqkv");
    ASSERT_SHAPE(g->layers[2].params[0].shape, 2, 12, 36);
    ck_assert_int_eq(g->layers[2].params[0].init, CLREMAT_INIT_GLOROT_UNIFORM);
    ck_assert_str_eq(g->layers[2].params[1].name, "bqkv");
    ASSERT_SHAPE(g->layers[2].params[1].shape, 1, 36, 0);
    ck_assert_str_eq(g->layers[2].params[2].name, "wo");
    ASSERT_SHAPE(g->layers[2].params[2].shape, 2, 12, 12);
    ck_assert_str_eq(g->layers[2].params[3].name, "bo");
    ASSERT_SHAPE(g->layers[2].out_shape, 2, 8, 12);
    ASSERT_SHAPE(g->layers[4].out_shape, 2, 8, 10);
    /* io: per-token class ids */
    ck_assert_int_eq(g->io.input_ids, 1);
    ASSERT_SHAPE(g->io.labels, 1, 8, 0);
    ck_assert_int_eq(g->io.classes, 10);
    /* blocks */
    ck_assert_int_eq(g->n_blocks, 2);
    ck_assert_int_eq(clremat_graph_find_block(g, "outer"), 0);
    ck_assert_int_eq(clremat_graph_find_block(g, "inner"), 1);
    ck_assert_int_eq(clremat_graph_find_block(g, "nope"), -1);
    ck_assert_int_eq(g->blocks[0].first, 1);
    ck_assert_int_eq(g->blocks[0].last, 3);
    ck_assert_int_eq(g->blocks[0].remat, 1);
    ck_assert_int_eq(g->blocks[1].parent, 0);
    ck_assert_int_eq(g->blocks[1].first, 1);
    ck_assert_int_eq(g->blocks[1].last, 2);
    ck_assert_int_eq(g->layers[1].block, 1);
    ck_assert_int_eq(g->layers[3].block, 0);
    ck_assert_int_eq(g->layers[4].block, -1);
    ck_assert(clremat_block_contains(g, 0, 1));
    ck_assert(clremat_block_contains(g, 1, 2));
    ck_assert(clremat_block_contains(g, 0, 3));
    ck_assert(!clremat_block_contains(g, 1, 3));
    ck_assert(!clremat_block_contains(g, 0, 4));
    ck_assert(!clremat_block_contains(g, 0, 0));
    clremat_graph_free(g);
}
END_TEST

/* A graph with input [8] and dense a (4), dense b (4). */
static clremat_graph *base_graph(void)
{
    clremat_graph *g = clremat_graph_new("t");
    clremat_shape in = shp(1, 8, 0, 0);
    clremat_layer a = mk_dense("a", 4, CLREMAT_ACT_NONE), b = mk_dense("b", 4, CLREMAT_ACT_NONE);
    ASSERT_OK(clremat_graph_set_input(g, &in, 0));
    ASSERT_OK(clremat_graph_add_layer(g, &a));
    ASSERT_OK(clremat_graph_add_layer(g, &b));
    return g;
}

#define ASSERT_GERR(g, expr, st, w1, w2)                                                     \
    do {                                                                                     \
        int got_ = (expr);                                                                   \
        ck_assert_msg(got_ == (st), "%s -> %s (%s)", #expr, clremat_status_str(got_), (g)->error); \
        ck_assert_msg(strstr((g)->error, (w1)) != NULL, "'%s' lacks '%s'", (g)->error, (w1)); \
        ck_assert_msg(strstr((g)->error, (w2)) != NULL, "'%s' lacks '%s'", (g)->error, (w2)); \
        ck_assert_str_eq(clremat_last_error(), (g)->error);                                  \
    } while (0)

START_TEST(test_c_api_errors)
{
    clremat_graph *g;
    clremat_layer L;

    g = base_graph(); /* duplicate names name both layers */
    L = mk_dense("a", 3, CLREMAT_ACT_NONE);
    ASSERT_GERR(g, clremat_graph_add_layer(g, &L), CLREMAT_ERR_INVALID_ARGUMENT, "duplicate name 'a'", "layer 0");
    ck_assert_int_eq(g->n_layers, 2);
    L = with_inputs(mk_dense("c", 3, CLREMAT_ACT_NONE), 2, -9); /* itself / later */
    ASSERT_GERR(g, clremat_graph_add_layer(g, &L), CLREMAT_ERR_INVALID_ARGUMENT, "layer 'c'", "forward reference");
    L = with_inputs(mk("sum", CLREMAT_ADD), 1, -9);
    ASSERT_GERR(g, clremat_graph_add_layer(g, &L), CLREMAT_ERR_INVALID_ARGUMENT, "layer 'sum'", "takes 2 inputs");
    L = mk("drop", CLREMAT_DROPOUT);
    L.rate = 1.0;
    ASSERT_GERR(g, clremat_graph_add_layer(g, &L), CLREMAT_ERR_INVALID_ARGUMENT, "layer 'drop'", "rate");
    L = mk("ln", CLREMAT_LAYERNORM);
    L.eps = 0;
    ASSERT_GERR(g, clremat_graph_add_layer(g, &L), CLREMAT_ERR_INVALID_ARGUMENT, "layer 'ln'", "eps");
    L = mk("r", CLREMAT_RESHAPE);
    L.target = shp(2, -1, -1, 0);
    ASSERT_GERR(g, clremat_graph_add_layer(g, &L), CLREMAT_ERR_INVALID_ARGUMENT, "layer 'r'", "at most one");
    ASSERT_GERR(g, clremat_graph_end_block(g), CLREMAT_ERR_INVALID_ARGUMENT, "end_block", "open block");
    /* no loss */
    ASSERT_GERR(g, clremat_graph_finalize(g), CLREMAT_ERR_INVALID_ARGUMENT, "layer 'b'", "no loss");
    ck_assert_int_eq(g->finalized, 0);
    clremat_graph_free(g);

    g = base_graph(); /* loss not last */
    L = mk("loss", CLREMAT_MSE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    L = mk_dense("after", 2, CLREMAT_ACT_NONE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    ASSERT_GERR(g, clremat_graph_finalize(g), CLREMAT_ERR_INVALID_ARGUMENT, "layer 'loss'", "not the last layer");
    clremat_graph_free(g);

    g = base_graph(); /* output never used: b reads the model input, a is dangling */
    g->layers[1].inputs[0] = -1;
    L = mk("loss", CLREMAT_MSE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    ASSERT_GERR(g, clremat_graph_finalize(g), CLREMAT_ERR_INVALID_ARGUMENT, "layer 'a''s output is never used",
                "a");
    clremat_graph_free(g);

    g = base_graph(); /* add shape mismatch names the layer and both shapes */
    L = mk_dense("c", 3, CLREMAT_ACT_NONE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    L = with_inputs(mk("sum", CLREMAT_ADD), 1, 2);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    L = mk("loss", CLREMAT_MSE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    g->layers[1].inputs[0] = 0;
    ASSERT_GERR(g, clremat_graph_finalize(g), CLREMAT_ERR_SHAPE, "layer 'sum': input has shape [4]",
                "second input has shape [3]");
    clremat_graph_free(g);

    g = base_graph(); /* attention on rank 1 / heads not dividing D */
    L = mk("att", CLREMAT_ATTENTION);
    L.heads = 3;
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    L = mk("loss", CLREMAT_MSE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    ASSERT_GERR(g, clremat_graph_finalize(g), CLREMAT_ERR_SHAPE, "layer 'att'", "[4]");
    {
        clremat_shape in2 = shp(2, 5, 8, 0);
        ASSERT_OK(clremat_graph_set_input(g, &in2, 0));
    }
    ASSERT_GERR(g, clremat_graph_finalize(g), CLREMAT_ERR_SHAPE, "layer 'att'", "not divisible by heads = 3");
    clremat_graph_free(g);

    g = clremat_graph_new("t"); /* embedding needs the ids input */
    {
        clremat_shape in2 = shp(1, 8, 0, 0);
        ASSERT_OK(clremat_graph_set_input(g, &in2, 0));
    }
    L = mk("emb", CLREMAT_EMBEDDING);
    L.vocab = 4;
    L.dim = 2;
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    L = mk("loss", CLREMAT_MSE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    ASSERT_GERR(g, clremat_graph_finalize(g), CLREMAT_ERR_SHAPE, "layer 'emb'", "token ids");
    clremat_graph_free(g);

    g = base_graph(); /* reshape element count */
    L = mk("r", CLREMAT_RESHAPE);
    L.target = shp(1, 3, 0, 0);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    L = mk("loss", CLREMAT_MSE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    ASSERT_GERR(g, clremat_graph_finalize(g), CLREMAT_ERR_SHAPE, "layer 'r': input has shape [4]", "[3]");
    clremat_graph_free(g);

    g = base_graph(); /* blocks: empty, unclosed, reference into a block from outside */
    ASSERT_OK(clremat_graph_begin_block(g, "blk", 0));
    ASSERT_GERR(g, clremat_graph_end_block(g), CLREMAT_ERR_INVALID_ARGUMENT, "block 'blk'", "empty");
    L = mk_dense("in1", 4, CLREMAT_ACT_NONE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    L = mk_dense("in2", 4, CLREMAT_ACT_NONE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    L = with_inputs(mk("inside", CLREMAT_ADD), 2, 3); /* inside the block: fine */
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    ASSERT_GERR(g, clremat_graph_finalize(g), CLREMAT_ERR_INVALID_ARGUMENT, "block 'blk'", "not closed");
    ASSERT_OK(clremat_graph_end_block(g));
    L = with_inputs(mk("sneak", CLREMAT_ADD), 4, 2);
    ASSERT_GERR(g, clremat_graph_add_layer(g, &L), CLREMAT_ERR_INVALID_ARGUMENT,
                "layer 'sneak' uses layer 'in1', which is inside block 'blk'", "'inside'");
    L = with_inputs(mk("fine", CLREMAT_ADD), 4, 1);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    L = mk_dense("blk", 2, CLREMAT_ACT_NONE);
    ASSERT_GERR(g, clremat_graph_add_layer(g, &L), CLREMAT_ERR_INVALID_ARGUMENT, "duplicate name 'blk'", "block 0");
    clremat_graph_free(g);

    g = base_graph(); /* the ids input can only feed an embedding */
    {
        clremat_shape in2 = shp(1, 8, 0, 0);
        ASSERT_OK(clremat_graph_set_input(g, &in2, 1));
    }
    L = mk("loss", CLREMAT_MSE);
    ASSERT_OK(clremat_graph_add_layer(g, &L));
    ASSERT_GERR(g, clremat_graph_finalize(g), CLREMAT_ERR_SHAPE, "layer 'a'", "only an embedding");
    clremat_graph_free(g);
}
END_TEST

/* --------------------------------------------------------- model files */

START_TEST(test_json_basic_and_defaults)
{
    clremat_graph *g = load_ok("{\"name\": \"m\", \"input\": {\"shape\": [2, 3]}, \"layers\": [\n"
                               "{\"type\": \"dense\", \"units\": 5, \"activation\": \"gelu\"},\n"
                               "{\"type\": \"dense\", \"units\": 5, \"use_bias\": false, \"activation\": \"relu\"},\n"
                               "{\"type\": \"layernorm\"},\n"
                               "{\"name\": \"ln2\", \"type\": \"layernorm\", \"eps\": 0.001},\n"
                               "{\"type\": \"flatten\"},\n"
                               "{\"type\": \"activation\", \"activation\": \"gelu_exact\"},\n"
                               "{\"type\": \"reshape\", \"shape\": [5, -1]},\n"
                               "{\"type\": \"dropout\", \"rate\": 0.5},\n"
                               "{\"type\": \"flatten\"},\n"
                               "{\"type\": \"dense\", \"units\": 3},\n"
                               "{\"type\": \"softmax_cross_entropy\"}]}");
    ck_assert_str_eq(g->name, "m");
    ck_assert_int_eq(g->n_layers, 11);
    /* automatic names, Keras style */
    ck_assert_str_eq(g->layers[0].name, "dense");
    ck_assert_str_eq(g->layers[1].name, "dense_1");
    ck_assert_str_eq(g->layers[2].name, "layernorm");
    ck_assert_str_eq(g->layers[4].name, "flatten");
    ck_assert_str_eq(g->layers[8].name, "flatten_1");
    ck_assert_str_eq(g->layers[9].name, "dense_2");
    ck_assert_int_eq(g->layers[0].act, CLREMAT_ACT_GELU_TANH);
    ck_assert_int_eq(g->layers[0].params[0].init, CLREMAT_INIT_GLOROT_UNIFORM);
    ck_assert_int_eq(g->layers[1].params[0].init, CLREMAT_INIT_HE_NORMAL);
    ck_assert_int_eq(g->layers[1].n_params, 1);
    ck_assert(g->layers[2].eps == 1e-5);
    ck_assert(g->layers[3].eps == 0.001);
    ck_assert_int_eq(g->layers[4].type, CLREMAT_RESHAPE);
    ASSERT_SHAPE(g->layers[4].out_shape, 1, 10, 0);
    ck_assert_int_eq(g->layers[5].act, CLREMAT_ACT_GELU_EXACT);
    ASSERT_SHAPE(g->layers[6].out_shape, 2, 5, 2);
    ck_assert(g->layers[7].rate == 0.5);
    ASSERT_SHAPE(g->layers[9].out_shape, 1, 3, 0);
    ck_assert_int_eq(g->io.classes, 3);
    ck_assert_int_eq(g->io.labels.rank, 0);
    /* source positions */
    ck_assert_int_eq(g->layers[0].src_line, 2);
    ck_assert_int_eq(g->layers[0].src_col, 1);
    ck_assert_int_eq(g->layers[10].src_line, 12);
    clremat_graph_free(g);
}
END_TEST

static const char *const transformer_text =
    "{\"name\": \"tf\", \"input\": {\"shape\": [6], \"dtype\": \"int32\"}, \"layers\": [\n"
    "  {\"name\": \"embed\", \"type\": \"embedding\", \"vocab\": 11, \"dim\": 8, \"positions\": true},\n"
    "  {\"block\": \"enc\", \"repeat\": 3, \"remat\": true, \"layers\": [\n"
    "    {\"name\": \"ln\", \"type\": \"layernorm\"},\n"
    "    {\"name\": \"attn\", \"type\": \"attention\", \"heads\": 2, \"causal\": true, \"rate\": 0.1},\n"
    "    {\"name\": \"res\", \"type\": \"add\", \"inputs\": [\"attn\", \"@block_input\"]}]},\n"
    "  {\"block\": \"head\", \"layers\": [\n"
    "    {\"name\": \"d\", \"type\": \"dense\", \"units\": 11, \"inputs\": [\"enc_2/res\"]}]},\n"
    "  {\"name\": \"loss\", \"type\": \"softmax_cross_entropy\"}]}";

START_TEST(test_json_repeat_naming_and_block_input)
{
    clremat_graph *g = load_ok(transformer_text);
    const char *names[] = {"embed", "enc_0/ln", "enc_0/attn", "enc_0/res", "enc_1/ln", "enc_1/attn", "enc_1/res",
                           "enc_2/ln", "enc_2/attn", "enc_2/res", "head/d", "loss"};
    ck_assert_int_eq(g->n_layers, 12);
    for (int i = 0; i < 12; i++)
        ck_assert_str_eq(g->layers[i].name, names[i]);
    ck_assert_int_eq(g->n_blocks, 4);
    ck_assert_str_eq(g->blocks[0].name, "enc_0");
    ck_assert_str_eq(g->blocks[2].name, "enc_2");
    ck_assert_str_eq(g->blocks[3].name, "head"); /* no suffix without repeat */
    for (int b = 0; b < 3; b++) {
        ck_assert_int_eq(g->blocks[b].first, 1 + 3 * b);
        ck_assert_int_eq(g->blocks[b].last, 3 + 3 * b);
        ck_assert_int_eq(g->blocks[b].parent, -1);
        ck_assert_int_eq(g->blocks[b].remat, 1);
    }
    ck_assert_int_eq(g->blocks[3].remat, 0);
    /* @block_input: the layer before each instance; short names stay in the instance */
    ck_assert_int_eq(g->layers[layer(g, "enc_0/res")].inputs[0], layer(g, "enc_0/attn"));
    ck_assert_int_eq(g->layers[layer(g, "enc_0/res")].inputs[1], layer(g, "embed"));
    ck_assert_int_eq(g->layers[layer(g, "enc_1/res")].inputs[0], layer(g, "enc_1/attn"));
    ck_assert_int_eq(g->layers[layer(g, "enc_1/res")].inputs[1], layer(g, "enc_0/res"));
    ck_assert_int_eq(g->layers[layer(g, "enc_2/res")].inputs[1], layer(g, "enc_1/res"));
    ck_assert_int_eq(g->layers[layer(g, "enc_1/ln")].inputs[0], layer(g, "enc_0/res"));
    ck_assert_int_eq(g->layers[layer(g, "head/d")].inputs[0], layer(g, "enc_2/res"));
    ck_assert_int_eq(g->layers[layer(g, "enc_1/attn")].block, 1);
    ck_assert_int_eq(g->layers[layer(g, "enc_1/attn")].causal, 1);
    ck_assert_int_eq(g->layers[layer(g, "enc_1/attn")].heads, 2);
    ck_assert(g->layers[layer(g, "enc_1/attn")].rate == 0.1);
    ck_assert_int_eq(g->layers[0].inputs[0], -1);
    ck_assert_int_eq(g->io.input_ids, 1);
    ASSERT_SHAPE(g->io.labels, 1, 6, 0);
    ck_assert_int_eq(g->io.classes, 11);
    ASSERT_SHAPE(g->layers[layer(g, "head/d")].out_shape, 2, 6, 11);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_json_nested_blocks_and_resolution)
{
    clremat_graph *g = load_ok(
        "{\"input\": {\"shape\": [4]}, \"layers\": [\n"
        "  {\"name\": \"x\", \"type\": \"dense\", \"units\": 4},\n"
        "  {\"block\": \"outer\", \"layers\": [\n"
        "    {\"name\": \"x\", \"type\": \"dense\", \"units\": 4, \"inputs\": [\"@input\"]},\n"
        "    {\"name\": \"skip\", \"type\": \"add\", \"inputs\": [\"x\", \"@block_input\"]},\n"
        "    {\"block\": \"inner\", \"repeat\": 2, \"layers\": [\n"
        "      {\"type\": \"dense\", \"units\": 4},\n"
        "      {\"name\": \"s\", \"type\": \"add\", \"inputs\": [\"dense\", \"skip\"]}]},\n"
        "    {\"name\": \"y\", \"type\": \"add\", \"inputs\": [\"inner_1/s\", \"outer/inner_0/s\"]}]},\n"
        "  {\"name\": \"loss\", \"type\": \"mse\"}]}");
    int outer = clremat_graph_find_block(g, "outer"), i0 = clremat_graph_find_block(g, "outer/inner_0"),
        i1 = clremat_graph_find_block(g, "outer/inner_1");
    ck_assert_int_ge(outer, 0);
    ck_assert_int_ge(i0, 0);
    ck_assert_int_ge(i1, 0);
    ck_assert_int_eq(g->blocks[i0].parent, outer);
    ck_assert_int_eq(g->blocks[i1].parent, outer);
    /* outer's x reads the model input, skip uses the short name x (outer/x, not the global x) */
    ck_assert_int_eq(g->layers[layer(g, "outer/x")].inputs[0], -1);
    ck_assert_int_eq(g->layers[layer(g, "outer/skip")].inputs[0], layer(g, "outer/x"));
    ck_assert_int_eq(g->layers[layer(g, "outer/skip")].inputs[1], layer(g, "x"));
    /* inner instances: "dense" in the instance, "skip" from the enclosing block */
    ck_assert_int_eq(g->layers[layer(g, "outer/inner_1/s")].inputs[0], layer(g, "outer/inner_1/dense"));
    ck_assert_int_eq(g->layers[layer(g, "outer/inner_1/s")].inputs[1], layer(g, "outer/skip"));
    ck_assert_int_eq(g->layers[layer(g, "outer/inner_1/dense")].inputs[0], layer(g, "outer/inner_0/s"));
    ck_assert_int_eq(g->layers[layer(g, "outer/y")].inputs[0], layer(g, "outer/inner_1/s"));
    ck_assert_int_eq(g->layers[layer(g, "outer/y")].inputs[1], layer(g, "outer/inner_0/s"));
    ck_assert(clremat_block_contains(g, outer, layer(g, "outer/inner_1/s")));
    ck_assert_int_eq(g->blocks[outer].last, layer(g, "outer/y"));
    {
        int found[3] = {-1, -1, -1};
        ck_assert_int_eq(clremat_graph_blocks_named(g, "outer/inner", found, 3), 2);
        ck_assert_int_eq(found[0], i0);
        ck_assert_int_eq(found[1], i1);
        ck_assert_int_eq(clremat_graph_blocks_named(g, "inner", found, 3), 0);
        ck_assert_int_eq(clremat_graph_blocks_named(g, "outer", NULL, 0), 1);
    }
    clremat_graph_free(g);
}
END_TEST

/* Fields of issue 13 (small language models): every bad value refused,
 * naming the field or the mismatch. */
#define SEQ_HEAD "{\"input\": {\"shape\": [4, 8]}, \"layers\": [\n"
#define IDS_HEAD "{\"input\": {\"shape\": [4], \"dtype\": \"int32\"}, \"layers\": [\n" \
                 "{\"name\": \"emb\", \"type\": \"embedding\", \"vocab\": 10, \"dim\": 8},\n"
START_TEST(test_json_llm_errors)
{
    const int P = CLREMAT_ERR_PARSE, S = CLREMAT_ERR_SHAPE;
    EXPECT_ST(SEQ_HEAD "{\"type\": \"attention\", \"heads\": 4, \"kv_heads\": 3}" LOSS TAIL, P, "kv_heads");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"attention\", \"heads\": 4, \"rope\": 5}" LOSS TAIL, P, "rope");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"attention\", \"heads\": 4, \"rope\": {\"theta\": -1}}" LOSS TAIL, P, "theta");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"attention\", \"heads\": 4, \"rope\": {\"base\": 1}}" LOSS TAIL, P,
              "unknown field 'base'");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"attention\", \"heads\": 8, \"rope\": {}}" LOSS TAIL, S, "even head width");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"attention\", \"heads\": 4, \"use_bias\": 0}" LOSS TAIL, P, "use_bias");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"rmsnorm\", \"eps\": 0}" LOSS TAIL, P, "eps");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"rope\", \"head_dim\": 3}" LOSS TAIL, P, "head_dim");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"rope\", \"head_dim\": 6}" LOSS TAIL, S, "multiple of an even head_dim");
    EXPECT_ST(HEAD "{\"type\": \"rope\"}" LOSS TAIL, S, "rope needs [T, D]");
    EXPECT_ST(SEQ_HEAD "{\"name\": \"a\", \"type\": \"dense\", \"units\": 8},\n"
              "{\"name\": \"b\", \"type\": \"dense\", \"units\": 4},\n"
              "{\"type\": \"multiply\", \"inputs\": [\"a\", \"b\"]}" LOSS TAIL, S, "multiply needs equal shapes");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"multiply\", \"inputs\": [\"x\"]}" LOSS TAIL, P, "inputs");
    EXPECT_ST(IDS_HEAD "{\"type\": \"dense\", \"units\": 10, \"use_bias\": false, \"tie\": \"nope\"}" LOSS TAIL, P,
              "not an earlier embedding");
    EXPECT_ST(IDS_HEAD "{\"name\": \"d\", \"type\": \"dense\", \"units\": 8},\n"
              "{\"type\": \"dense\", \"units\": 10, \"use_bias\": false, \"tie\": \"d\"}" LOSS TAIL, P,
              "not an earlier embedding");
    EXPECT_ST(IDS_HEAD "{\"type\": \"dense\", \"units\": 10, \"tie\": \"emb\"}" LOSS TAIL, S, "without bias");
    EXPECT_ST(IDS_HEAD "{\"type\": \"dense\", \"units\": 9, \"use_bias\": false, \"tie\": \"emb\"}" LOSS TAIL,
              S, "vocab = units");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"dense\", \"units\": 4, \"lora\": {\"rank\": 0}}" LOSS TAIL, P, "rank");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"dense\", \"units\": 4, \"lora\": {\"rank\": 2, \"beta\": 1}}" LOSS TAIL, P,
              "unknown field 'beta'");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"dense\", \"units\": 4, \"lora\": {\"rank\": 2, \"alpha\": 0}}" LOSS TAIL,
              P, "alpha");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"dense\", \"units\": 4, \"lora\": {\"rank\": 6}}" LOSS TAIL, S,
              "LoRA rank 6");
    EXPECT_ST(SEQ_HEAD "{\"type\": \"dense\", \"units\": 4, \"trainable\": 1}" LOSS TAIL, P, "trainable");
    EXPECT_ST(SEQ_HEAD "{\"block\": \"b\", \"trainable\": \"no\", \"layers\": [{\"type\": \"dense\", "
              "\"units\": 4}]}" LOSS TAIL, P, "trainable");
    {
        /* and the good ones: frozen params, tie, adapters */
        clremat_graph *g = load_ok(IDS_HEAD "{\"block\": \"b\", \"trainable\": false, \"layers\": ["
                                   "{\"name\": \"up\", \"type\": \"dense\", \"units\": 8, \"lora\": {\"rank\": 2}}]},\n"
                                   "{\"name\": \"head\", \"type\": \"dense\", \"units\": 10, \"use_bias\": false, "
                                   "\"tie\": \"emb\"}" LOSS TAIL);
        int up = layer(g, "b/up"), head = layer(g, "head");
        ck_assert_int_eq(g->layers[up].n_params, 4);
        ck_assert(g->layers[up].params[0].frozen && g->layers[up].params[1].frozen);
        ck_assert(!g->layers[up].params[2].frozen && !g->layers[up].params[3].frozen);
        ck_assert(fabs(g->layers[up].lora_alpha - 2.0) < 1e-12); /* alpha defaults to the rank */
        ck_assert_int_eq(g->layers[head].n_params, 0);
        ck_assert_int_eq(g->layers[head].tie, 1);
        ck_assert_int_eq(clremat_graph_tied_user(g, 0), head);
        ck_assert_int_eq(clremat_graph_trainable_elems(g), 10 * 8 + 8 * 2 + 2 * 8);
        clremat_graph_free(g);
    }
}
END_TEST

/* The model-level "task" field: the synthetic task that data defaults to
 * (the bundled Llama decoders name "language"), checked at load against
 * the known tasks and the model's input and labels. */
#define TASK_MODEL(task) "{\"task\": " task ", \"input\": {\"shape\": [4], \"dtype\": \"int32\"}, \"layers\": [\n" \
                         "{\"name\": \"emb\", \"type\": \"embedding\", \"vocab\": 10, \"dim\": 8},\n" \
                         "{\"type\": \"dense\", \"units\": 10},\n" \
                         "{\"name\": \"loss\", \"type\": \"softmax_cross_entropy\"}]}"
START_TEST(test_json_task)
{
    const int P = CLREMAT_ERR_PARSE;
    clremat_graph *g;
    clremat_dataset a, b, c;
    EXPECT_ERR(TASK_MODEL("\"chess\""), P, "\"chess\"", 0, "field 'task'", "unknown task 'chess'", "language");
    EXPECT_ERR(TASK_MODEL("\"clusters\""), P, "\"clusters\"", 0, "field 'task'",
               "task 'clusters' needs float vector input", "[4] token ids");
    EXPECT_ST(TASK_MODEL("3"), P, "field 'task' must be the name of a synthetic task");
    EXPECT_ST(TASK_MODEL("\"\""), P, "field 'task' must be the name of a synthetic task");
    EXPECT_ST(TASK_MODEL("\"languagelanguagelanguage\""), P, "field 'task' must be the name of a synthetic task");
    g = load_ok(TASK_MODEL("\"language\""));
    ck_assert_str_eq(g->task, "language");
    /* data without a task name is the model's task, not the input's default ("sequence") */
    ck_assert_int_eq(clremat_data_synthetic(g, NULL, 3, 16, 4, &a), CLREMAT_OK);
    ck_assert_int_eq(clremat_data_synthetic(g, "language", 3, 16, 4, &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_data_synthetic(g, "sequence", 3, 16, 4, &c), CLREMAT_OK);
    ck_assert_str_eq(a.name, b.name);
    ck_assert(memcmp(a.train.x, b.train.x, sizeof(float) * 16 * 4) == 0);
    ck_assert(memcmp(a.train.y, b.train.y, sizeof(float) * 16 * 4) == 0);
    ck_assert(memcmp(a.val.y, b.val.y, sizeof(float) * 4 * 4) == 0);
    ck_assert(memcmp(a.train.y, c.train.y, sizeof(float) * 16 * 4) != 0);
    clremat_data_free(&a);
    clremat_data_free(&b);
    clremat_graph_free(g);
    /* without the field, token ids default to "sequence" as before */
    g = load_ok("{\"input\": {\"shape\": [4], \"dtype\": \"int32\"}, \"layers\": [\n"
                "{\"name\": \"emb\", \"type\": \"embedding\", \"vocab\": 10, \"dim\": 8},\n"
                "{\"type\": \"dense\", \"units\": 10},\n{\"name\": \"loss\", \"type\": \"softmax_cross_entropy\"}]}");
    ck_assert_str_eq(g->task, "");
    ck_assert_int_eq(clremat_data_synthetic(g, NULL, 3, 16, 4, &a), CLREMAT_OK);
    ck_assert_str_eq(a.name, c.name);
    ck_assert(memcmp(a.train.x, c.train.x, sizeof(float) * 16 * 4) == 0);
    ck_assert(memcmp(a.train.y, c.train.y, sizeof(float) * 16 * 4) == 0);
    clremat_data_free(&a);
    clremat_data_free(&c);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_json_errors)
{
    const char *t;
    /* syntax error */
    EXPECT_ERR(HEAD "{\"type\": \"dense\" \"units\": 4}" LOSS TAIL, CLREMAT_ERR_PARSE, "\"units\"", 0,
               "JSON syntax error", NULL, NULL);
    EXPECT_ERR(HEAD "{\"type\": \"dense\", \"units\": 4,}" LOSS TAIL, CLREMAT_ERR_PARSE, "}" LOSS, 0,
               "JSON syntax error", NULL, NULL);
    EXPECT_ERR(HEAD "{\"type\": \"dense\", \"units\": 4, \"units\": 5}" LOSS TAIL, CLREMAT_ERR_PARSE, "\"units\"", 1,
               "syntax error", "duplicate", NULL);
    EXPECT_ERR("", CLREMAT_ERR_PARSE, "", 0, "syntax error", NULL, NULL);
    EXPECT_ERR("[1, 2]", CLREMAT_ERR_PARSE, "[", 0, "must be a JSON object", "got [1,2]", NULL);
    /* explicit line:col for one case, independent of pos_of */
    {
        clremat_graph *g;
        ck_assert_int_eq(clremat_graph_load_string(HEAD "{\"type\": \"dense\", \"units\": \"abc\"}" LOSS TAIL, "t.json",
                                                   &g),
                         CLREMAT_ERR_PARSE);
        ck_assert_str_eq(clremat_last_error(), "t.json:2:28: layer 'dense': field 'units' must be a positive integer, "
                                               "got \"abc\"");
    }
    /* unknown type */
    EXPECT_ERR(HEAD "{\"name\": \"d\", \"type\": \"dnese\", \"units\": 4}" LOSS TAIL, CLREMAT_ERR_PARSE, "\"dnese\"", 0,
               "unknown layer type 'dnese'", "dense, activation, dropout", NULL);
    /* missing fields */
    EXPECT_ERR(HEAD "{\"name\": \"d\", \"type\": \"dense\"}" LOSS TAIL, CLREMAT_ERR_PARSE, "{\"name\": \"d\"", 0,
               "layer 'd': missing field 'units'", "positive integer", NULL);
    EXPECT_ERR(HEAD "{\"name\": \"d\", \"units\": 4}" LOSS TAIL, CLREMAT_ERR_PARSE, "{\"name\": \"d\"", 0,
               "missing field 'type'", "block", NULL);
    EXPECT_ERR(HEAD "{\"name\": \"s\", \"type\": \"add\"}" LOSS TAIL, CLREMAT_ERR_PARSE, "{\"name\": \"s\"", 0,
               "layer 's': missing field 'inputs'", "2 layer names", NULL);
    EXPECT_ERR("{\"layers\": [{\"type\": \"mse\"}]}", CLREMAT_ERR_PARSE, "{", 0, "missing field 'input'", NULL, NULL);
    EXPECT_ERR("{\"input\": {\"shape\": [8]}}", CLREMAT_ERR_PARSE, "{", 0, "missing field 'layers'", NULL, NULL);
    EXPECT_ERR(HEAD "{\"name\": \"a\", \"type\": \"activation\"}" LOSS TAIL, CLREMAT_ERR_PARSE, "{\"name\": \"a\"", 0,
               "missing field 'activation'", "relu", NULL);
    /* bad field types and values */
    EXPECT_ERR(HEAD "{\"name\": \"d2\", \"type\": \"dense\", \"units\": \"abc\"}" LOSS TAIL, CLREMAT_ERR_PARSE,
               "\"abc\"", 0, "layer 'd2': field 'units' must be a positive integer, got \"abc\"", NULL, NULL);
    EXPECT_ERR(HEAD "{\"name\": \"d2\", \"type\": \"dense\", \"units\": 4.5}" LOSS TAIL, CLREMAT_ERR_PARSE, "4.5", 0,
               "field 'units' must be a positive integer", "got 4.5", NULL);
    EXPECT_ERR(HEAD "{\"name\": \"d2\", \"type\": \"dense\", \"units\": 0}" LOSS TAIL, CLREMAT_ERR_PARSE, "0}", 0,
               "field 'units' must be a positive integer", "got 0", NULL);
    EXPECT_ERR(HEAD "{\"type\": \"dense\", \"units\": 4, \"use_bias\": 1}" LOSS TAIL, CLREMAT_ERR_PARSE, "1}", 0,
               "field 'use_bias' must be true or false", "got 1", NULL);
    EXPECT_ERR(HEAD "{\"type\": \"dropout\", \"rate\": 1.0}" LOSS TAIL, CLREMAT_ERR_PARSE, "1.0", 0,
               "field 'rate' must be a number with 0 <= rate < 1", NULL, NULL);
    EXPECT_ERR(HEAD "{\"type\": \"dropout\", \"rate\": true}" LOSS TAIL, CLREMAT_ERR_PARSE, "true", 0,
               "field 'rate'", "got true", NULL);
    EXPECT_ERR(HEAD "{\"type\": \"layernorm\", \"eps\": 0}" LOSS TAIL, CLREMAT_ERR_PARSE, "0}", 0, "field 'eps'",
               "0 < eps", NULL);
    EXPECT_ERR(HEAD "{\"type\": \"dense\", \"units\": 4, \"inputs\": \"x\"}" LOSS TAIL, CLREMAT_ERR_PARSE, "\"x\"", 0,
               "field 'inputs' must be an array of 1 layer name", NULL, NULL);
    EXPECT_ERR(HEAD "{\"name\": \"a/b\", \"type\": \"dense\", \"units\": 4}" LOSS TAIL, CLREMAT_ERR_PARSE, "\"a/b\"", 0,
               "field 'name' must be", "letters", NULL);
    EXPECT_ERR(HEAD "{\"type\": \"reshape\", \"shape\": [-1, 2, -1]}" LOSS TAIL, CLREMAT_ERR_PARSE, "-1]", 0,
               "field 'shape'", "element 2 is -1", NULL);
    EXPECT_ERR("{\"input\": {\"shape\": [8, 0]}, \"layers\": [{\"type\": \"mse\"}]}", CLREMAT_ERR_PARSE, "0]", 0,
               "input: field 'shape' must be an array of 1 to 4 positive integers", "element 1 is 0", NULL);
    EXPECT_ERR("{\"input\": {\"shape\": [8], \"dtype\": \"float64\"}, \"layers\": [{\"type\": \"mse\"}]}",
               CLREMAT_ERR_PARSE, "\"float64\"", 0, "field 'dtype'", "int32", NULL);
    EXPECT_ERR(HEAD "42" LOSS TAIL, CLREMAT_ERR_PARSE, "42", 0, "expected a layer object", "got 42", NULL);
    /* unknown fields list the allowed ones */
    EXPECT_ERR(HEAD "{\"name\": \"d1\", \"type\": \"dense\", \"units\": 4, \"unit\": 5}" LOSS TAIL, CLREMAT_ERR_PARSE,
               "\"unit\"", 0, "layer 'd1': unknown field 'unit'",
               "allowed fields: name, type, inputs, units, activation, use_bias", NULL);
    EXPECT_ERR("{\"input\": {\"shape\": [8]}, \"layer\": []}", CLREMAT_ERR_PARSE, "\"layer\"", 0,
               "model: unknown field 'layer'", "name, description, input, layers", NULL);
    EXPECT_ERR(HEAD "{\"block\": \"b\", \"repaet\": 2, \"layers\": [{\"type\": \"dense\", \"units\": 8}]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "\"repaet\"", 0, "block 'b': unknown field 'repaet'", "block, repeat, remat, layers",
               NULL);
    /* shape mismatch: the add layer, both shapes */
    EXPECT_ERR(HEAD "{\"name\": \"a\", \"type\": \"dense\", \"units\": 4},\n"
                    "{\"name\": \"b\", \"type\": \"dense\", \"units\": 3},\n"
                    "{\"name\": \"sum\", \"type\": \"add\", \"inputs\": [\"a\", \"b\"]}" LOSS TAIL,
               CLREMAT_ERR_SHAPE, "{\"name\": \"sum\"", 0, "layer 'sum': input has shape [4]",
               "second input has shape [3]", NULL);
    EXPECT_ERR(HEAD "{\"name\": \"att\", \"type\": \"attention\", \"heads\": 2}" LOSS TAIL, CLREMAT_ERR_SHAPE,
               "{\"name\": \"att\"", 0, "layer 'att': input has shape [8]", "[T, D]", NULL);
    EXPECT_ERR(HEAD "{\"name\": \"e\", \"type\": \"embedding\", \"vocab\": 3, \"dim\": 2}" LOSS TAIL, CLREMAT_ERR_SHAPE,
               "{\"name\": \"e\"", 0, "layer 'e'", "token ids", NULL);
    /* forward reference, self reference */
    EXPECT_ERR(HEAD "{\"name\": \"a\", \"type\": \"dense\", \"units\": 4, \"inputs\": [\"b\"]},\n"
                    "{\"name\": \"b\", \"type\": \"dense\", \"units\": 4}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "\"b\"", 0, "layer 'a': input 'b'", "cycle / forward reference", NULL);
    EXPECT_ERR(HEAD "{\"name\": \"a\", \"type\": \"dense\", \"units\": 8},\n"
                    "{\"name\": \"b\", \"type\": \"add\", \"inputs\": [\"a\", \"b\"]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "\"b\"]", 0, "layer 'b': input 'b' is the layer itself", "cycle", NULL);
    /* duplicate names: both places */
    EXPECT_ERR(HEAD "{\"name\": \"d\", \"type\": \"dense\", \"units\": 4},\n"
                    "{\"name\": \"d\", \"type\": \"dense\", \"units\": 4}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "\"d\"", 1, "duplicate layer name 'd'", "already defined at t.json:2:1", NULL);
    EXPECT_ERR(HEAD "{\"name\": \"b\", \"type\": \"dense\", \"units\": 4},\n"
                    "{\"block\": \"b\", \"layers\": [{\"type\": \"dense\", \"units\": 4}]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "\"b\"", 1, "duplicate name 'b'", "t.json:2:1", NULL);
    /* a reference into a block from outside (only its last layer may be used) */
    EXPECT_ERR(HEAD "{\"block\": \"b\", \"layers\": [{\"name\": \"x\", \"type\": \"dense\", \"units\": 8},\n"
                    "  {\"name\": \"y\", \"type\": \"dense\", \"units\": 8}]},\n"
                    "{\"name\": \"z\", \"type\": \"add\", \"inputs\": [\"b/y\", \"b/x\"]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "[\"b/y\"", 0, "layer 'z' uses layer 'b/x', which is inside block 'b'",
               "only its last layer ('b/y'", NULL);
    EXPECT_ERR(HEAD "{\"block\": \"e\", \"repeat\": 2, \"layers\": [{\"name\": \"x\", \"type\": \"dense\", \"units\": 8},\n"
                    "  {\"name\": \"y\", \"type\": \"add\", \"inputs\": [\"x\", \"e_0/x\"]}]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "[\"x\"", 0, "layer 'e_1/y' uses layer 'e_0/x', which is inside block 'e_0'", NULL,
               NULL);
    /* no loss, loss not last, unused output */
    EXPECT_ERR(HEAD "{\"name\": \"d\", \"type\": \"dense\", \"units\": 4}" TAIL, CLREMAT_ERR_PARSE, "{\"name\": \"d\"", 0,
               "layer 'd' is the last layer but not a loss layer", "no loss", NULL);
    EXPECT_ERR(HEAD "{\"name\": \"l1\", \"type\": \"mse\"},\n{\"name\": \"d\", \"type\": \"dense\", \"units\": 4}" LOSS
                    TAIL,
               CLREMAT_ERR_PARSE, "{\"name\": \"l1\"", 0, "layer 'l1' is a loss layer", "not the last layer", NULL);
    EXPECT_ERR(HEAD "{\"name\": \"a\", \"type\": \"dense\", \"units\": 4},\n"
                    "{\"name\": \"b\", \"type\": \"dense\", \"units\": 4, \"inputs\": [\"@input\"]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "{\"name\": \"a\"", 0, "layer 'a''s output is never used", NULL, NULL);
    /* unknown activation */
    EXPECT_ERR(HEAD "{\"type\": \"dense\", \"units\": 4, \"activation\": \"gleu\"}" LOSS TAIL, CLREMAT_ERR_PARSE,
               "\"gleu\"", 0, "unknown activation 'gleu'", "relu, gelu, gelu_exact, tanh, sigmoid, silu, linear", NULL);
    /* empty block, bad repeat */
    EXPECT_ERR(HEAD "{\"block\": \"b\", \"layers\": []}" LOSS TAIL, CLREMAT_ERR_PARSE, "[]", 0, "block 'b' is empty",
               NULL, NULL);
    t = HEAD "{\"block\": \"b\", \"repeat\": 0, \"layers\": [{\"type\": \"dense\", \"units\": 8}]}" LOSS TAIL;
    EXPECT_ERR(t, CLREMAT_ERR_PARSE, "0,", 0, "block 'b': field 'repeat' must be an integer from 1 to 10000",
               "got 0", NULL);
    EXPECT_ERR(HEAD "{\"block\": \"b\", \"repeat\": 1000000000, \"layers\": [{\"type\": \"dense\", \"units\": 8}]}" LOSS
                    TAIL,
               CLREMAT_ERR_PARSE, "1000000000", 0, "field 'repeat'", "got 1000000000", NULL);
    EXPECT_ERR(HEAD "{\"block\": \"b\", \"repeat\": \"2\", \"layers\": [{\"type\": \"dense\", \"units\": 8}]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "\"2\"", 0, "field 'repeat'", "got \"2\"", NULL);
    EXPECT_ERR(HEAD "{\"block\": \"b\", \"repeat\": -3, \"layers\": [{\"type\": \"dense\", \"units\": 8}]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "-3", 0, "field 'repeat'", "got -3", NULL);
    EXPECT_ERR(HEAD "{\"block\": \"b\"}" LOSS TAIL, CLREMAT_ERR_PARSE, "{\"block\"", 0,
               "block 'b': missing field 'layers'", NULL, NULL);
    /* unknown input names, misplaced reserved names */
    EXPECT_ERR(HEAD "{\"type\": \"dense\", \"units\": 4, \"inputs\": [\"nope\"]}" LOSS TAIL, CLREMAT_ERR_PARSE,
               "\"nope\"", 0, "layer 'dense': unknown input name 'nope'", "@input, @block_input", NULL);
    EXPECT_ERR(HEAD "{\"type\": \"dense\", \"units\": 4, \"inputs\": [\"@block_input\"]}" LOSS TAIL, CLREMAT_ERR_PARSE,
               "\"@block_input\"", 0, "'@block_input' is only valid inside a block", NULL, NULL);
    EXPECT_ERR(HEAD "{\"type\": \"dense\", \"units\": 4, \"inputs\": [\"@prev\"]}" LOSS TAIL, CLREMAT_ERR_PARSE,
               "\"@prev\"", 0, "unknown reserved input name '@prev'", NULL, NULL);
    /* a short name inside a block does not reach into another instance */
    EXPECT_ERR(HEAD "{\"block\": \"e\", \"repeat\": 2, \"layers\": [{\"name\": \"x\", \"type\": \"dense\", \"units\": 8}]},\n"
                    "{\"type\": \"dense\", \"units\": 4, \"inputs\": [\"x\"]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "\"x\"]", 0, "unknown input name 'x'", NULL, NULL);
}
END_TEST

START_TEST(test_json_hostile_input)
{
    char *deep = malloc(20010);
    char big[8192];
    size_t n = 0;
    /* nesting far past jansson's depth limit */
    for (int i = 0; i < 10000; i++)
        deep[n++] = '[';
    deep[n] = '\0';
    EXPECT_ST(deep, CLREMAT_ERR_PARSE, "syntax error");
    n = 0;
    for (int i = 0; i < 10000; i++)
        deep[n++] = '[';
    for (int i = 0; i < 10000; i++)
        deep[n++] = ']';
    deep[n] = '\0';
    {
        clremat_graph *g;
        ck_assert_int_eq(clremat_graph_load_string(deep, "t.json", &g), CLREMAT_ERR_PARSE);
        ck_assert_ptr_nonnull(strstr(clremat_last_error(), "syntax error"));
    }
    free(deep);
    /* blocks nested deeper than allowed */
    n = (size_t)snprintf(big, sizeof big, "{\"input\": {\"shape\": [8]}, \"layers\": [");
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "{\"block\": \"b\", \"layers\": [");
    n += (size_t)snprintf(big + n, sizeof big - n, "{\"type\": \"dense\", \"units\": 8}");
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "]}");
    snprintf(big + n, sizeof big - n, ", {\"type\": \"mse\"}]}");
    EXPECT_ERR(big, CLREMAT_ERR_PARSE, "{\"block\"", 16, "nested more than 16 deep", NULL, NULL);
    /* huge numbers */
    EXPECT_ST(HEAD "{\"type\": \"dense\", \"units\": 99999999999999999999999}" LOSS TAIL, CLREMAT_ERR_PARSE,
              "too big integer");
    EXPECT_ERR(HEAD "{\"type\": \"dense\", \"units\": 9223372036854775807}" LOSS TAIL, CLREMAT_ERR_PARSE,
               "9223372036854775807", 0, "field 'units'", NULL, NULL);
    EXPECT_ST(HEAD "{\"type\": \"dropout\", \"rate\": 1e999}" LOSS TAIL, CLREMAT_ERR_PARSE, "syntax error");
    EXPECT_ERR("{\"input\": {\"shape\": [1073741824, 1073741824]}, \"layers\": [{\"type\": \"mse\"}]}",
               CLREMAT_ERR_SHAPE, "[1073741824", 0, "model input shape", "elements", NULL);
    EXPECT_ERR(HEAD "{\"type\": \"dense\", \"units\": 1073741824}" LOSS TAIL, CLREMAT_ERR_SHAPE, "{\"type\"", 0,
               "layer 'dense'", "too many", NULL);
    /* repeats that would expand past the layer limit fail fast */
    EXPECT_ERR(HEAD "{\"block\": \"a\", \"repeat\": 10000, \"layers\": [{\"block\": \"b\", \"repeat\": 10000, "
                    "\"layers\": [{\"type\": \"dense\", \"units\": 8}]}]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "{\"type\": \"dense\"", 0, "more than 10000 layers", NULL, NULL);
    /* names too long after prefixing */
    EXPECT_ERR(HEAD "{\"block\": \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\", \"layers\": "
                    "[{\"name\": \"llllllllllllllllllllllllllllll\", \"type\": \"dense\", \"units\": 8}]}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "\"llll", 0, "longer than 63 characters", NULL, NULL);
    /* a top-level name too long: no block path in front of it ("layer '/lll...") */
    EXPECT_ERR(HEAD "{\"name\": \"" "llllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllll"
                    "\", \"type\": \"dense\", \"units\": 8}" LOSS TAIL,
               CLREMAT_ERR_PARSE, "\"llll", 0, "layer 'llll", "...': the full name", NULL);
    /* invalid UTF-8, NUL bytes, non-JSON */
    EXPECT_ST("{\"input\": \"\xff\xfe\"}", CLREMAT_ERR_PARSE, "syntax error");
    EXPECT_ERR("null", CLREMAT_ERR_PARSE, "n", 0, "syntax error", NULL, NULL);
    EXPECT_ERR("{\"input\": {\"shape\": [8]}, \"layers\": [{\"type\": \"dense\", \"units\": 8, \"na\\u006de\": \"x/y\"},"
               "{\"type\": \"mse\"}]}", CLREMAT_ERR_PARSE, "\"x/y\"", 0, "field 'name'", NULL, NULL);
}
END_TEST

/* Random mutations of a valid model never crash, and every error has a
 * position inside the text. */
START_TEST(test_json_fuzz)
{
    static const char alphabet[] = "{}[]:,\"0123456789-.eE tfnul\\ab/@\n";
    size_t len = strlen(transformer_text), lines = 1;
    uint64_t state = 0x9e3779b97f4a7c15ull;
    char *buf = malloc(len + 64);
    int ok = 0, failed = 0;
    for (size_t i = 0; i < len; i++)
        lines += transformer_text[i] == '\n';
    for (int iter = 0; iter < 3000; iter++) {
        clremat_graph *g = NULL;
        size_t n = len;
        int st, edits;
        memcpy(buf, transformer_text, len + 1);
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        edits = 1 + (int)((state >> 33) % 3);
        for (int e = 0; e < edits; e++) {
            size_t at;
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            at = (size_t)((state >> 20) % n);
            switch ((state >> 8) % 4) {
            case 0: buf[at] = alphabet[(state >> 40) % (sizeof alphabet - 1)]; break;
            case 1: memmove(buf + at, buf + at + 1, n - at); n--; break;
            case 2: n = at; break;
            default:
                if (n + 1 < len + 64) {
                    memmove(buf + at + 1, buf + at, n - at + 1);
                    buf[at] = alphabet[(state >> 40) % (sizeof alphabet - 1)];
                    n++;
                }
            }
            buf[n] = '\0';
            n = strlen(buf);
            if (n == 0)
                break;
        }
        st = clremat_graph_load_string(buf, "f.json", &g);
        if (st == CLREMAT_OK) {
            ck_assert_int_eq(g->finalized, 1);
            clremat_graph_free(g);
            ok++;
        } else {
            int line = 0, col = 0;
            ck_assert_ptr_null(g);
            ck_assert_msg(st == CLREMAT_ERR_PARSE || st == CLREMAT_ERR_SHAPE, "status %s: %s",
                          clremat_status_str(st), clremat_last_error());
            ck_assert_msg(sscanf(clremat_last_error(), "f.json:%d:%d:", &line, &col) == 2 && line >= 1 &&
                              (size_t)line <= lines + 1 && col >= 1,
                          "no position in '%s'", clremat_last_error());
            failed++;
        }
    }
    ck_assert_int_gt(failed, 1000);
    ck_assert_int_gt(ok, 0);
    free(buf);
}
END_TEST

START_TEST(test_load_file_errors)
{
    clremat_graph *g = (clremat_graph *)1;
    char path[] = "/tmp/clremat_test_graph_XXXXXX";
    int fd;
    FILE *f;
    ck_assert_int_eq(clremat_graph_load("/nonexistent/model.json", &g), CLREMAT_ERR_IO);
    ck_assert_ptr_null(g);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "/nonexistent/model.json"));
    ck_assert_int_eq(clremat_graph_load("/tmp", &g), CLREMAT_ERR_IO);
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    fputs("{\"input\": {\"shape\": [8]},\n \"layers\": [\n  {\"type\": \"dense\", \"units\": -4}]}\n", f);
    fclose(f);
    ck_assert_int_eq(clremat_graph_load(path, &g), CLREMAT_ERR_PARSE);
    {
        char want[128];
        snprintf(want, sizeof want, "%s:3:30: layer 'dense': field 'units'", path);
        ck_assert_msg(strncmp(clremat_last_error(), want, strlen(want)) == 0, "%s", clremat_last_error());
    }
    unlink(path);
}
END_TEST

static const char *models_dir(void)
{
    const char *d = getenv("CLREMAT_MODELS");
    return d && *d ? d : "models";
}

static clremat_graph *load_model(const char *file)
{
    char path[1024];
    clremat_graph *g = NULL;
    int st;
    snprintf(path, sizeof path, "%s/%s", models_dir(), file);
    st = clremat_graph_load(path, &g);
    ck_assert_msg(st == CLREMAT_OK, "%s: %s", path, clremat_last_error());
    return g;
}

START_TEST(test_bundled_models)
{
    DIR *d = opendir(models_dir());
    struct dirent *e;
    int count = 0;
    clremat_graph *g;
    ck_assert_msg(d != NULL, "cannot open models directory %s", models_dir());
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        int64_t params;
        if (n < 6 || strcmp(e->d_name + n - 5, ".json"))
            continue;
        g = load_model(e->d_name);
        ck_assert_int_eq(g->finalized, 1);
        params = clremat_graph_param_elems(g);
        /* llama_tiny's size is set by issue 13 (width 128, 4 blocks, MLP 352): 0.75 M parameters */
        ck_assert_msg(params >= 30000 && params <= (strncmp(e->d_name, "llama_tiny", 10) ? 300000 : 800000),
                      "%s: %lld parameters", e->d_name, (long long)params);
        clremat_graph_free(g);
        count++;
    }
    closedir(d);
    ck_assert_int_ge(count, 4);

    g = load_model("mlp_deep.json");
    ck_assert_int_ge(g->n_layers, 24);
    for (int l = 1; l < g->n_layers; l++) /* a chain */
        ck_assert_int_eq(g->layers[l].inputs[0], l - 1);
    ASSERT_SHAPE(g->io.input, 1, 32, 0);
    ck_assert_int_eq(g->io.classes, 8);
    ck_assert_int_eq(g->layers[g->n_layers - 1].type, CLREMAT_SOFTMAX_CE);
    clremat_graph_free(g);

    g = load_model("transformer.json");
    ck_assert_int_eq(g->io.input_ids, 1);
    ASSERT_SHAPE(g->io.input, 1, 16, 0);
    ASSERT_SHAPE(g->io.labels, 1, 16, 0);
    ck_assert_int_eq(g->io.classes, 16);
    ck_assert_int_ge(clremat_graph_find_block(g, "encoder_block_0"), 0);
    ck_assert_int_ge(clremat_graph_find_block(g, "encoder_block_1"), 0);
    ck_assert_int_eq(clremat_graph_find_block(g, "encoder_block_2"), -1);
    ck_assert_int_eq(g->layers[layer(g, "encoder_block_1/attn")].heads, 4);
    ck_assert_int_eq(g->layers[layer(g, "encoder_block_1/res1")].inputs[1], layer(g, "encoder_block_0/res2"));
    ASSERT_SHAPE(g->layers[layer(g, "embed")].out_shape, 2, 16, 64);
    {
        int found[4] = {-1, -1, -1, -1};
        ck_assert_int_eq(clremat_graph_blocks_named(g, "encoder_block", found, 4), 2);
        ck_assert_int_eq(found[0], clremat_graph_find_block(g, "encoder_block_0"));
        ck_assert_int_eq(found[1], clremat_graph_find_block(g, "encoder_block_1"));
        ck_assert_int_eq(clremat_graph_blocks_named(g, "encoder_block_1", found, 4), 1);
        ck_assert_int_eq(found[0], clremat_graph_find_block(g, "encoder_block_1"));
        ck_assert_int_eq(clremat_graph_blocks_named(g, "encoder", found, 4), 0);
        ck_assert_int_eq(clremat_graph_blocks_named(g, "encoder_block_", found, 4), 0);
    }
    clremat_graph_free(g);

    g = load_model("resnet_mlp.json");
    {
        /* a skip connection: a two-input layer reading a layer before its
         * predecessor (a residual add reads the block's input) */
        int skips = 0, adds = 0;
        for (int l = 0; l < g->n_layers; l++) {
            const clremat_layer *L = &g->layers[l];
            adds += L->type == CLREMAT_ADD;
            skips += L->n_inputs == 2 && (L->inputs[0] < l - 1 || L->inputs[1] < l - 1);
        }
        ck_assert_int_ge(skips, 4);
        ck_assert_int_eq(skips, adds); /* every residual add skips */
    }
    ck_assert_int_eq(g->io.classes, 8);
    ASSERT_SHAPE(g->io.input, 1, 32, 0);
    clremat_graph_free(g);

    g = load_model("regression.json");
    ck_assert_int_eq(g->layers[g->n_layers - 1].type, CLREMAT_MSE);
    ck_assert_int_eq(g->io.labels_ids, 0);
    clremat_graph_free(g);
}
END_TEST

/* Every ```json block of docs/model-format.md is a complete model that loads. */
START_TEST(test_docs_examples)
{
    char path[1024], *text, *p;
    FILE *f;
    long size;
    int blocks = 0;
    snprintf(path, sizeof path, "%s/../docs/model-format.md", models_dir());
    f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = malloc((size_t)size + 1);
    ck_assert_int_eq(fread(text, 1, (size_t)size, f), (size_t)size);
    text[size] = '\0';
    fclose(f);
    for (p = strstr(text, "```json\n"); p; p = strstr(p, "```json\n")) {
        char *end;
        clremat_graph *g = NULL;
        int st;
        p += strlen("```json\n");
        end = strstr(p, "```");
        ck_assert_ptr_nonnull(end);
        *end = '\0';
        st = clremat_graph_load_string(p, "docs", &g);
        ck_assert_msg(st == CLREMAT_OK, "docs example %d: %s", blocks + 1, clremat_last_error());
        ck_assert_int_eq(g->finalized, 1);
        clremat_graph_free(g);
        blocks++;
        p = end + 1;
    }
    ck_assert_int_ge(blocks, 5);
    free(text);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("graph", 60, &tc);
    tcase_add_test(tc, test_names_and_shapes);
    tcase_add_test(tc, test_c_api_mlp);
    tcase_add_test(tc, test_c_api_shapes_add_reshape_mse);
    tcase_add_test(tc, test_c_api_embedding_attention_blocks);
    tcase_add_test(tc, test_c_api_errors);
    tcase_add_test(tc, test_json_basic_and_defaults);
    tcase_add_test(tc, test_json_repeat_naming_and_block_input);
    tcase_add_test(tc, test_json_nested_blocks_and_resolution);
    tcase_add_test(tc, test_json_errors);
    tcase_add_test(tc, test_json_llm_errors);
    tcase_add_test(tc, test_json_task);
    tcase_add_test(tc, test_json_hostile_input);
    tcase_add_test(tc, test_json_fuzz);
    tcase_add_test(tc, test_load_file_errors);
    tcase_add_test(tc, test_bundled_models);
    tcase_add_test(tc, test_docs_examples);
    return test_run_suite(s);
}
