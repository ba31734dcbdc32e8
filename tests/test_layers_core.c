/* test_layers_core.c: the core layers (dense, activation, dropout, add,
 * reshape) through the gradient-check harness (tests/layercheck.h) against
 * the double references of tests/ref_core.c, with odd shapes, every
 * activation, dense with and without bias and activation, dropout masks
 * (rate 0, regeneration, step dependence), broadcast add, and the cost
 * model's slots, saved tensors and FLOPs. Skips (77) without a device. */
#include "testutil.h"
#include "layercheck.h"
#include "ref_core.h"
#include "rng.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static void base_layer(clremat_layer *L, const char *name, clremat_layer_type t, int rank, const int64_t *dims)
{
    memset(L, 0, sizeof *L);
    snprintf(L->name, sizeof L->name, "%s", name);
    L->type = t;
    L->n_inputs = 1;
    L->in_shape[0] = lc_shape(rank, dims);
    L->out_shape = L->in_shape[0];
}

static void make_dense(clremat_layer *L, int rank, const int64_t *dims, int64_t units, clremat_act act, int bias)
{
    int64_t kd[2] = {dims[rank - 1], units};
    base_layer(L, "dense_t", CLREMAT_DENSE, rank, dims);
    L->units = units;
    L->act = act;
    L->use_bias = bias;
    L->out_shape.dims[rank - 1] = units;
    lc_set_param(L, 0, "kernel", 2, kd);
    if (bias)
        lc_set_param(L, 1, "bias", 1, &kd[1]);
}

static void check(clremat_ctx *ctx, clremat_layer *L, int64_t batch, lc_ref_forward f, lc_ref_backward b,
                  double in_scale, double param_scale)
{
    clremat_graph g;
    lc_spec s;
    lc_graph_of_layer(&g, L);
    memset(&s, 0, sizeof s);
    s.g = &g;
    s.layer = 0;
    s.batch = batch;
    s.seed = 0x1234567890abcdefULL;
    s.step = 3;
    s.fwd = f;
    s.bwd = b;
    s.in_scale = in_scale;
    s.param_scale = param_scale;
    s.rng = 7 + (unsigned)L->act * 13 + (unsigned)batch;
    lc_check_layer(ctx, &s);
}

