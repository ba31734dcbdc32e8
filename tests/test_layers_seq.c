/* test_layers_seq.c: layernorm, embedding, multi-head attention, softmax
 * cross-entropy and mse launchers. Each layer goes through the layercheck
 * harness (device forward/backward vs the double references of ref_seq.c,
 * din overwrite/accumulate, finite differences) over several shapes (T = 1,
 * odd T, widths not multiples of 16, 1 and 3 heads, causal on/off, attention
 * dropout 0 and > 0, layernorm eps 1e-5 and 0.5); then specific checks: the
 * attention dropout mask is regenerated bit-identically and matches the
 * host hash, losses and accuracy counts (ties, clamped labels), clamped
 * token ids, determinism of the reductions, and the cost model. Skips (77)
 * without a device. */
#include "testutil.h"
#include "backend.h"
#include "layers.h"
#include "layercheck.h"
#include "ref_seq.h"
#include "rng.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define TIMEOUT 300

/* ------------------------------------------------------------ references */

static void ln_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = lc_layer(io);
    ref_layernorm_fwd((int)lc_rows(&L->in_shape[0], io->batch), lc_last_dim(&L->in_shape[0]), L->eps, io->in[0],
                      io->param[0], io->param[1], out, NULL);
}

static void ln_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = lc_layer(io);
    ref_layernorm_bwd((int)lc_rows(&L->in_shape[0], io->batch), lc_last_dim(&L->in_shape[0]), L->eps, io->in[0],
                      io->param[0], dout, din[0], grad[0], grad[1]);
}

static void emb_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = lc_layer(io);
    int T = lc_last_dim(&L->in_shape[0]);
    ref_embedding_fwd((int)(io->batch * T), (int)L->dim, (int)L->vocab, T, L->positions, io->in[0], io->param[0],
                      L->positions ? io->param[1] : NULL, out);
}

static void emb_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = lc_layer(io);
    int T = lc_last_dim(&L->in_shape[0]);
    (void)din;
    ref_embedding_bwd((int)(io->batch * T), (int)L->dim, (int)L->vocab, T, L->positions, io->in[0], dout, grad[0],
                      L->positions ? grad[1] : NULL);
}

static ref_attn attn_cfg(const lc_io *io)
{
    const clremat_layer *L = lc_layer(io);
    ref_attn a = {(int)io->batch, (int)L->in_shape[0].dims[0], (int)L->in_shape[0].dims[1], L->heads, L->causal,
                  L->rate, io->seed, (uint32_t)io->step, (uint32_t)io->layer, 0, 0.0};
    return a;
}

static void attn_fwd(const lc_io *io, double *out)
{
    ref_attn a = attn_cfg(io);
    ref_attention_fwd(&a, io->in[0], io->param[0], io->param[1], io->param[2], io->param[3], out, NULL, NULL, NULL);
}

static void attn_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    ref_attn a = attn_cfg(io);
    ref_attention_bwd(&a, io->in[0], io->param[0], io->param[1], io->param[2], io->param[3], dout, din[0], grad[0],
                      grad[1], grad[2], grad[3]);
}

static void ce_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = lc_layer(io);
    ref_softmax_ce_fwd((int)lc_rows(&L->in_shape[0], io->batch), lc_last_dim(&L->in_shape[0]), io->in[0], io->labels,
                       &out[0], &out[1]);
}

static void ce_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = lc_layer(io);
    (void)dout;
    (void)grad;
    if (din[0])
        ref_softmax_ce_bwd((int)lc_rows(&L->in_shape[0], io->batch), lc_last_dim(&L->in_shape[0]), io->in[0],
                           io->labels, din[0]);
}

static int64_t elems_of(const clremat_shape *s)
{
    int64_t e = 1;
    for (int i = 0; i < s->rank; i++)
        e *= s->dims[i];
    return e;
}

static void mse_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = lc_layer(io);
    out[0] = ref_mse_fwd((int)(io->batch * elems_of(&L->in_shape[0])), io->in[0], io->labels);
    out[1] = 0.0;
}

static void mse_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = lc_layer(io);
    (void)dout;
    (void)grad;
    if (din[0])
        ref_mse_bwd((int)(io->batch * elems_of(&L->in_shape[0])), io->in[0], io->labels, din[0]);
}

/* ----------------------------------------------------------- layer makers */

static void base_layer(clremat_layer *L, const char *name, clremat_layer_type type, int rank, const int64_t *dims)
{
    memset(L, 0, sizeof *L);
    snprintf(L->name, sizeof L->name, "%s", name);
    L->type = type;
    L->n_inputs = 1;
    L->inputs[0] = -1;
    L->block = -1;
    L->in_shape[0] = lc_shape(rank, dims);
    L->out_shape = L->in_shape[0];
}

