/* test_act_table.c: GELU (tanh form) of 16-bit operands by table
 * (backend/act_table.c) against the kernels that compute it, exhaustively:
 * every one of the 65536 bit patterns of binary16 and of bfloat16 (NaNs,
 * infinities and subnormals included) plus a partial last block, through
 * the forward (into 16-bit and float32 destinations, overwriting and
 * accumulating, scaled and not) and the backward (dy random, z 16-bit and
 * float32, overwriting and accumulating), every output byte equal to the
 * computing kernel's; the size rule of the table; and the costs that plan
 * it (an activation layer and a dense layer with GELU above and below the
 * element count), and the launches taking exactly what the costs plan. */
#include "testutil.h"
#include "act_table.h"
#include "layers.h"
#include "mixed_precision.h"
#include "gemm.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

/* all 65536 patterns, then a partial block of eight */
enum { N = CLREMAT_ACT_TABLE_ENTRIES + 5 };

static uint32_t next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* A finite 16-bit value of format fmt in about [-4, 4). */
static uint16_t random16(uint32_t *s, int fmt)
{
    const float v = (float)next(s) / 16777216.0f * 8.0f - 4.0f;
    return fmt == CLREMAT_FMT_F16 ? clremat_float_to_half(v) : clremat_float_to_bf16(v);
}

static const char *fmt_name(int fmt)
{
    return fmt == CLREMAT_FMT_F16 ? "binary16" : fmt == CLREMAT_FMT_BF16 ? "bfloat16" : "float32";
}

typedef struct bufs {
    clremat_ctx *ctx;
    clremat_buf *x, *dy, *table, *want, *got;
    uint16_t *hx, *hdy;
    unsigned char *init, *hwant, *hgot;
} bufs;

static void open_bufs(bufs *b, int fmt)
{
    uint32_t s = 12345u + (uint32_t)fmt;
    memset(b, 0, sizeof *b);
    TEST_OPEN_CTX(b->ctx, 0);
    b->hx = malloc(N * sizeof(uint16_t));
    b->hdy = malloc(N * sizeof(uint16_t));
    b->init = malloc(N * sizeof(float));
    b->hwant = malloc(N * sizeof(float));
    b->hgot = malloc(N * sizeof(float));
    ck_assert(b->hx && b->hdy && b->init && b->hwant && b->hgot);
    for (int i = 0; i < N; i++) {
        b->hx[i] = i < CLREMAT_ACT_TABLE_ENTRIES ? (uint16_t)i : random16(&s, fmt);
        b->hdy[i] = random16(&s, fmt);
    }
    ck_assert_int_eq(clremat_pool_alloc(b->ctx->pool, N * 2, "x", &b->x), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(b->ctx->pool, N * 2, "dy", &b->dy), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(b->ctx->pool, CLREMAT_ACT_TABLE_ENTRIES * 4, "table", &b->table),
                     CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(b->ctx->pool, N * 4, "want", &b->want), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(b->ctx->pool, N * 4, "got", &b->got), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(b->ctx, b->x, 0, N * 2, b->hx), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(b->ctx, b->dy, 0, N * 2, b->hdy), CLREMAT_OK);
}

static void close_bufs(bufs *b)
{
    clremat_buf *all[5] = {b->x, b->dy, b->table, b->want, b->got};
    for (int i = 0; i < 5; i++)
        clremat_pool_release(b->ctx->pool, all[i]);
    clremat_ctx_destroy(b->ctx);
    free(b->hx);
    free(b->hdy);
    free(b->init);
    free(b->hwant);
    free(b->hgot);
}

/* Sets want and got to the same start values of format dfmt (what an
 * accumulating call adds to): finite random values. */
static void preset(bufs *b, int dfmt, uint32_t seed)
{
    const size_t bytes = (size_t)N * (dfmt ? 2 : 4);
    for (int i = 0; i < N; i++) {
        if (dfmt) {
            const uint16_t v = random16(&seed, dfmt);
            memcpy(b->init + 2 * i, &v, 2);
        } else {
            const float v = (float)next(&seed) / 16777216.0f - 0.5f;
            memcpy(b->init + 4 * i, &v, 4);
        }
    }
    ck_assert_int_eq(clremat_write(b->ctx, b->want, 0, bytes, b->init), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(b->ctx, b->got, 0, bytes, b->init), CLREMAT_OK);
}

/* Reads want and got (dfmt) and asserts every byte equal; reports the first
 * element that differs. */