START_TEST(test_activation_layers)
{
    clremat_ctx *ctx;
    clremat_layer L;
    const int64_t d1[] = {7, 5}, d2[] = {33};
    TEST_OPEN_CTX(ctx, 0);
    for (int a = CLREMAT_ACT_RELU; a < CLREMAT_ACT_COUNT; a++) {
        base_layer(&L, "act_t", CLREMAT_ACTIVATION, 2, d1);
        L.act = (clremat_act)a;
        check(ctx, &L, 3, ref_activation_fwd, ref_activation_bwd, 3.0, 1.0);
        base_layer(&L, "act_t", CLREMAT_ACTIVATION, 1, d2);
        L.act = (clremat_act)a;
        check(ctx, &L, 1, ref_activation_fwd, ref_activation_bwd, 3.0, 1.0);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_dense_layers)
{
    clremat_ctx *ctx;
    clremat_layer L;
    const int64_t d1[] = {5, 7}, d2[] = {33};
    TEST_OPEN_CTX(ctx, 0);
    for (int a = CLREMAT_ACT_NONE; a < CLREMAT_ACT_COUNT; a++)
        for (int bias = 0; bias < 2; bias++) {
            make_dense(&L, 2, d1, 9, (clremat_act)a, bias);
            check(ctx, &L, 3, ref_dense_fwd, ref_dense_bwd, 1.0, 0.6);
        }
    make_dense(&L, 1, d2, 65, CLREMAT_ACT_GELU_TANH, 1);
    check(ctx, &L, 2, ref_dense_fwd, ref_dense_bwd, 1.0, 0.3);
    make_dense(&L, 1, d2, 1, CLREMAT_ACT_NONE, 1);
    check(ctx, &L, 1, ref_dense_fwd, ref_dense_bwd, 1.0, 0.3);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Under a loop budget of 64 iterations a work-item (lc_small_loop_budget)
 * the bias gradient's column sums over 150 rows of 13 columns (five in the
 * last work-item's tail, walked one by one) go in several launches that
 * continue each other's sums; the layer still matches its reference. */
START_TEST(test_dense_loop_budget)
{
    clremat_ctx *ctx;
    clremat_layer L;
    const int64_t d[] = {50, 9};
    TEST_OPEN_CTX(ctx, 0);
    lc_small_loop_budget(ctx, 64);
    make_dense(&L, 2, d, 13, CLREMAT_ACT_GELU_TANH, 1);
    check(ctx, &L, 3, ref_dense_fwd, ref_dense_bwd, 1.0, 0.6);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_dropout_layers)
{
    clremat_ctx *ctx;
    clremat_layer L;
    const int64_t d[] = {13, 11};
    const double rates[] = {0.0, 0.3, 0.9};
    TEST_OPEN_CTX(ctx, 0);
    for (size_t r = 0; r < 3; r++) {
        base_layer(&L, "drop_t", CLREMAT_DROPOUT, 2, d);
        L.rate = rates[r];
        check(ctx, &L, 3, ref_dropout_fwd, ref_dropout_bwd, 1.0, 1.0);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Masks: same key, same mask (forward and backward); another step, another
 * mask; the kept fraction is near 1 - rate; rate 0 copies exactly. */
START_TEST(test_dropout_masks)
{
    enum { N = 4000 };
    const int64_t d[] = {N};
    clremat_ctx *ctx;
    clremat_layer L;
    clremat_graph g;
    clremat_layer_call c;
    clremat_buf *x, *y, *dx;
    static float ones[N], o1[N], o2[N], o3[N], back[N];
    int kept = 0, differ = 0;
    TEST_OPEN_CTX(ctx, 0);
    base_layer(&L, "drop_m", CLREMAT_DROPOUT, 1, d);
    L.rate = 0.25;
    lc_graph_of_layer(&g, &L);
    for (int i = 0; i < N; i++)
        ones[i] = 1.0f;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof ones, "x", &x), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof ones, "y", &y), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof ones, "dx", &dx), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, x, 0, sizeof ones, ones), CLREMAT_OK);
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.g = &g;
    c.layer = 0;
    c.batch = 1;
    c.seed = 99;
    c.step = 5;
    c.in[0] = x;
    c.slot[0] = y;
    ck_assert_int_eq(clremat_layer_forward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, y, 0, sizeof o1, o1), CLREMAT_OK);
    ck_assert_int_eq(clremat_layer_forward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, y, 0, sizeof o2, o2), CLREMAT_OK);
    ck_assert(memcmp(o1, o2, sizeof o1) == 0);
    c.dout = x;
    c.din[0] = dx;
    ck_assert_int_eq(clremat_layer_backward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, dx, 0, sizeof back, back), CLREMAT_OK);
    ck_assert(memcmp(o1, back, sizeof o1) == 0);
    for (int i = 0; i < N; i++) {
        int keep = clremat_uniform(clremat_hash(99, 5, 0, (uint32_t)i)) >= 0.25f;
        ck_assert_float_eq(o1[i], keep ? (float)(1.0 / 0.75) : 0.0f);
        kept += keep;
    }
    ck_assert_int_gt(kept, (int)(0.72 * N));
    ck_assert_int_lt(kept, (int)(0.78 * N));
    c.step = 6;
    ck_assert_int_eq(clremat_layer_forward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, y, 0, sizeof o3, o3), CLREMAT_OK);
    for (int i = 0; i < N; i++)
        differ += o3[i] != o1[i];
    ck_assert_int_gt(differ, N / 10);
    L.rate = 0.0;
    ck_assert_int_eq(clremat_layer_forward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, y, 0, sizeof o3, o3), CLREMAT_OK);
    ck_assert(memcmp(o3, ones, sizeof ones) == 0);
    clremat_pool_release(ctx->pool, x);
    clremat_pool_release(ctx->pool, y);
    clremat_pool_release(ctx->pool, dx);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_add_and_reshape)
{
    clremat_ctx *ctx;
    clremat_layer L;
    const int64_t a1[] = {4, 6}, a2[] = {3, 2, 5}, b2[] = {2, 5}, flat[] = {24};
    TEST_OPEN_CTX(ctx, 0);
    base_layer(&L, "add_same", CLREMAT_ADD, 2, a1);
    L.n_inputs = 2;
    L.in_shape[1] = L.in_shape[0];
    check(ctx, &L, 3, ref_add_fwd, ref_add_bwd, 1.0, 1.0);
    base_layer(&L, "add_bcast1", CLREMAT_ADD, 2, a1);
    L.n_inputs = 2;
    L.in_shape[1] = lc_shape(1, &a1[1]);
    check(ctx, &L, 3, ref_add_fwd, ref_add_bwd, 1.0, 1.0);
    base_layer(&L, "add_bcast2", CLREMAT_ADD, 3, a2);
    L.n_inputs = 2;
    L.in_shape[1] = lc_shape(2, b2);
    check(ctx, &L, 2, ref_add_fwd, ref_add_bwd, 1.0, 1.0);
    base_layer(&L, "reshape_t", CLREMAT_RESHAPE, 2, a1);
    L.out_shape = lc_shape(1, flat);
    check(ctx, &L, 3, ref_reshape_fwd, ref_reshape_bwd, 1.0, 1.0);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_costs)
{
    clremat_layer L;
    clremat_graph g;
    clremat_layer_cost c;
    const int64_t d[] = {5, 7}, bad[] = {3};
    make_dense(&L, 2, d, 9, CLREMAT_ACT_GELU_TANH, 1);
    lc_graph_of_layer(&g, &L);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 3, &c), CLREMAT_OK);
    ck_assert_int_eq(c.n_slots, 2);
    ck_assert_uint_eq(c.slot_bytes[0], 15 * 9 * 4);
    ck_assert_uint_eq(c.slot_bytes[1], 15 * 9 * 4);
    ck_assert_str_eq(c.slot_name[1], "preact");
    ck_assert_uint_eq(c.bwd_needs_inputs, 1);
    ck_assert_uint_eq(c.bwd_needs_slots, 2);
    ck_assert_int_eq(c.act_source, 1);
    ck_assert_int_eq(c.act_from_input, 0);
    ck_assert(c.fwd_flops >= 2.0 * 15 * 7 * 9 && c.fwd_flops <= 2.0 * 15 * 7 * 9 + 2 * 15 * 9);
    ck_assert(c.bwd_flops >= 4.0 * 15 * 7 * 9);
    ck_assert_uint_eq(c.param_bytes, (7 * 9 + 9) * 4);
    ck_assert_uint_eq(c.fwd_temp_bytes + c.bwd_temp_bytes, 0);
    make_dense(&L, 2, d, 9, CLREMAT_ACT_NONE, 0);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 3, &c), CLREMAT_OK);
    ck_assert_int_eq(c.n_slots, 1);
    ck_assert_uint_eq(c.bwd_needs_slots, 0);
    ck_assert_int_eq(c.act_source, -1);
    ck_assert_uint_eq(c.param_bytes, 7 * 9 * 4);
    base_layer(&L, "act_c", CLREMAT_ACTIVATION, 2, d);
    L.act = CLREMAT_ACT_RELU;
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_OK);
    ck_assert_int_eq(c.n_slots, 1);
    ck_assert_uint_eq(c.slot_bytes[0], 70 * 4);
    ck_assert_uint_eq(c.bwd_needs_inputs, 1);
    ck_assert_int_eq(c.act_source, 0);
    ck_assert_int_eq(c.act_from_input, 1);
    base_layer(&L, "drop_c", CLREMAT_DROPOUT, 2, d);
    L.rate = 0.5;
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.bwd_needs_inputs | c.bwd_needs_slots, 0);
    ck_assert_int_eq(c.act_source, -1);
    L.rate = 1.0;
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_ERR_SHAPE);
    base_layer(&L, "add_c", CLREMAT_ADD, 2, d);
    L.n_inputs = 2;
    L.in_shape[1] = lc_shape(1, bad);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "add_c"));
    L.in_shape[1] = lc_shape(1, &d[1]);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.bwd_needs_inputs | c.bwd_needs_slots, 0);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("layers_core", 300, &tc);
    tcase_add_test(tc, test_costs);
    tcase_add_test(tc, test_activation_layers);
    tcase_add_test(tc, test_dense_layers);
    tcase_add_test(tc, test_dense_loop_budget);
    tcase_add_test(tc, test_dropout_layers);
    tcase_add_test(tc, test_dropout_masks);
    tcase_add_test(tc, test_add_and_reshape);
    return test_run_device_suite(s);
}