static void make_layernorm(clremat_layer *L, int rank, const int64_t *dims)
{
    int64_t D = dims[rank - 1];
    base_layer(L, "ln", CLREMAT_LAYERNORM, rank, dims);
    L->eps = 1e-5;
    lc_set_param(L, 0, "gamma", 1, &D);
    lc_set_param(L, 1, "beta", 1, &D);
}

static void make_embedding(clremat_layer *L, int64_t T, int64_t vocab, int64_t dim, int positions)
{
    int64_t od[2] = {T, dim}, td[2] = {vocab, dim};
    base_layer(L, "emb", CLREMAT_EMBEDDING, 1, &T);
    L->out_shape = lc_shape(2, od);
    L->vocab = vocab;
    L->dim = dim;
    L->positions = positions;
    lc_set_param(L, 0, "table", 2, td);
    if (positions)
        lc_set_param(L, 1, "pos_table", 2, od);
}

static void make_attention(clremat_layer *L, int64_t T, int64_t D, int heads, int causal, double rate)
{
    int64_t xd[2] = {T, D}, wq[2] = {D, 3 * D}, bq = 3 * D, wo[2] = {D, D};
    base_layer(L, "attn", CLREMAT_ATTENTION, 2, xd);
    L->heads = heads;
    L->causal = causal;
    L->rate = rate;
    lc_set_param(L, 0, "wqkv", 2, wq);
    lc_set_param(L, 1, "bqkv", 1, &bq);
    lc_set_param(L, 2, "wo", 2, wo);
    lc_set_param(L, 3, "bo", 1, &D);
}

static void make_loss(clremat_layer *L, clremat_layer_type type, int rank, const int64_t *dims)
{
    base_layer(L, type == CLREMAT_MSE ? "mse" : "ce", type, rank, dims);
    L->out_shape.rank = 0;
}

/* ------------------------------------------------------- harness checks */