static void compare(bufs *b, int dfmt, const char *what)
{
    const size_t es = dfmt ? 2 : 4;
    ck_assert_int_eq(clremat_read(b->ctx, b->want, 0, N * es, b->hwant), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(b->ctx, b->got, 0, N * es, b->hgot), CLREMAT_OK);
    for (int i = 0; i < N; i++)
        if (memcmp(b->hwant + es * i, b->hgot + es * i, es) != 0) {
            uint32_t w = 0, g = 0;
            memcpy(&w, b->hwant + es * i, es);
            memcpy(&g, b->hgot + es * i, es);
            ck_abort_msg("%s: element %d (x bits 0x%04x): computed 0x%x, table 0x%x", what, i, b->hx[i], w, g);
        }
}

static void check_forward(int fmt)
{
    static const float scales[2] = {1.0f, 0.75f};
    bufs b;
    open_bufs(&b, fmt);
    ck_assert_int_eq(clremat_act_table_fill(b.ctx, b.table, CLREMAT_ACT_GELU_TANH, fmt, 0), CLREMAT_OK);
    for (int d = 0; d < 2; d++)
        for (int acc = 0; acc < 2; acc++)
            for (int k = 0; k < 2; k++) {
                const int dfmt = d ? CLREMAT_FMT_F32 : fmt;
                char what[96];
                snprintf(what, sizeof what, "GELU %s -> %s, acc %d, scale %g", fmt_name(fmt), fmt_name(dfmt), acc,
                         (double)scales[k]);
                preset(&b, dfmt, 77u + (uint32_t)(4 * d + 2 * acc + k));
                ck_assert_int_eq(clremat_op_convert(b.ctx, b.x, fmt, b.want, dfmt, N, CLREMAT_ACT_GELU_TANH,
                                                    scales[k], acc),
                                 CLREMAT_OK);
                ck_assert_int_eq(clremat_op_convert_table(b.ctx, b.x, b.got, dfmt, N, b.table, scales[k], acc),
                                 CLREMAT_OK);
                compare(&b, dfmt, what);
                if (dfmt == CLREMAT_FMT_F32 && !acc && k == 0) { /* the values are GELU's, not just equal */
                    const uint16_t one = fmt == CLREMAT_FMT_F16 ? 0x3c00 : 0x3f80;
                    float y;
                    memcpy(&y, b.hgot + 4 * one, 4);
                    ck_assert_msg(fabsf(y - 0.8411920f) < 1e-6f, "%s: GELU(1) = %.9g", what, (double)y);
                }
            }
    close_bufs(&b);
}

static void check_backward(int fmt)
{
    bufs b;
    open_bufs(&b, fmt);
    ck_assert_int_eq(clremat_act_table_fill(b.ctx, b.table, CLREMAT_ACT_GELU_TANH, fmt, 1), CLREMAT_OK);
    for (int d = 0; d < 2; d++)
        for (int acc = 0; acc < 2; acc++) {
            const int fz = d ? CLREMAT_FMT_F32 : fmt;
            char what[96];
            snprintf(what, sizeof what, "GELU' %s, dz %s, acc %d", fmt_name(fmt), fmt_name(fz), acc);
            preset(&b, fz, 91u + (uint32_t)(2 * d + acc));
            ck_assert_int_eq(clremat_op_mul_dact(b.ctx, N, CLREMAT_ACT_GELU_TANH, b.x, fmt, b.dy, fmt, b.want, fz, acc),
                             CLREMAT_OK);
            ck_assert_int_eq(clremat_op_mul_dact_table(b.ctx, N, b.table, b.x, b.dy, fmt, b.got, fz, acc),
                             CLREMAT_OK);
            compare(&b, fz, what);
        }
    close_bufs(&b);
}

START_TEST(forward_f16) { check_forward(CLREMAT_FMT_F16); }
END_TEST
START_TEST(forward_bf16) { check_forward(CLREMAT_FMT_BF16); }
END_TEST
START_TEST(backward_f16) { check_backward(CLREMAT_FMT_F16); }
END_TEST
START_TEST(backward_bf16) { check_backward(CLREMAT_FMT_BF16); }
END_TEST

