/* test_layers_conv.c: the convolutional layers (conv2d, max_pool2d,
 * avg_pool2d, global_avg_pool2d, zero_pad2d) through the gradient-check
 * harness (tests/layercheck.h) against the double references of
 * tests/ref_conv.c on odd shapes: stride 2 with odd sizes, "same" padding's
 * odd split, dilation 2, groups 1 / 2 / depthwise with a depth multiplier,
 * with and without bias and activation; batchnorm in training (with and
 * without center / scale) and evaluation, its moving statistics untouched
 * by forwards and moved once by a backward; concat of 2 and 3 inputs; the cost model's slots, workspace
 * and FLOPs; model-file parsing of the new fields and its errors. Skips
 * (77) without a device for the device tests. */
#include "testutil.h"
#include "layercheck.h"
#include "ref_conv.h"
#include "conv_geom.h"
#include "conv_direct.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* A hand-built layer of type t on a per-sample [H, W, C] input; shapes and
 * parameters from clremat_conv_infer, checked against the reference's own
 * geometry. */
static void base(clremat_layer *L, const char *name, clremat_layer_type t, int64_t H, int64_t W, int64_t C)
{
    const int64_t d[3] = {H, W, C};
    memset(L, 0, sizeof *L);
    snprintf(L->name, sizeof L->name, "%s", name);
    L->type = t;
    L->n_inputs = 1;
    L->in_shape[0] = lc_shape(3, d);
    L->strides[0] = L->strides[1] = 1;
    L->dilation[0] = L->dilation[1] = 1;
    L->groups = 1;
}

static void infer(clremat_layer *L)
{
    char why[256] = "";
    ck_assert_msg(clremat_conv_check_settings(L, why, sizeof why) == 0, "%s: %s", L->name, why);
    ck_assert_msg(clremat_conv_infer(L, why, sizeof why) == 0, "%s: %s", L->name, why);
    if (L->type == CLREMAT_CONV2D || L->type == CLREMAT_MAX_POOL2D || L->type == CLREMAT_AVG_POOL2D) {
        int64_t oh, ow, ph, pw;
        const int conv = L->type == CLREMAT_CONV2D;
        ref_conv_axis(L->in_shape[0].dims[0], L->ksize[0], L->strides[0], conv ? L->dilation[0] : 1, L->pad_same,
                      &oh, &ph);
        ref_conv_axis(L->in_shape[0].dims[1], L->ksize[1], L->strides[1], conv ? L->dilation[1] : 1, L->pad_same,
                      &ow, &pw);
        ck_assert_int_eq(L->out_shape.dims[0], oh);
        ck_assert_int_eq(L->out_shape.dims[1], ow);
    }
}

static void conv(clremat_layer *L, const char *name, int64_t H, int64_t W, int64_t C, int64_t filters, int k,
                 int s, int dil, int same, int groups, int dm, clremat_act act, int bias)
{
    base(L, name, CLREMAT_CONV2D, H, W, C);
    L->filters = dm ? 0 : filters;
    L->ksize[0] = k;
    L->ksize[1] = k == 3 ? 2 : k; /* a non-square window where the size allows */
    L->strides[0] = L->strides[1] = s;
    L->dilation[0] = L->dilation[1] = dil;
    L->pad_same = same;
    L->groups = dm ? 1 : groups;
    L->depth_multiplier = dm;
    L->act = act;
    L->use_bias = bias;
    infer(L);
}

static void check(clremat_ctx *ctx, clremat_layer *L, int64_t batch, lc_ref_forward f, lc_ref_backward b)
{
    clremat_graph g;
    lc_spec sp;
    lc_graph_of_layer(&g, L);
    memset(&sp, 0, sizeof sp);
    sp.g = &g;
    sp.layer = 0;
    sp.batch = batch;
    sp.fwd = f;
    sp.bwd = b;
    sp.in_scale = 1.0;
    sp.param_scale = 0.5;
    sp.rng = 11 + (unsigned)L->ksize[0] * 7 + (unsigned)L->strides[0] * 3 + (unsigned)L->groups;
    lc_check_layer(ctx, &sp);
}