START_TEST(test_layernorm_check)
{
    static const int64_t shapes[][3] = {{2, 5, 7}, {2, 1, 16}, {1, 3, 33}, {2, 4, 1}};
    static const int ranks[] = {2, 2, 1, 1};
    static const int64_t batches[] = {3, 2, 4, 3};
    /* the default epsilon and one that changes the result (inputs in
     * [-1, 1] have a variance near 1/3): a launcher that ignored the
     * layer's eps would miss the reference at 0.5 */
    static const double eps[] = {1e-5, 0.5};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int s = 0; s < 8; s++) {
        clremat_layer L;
        clremat_graph g;
        lc_spec spec;
        make_layernorm(&L, ranks[s % 4], shapes[s % 4] + (ranks[s % 4] == 2 ? 1 : 2));
        L.eps = eps[s / 4];
        lc_graph_of_layer(&g, &L);
        memset(&spec, 0, sizeof spec);
        spec.g = &g;
        spec.batch = batches[s % 4];
        spec.fwd = ln_fwd;
        spec.bwd = ln_bwd;
        spec.param_scale = 1.5;
        spec.rng = 10 + (unsigned)s;
        /* D = 1: the output is beta whatever x is (xhat = 0) */
        lc_check_layer(ctx, &spec);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_embedding_check)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int positions = 0; positions < 2; positions++) {
        enum { T = 7, B = 3, V = 11, DIM = 5 };
        float ids[B * T];
        clremat_layer L;
        clremat_graph g;
        lc_spec spec;
        for (int i = 0; i < B * T; i++)
            ids[i] = (float)((i * 5 + 3) % V);
        ids[4] = -3.0f;          /* clamped to 0 */
        ids[9] = (float)V;       /* clamped to V - 1 */
        ids[17] = 1000.0f;       /* clamped to V - 1 */
        ids[1] = ids[2];         /* repeated id: table rows accumulate */
        make_embedding(&L, T, V, DIM, positions);
        lc_graph_of_layer(&g, &L);
        memset(&spec, 0, sizeof spec);
        spec.g = &g;
        spec.batch = B;
        spec.fwd = emb_fwd;
        spec.bwd = emb_bwd;
        spec.in_fixed[0] = ids;
        spec.rng = 20 + (unsigned)positions;
        lc_check_layer(ctx, &spec);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* One attention configuration through the harness. */
static void check_attention(clremat_ctx *ctx, int64_t batch, int64_t T, int64_t D, int heads, int causal,
                            double rate, unsigned rng)
{
    clremat_layer L;
    clremat_graph g;
    lc_spec spec;
    make_attention(&L, T, D, heads, causal, rate);
    lc_graph_of_layer(&g, &L);
    memset(&spec, 0, sizeof spec);
    spec.g = &g;
    spec.batch = batch;
    spec.seed = 0x1234567890abcdefULL;
    spec.step = 3;
    spec.fwd = attn_fwd;
    spec.bwd = attn_bwd;
    spec.param_scale = 0.6;
    spec.rng = rng;
    lc_check_layer(ctx, &spec);
}

START_TEST(test_attention_check)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    check_attention(ctx, 2, 7, 6, 3, 0, 0.0, 31);   /* odd T, 3 heads of 2 */
    check_attention(ctx, 2, 7, 6, 3, 1, 0.0, 32);   /* causal */
    check_attention(ctx, 3, 1, 5, 1, 0, 0.0, 33);   /* T = 1, one head, odd width */
    check_attention(ctx, 1, 5, 9, 3, 1, 0.0, 34);   /* heads of 3 */
    check_attention(ctx, 2, 6, 20, 1, 0, 0.0, 35);  /* width 20: not a multiple of 16 */
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_attention_dropout_check)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    check_attention(ctx, 2, 7, 6, 3, 0, 0.3, 41);
    check_attention(ctx, 2, 7, 6, 3, 1, 0.5, 42);
    check_attention(ctx, 1, 1, 4, 1, 1, 0.25, 43);  /* T = 1 */
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_softmax_ce_check)
{
    static const int64_t dims[][2] = {{3, 5}, {1, 1}, {2, 17}};
    static const int ranks[] = {2, 2, 1};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int s = 0; s < 3; s++) {
        const int64_t *d = ranks[s] == 2 ? dims[s] : dims[s] + 1;
        int64_t C = d[ranks[s] - 1], batch = 4;
        int64_t rows = lc_rows(&(clremat_shape){ranks[s], {d[0], ranks[s] == 2 ? d[1] : 0}}, batch);
        float labels[64];
        clremat_layer L;
        clremat_graph g;
        lc_spec spec;
        for (int64_t r = 0; r < rows; r++)
            labels[r] = (float)((r * 7 + 2) % C);
        make_loss(&L, CLREMAT_SOFTMAX_CE, ranks[s], d);
        lc_graph_of_layer(&g, &L);
        memset(&spec, 0, sizeof spec);
        spec.g = &g;
        spec.batch = batch;
        spec.fwd = ce_fwd;
        spec.bwd = ce_bwd;
        spec.loss = 1;
        spec.labels = labels;
        spec.n_labels = rows;
        spec.in_scale = 3.0;
        spec.rng = 50 + (unsigned)s;
        lc_check_layer(ctx, &spec);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Under a loop budget of 64 iterations a work-item (lc_small_loop_budget):
 * layernorm's parameter gradients over 200 rows, the embedding's table
 * gradient over 120 tokens (with and without positions) and the softmax
 * cross-entropy's loss over 240 rows go in several launches that continue
 * each other's sums; the layers still match their references. */
START_TEST(test_loop_budget_split)
{
    const int64_t ln_dims[2] = {50, 16}, ce_dims[2] = {60, 10};
    clremat_layer L;
    clremat_graph g;
    lc_spec spec;
    clremat_ctx *ctx;
    float ids[3 * 40], labels[240];
    TEST_OPEN_CTX(ctx, 0);
    lc_small_loop_budget(ctx, 64);

    make_layernorm(&L, 2, ln_dims);
    lc_graph_of_layer(&g, &L);
    memset(&spec, 0, sizeof spec);
    spec.g = &g;
    spec.batch = 4;
    spec.fwd = ln_fwd;
    spec.bwd = ln_bwd;
    spec.param_scale = 1.5;
    spec.rng = 91;
    lc_check_layer(ctx, &spec);

    for (int positions = 0; positions < 2; positions++) {
        for (int i = 0; i < 3 * 40; i++)
            ids[i] = (float)((i * 5 + 3) % 11);
        make_embedding(&L, 40, 11, 5, positions);
        lc_graph_of_layer(&g, &L);
        memset(&spec, 0, sizeof spec);
        spec.g = &g;
        spec.batch = 3;
        spec.fwd = emb_fwd;
        spec.bwd = emb_bwd;
        spec.in_fixed[0] = ids;
        spec.rng = 92 + (unsigned)positions;
        lc_check_layer(ctx, &spec);
    }

    for (int r = 0; r < 240; r++)
        labels[r] = (float)((r * 7 + 2) % 10);
    make_loss(&L, CLREMAT_SOFTMAX_CE, 2, ce_dims);
    lc_graph_of_layer(&g, &L);
    memset(&spec, 0, sizeof spec);
    spec.g = &g;
    spec.batch = 4;
    spec.fwd = ce_fwd;
    spec.bwd = ce_bwd;
    spec.loss = 1;
    spec.labels = labels;
    spec.n_labels = 240;
    spec.in_scale = 3.0;
    spec.rng = 94;
    lc_check_layer(ctx, &spec);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_mse_check)
{
    static const int64_t dims[][2] = {{3, 7}, {300, 1}};
    static const int ranks[] = {2, 1};
    static const int64_t batches[] = {5, 3};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int s = 0; s < 2; s++) {
        int64_t n = batches[s] * dims[s][0] * (ranks[s] == 2 ? dims[s][1] : 1);
        float *y = malloc(sizeof(float) * (size_t)n);
        clremat_layer L;
        clremat_graph g;
        lc_spec spec;
        for (int64_t i = 0; i < n; i++)
            y[i] = (float)sin((double)i * 0.37);
        make_loss(&L, CLREMAT_MSE, ranks[s], dims[s]);
        lc_graph_of_layer(&g, &L);
        memset(&spec, 0, sizeof spec);
        spec.g = &g;
        spec.batch = batches[s];
        spec.fwd = mse_fwd;
        spec.bwd = mse_bwd;
        spec.loss = 1;
        spec.labels = y;
        spec.n_labels = n;
        spec.rng = 60 + (unsigned)s;
        lc_check_layer(ctx, &spec);
        free(y);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* --------------------------------------------------------- direct runner */

/* Buffers of one layer call made exactly as the cost says. */
typedef struct run {
    clremat_ctx *ctx;
    clremat_layer_cost cost;
    clremat_layer_call c;
    clremat_buf *temp_f, *temp_b;
} run;

static clremat_buf *upload(clremat_ctx *ctx, const float *h, int64_t n, const char *tag)
{
    clremat_buf *b = NULL;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (size_t)n * sizeof(float), tag, &b), CLREMAT_OK);
    if (h)
        ck_assert_int_eq(clremat_write(ctx, b, 0, (size_t)n * sizeof(float), h), CLREMAT_OK);
    return b;
}