START_TEST(size_rule)
{
    const size_t t = CLREMAT_ACT_TABLE_ENTRIES * sizeof(float);
    const int64_t at = CLREMAT_ACT_TABLE_MIN_ELEMS;
    ck_assert_uint_eq(clremat_act_table_bytes(CLREMAT_ACT_GELU_TANH, CLREMAT_FMT_BF16, at), t);
    ck_assert_uint_eq(clremat_act_table_bytes(CLREMAT_ACT_GELU_TANH, CLREMAT_FMT_F16, at), t);
    ck_assert_uint_eq(clremat_act_table_bytes(CLREMAT_ACT_GELU_TANH, CLREMAT_FMT_BF16, at - 1), 0);
    ck_assert_uint_eq(clremat_act_table_bytes(CLREMAT_ACT_GELU_TANH, CLREMAT_FMT_F32, at), 0);
    /* the others compute: ReLU is cheaper than a lookup, and the rest call
     * math builtins, which a table built elsewhere need not match */
    for (int act = CLREMAT_ACT_NONE; act <= CLREMAT_ACT_SILU; act++)
        if (act != CLREMAT_ACT_GELU_TANH)
            ck_assert_uint_eq(clremat_act_table_bytes(act, CLREMAT_FMT_BF16, at), 0);
}
END_TEST

/* A mixed model whose GELU layers hold 2^21 elements at batch 2: the
 * dense layer's backward and the activation layer's forward and backward
 * plan a table at batch 2, none at batch 1. */
static const char *const wide_model =
    "{\"name\": \"wide_gelu\", \"precision\": \"mixed_bfloat16\", "
    "\"input\": {\"shape\": [1024], \"dtype\": \"int32\"}, \"layers\": ["
    "{\"name\": \"embed\", \"type\": \"embedding\", \"vocab\": 16, \"dim\": 64},"
    "{\"name\": \"up\", \"type\": \"dense\", \"units\": 1024, \"activation\": \"gelu\"},"
    "{\"name\": \"mid\", \"type\": \"dense\", \"units\": 1024},"
    "{\"name\": \"act\", \"type\": \"activation\", \"activation\": \"gelu\"},"
    "{\"name\": \"logits\", \"type\": \"dense\", \"units\": 16},"
    "{\"name\": \"loss\", \"type\": \"softmax_cross_entropy\"}]}";

START_TEST(costs_plan_table)
{
    const size_t t = CLREMAT_ACT_TABLE_ENTRIES * sizeof(float);
    clremat_graph *g = NULL;
    clremat_layer_cost c1, c2;
    int up = -1, act = -1;
    ck_assert_msg(clremat_graph_load_string(wide_model, "wide_gelu", &g) == CLREMAT_OK, "%s", clremat_last_error());
    for (int l = 0; l < g->n_layers; l++) {
        if (!strcmp(g->layers[l].name, "up"))
            up = l;
        if (!strcmp(g->layers[l].name, "act"))
            act = l;
    }
    ck_assert(up >= 0 && act >= 0);
    ck_assert_int_eq(g->layers[up].act, CLREMAT_ACT_GELU_TANH);
    ck_assert_int_eq(clremat_layer_cost_on(g, act, 1, CLREMAT_GEMM_NATIVE, &c1), CLREMAT_OK);
    ck_assert_int_eq(clremat_layer_cost_on(g, act, 2, CLREMAT_GEMM_NATIVE, &c2), CLREMAT_OK);
    ck_assert(c1.mixed_fused && c2.mixed_fused);
    ck_assert_uint_eq(c1.fwd_stage_bytes, 0);
    ck_assert_uint_eq(c1.bwd_stage_bytes, 0);
    ck_assert_uint_eq(c2.fwd_stage_bytes, t);
    ck_assert_uint_eq(c2.bwd_stage_bytes, t);
    ck_assert_uint_eq(c2.fwd_temp_bytes, c1.fwd_temp_bytes + t);
    ck_assert_int_eq(clremat_layer_cost_on(g, up, 1, CLREMAT_GEMM_NATIVE, &c1), CLREMAT_OK);
    ck_assert_int_eq(clremat_layer_cost_on(g, up, 2, CLREMAT_GEMM_NATIVE, &c2), CLREMAT_OK);
    ck_assert(c1.mixed_fused && c2.mixed_fused);
    /* dZ and dx's partial sums scale with the batch; the table does not */
    ck_assert_uint_eq(c2.bwd_stage_bytes, 2 * c1.bwd_stage_bytes + t);
    ck_assert_uint_eq(c2.fwd_stage_bytes, 2 * c1.fwd_stage_bytes);
    clremat_graph_free(g);
}
END_TEST