START_TEST(test_conv2d_layers)
{
    clremat_ctx *ctx;
    clremat_layer L;
    TEST_OPEN_CTX(ctx, 0);
    /* groups 1: 3x2 window, stride 1 valid, with bias and relu */
    conv(&L, "conv_valid", 7, 6, 3, 5, 3, 1, 1, 0, 1, 0, CLREMAT_ACT_RELU, 1);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    /* stride 2 with odd sizes, "same" (odd total padding: the extra pixel after) */
    conv(&L, "conv_s2_same", 9, 7, 3, 4, 3, 2, 1, 1, 1, 0, CLREMAT_ACT_NONE, 1);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    conv(&L, "conv_s2_valid", 9, 8, 5, 3, 3, 2, 1, 0, 1, 0, CLREMAT_ACT_TANH, 0);
    check(ctx, &L, 1, ref_conv2d_fwd, ref_conv2d_bwd);
    /* dilation 2, "same" */
    conv(&L, "conv_dil2", 9, 7, 3, 5, 3, 1, 2, 1, 1, 0, CLREMAT_ACT_SILU, 1);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    /* groups 2 */
    conv(&L, "conv_g2", 7, 5, 6, 10, 3, 1, 1, 1, 2, 0, CLREMAT_ACT_RELU, 1);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    conv(&L, "conv_g2_s2", 9, 9, 4, 6, 3, 2, 1, 0, 2, 0, CLREMAT_ACT_NONE, 0);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    /* depthwise, depth_multiplier 1 and 2, stride 2 "same" */
    conv(&L, "conv_dw", 7, 7, 5, 0, 3, 1, 1, 1, 1, 1, CLREMAT_ACT_SIGMOID, 1);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    conv(&L, "conv_dw_m2", 9, 7, 3, 0, 3, 2, 1, 1, 1, 2, CLREMAT_ACT_NONE, 1);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    /* 1x1 (direct, no workspace) and 1x1 stride 2 (projection shortcut) */
    conv(&L, "conv_1x1", 5, 3, 7, 9, 1, 1, 1, 0, 1, 0, CLREMAT_ACT_GELU_TANH, 1);
    check(ctx, &L, 3, ref_conv2d_fwd, ref_conv2d_bwd);
    conv(&L, "conv_1x1_s2", 7, 5, 3, 4, 1, 2, 1, 1, 1, 0, CLREMAT_ACT_NONE, 0);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    /* wider than one 16-channel tile of the direct kernels (a full tile and
     * a tail) with more rows than one weight-gradient chunk (2 * 13 * 11 =
     * 286 > 256): groups 1 (stride 1, stride 2, dilation 2), depthwise */
    conv(&L, "conv_wide", 13, 11, 19, 21, 3, 1, 1, 1, 1, 0, CLREMAT_ACT_RELU, 1);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    conv(&L, "conv_wide_s2", 25, 23, 17, 18, 3, 2, 1, 1, 1, 0, CLREMAT_ACT_NONE, 0);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    conv(&L, "conv_wide_dil2", 13, 11, 17, 5, 3, 1, 2, 0, 1, 0, CLREMAT_ACT_TANH, 1);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    /* rows wide enough that, dilated, every tap of a kernel row reaches
     * whole tiles: the direct kernels' one-loop-per-kernel-row path
     * (forward, and the input gradient at stride 1) */
    conv(&L, "conv_dil2_rows", 5, 24, 16, 16, 3, 1, 2, 1, 1, 0, CLREMAT_ACT_RELU, 1);
    check(ctx, &L, 1, ref_conv2d_fwd, ref_conv2d_bwd);
    conv(&L, "conv_dw_wide", 13, 11, 19, 0, 3, 1, 1, 1, 1, 1, CLREMAT_ACT_SIGMOID, 1);
    check(ctx, &L, 2, ref_conv2d_fwd, ref_conv2d_bwd);
    conv(&L, "conv_dw_wide_m3", 13, 11, 7, 0, 3, 1, 1, 0, 1, 3, CLREMAT_ACT_NONE, 0);
    check(ctx, &L, 3, ref_conv2d_fwd, ref_conv2d_bwd);
    /* the direct kernels' register tiles without a lane tail (16 filters
     * and channels: 16 pixels x one 16-wide vector, or 8 x two 8-wide) on
     * rows of 19 pixels (full pixel tiles and a tail), so that interior
     * tiles take the loops without tests; and 32 + 8 filters and 32
     * channels with stride 2 (8 pixels x two vectors, a full tile and a
     * tail; the input gradient's two stride phases) */
    conv(&L, "conv_tile16", 5, 19, 16, 16, 3, 1, 1, 1, 1, 0, CLREMAT_ACT_RELU, 1);
    check(ctx, &L, 1, ref_conv2d_fwd, ref_conv2d_bwd);
    conv(&L, "conv_tile32_s2", 6, 20, 32, 40, 3, 2, 1, 1, 1, 0, CLREMAT_ACT_NONE, 0);
    check(ctx, &L, 1, ref_conv2d_fwd, ref_conv2d_bwd);
    /* square 5x5 "same" windows on rows of 32 and 16 pixels (two full
     * tiles): the tiles at a row's left and right edge with one pixel
     * outside the image (the 16-wide devices' loops that leave out the
     * first or the last pixel), with two outside (the tested loop) and
     * interior tiles, for 16 filters (16 pixels x one vector) and 32 (8 x
     * two), stride 1 and 2. Those loops exist only on 16-wide devices
     * (the native GEMM tile 12 x 32); slow implementations
     * (CLREMAT_TEST_REDUCED, 8-wide: the tested loop, covered above) skip
     * them, unless the tile is forced (CLREMAT_GEMM_TILE=12x32 under
     * Oclgrind) */
    if (!test_reduced() || ctx->gemm_nr >= 32) {
        conv(&L, "conv_edge16_k5", 4, 32, 16, 16, 5, 1, 1, 1, 1, 0, CLREMAT_ACT_RELU, 1);
        check(ctx, &L, 1, ref_conv2d_fwd, ref_conv2d_bwd);
        conv(&L, "conv_edge32_k5", 3, 16, 32, 32, 5, 1, 1, 1, 1, 0, CLREMAT_ACT_NONE, 1);
        check(ctx, &L, 1, ref_conv2d_fwd, ref_conv2d_bwd);
        conv(&L, "conv_edge_k5_s2", 5, 36, 16, 32, 5, 2, 1, 1, 1, 0, CLREMAT_ACT_TANH, 0);
        check(ctx, &L, 1, ref_conv2d_fwd, ref_conv2d_bwd);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_pool_layers)
{
    clremat_ctx *ctx;
    clremat_layer L;
    TEST_OPEN_CTX(ctx, 0);
    for (int t = 0; t < 2; t++) {
        const clremat_layer_type ty = t ? CLREMAT_AVG_POOL2D : CLREMAT_MAX_POOL2D;
        /* 2x2 stride 2 on odd sizes, valid and same (same: the last window holds fewer real inputs) */
        for (int same = 0; same < 2; same++) {
            base(&L, same ? "pool_same" : "pool_valid", ty, 7, 5, 3);
            L.ksize[0] = L.ksize[1] = 2;
            L.strides[0] = L.strides[1] = 2;
            L.pad_same = same;
            infer(&L);
            check(ctx, &L, 2, ref_pool2d_fwd, ref_pool2d_bwd);
        }
        /* 3x3 stride 2 same: overlapping windows */
        base(&L, "pool_3s2", ty, 9, 6, 2);
        L.ksize[0] = L.ksize[1] = 3;
        L.strides[0] = L.strides[1] = 2;
        L.pad_same = 1;
        infer(&L);
        check(ctx, &L, 2, ref_pool2d_fwd, ref_pool2d_bwd);
    }
    base(&L, "gap", CLREMAT_GLOBAL_AVG_POOL2D, 5, 3, 7);
    infer(&L);
    ck_assert_int_eq(L.out_shape.rank, 1);
    ck_assert_int_eq(L.out_shape.dims[0], 7);
    check(ctx, &L, 3, ref_gap_fwd, ref_gap_bwd);
    base(&L, "zpad", CLREMAT_ZERO_PAD2D, 5, 3, 2);
    L.zpad[0] = 1;
    L.zpad[1] = 2;
    L.zpad[2] = 0;
    L.zpad[3] = 3;
    infer(&L);
    ck_assert_int_eq(L.out_shape.dims[0], 8);
    ck_assert_int_eq(L.out_shape.dims[1], 6);
    check(ctx, &L, 2, ref_zpad_fwd, ref_zpad_bwd);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* A hand-built batchnorm on a per-sample shape, parameters in Keras's order. */
static void make_bn(clremat_layer *L, const char *name, int rank, const int64_t *dims, int center, int scale)
{
    const int64_t C = dims[rank - 1];
    int p = 0;
    memset(L, 0, sizeof *L);
    snprintf(L->name, sizeof L->name, "%s", name);
    L->type = CLREMAT_BATCHNORM;
    L->n_inputs = 1;
    L->in_shape[0] = lc_shape(rank, dims);
    L->out_shape = L->in_shape[0];
    L->eps = 1e-3;
    L->momentum = 0.99;
    L->center = center;
    L->scale = scale;
    if (scale)
        lc_set_param(L, p++, "gamma", 1, &C);
    if (center)
        lc_set_param(L, p++, "beta", 1, &C);
    lc_set_param(L, p, "moving_mean", 1, &C);
    L->params[p++].frozen = 1;
    lc_set_param(L, p, "moving_variance", 1, &C);
    L->params[p++].frozen = 1;
    L->n_params = p;
}

/* Training mode against the double reference and finite differences, with
 * and without center / scale; evaluation mode normalizes with the moving
 * statistics and leaves them alone; the backward moves them one step. */
START_TEST(test_batchnorm_layer)
{
    const int64_t d3[] = {5, 3, 7}, d1[] = {9};
    clremat_ctx *ctx;
    clremat_layer L;
    clremat_graph g;
    clremat_layer_call c;
    clremat_buf *x, *y, *st, *par[4], *grd[4], *dy, *ws, *fws, *dx;
    clremat_layer_cost cost;
    enum { B = 3, N = B * 9 };
    float hx[N], hy[N], hp[4][9], hd[N], mm[9], mv[9];
    TEST_OPEN_CTX(ctx, 0);
    for (int cs = 0; cs < 4; cs++) {
        make_bn(&L, "bn3", 3, d3, cs & 1, cs >> 1);
        check(ctx, &L, 2, ref_bn_fwd, ref_bn_bwd);
    }
    make_bn(&L, "bn1", 1, d1, 1, 1);
    check(ctx, &L, 5, ref_bn_fwd, ref_bn_bwd);

    /* direct launches on [9] at batch 3 */
    make_bn(&L, "bn_state", 1, d1, 1, 1);
    lc_graph_of_layer(&g, &L);
    for (int i = 0; i < N; i++) {
        hx[i] = (float)((i * 37) % 11) * 0.3f - 1.2f;
        hd[i] = (float)((i * 13) % 7) * 0.1f - 0.3f;
    }
    for (int k = 0; k < 9; k++) {
        hp[0][k] = 1.0f + 0.1f * (float)k;  /* gamma */
        hp[1][k] = -0.2f * (float)k;        /* beta */
        hp[2][k] = 0.05f * (float)k;        /* moving mean */
        hp[3][k] = 0.5f + 0.25f * (float)k; /* moving variance */
    }
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hx, "x", &x), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hx, "y", &y), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hx, "dy", &dy), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hx, "dx", &dx), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, 27 * sizeof(float), "stats", &st), CLREMAT_OK);
    /* workspace as the cost model sizes it: the reductions' partials (forward), the sums and partials (backward) */
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, B, &cost), CLREMAT_OK);
    ck_assert_uint_eq(cost.fwd_temp_bytes, 2 * 9 * sizeof(float));
    ck_assert_uint_eq(cost.bwd_temp_bytes, 4 * 9 * sizeof(float));
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, cost.fwd_temp_bytes, "fws", &fws), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, cost.bwd_temp_bytes, "ws", &ws), CLREMAT_OK);
    for (int p = 0; p < 4; p++) {
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hp[p], "param", &par[p]), CLREMAT_OK);
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hp[p], "grad", &grd[p]), CLREMAT_OK);
        ck_assert_int_eq(clremat_write(ctx, par[p], 0, sizeof hp[p], hp[p]), CLREMAT_OK);
    }
    ck_assert_int_eq(clremat_write(ctx, x, 0, sizeof hx, hx), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, dy, 0, sizeof hd, hd), CLREMAT_OK);
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.g = &g;
    c.batch = B;
    c.in[0] = x;
    c.slot[0] = y;
    c.slot[1] = st;
    for (int p = 0; p < 4; p++) {
        c.param[p] = par[p];
        c.grad[p] = grd[p];
    }
    /* evaluation: (x - mm) / sqrt(mv + eps) * gamma + beta, state untouched */
    L.bn_eval = 1;
    ck_assert_int_eq(clremat_layer_forward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, y, 0, sizeof hy, hy), CLREMAT_OK);
    for (int i = 0; i < N; i++) {
        const int k = i % 9;
        const double want = (hx[i] - hp[2][k]) / sqrt(hp[3][k] + 1e-3) * hp[0][k] + hp[1][k];
        ck_assert_msg(fabs(hy[i] - want) <= 1e-5 * (1 + fabs(want)), "eval %d: %g, want %g", i, (double)hy[i], want);
    }
    /* training forward twice (as a recomputation would): the state stays; one backward moves it once */
    L.bn_eval = 0;
    c.temp = fws;
    ck_assert_int_eq(clremat_layer_forward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_layer_forward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, par[2], 0, sizeof mm, mm), CLREMAT_OK);
    ck_assert_int_eq(memcmp(mm, hp[2], sizeof mm), 0);
    c.dout = dy;
    c.din[0] = dx;
    c.temp = ws;
    ck_assert_int_eq(clremat_layer_backward(&c), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, par[2], 0, sizeof mm, mm), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, par[3], 0, sizeof mv, mv), CLREMAT_OK);
    for (int k = 0; k < 9; k++) {
        double mean = 0, var = 0;
        for (int b = 0; b < B; b++)
            mean += hx[b * 9 + k] / (double)B;
        for (int b = 0; b < B; b++)
            var += (hx[b * 9 + k] - mean) * (hx[b * 9 + k] - mean) / (double)B;
        ck_assert_msg(fabs(mm[k] - (0.99 * hp[2][k] + 0.01 * mean)) < 1e-6, "moving mean %d: %g", k, (double)mm[k]);
        ck_assert_msg(fabs(mv[k] - (0.99 * hp[3][k] + 0.01 * var)) < 1e-6, "moving var %d: %g", k, (double)mv[k]);
    }
    clremat_pool_release(ctx->pool, x);
    clremat_pool_release(ctx->pool, y);
    clremat_pool_release(ctx->pool, dy);
    clremat_pool_release(ctx->pool, dx);
    clremat_pool_release(ctx->pool, st);
    clremat_pool_release(ctx->pool, ws);
    clremat_pool_release(ctx->pool, fws);
    for (int p = 0; p < 4; p++) {
        clremat_pool_release(ctx->pool, par[p]);
        clremat_pool_release(ctx->pool, grd[p]);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* concat of 2 and of 3 inputs of different widths, ranks 3 and 1. */
START_TEST(test_concat_layer)
{
    const int64_t a[] = {4, 3, 2}, b[] = {4, 3, 5}, c1[] = {4, 3, 1}, v[] = {3}, w[] = {7};
    const int64_t o3[] = {4, 3, 8}, o1[] = {10};
    clremat_ctx *ctx;
    clremat_layer L;
    TEST_OPEN_CTX(ctx, 0);
    memset(&L, 0, sizeof L);
    snprintf(L.name, sizeof L.name, "cat3");
    L.type = CLREMAT_CONCAT;
    L.n_inputs = 3;
    L.in_shape[0] = lc_shape(3, a);
    L.in_shape[1] = lc_shape(3, b);
    L.in_shape[2] = lc_shape(3, c1);
    L.out_shape = lc_shape(3, o3);
    check(ctx, &L, 2, ref_concat_fwd, ref_concat_bwd);
    memset(&L, 0, sizeof L);
    snprintf(L.name, sizeof L.name, "cat2");
    L.type = CLREMAT_CONCAT;
    L.n_inputs = 2;
    L.in_shape[0] = lc_shape(1, v);
    L.in_shape[1] = lc_shape(1, w);
    L.out_shape = lc_shape(1, o1);
    check(ctx, &L, 3, ref_concat_fwd, ref_concat_bwd);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Keras's padding rule, the cost model's numbers, and the workspace. */
START_TEST(test_conv_geometry_and_costs)
{
    clremat_layer L;
    clremat_graph g;
    clremat_layer_cost c;
    clremat_conv_geom geo;
    char why[256];
    /* Keras: 8 wide, k 3, stride 2, same: out 4, total padding 1, all after */
    conv(&L, "geo", 8, 7, 3, 4, 3, 2, 1, 1, 1, 0, CLREMAT_ACT_NONE, 1);
    ck_assert_int_eq(clremat_conv_geom_of(&L, &geo, why, sizeof why), 0);
    ck_assert_int_eq(geo.h.out, 4);
    ck_assert_int_eq(geo.h.pad_before, 0);
    /* 7 wide, k 2 (the non-square width), stride 2: out 4, total 1: after */
    ck_assert_int_eq(geo.w.out, 4);
    ck_assert_int_eq(geo.w.pad_before, 0);
    /* 7 high, k 3, stride 1, same: total 2, one before */
    conv(&L, "geo2", 7, 7, 3, 4, 3, 1, 1, 1, 1, 0, CLREMAT_ACT_RELU, 1);
    ck_assert_int_eq(clremat_conv_geom_of(&L, &geo, why, sizeof why), 0);
    ck_assert_int_eq(geo.h.pad_before, 1);
    lc_graph_of_layer(&g, &L);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 3, &c), CLREMAT_OK);
    ck_assert_int_eq(c.n_slots, 2);
    ck_assert_uint_eq(c.slot_bytes[0], 3 * 7 * 7 * 4 * 4);
    ck_assert_str_eq(c.slot_name[1], "preact");
    ck_assert_int_eq(c.act_source, 1);
    ck_assert_uint_eq(c.bwd_needs_inputs, 1);
    ck_assert_uint_eq(c.bwd_needs_slots, 2);
    ck_assert(c.fwd_flops >= 2.0 * 3 * 49 * 18 * 4);
    ck_assert(c.bwd_flops >= 4.0 * 3 * 49 * 18 * 4);
    ck_assert_uint_eq(c.param_bytes, (18 * 4 + 4) * 4);
    /* the workspace is the GEMM path's: the native path (clremat_layer_cost_of)
     * runs the direct kernels, which need no forward workspace and, in the
     * backward, the transposed kernel (kh*kw*C*F = 3*2*3*4 floats; 147 rows
     * are one weight-gradient chunk, so no partials) */
    ck_assert_uint_eq(c.fwd_temp_bytes, 0);
    ck_assert_uint_eq(c.bwd_temp_bytes, (size_t)18 * 4 * 4);
    /* CLBlast: im2col, rows * kh*kw*C floats = 3*49 * 3*2*3, in both passes */
    ck_assert_int_eq(clremat_layer_cost_on(&g, 0, 3, CLREMAT_GEMM_CLBLAST, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.fwd_temp_bytes, (size_t)3 * 49 * 18 * 4);
    ck_assert_uint_eq(c.bwd_temp_bytes, c.fwd_temp_bytes);
    ck_assert_int_eq(c.n_slots, 2);
    ck_assert(c.fwd_flops >= 2.0 * 3 * 49 * 18 * 4);
    ck_assert(c.bwd_flops >= 4.0 * 3 * 49 * 18 * 4);
    /* one output pixel: the im2col row (CLBlast) is smaller than the
     * transposed kernel (native); each path plans only its own */
    conv(&L, "geo_small", 3, 2, 3, 4, 3, 1, 1, 0, 1, 0, CLREMAT_ACT_NONE, 0);
    ck_assert_int_eq(clremat_layer_cost_on(&g, 0, 1, CLREMAT_GEMM_CLBLAST, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.fwd_temp_bytes, (size_t)18 * 4);
    ck_assert_uint_eq(c.bwd_temp_bytes, (size_t)18 * 4);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 1, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.fwd_temp_bytes, 0);
    ck_assert_uint_eq(c.bwd_temp_bytes, (size_t)18 * 4 * 4);
    /* many rows: the weight gradient's chunk partials outgrow the
     * transposed kernel (native); 64 * 49 rows = 13 chunks of 256 */
    conv(&L, "geo_rows", 7, 7, 3, 4, 3, 1, 1, 1, 1, 0, CLREMAT_ACT_NONE, 0);
    {
        int64_t rc, nch;
        clremat_conv_wgrad_chunks(64 * 49, &rc, &nch);
        ck_assert_int_eq(nch, 13);
        ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 64, &c), CLREMAT_OK);
        ck_assert_uint_eq(c.fwd_temp_bytes, 0);
        ck_assert_uint_eq(c.bwd_temp_bytes, (size_t)nch * 18 * 4 * 4);
        ck_assert_int_eq(clremat_layer_cost_on(&g, 0, 64, CLREMAT_GEMM_CLBLAST, &c), CLREMAT_OK);
        ck_assert_uint_eq(c.fwd_temp_bytes, (size_t)64 * 49 * 18 * 4);
        ck_assert_uint_eq(c.bwd_temp_bytes, c.fwd_temp_bytes);
    }
    /* depthwise on few rows: one chunk and no transposed kernel, so no
     * workspace at all natively; im2col on CLBlast (3*2*1 per group) */
    conv(&L, "geo_dw", 5, 5, 4, 0, 3, 1, 1, 1, 1, 2, CLREMAT_ACT_NONE, 0);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.fwd_temp_bytes + c.bwd_temp_bytes, 0);
    ck_assert_int_eq(clremat_layer_cost_on(&g, 0, 2, CLREMAT_GEMM_CLBLAST, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.fwd_temp_bytes, (size_t)2 * 25 * 4 * 6 * 4);
    ck_assert_uint_eq(c.bwd_temp_bytes, c.fwd_temp_bytes);
    /* 1x1 stride 1: no workspace on either path */
    conv(&L, "geo3", 5, 5, 8, 4, 1, 1, 1, 0, 1, 0, CLREMAT_ACT_NONE, 0);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.fwd_temp_bytes + c.bwd_temp_bytes, 0);
    ck_assert_int_eq(c.act_source, -1);
    ck_assert_int_eq(clremat_layer_cost_on(&g, 0, 2, CLREMAT_GEMM_CLBLAST, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.fwd_temp_bytes + c.bwd_temp_bytes, 0);
    /* max pool reads its input in the backward; the others need nothing */
    base(&L, "mp", CLREMAT_MAX_POOL2D, 6, 6, 2);
    L.ksize[0] = L.ksize[1] = L.strides[0] = L.strides[1] = 2;
    infer(&L);
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.bwd_needs_inputs, 1);
    ck_assert_uint_eq(c.slot_bytes[0], 2 * 9 * 2 * 4);
    L.type = CLREMAT_AVG_POOL2D;
    ck_assert_int_eq(clremat_layer_cost_of(&g, 0, 2, &c), CLREMAT_OK);
    ck_assert_uint_eq(c.bwd_needs_inputs | c.bwd_needs_slots, 0);
    /* bad settings and shapes are refused with the reason */
    conv(&L, "bad", 5, 5, 6, 4, 3, 1, 1, 0, 1, 0, CLREMAT_ACT_NONE, 0);
    L.groups = 4;
    ck_assert_int_eq(clremat_conv_infer(&L, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "divisible by groups"));
    L.groups = 1;
    L.ksize[0] = 6;
    ck_assert_int_eq(clremat_conv_infer(&L, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "smaller than"));
    L.ksize[0] = 3;
    L.strides[0] = 2;
    L.dilation[0] = 2;
    ck_assert_int_eq(clremat_conv_check_settings(&L, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "dilation_rate"));
}
END_TEST