static float *download(clremat_ctx *ctx, const clremat_buf *b)
{
    float *h = malloc(b->bytes);
    ck_assert_int_eq(clremat_read(ctx, b, 0, b->bytes, h), CLREMAT_OK);
    return h;
}

/* Sets up g's layer 0 at batch with input in0 (n0 floats), params and labels. */
static void run_open(run *r, clremat_ctx *ctx, const clremat_graph *g, int64_t batch, const float *in0, int64_t n0,
                     const float *const *params, const float *labels, int64_t n_labels)
{
    const clremat_layer *L = &g->layers[0];
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    ck_assert_int_eq(clremat_layer_cost_of(g, 0, batch, &r->cost), CLREMAT_OK);
    r->c.ctx = ctx;
    r->c.g = g;
    r->c.batch = batch;
    r->c.in[0] = upload(ctx, in0, n0, "in");
    for (int s = 0; s < r->cost.n_slots; s++)
        r->c.slot[s] = upload(ctx, NULL, (int64_t)(r->cost.slot_bytes[s] / sizeof(float)), "slot");
    for (int p = 0; p < L->n_params; p++)
        r->c.param[p] = upload(ctx, params[p], L->params[p].elems, "param");
    if (labels)
        r->c.labels = upload(ctx, labels, n_labels, "labels");
    if (r->cost.fwd_temp_bytes)
        r->temp_f = upload(ctx, NULL, (int64_t)(r->cost.fwd_temp_bytes / sizeof(float)), "temp fwd");
    if (r->cost.bwd_temp_bytes)
        r->temp_b = upload(ctx, NULL, (int64_t)(r->cost.bwd_temp_bytes / sizeof(float)), "temp bwd");
}

static void run_forward(run *r, uint64_t seed, uint64_t step)
{
    r->c.seed = seed;
    r->c.step = step;
    r->c.temp = r->temp_f;
    ck_assert_msg(clremat_layer_forward(&r->c) == CLREMAT_OK, "forward: %s", clremat_ctx_last_error(r->ctx));
}

static void run_close(run *r)
{
    clremat_pool *p = r->ctx->pool;
    for (int i = 0; i < CLREMAT_MAX_INPUTS; i++) {
        clremat_pool_release(p, r->c.in[i]);
        clremat_pool_release(p, r->c.din[i]);
    }
    for (int i = 0; i < CLREMAT_MAX_SLOTS; i++)
        clremat_pool_release(p, r->c.slot[i]);
    for (int i = 0; i < CLREMAT_MAX_PARAMS; i++) {
        clremat_pool_release(p, r->c.param[i]);
        clremat_pool_release(p, r->c.grad[i]);
    }
    clremat_pool_release(p, r->c.dout);
    clremat_pool_release(p, r->c.labels);
    clremat_pool_release(p, r->temp_f);
    clremat_pool_release(p, r->temp_b);
}