/* The launches take what the costs plan: for each GELU-carrying layer of
 * wide_model and its neighbours at batch 2 (tables planned) and batch 1
 * (none), the pool's live bytes rise during the forward and the backward
 * by exactly the layer's planned staging (fwd_stage_bytes /
 * bwd_stage_bytes; the tables, dZ and the GEMM's partial sums), and the
 * outputs of the table-reading launches equal the computing ones'
 * (checked bit for bit in the cases above and by test_precision's
 * fused-against-staged training of the same model). */
static void run_launch(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch)
{
    const clremat_layer *L = &g->layers[l];
    clremat_layer_cost c, pc;
    clremat_layer_call call;
    clremat_buf *bufs[64];
    int nb = 0;
    clremat_pool_stats s0, s1;
#define TAKE(bytes, dst)                                                                                      \
    do {                                                                                                       \
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (bytes), "launch", &bufs[nb]), CLREMAT_OK);             \
        (dst) = bufs[nb++];                                                                                    \
    } while (0)
    ck_assert_int_eq(clremat_layer_cost_for(ctx, g, l, batch, &c), CLREMAT_OK);
    ck_assert_int_eq(clremat_layer_cost_for(ctx, g, L->inputs[0], batch, &pc), CLREMAT_OK);
    ck_assert(c.mixed_fused);
    memset(&call, 0, sizeof call);
    call.ctx = ctx;
    call.g = g;
    call.layer = l;
    call.batch = batch;
    TAKE(pc.slot_bytes[0], call.in[0]);
    TAKE(pc.slot_bytes[0], call.din[0]);
    for (int k = 0; k < c.n_slots; k++)
        TAKE(c.slot_bytes[k], call.slot[k]);
    TAKE(c.slot_bytes[0], call.dout);
    for (int p = 0; p < L->n_params; p++) {
        TAKE((size_t)L->params[p].elems * sizeof(float), call.param[p]);
        TAKE((size_t)L->params[p].elems * sizeof(float), call.grad[p]);
    }
    ck_assert_uint_eq(c.fwd_temp_bytes, c.fwd_stage_bytes); /* no GEMM workspace on the native path */
    ck_assert_uint_eq(c.bwd_temp_bytes, c.bwd_stage_bytes);
    for (int pass = 0; pass < 2; pass++) {
        clremat_pool_reset_peaks(ctx->pool);
        s0 = clremat_pool_get_stats(ctx->pool);
        ck_assert_msg((pass ? clremat_layer_backward(&call) : clremat_layer_forward(&call)) == CLREMAT_OK, "%s",
                      clremat_ctx_last_error(ctx));
        ck_assert_int_eq(clFinish(ctx->queue), CL_SUCCESS);
        s1 = clremat_pool_get_stats(ctx->pool);
        ck_assert_uint_eq(s1.live_bytes, s0.live_bytes);
        ck_assert_msg(s1.live_peak - s0.live_bytes == (pass ? c.bwd_stage_bytes : c.fwd_stage_bytes),
                      "layer %s batch %lld %s: took %llu bytes, planned %zu", L->name, (long long)batch,
                      pass ? "backward" : "forward", (unsigned long long)(s1.live_peak - s0.live_bytes),
                      pass ? c.bwd_stage_bytes : c.fwd_stage_bytes);
    }
    while (nb > 0)
        clremat_pool_release(ctx->pool, bufs[--nb]);
#undef TAKE
}

START_TEST(launches_take_planned)
{
    clremat_graph *g = NULL;
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_msg(clremat_graph_load_string(wide_model, "wide_gelu", &g) == CLREMAT_OK, "%s", clremat_last_error());
    if (clremat_gemm_resolve(ctx) != CLREMAT_GEMM_NATIVE) { /* CLBlast stages every layer: nothing fused */
        clremat_graph_free(g);
        clremat_ctx_destroy(ctx);
        return;
    }
    for (int64_t batch = 1; batch <= 2; batch++)
        for (int l = 1; l < g->n_layers - 1; l++)
            run_launch(ctx, g, l, batch);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("act_table", 600, &tc);
    tcase_add_test(tc, size_rule);
    tcase_add_test(tc, costs_plan_table);
    tcase_add_test(tc, launches_take_planned);
    tcase_add_test(tc, forward_f16);
    tcase_add_test(tc, forward_bf16);
    tcase_add_test(tc, backward_f16);
    tcase_add_test(tc, backward_bf16);
    return test_run_device_suite(s);
}