/* Model files: the fields parse into the layer, shapes are inferred, and
 * mistakes are errors naming the file position and the layer. */
START_TEST(test_conv_model_file)
{
    static const char *good =
        "{\"name\": \"cnn\", \"input\": {\"shape\": [9, 8, 3]}, \"layers\": [\n"
        " {\"name\": \"c1\", \"type\": \"conv2d\", \"filters\": 6, \"kernel_size\": 3, \"strides\": 2,\n"
        "  \"padding\": \"same\", \"activation\": \"relu\"},\n"
        " {\"name\": \"dw\", \"type\": \"conv2d\", \"kernel_size\": [3, 3], \"depth_multiplier\": 2, \"padding\": \"same\"},\n"
        " {\"name\": \"g\", \"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 1, \"groups\": 2, \"use_bias\": false},\n"
        " {\"name\": \"zp\", \"type\": \"zero_pad2d\", \"padding\": [[1, 0], [0, 1]]},\n"
        " {\"name\": \"mp\", \"type\": \"max_pool2d\", \"pool_size\": 2},\n"
        " {\"name\": \"ap\", \"type\": \"avg_pool2d\", \"pool_size\": 2, \"strides\": 1, \"padding\": \"same\"},\n"
        " {\"name\": \"gap\", \"type\": \"global_avg_pool2d\"},\n"
        " {\"name\": \"fc\", \"type\": \"dense\", \"units\": 3},\n"
        " {\"type\": \"softmax_cross_entropy\"}]}\n";
    clremat_graph *g = NULL;
    const clremat_layer *L;
    ck_assert_msg(clremat_graph_load_string(good, "good.json", &g) == CLREMAT_OK, "%s", clremat_last_error());
    L = &g->layers[0];
    ck_assert_int_eq(L->out_shape.dims[0], 5);
    ck_assert_int_eq(L->out_shape.dims[1], 4);
    ck_assert_int_eq(L->out_shape.dims[2], 6);
    ck_assert_int_eq(L->params[0].shape.rank, 4);
    ck_assert_int_eq(L->params[0].shape.dims[2], 3);
    L = &g->layers[1];
    ck_assert_int_eq(L->out_shape.dims[2], 12);
    ck_assert_int_eq(L->params[0].shape.dims[2], 1);
    ck_assert_int_eq(L->params[0].shape.dims[3], 12);
    L = &g->layers[2];
    ck_assert_int_eq(L->n_params, 1);
    ck_assert_int_eq(L->params[0].shape.dims[2], 6);
    L = &g->layers[3];
    ck_assert_int_eq(L->out_shape.dims[0], 6);
    ck_assert_int_eq(L->out_shape.dims[1], 5);
    L = &g->layers[4];
    ck_assert_int_eq(L->out_shape.dims[0], 3);
    ck_assert_int_eq(L->out_shape.dims[1], 2);
    ck_assert_int_eq(g->layers[5].out_shape.dims[0], 3);
    ck_assert_int_eq(g->layers[6].out_shape.rank, 1);
    ck_assert_int_eq(g->layers[6].out_shape.dims[0], 4);
    clremat_graph_free(g);
    g = NULL;
    {
        static const char *bad[][2] = {
            {"{\"name\": \"m\", \"input\": {\"shape\": [5, 5, 3]}, \"layers\": [\n"
             " {\"name\": \"c\", \"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 3, \"padding\": \"full\"},\n"
             " {\"type\": \"mse\"}]}", "padding"},
            {"{\"name\": \"m\", \"input\": {\"shape\": [5, 5, 3]}, \"layers\": [\n"
             " {\"name\": \"c\", \"type\": \"conv2d\", \"kernel_size\": 3},\n {\"type\": \"mse\"}]}", "filters"},
            {"{\"name\": \"m\", \"input\": {\"shape\": [5, 5, 3]}, \"layers\": [\n"
             " {\"name\": \"c\", \"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 7},\n {\"type\": \"mse\"}]}",
             "smaller than"},
            {"{\"name\": \"m\", \"input\": {\"shape\": [5, 5, 3]}, \"layers\": [\n"
             " {\"name\": \"c\", \"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 3, \"groups\": 2},\n"
             " {\"type\": \"mse\"}]}", "divisible by groups"},
            {"{\"name\": \"m\", \"input\": {\"shape\": [5, 5, 3]}, \"layers\": [\n"
             " {\"name\": \"c\", \"type\": \"conv2d\", \"filters\": 3, \"kernel_size\": 3, \"depth_multiplier\": 1},\n"
             " {\"type\": \"mse\"}]}", "depth_multiplier"},
            {"{\"name\": \"m\", \"input\": {\"shape\": [15]}, \"layers\": [\n"
             " {\"name\": \"p\", \"type\": \"max_pool2d\"},\n {\"type\": \"mse\"}]}", "[H, W, C]"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            ck_assert_int_ne(clremat_graph_load_string(bad[i][0], "bad.json", &g), CLREMAT_OK);
            ck_assert_msg(strstr(clremat_last_error(), bad[i][1]) && strstr(clremat_last_error(), "bad.json:"),
                          "case %zu: %s", i, clremat_last_error());
            ck_assert_msg(strstr(clremat_last_error(), "'c'") || strstr(clremat_last_error(), "'p'"),
                          "case %zu names no layer: %s", i, clremat_last_error());
        }
    }
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("layers_conv", 300, &tc);
    tcase_add_test(tc, test_conv_geometry_and_costs);
    tcase_add_test(tc, test_conv_model_file);
    tcase_add_test(tc, test_conv2d_layers);
    tcase_add_test(tc, test_pool_layers);
    tcase_add_test(tc, test_batchnorm_layer);
    tcase_add_test(tc, test_concat_layer);
    return test_run_device_suite(s);
}