static float *uniform_floats(int64_t n, unsigned seed, float scale)
{
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        h[i] = scale * (2.0f * clremat_uniform(clremat_hash(seed, 0, 0, (uint32_t)i)) - 1.0f);
    return h;
}

/* ------------------------------------------------------ specific checks */

START_TEST(test_attention_mask_regenerated)
{
    enum { B = 2, T = 7, D = 6, H = 3 };
    const double rate = 0.4;
    const uint64_t seed = 0xfeedface12345678ULL;
    clremat_layer L;
    clremat_graph g;
    clremat_ctx *ctx;
    float *x, *par[4], *out1, *out2, *probs1, *probs2, *ctx1, *ctx3, *dropped, *dx1, *dx2, *gw1, *gw2, *dout;
    int64_t P = (int64_t)B * H * T * T, kept = 0, nonzero = 0;
    run r;
    TEST_OPEN_CTX(ctx, 0);
    make_attention(&L, T, D, H, 1, rate);
    lc_graph_of_layer(&g, &L);
    x = uniform_floats((int64_t)B * T * D, 1, 1.0f);
    for (int p = 0; p < 4; p++)
        par[p] = uniform_floats(L.params[p].elems, 2 + (unsigned)p, 0.7f);
    run_open(&r, ctx, &g, B, x, (int64_t)B * T * D, (const float *const *)par, NULL, 0);
    ck_assert_uint_eq(r.cost.fwd_temp_bytes, (size_t)P * sizeof(float));
    ck_assert_uint_eq(r.cost.bwd_temp_bytes, (size_t)(P + B * T * D + B * T * 3 * D) * sizeof(float));

    run_forward(&r, seed, 5);
    out1 = download(ctx, r.c.slot[0]);
    probs1 = download(ctx, r.c.slot[2]);
    ctx1 = download(ctx, r.c.slot[3]);
    dropped = download(ctx, r.temp_f);
    /* the forward workspace holds probs * keep: its zero pattern is the host
     * hash's mask (bit-identical generator), kept values are scaled */
    for (int64_t e = 0; e < P; e++) {
        int keep = clremat_uniform(clremat_hash(seed, 5, 0, (uint32_t)e)) >= (float)rate;
        if (probs1[e] != 0.0f) {
            nonzero++;
            kept += keep;
            if (keep)
                ck_assert_msg(fabsf(dropped[e] - probs1[e] / (1.0f - (float)rate)) <= 1e-6f * (1.0f + dropped[e]),
                              "element %lld: %g vs %g", (long long)e, dropped[e], probs1[e]);
            else
                ck_assert_msg(dropped[e] == 0.0f, "element %lld dropped on the host but %g on the device",
                              (long long)e, dropped[e]);
        }
    }
    ck_assert(kept > nonzero / 4 && kept < nonzero * 9 / 10);   /* ~60% kept */

    /* same key: bit-identical forward (what a recomputation sees) */
    clremat_zero(ctx, r.c.slot[0]);
    run_forward(&r, seed, 5);
    out2 = download(ctx, r.c.slot[0]);
    probs2 = download(ctx, r.c.slot[2]);
    ck_assert_int_eq(memcmp(out1, out2, r.c.slot[0]->bytes), 0);
    ck_assert_int_eq(memcmp(probs1, probs2, r.c.slot[2]->bytes), 0);

    /* backward twice from the same state: bit-identical gradients */
    dout = uniform_floats((int64_t)B * T * D, 9, 1.0f);
    r.c.dout = upload(ctx, dout, (int64_t)B * T * D, "dout");
    r.c.din[0] = upload(ctx, NULL, (int64_t)B * T * D, "din");
    for (int p = 0; p < 4; p++)
        r.c.grad[p] = upload(ctx, NULL, L.params[p].elems, "grad");
    r.c.temp = r.temp_b;
    ck_assert_int_eq(clremat_layer_backward(&r.c), CLREMAT_OK);
    dx1 = download(ctx, r.c.din[0]);
    gw1 = download(ctx, r.c.grad[0]);
    ck_assert_int_eq(clremat_layer_backward(&r.c), CLREMAT_OK);
    dx2 = download(ctx, r.c.din[0]);
    gw2 = download(ctx, r.c.grad[0]);
    ck_assert_int_eq(memcmp(dx1, dx2, r.c.din[0]->bytes), 0);
    ck_assert_int_eq(memcmp(gw1, gw2, r.c.grad[0]->bytes), 0);

    /* another step: same probs (dropout comes after), different context */
    r.c.temp = r.temp_f;
    run_forward(&r, seed, 6);
    free(probs2);
    probs2 = download(ctx, r.c.slot[2]);
    ctx3 = download(ctx, r.c.slot[3]);
    ck_assert_int_eq(memcmp(probs1, probs2, r.c.slot[2]->bytes), 0);
    ck_assert_int_ne(memcmp(ctx1, ctx3, r.c.slot[3]->bytes), 0);

    run_close(&r);
    free(x);
    for (int p = 0; p < 4; p++)
        free(par[p]);
    free(out1), free(out2), free(probs1), free(probs2), free(ctx1), free(ctx3), free(dropped);
    free(dx1), free(dx2), free(gw1), free(gw2), free(dout);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_attention_causal_probs)
{
    enum { B = 2, T = 5, D = 4, H = 2 };
    clremat_layer L;
    clremat_graph g;
    clremat_ctx *ctx;
    float *x, *par[4], *probs;
    run r;
    TEST_OPEN_CTX(ctx, 0);
    make_attention(&L, T, D, H, 1, 0.0);
    lc_graph_of_layer(&g, &L);
    x = uniform_floats((int64_t)B * T * D, 3, 2.0f);
    for (int p = 0; p < 4; p++)
        par[p] = uniform_floats(L.params[p].elems, 12 + (unsigned)p, 0.8f);
    run_open(&r, ctx, &g, B, x, (int64_t)B * T * D, (const float *const *)par, NULL, 0);
    ck_assert_uint_eq(r.cost.fwd_temp_bytes, 0);
    run_forward(&r, 1, 1);
    probs = download(ctx, r.c.slot[2]);
    for (int bh = 0; bh < B * H; bh++)
        for (int i = 0; i < T; i++) {
            double s = 0;
            for (int j = 0; j < T; j++) {
                float p = probs[(bh * T + i) * T + j];
                if (j > i)
                    ck_assert_msg(p == 0.0f, "probs[%d][%d][%d] = %g above the diagonal", bh, i, j, p);
                else
                    ck_assert(p > 0.0f);
                s += p;
            }
            ck_assert_double_eq_tol(s, 1.0, 1e-5);
        }
    ck_assert_float_eq(probs[0], 1.0f);   /* the first query sees only itself */
    run_close(&r);
    free(x);
    for (int p = 0; p < 4; p++)
        free(par[p]);
    free(probs);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_softmax_ce_values)
{
    enum { ROWS = 6, C = 4 };
    /* row 0: argmax 2 = label; row 1: tie 1 and 3 (lowest wins) label 1;
     * row 2: same tie, label 3 (wrong); row 3: all equal, label 0 (right);
     * row 4: label 9 clamped to 3, argmax 3; row 5: label -1 clamped to 0:
     * 5 of 6 right */
    static const float logits[ROWS * C] = {0.1f, -1.0f, 2.0f, 0.5f, 0.0f, 3.0f, -2.0f, 3.0f,
                                           0.0f, 3.0f, -2.0f, 3.0f, 1.0f, 1.0f, 1.0f,  1.0f,
                                           -0.5f, 0.2f, 0.1f, 4.0f, 2.0f, 1.0f, 0.5f, 0.0f};
    static const float labels[ROWS] = {2, 1, 3, 0, 9, -1};
    double ld[ROWS * C], yd[ROWS], loss, correct, din_ref[ROWS * C];
    clremat_layer L;
    clremat_graph g;
    clremat_ctx *ctx;
    const int64_t dims[2] = {3, C};
    float *out, *din;
    run r;
    TEST_OPEN_CTX(ctx, 0);
    for (int i = 0; i < ROWS * C; i++)
        ld[i] = logits[i];
    for (int i = 0; i < ROWS; i++)
        yd[i] = labels[i];
    make_loss(&L, CLREMAT_SOFTMAX_CE, 2, dims);
    lc_graph_of_layer(&g, &L);
    run_open(&r, ctx, &g, 2, logits, ROWS * C, NULL, labels, ROWS);
    ck_assert_uint_eq(r.cost.slot_bytes[0], 2 * sizeof(float));
    ck_assert_uint_eq(r.cost.fwd_temp_bytes, 2 * ROWS * sizeof(float));
    run_forward(&r, 0, 0);
    out = download(ctx, r.c.slot[0]);
    ref_softmax_ce_fwd(ROWS, C, ld, yd, &loss, &correct);
    ck_assert_double_eq(correct, 5.0);
    ck_assert_float_eq(out[1], 5.0f);
    ck_assert_double_eq_tol(out[0], loss, 1e-6 * (1 + loss));
    /* backward: overwrite, then accumulate onto it (doubles it) */
    r.c.din[0] = upload(ctx, NULL, ROWS * C, "din");
    ck_assert_int_eq(clremat_layer_backward(&r.c), CLREMAT_OK);
    r.c.din_accumulate[0] = 1;
    ck_assert_int_eq(clremat_layer_backward(&r.c), CLREMAT_OK);
    din = download(ctx, r.c.din[0]);
    ref_softmax_ce_bwd(ROWS, C, ld, yd, din_ref);
    for (int i = 0; i < ROWS * C; i++)
        ck_assert_double_eq_tol(din[i], 2 * din_ref[i], 1e-6);
    run_close(&r);
    free(out);
    free(din);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_mse_values)
{
    enum { N = 1000 };   /* 4 partial sums of 256 */
    clremat_layer L;
    clremat_graph g;
    clremat_ctx *ctx;
    const int64_t dims[1] = {N / 4};
    float *p = uniform_floats(N, 71, 2.0f), *y = uniform_floats(N, 72, 1.0f), *out, *out2;
    double pd[N], yd[N], ref;
    run r;
    TEST_OPEN_CTX(ctx, 0);
    for (int i = 0; i < N; i++)
        pd[i] = p[i], yd[i] = y[i];
    make_loss(&L, CLREMAT_MSE, 1, dims);
    lc_graph_of_layer(&g, &L);
    run_open(&r, ctx, &g, 4, p, N, NULL, y, N);
    ck_assert_uint_eq(r.cost.fwd_temp_bytes, 4 * sizeof(float));
    run_forward(&r, 0, 0);
    out = download(ctx, r.c.slot[0]);
    ref = ref_mse_fwd(N, pd, yd);
    ck_assert_double_eq_tol(out[0], ref, 1e-5 * ref);
    ck_assert_float_eq(out[1], 0.0f);
    run_forward(&r, 0, 0);
    out2 = download(ctx, r.c.slot[0]);
    ck_assert_int_eq(memcmp(out, out2, 2 * sizeof(float)), 0);
    run_close(&r);
    free(p), free(y), free(out), free(out2);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_embedding_grad_deterministic)
{
    enum { T = 16, B = 8, V = 5, DIM = 7 };
    clremat_layer L;
    clremat_graph g;
    clremat_ctx *ctx;
    float ids[B * T], *table = uniform_floats(V * DIM, 81, 1.0f), *pos = uniform_floats(T * DIM, 82, 1.0f);
    float *dout = uniform_floats(B * T * DIM, 83, 1.0f), *g1, *g2, *p1;
    double idd[B * T], dd[B * T * DIM], gref[V * DIM], pref[T * DIM];
    const float *par[2] = {table, pos};
    run r;
    TEST_OPEN_CTX(ctx, 0);
    for (int i = 0; i < B * T; i++)
        ids[i] = (float)(i % 3 == 0 ? 2 : i % V), idd[i] = ids[i];
    for (int i = 0; i < B * T * DIM; i++)
        dd[i] = dout[i];
    make_embedding(&L, T, V, DIM, 1);
    lc_graph_of_layer(&g, &L);
    run_open(&r, ctx, &g, B, ids, B * T, par, NULL, 0);
    ck_assert_uint_eq(r.cost.bwd_temp_bytes, 0);
    ck_assert_uint_eq(r.cost.bwd_needs_inputs, 1u);
    r.c.dout = upload(ctx, dout, B * T * DIM, "dout");
    r.c.grad[0] = upload(ctx, NULL, V * DIM, "gtable");
    r.c.grad[1] = upload(ctx, NULL, T * DIM, "gpos");
    ck_assert_int_eq(clremat_layer_backward(&r.c), CLREMAT_OK);
    g1 = download(ctx, r.c.grad[0]);
    p1 = download(ctx, r.c.grad[1]);
    ck_assert_int_eq(clremat_layer_backward(&r.c), CLREMAT_OK);
    g2 = download(ctx, r.c.grad[0]);
    ck_assert_int_eq(memcmp(g1, g2, V * DIM * sizeof(float)), 0);
    ref_embedding_bwd(B * T, DIM, V, T, 1, idd, dd, gref, pref);
    for (int i = 0; i < V * DIM; i++)
        ck_assert_double_eq_tol(g1[i], gref[i], 1e-5 * (1 + fabs(gref[i])));
    for (int i = 0; i < T * DIM; i++)
        ck_assert_double_eq_tol(p1[i], pref[i], 1e-5 * (1 + fabs(pref[i])));
    run_close(&r);
    free(table), free(pos), free(dout), free(g1), free(g2), free(p1);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------------ cost model */

START_TEST(test_costs)
{
    clremat_layer L;
    clremat_graph g;
    clremat_layer_cost c;
    const int64_t ln_dims[2] = {7, 10};
    make_layernorm(&L, 2, ln_dims);
    lc_graph_of_layer(&g, &L);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 3, &c), CLREMAT_OK);
    ck_assert_int_eq(c.n_slots, 2);
    ck_assert_uint_eq(c.slot_bytes[0], 3 * 7 * 10 * 4);
    ck_assert_uint_eq(c.slot_bytes[1], 3 * 7 * 2 * 4);
    ck_assert_str_eq(c.slot_name[1], "stats");
    ck_assert_uint_eq(c.bwd_needs_inputs, 1u);
    ck_assert_uint_eq(c.bwd_needs_slots, 2u);
    ck_assert_uint_eq(c.param_bytes, 2 * 10 * 4);
    ck_assert_int_eq(c.act_source, -1);

    make_attention(&L, 7, 6, 3, 1, 0.0);
    lc_graph_of_layer(&g, &L);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_OK);
    ck_assert_int_eq(c.n_slots, 4);
    ck_assert_str_eq(c.slot_name[1], "qkv");
    ck_assert_str_eq(c.slot_name[2], "probs");
    ck_assert_str_eq(c.slot_name[3], "ctx");
    ck_assert_uint_eq(c.slot_bytes[0], 2 * 7 * 6 * 4);
    ck_assert_uint_eq(c.slot_bytes[1], 2 * 7 * 18 * 4);
    ck_assert_uint_eq(c.slot_bytes[2], 2 * 3 * 7 * 7 * 4);
    ck_assert_uint_eq(c.slot_bytes[3], 2 * 7 * 6 * 4);
    ck_assert_uint_eq(c.bwd_needs_slots, 0xeu);
    ck_assert_uint_eq(c.fwd_temp_bytes, 0);
    ck_assert_uint_eq(c.param_bytes, (6 * 18 + 18 + 36 + 6) * 4);
    /* FLOPs at least the GEMMs: 2*14*6*18 + 2*14*6*6 + 4*(2*3*49)*2 */
    ck_assert(c.fwd_flops >= 2.0 * 14 * 6 * 18 + 2.0 * 14 * 6 * 6 + 4.0 * 2 * 3 * 49 * 2);
    ck_assert(c.bwd_flops > 1.5 * c.fwd_flops);

    /* 3 heads do not divide width 8: a shape error naming the layer */
    make_attention(&L, 7, 8, 3, 0, 0.0);
    lc_graph_of_layer(&g, &L);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "attn"));

    {
        const int64_t d[1] = {10};
        make_embedding(&L, 10, 50, 8, 1);
        lc_graph_of_layer(&g, &L);
        ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 4, &c), CLREMAT_OK);
        ck_assert_uint_eq(c.slot_bytes[0], 4 * 10 * 8 * 4);
        ck_assert_uint_eq(c.param_bytes, (50 * 8 + 10 * 8) * 4);
        make_loss(&L, CLREMAT_MSE, 1, d);
        lc_graph_of_layer(&g, &L);
        ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 100, &c), CLREMAT_OK);
        ck_assert_uint_eq(c.slot_bytes[0], 8);
        ck_assert_uint_eq(c.fwd_temp_bytes, 4 * 4);   /* 1000 elements: 4 chunks */
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("layers_seq");
    TCase *tc = tcase_create("costs");
    tcase_add_test(tc, test_costs);
    suite_add_tcase(s, tc);
    if (!test_have_device()) {
        /* the cost model needs no device, the rest does */
        int rc = test_run_suite(s);
        return rc != EXIT_SUCCESS ? rc : TEST_SKIP;
    }
    tc = tcase_create("harness");
    tcase_set_timeout(tc, TIMEOUT);
    tcase_add_test(tc, test_layernorm_check);
    tcase_add_test(tc, test_embedding_check);
    tcase_add_test(tc, test_attention_check);
    tcase_add_test(tc, test_attention_dropout_check);
    tcase_add_test(tc, test_softmax_ce_check);
    tcase_add_test(tc, test_mse_check);
    tcase_add_test(tc, test_loop_budget_split);
    suite_add_tcase(s, tc);
    tc = tcase_create("specific");
    tcase_set_timeout(tc, TIMEOUT);
    tcase_add_test(tc, test_attention_mask_regenerated);
    tcase_add_test(tc, test_attention_causal_probs);
    tcase_add_test(tc, test_softmax_ce_values);
    tcase_add_test(tc, test_mse_values);
    tcase_add_test(tc, test_embedding_grad_deterministic);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
