/* test_kernels8.c: the eight-wide elementwise kernels of issue 21 against
 * their one-float versions, bit for bit: clremat_dropout8 against
 * clremat_dropout (same mask, same scaling, forward and accumulated),
 * clremat_add8 against clremat_add_bcast without broadcast,
 * clremat_copy_acc8 against clremat_copy_acc (copy and accumulate, in place
 * too), on lengths that are and are not multiples of eight. And the GELU
 * (tanh form) computed through exp, x / (1 + exp(-2u)): within float
 * rounding of the double reference over [-30, 30] (checked against the
 * tanh form where that is accurate in double), and the forward kernel, the
 * dense bias/activation pass and the scalar kernel agree bit for bit. The
 * column sums of the bias gradient at every work-item width, stored and
 * fused with the update, bit for bit.
 * Without a device: the activations mode reads a discarded activation
 * output inside a multiply's or a layernorm's backward (the SwiGLU gates of
 * llama_tiny, the stem of resnet_mlp): no recompute pass for those. */
#include "testutil.h"
#include "executor.h"
#include "kernel_run.h"
#include "colsum.h"
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const int lengths[] = {1, 7, 8, 13, 1000, 4099};
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])

static clremat_buf *upload(clremat_ctx *ctx, const float *h, size_t n)
{
    clremat_buf *b = NULL;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, n * sizeof(float), "test", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, b, 0, n * sizeof(float), h), CLREMAT_OK);
    return b;
}

static void download(clremat_ctx *ctx, clremat_buf *b, float *h, size_t n)
{
    ck_assert_int_eq(clremat_read(ctx, b, 0, n * sizeof(float), h), CLREMAT_OK);
}

static void fill(float *h, int n, int salt)
{
    for (int i = 0; i < n; i++)
        h[i] = (float)(((int64_t)(i + salt) * 7919 % 1999) - 999) / 137.0f; /* (int overflowed past 271k: UBSan) */
}

static void expect_same(const float *a, const float *b, int n, const char *what, int acc)
{
    ck_assert_msg(memcmp(a, b, sizeof(float) * (size_t)n) == 0, "%s, n %d, acc %d: bits differ", what, n, acc);
}

START_TEST(test_dropout8_bits)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t li = 0; li < N_LENGTHS; li++)
        for (int acc = 0; acc < 2; acc++) {
            const int n = lengths[li];
            float *hx = malloc(sizeof(float) * (size_t)n), *hy = malloc(sizeof(float) * (size_t)n);
            float *r1 = malloc(sizeof(float) * (size_t)n), *r2 = malloc(sizeof(float) * (size_t)n);
            clremat_buf *x, *y1, *y2;
            cl_int in = n, iacc = acc;
            cl_float rate = 0.3f, scale = 1.0f / 0.7f;
            cl_uint lo = 77, hi = 5, step = 3, layer = 2, off = 40;
            cl_mem mx, m1, m2;
            fill(hx, n, 1);
            fill(hy, n, 2);
            x = upload(ctx, hx, (size_t)n);
            y1 = upload(ctx, hy, (size_t)n);
            y2 = upload(ctx, hy, (size_t)n);
            mx = clremat_mem(x);
            m1 = clremat_mem(y1);
            m2 = clremat_mem(y2);
            ck_assert_int_eq(clremat_run1d(ctx, "clremat_dropout", n, sizeof in, &in, sizeof iacc, &iacc, sizeof rate,
                                           &rate, sizeof scale, &scale, sizeof lo, &lo, sizeof hi, &hi, sizeof step,
                                           &step, sizeof layer, &layer, sizeof mx, &mx, sizeof m1, &m1, sizeof off,
                                           &off, (size_t)0),
                             CLREMAT_OK);
            ck_assert_int_eq(clremat_run1d(ctx, "clremat_dropout8", (n + 7) / 8, sizeof in, &in, sizeof iacc, &iacc,
                                           sizeof rate, &rate, sizeof scale, &scale, sizeof lo, &lo, sizeof hi, &hi,
                                           sizeof step, &step, sizeof layer, &layer, sizeof mx, &mx, sizeof m2, &m2,
                                           sizeof off, &off, (size_t)0),
                             CLREMAT_OK);
            download(ctx, y1, r1, (size_t)n);
            download(ctx, y2, r2, (size_t)n);
            expect_same(r1, r2, n, "dropout8", acc);
            if (n >= 1000) { /* the mask drops about rate of the elements */
                int dropped = 0;
                for (int i = 0; i < n; i++)
                    dropped += acc ? r1[i] == hy[i] : r1[i] == 0.0f;
                ck_assert_msg(dropped > n / 5 && dropped < 2 * n / 5, "dropout: %d of %d dropped", dropped, n);
            }
            clremat_pool_release(ctx->pool, x);
            clremat_pool_release(ctx->pool, y1);
            clremat_pool_release(ctx->pool, y2);
            free(hx);
            free(hy);
            free(r1);
            free(r2);
        }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_add_copy8_bits)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t li = 0; li < N_LENGTHS; li++) {
        const int n = lengths[li];
        float *ha = malloc(sizeof(float) * (size_t)n), *hb = malloc(sizeof(float) * (size_t)n);
        float *r1 = malloc(sizeof(float) * (size_t)n), *r2 = malloc(sizeof(float) * (size_t)n);
        clremat_buf *a, *b, *y1, *y2;
        cl_int in = n;
        cl_mem ma, mb, m1, m2;
        fill(ha, n, 3);
        fill(hb, n, 4);
        a = upload(ctx, ha, (size_t)n);
        b = upload(ctx, hb, (size_t)n);
        y1 = upload(ctx, hb, (size_t)n);
        y2 = upload(ctx, hb, (size_t)n);
        ma = clremat_mem(a);
        mb = clremat_mem(b);
        m1 = clremat_mem(y1);
        m2 = clremat_mem(y2);
        /* y = a + b */
        ck_assert_int_eq(clremat_run1d(ctx, "clremat_add_bcast", n, sizeof in, &in, sizeof in, &in, sizeof in, &in,
                                       sizeof ma, &ma, sizeof mb, &mb, sizeof m1, &m1, (size_t)0),
                         CLREMAT_OK);
        ck_assert_int_eq(clremat_run1d(ctx, "clremat_add8", (n + 7) / 8, sizeof in, &in, sizeof ma, &ma, sizeof mb,
                                       &mb, sizeof m2, &m2, (size_t)0),
                         CLREMAT_OK);
        download(ctx, y1, r1, (size_t)n);
        download(ctx, y2, r2, (size_t)n);
        expect_same(r1, r2, n, "add8", 0);
        for (int i = 0; i < n; i++)
            ck_assert_msg(r2[i] == ha[i] + hb[i], "add8: element %d", i);
        /* dst = src, then dst += src (in place on y: y += y) */
        for (int acc = 0; acc < 2; acc++) {
            cl_int iacc = acc;
            ck_assert_int_eq(clremat_run1d(ctx, "clremat_copy_acc", n, sizeof in, &in, sizeof iacc, &iacc, sizeof m1,
                                           &m1, sizeof ma, &ma, (size_t)0),
                             CLREMAT_OK);
            ck_assert_int_eq(clremat_run1d(ctx, "clremat_copy_acc8", (n + 7) / 8, sizeof in, &in, sizeof iacc, &iacc,
                                           sizeof m2, &m2, sizeof ma, &ma, (size_t)0),
                             CLREMAT_OK);
            ck_assert_int_eq(clremat_run1d(ctx, "clremat_copy_acc", n, sizeof in, &in, sizeof iacc, &iacc, sizeof m1,
                                           &m1, sizeof m1, &m1, (size_t)0),
                             CLREMAT_OK);
            ck_assert_int_eq(clremat_run1d(ctx, "clremat_copy_acc8", (n + 7) / 8, sizeof in, &in, sizeof iacc, &iacc,
                                           sizeof m2, &m2, sizeof m2, &m2, (size_t)0),
                             CLREMAT_OK);
            download(ctx, y1, r1, (size_t)n);
            download(ctx, y2, r2, (size_t)n);
            expect_same(r1, r2, n, "copy_acc8", acc);
        }
        clremat_pool_release(ctx->pool, a);
        clremat_pool_release(ctx->pool, b);
        clremat_pool_release(ctx->pool, y1);
        clremat_pool_release(ctx->pool, y2);
        free(ha);
        free(hb);
        free(r1);
        free(r2);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* The column sums (the bias gradient) at every work-item width (1 to 8
 * blocks of eight columns per item: 1 is the GPU geometry, CPUs take up
 * to 8), on shapes with and without whole blocks and partial last items,
 * and within a wider matrix (leading dimension and offset, as attention's
 * projections sum part of a row): the host's sum of each column in row
 * order, bit for bit, for float32 and bfloat16 inputs; binary16 and the
 * fused update (SGD and Adam: parameter and states) the same bits at every
 * width; clremat_colsum (the device's own width) too. */
static const int colsum_shapes[][4] = { /* rows, cols, ld - cols, off */
    {1, 1, 0, 0},    {3, 7, 0, 0},     {5, 8, 0, 0},   {17, 63, 0, 0}, {33, 64, 0, 0},  {9, 65, 0, 0},
    {4, 127, 0, 0},  {256, 130, 0, 0}, {7, 200, 0, 0}, {64, 192, 0, 0}, {300, 1024, 0, 0}, {2, 1031, 0, 0},
    {20, 64, 128, 64}, {6, 67, 5, 3}};
static const int colsum_widths[] = {1, 2, 3, 5, 8};
#define N_COLSUM_SHAPES (sizeof colsum_shapes / sizeof colsum_shapes[0])
#define N_COLSUM_WIDTHS (sizeof colsum_widths / sizeof colsum_widths[0])

static clremat_buf *upload_bytes(clremat_ctx *ctx, const void *h, size_t bytes)
{
    clremat_buf *b = NULL;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, bytes, "test", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, b, 0, bytes, h), CLREMAT_OK);
    return b;
}

static void colsum_run(clremat_ctx *ctx, const int shape[4], int blocks, int fmt, clremat_buf *x, clremat_buf *y)
{
    cl_int ir = shape[0], ic = shape[1], ild = shape[1] + shape[2], ioff = shape[3], ib = blocks, ifmt = fmt;
    cl_int resume = 0; /* sums from 0, not continued */
    cl_mem mx = clremat_mem(x), my = clremat_mem(y);
    const int64_t items = (ic + 8 * blocks - 1) / (8 * blocks);
    if (fmt)
        ck_assert_int_eq(clremat_run1d(ctx, "clremat_colsum8_16", items, sizeof ir, &ir, sizeof ic, &ic, sizeof ild,
                                       &ild, sizeof ioff, &ioff, sizeof ib, &ib, sizeof ifmt, &ifmt, sizeof mx, &mx,
                                       sizeof my, &my, sizeof resume, &resume, (size_t)0),
                         CLREMAT_OK);
    else
        ck_assert_int_eq(clremat_run1d(ctx, "clremat_colsum8", items, sizeof ir, &ir, sizeof ic, &ic, sizeof ild, &ild,
                                       sizeof ioff, &ioff, sizeof ib, &ib, sizeof mx, &mx, sizeof my, &my,
                                       sizeof resume, &resume, (size_t)0),
                         CLREMAT_OK);
}

/* The fused update of p (and its states, kind 0 SGD, 1 Adam) from the
 * column sums of x (rows x cols) at the given width; p, s0, s1 read back
 * into out (3 x cols). */
static void colsum_upd_run(clremat_ctx *ctx, int rows, int cols, int blocks, int fmt, int kind, clremat_buf *x,
                           float *out)
{
    float *h = malloc(sizeof(float) * 3 * (size_t)cols);
    clremat_buf *b[3];
    cl_mem m[3], mx = clremat_mem(x);
    cl_int ir = rows, ic = cols, ib = blocks, ifmt = fmt, ik = kind;
    cl_float8 hp = {{0.01f, 0.9f, 0.999f, 1e-7f, 0.0f, 0.1f, 0.001f, 0.0f}};
    const int64_t items = (cols + 8 * blocks - 1) / (8 * blocks);
    for (int i = 0; i < 3; i++) {
        fill(h, cols, 11 + i);
        if (i == 2)
            for (int c = 0; c < cols; c++)
                h[c] = fabsf(h[c]); /* Adam's second moment */
        b[i] = upload(ctx, h, (size_t)cols);
        m[i] = clremat_mem(b[i]);
    }
    if (fmt)
        ck_assert_int_eq(clremat_run1d(ctx, "clremat_colsum8_upd16", items, sizeof ir, &ir, sizeof ic, &ic,
                                       sizeof ib, &ib, sizeof ifmt, &ifmt, sizeof mx, &mx, sizeof m[0], &m[0],
                                       sizeof m[1], &m[1], sizeof m[2], &m[2], sizeof hp, &hp, sizeof ik, &ik,
                                       (size_t)0),
                         CLREMAT_OK);
    else
        ck_assert_int_eq(clremat_run1d(ctx, "clremat_colsum8_upd", items, sizeof ir, &ir, sizeof ic, &ic, sizeof ib,
                                       &ib, sizeof mx, &mx, sizeof m[0], &m[0], sizeof m[1], &m[1], sizeof m[2],
                                       &m[2], sizeof hp, &hp, sizeof ik, &ik, (size_t)0),
                         CLREMAT_OK);
    for (int i = 0; i < 3; i++) {
        download(ctx, b[i], out + (size_t)i * (size_t)cols, (size_t)cols);
        clremat_pool_release(ctx->pool, b[i]);
    }
    free(h);
}

START_TEST(test_colsum_widths_bits)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (size_t si = 0; si < N_COLSUM_SHAPES; si++)
        for (int fmt = 0; fmt < 3; fmt++) {
            const int *sh = colsum_shapes[si], rows = sh[0], cols = sh[1], ld = sh[1] + sh[2], off = sh[3];
            const int dense = ld == cols && off == 0; /* the fused update's layout */
            const size_t n = (size_t)off + (size_t)rows * (size_t)ld;
            float *hx = malloc(sizeof(float) * n), *ref = calloc((size_t)cols, sizeof(float));
            float *r1 = malloc(sizeof(float) * (size_t)cols), *rw = malloc(sizeof(float) * (size_t)cols);
            float *u1 = malloc(sizeof(float) * 3 * (size_t)cols), *uw = malloc(sizeof(float) * 3 * (size_t)cols);
            uint16_t *h16 = malloc(sizeof(uint16_t) * n);
            clremat_buf *x, *y = upload(ctx, ref, (size_t)cols);
            fill(hx, (int)n, (int)si);
            for (size_t i = 0; i < n; i++) { /* bfloat16: the float's upper half, exactly its value widened */
                uint32_t u;
                memcpy(&u, &hx[i], sizeof u);
                h16[i] = (uint16_t)(u >> 16);
                if (fmt == 2) {
                    u &= 0xffff0000u;
                    memcpy(&hx[i], &u, sizeof u);
                }
            }
            x = fmt ? upload_bytes(ctx, h16, sizeof(uint16_t) * n) : upload(ctx, hx, n);
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++)
                    ref[c] += hx[(size_t)off + (size_t)r * (size_t)ld + (size_t)c];
            colsum_run(ctx, sh, 1, fmt, x, y);
            download(ctx, y, r1, (size_t)cols);
            if (fmt != 1) /* binary16's bits are not the float's: no host reference here */
                for (int c = 0; c < cols; c++)
                    ck_assert_msg(r1[c] == ref[c],
                                  "colsum %dx%d (ld %d, off %d) fmt %d: column %d is %a, the host's %a", rows, cols,
                                  ld, off, fmt, c, (double)r1[c], (double)ref[c]);
            for (size_t wi = 1; wi < N_COLSUM_WIDTHS; wi++) {
                const int w = colsum_widths[wi];
                colsum_run(ctx, sh, w, fmt, x, y);
                download(ctx, y, rw, (size_t)cols);
                ck_assert_msg(memcmp(r1, rw, sizeof(float) * (size_t)cols) == 0,
                              "colsum %dx%d (ld %d, off %d) fmt %d: width %d differs from width 1", rows, cols, ld, off,
                              fmt, w);
            }
            ck_assert_int_eq(clremat_colsum(ctx, "test", rows, cols, ld, off, x, fmt, y), CLREMAT_OK);
            download(ctx, y, rw, (size_t)cols);
            ck_assert_msg(memcmp(r1, rw, sizeof(float) * (size_t)cols) == 0,
                          "clremat_colsum %dx%d (ld %d, off %d) fmt %d: not the kernel's sums", rows, cols, ld, off,
                          fmt);
            for (int kind = 0; dense && kind < 2; kind++) {
                colsum_upd_run(ctx, rows, cols, 1, fmt, kind, x, u1);
                for (size_t wi = 1; wi < N_COLSUM_WIDTHS; wi++) {
                    colsum_upd_run(ctx, rows, cols, colsum_widths[wi], fmt, kind, x, uw);
                    ck_assert_msg(memcmp(u1, uw, sizeof(float) * 3 * (size_t)cols) == 0,
                                  "fused bias update %dx%d fmt %d kind %d: width %d differs from width 1", rows, cols,
                                  fmt, kind, colsum_widths[wi]);
                }
            }
            clremat_pool_release(ctx->pool, x);
            clremat_pool_release(ctx->pool, y);
            free(hx);
            free(ref);
            free(r1);
            free(rw);
            free(u1);
            free(uw);
            free(h16);
        }
    { /* no rows: every sum is 0; a leading dimension below cols is refused */
        float ones[20], got[20];
        clremat_buf *x, *y;
        for (int c = 0; c < 20; c++)
            ones[c] = 1.0f;
        x = upload(ctx, ones, 20);
        y = upload(ctx, ones, 20);
        ck_assert_int_eq(clremat_colsum(ctx, "test", 0, 20, 20, 0, x, 0, y), CLREMAT_OK);
        download(ctx, y, got, 20);
        for (int c = 0; c < 20; c++)
            ck_assert_msg(got[c] == 0.0f, "colsum of 0 rows: column %d is %g", c, (double)got[c]);
        ck_assert_int_eq(clremat_colsum(ctx, "test", 1, 20, 19, 0, x, 0, y), CLREMAT_ERR_INVALID_ARGUMENT);
        ck_assert_int_ne(clremat_colsum(ctx, "test", 2, 20, 20, 1, x, 0, y), CLREMAT_OK); /* past x's end */
        clremat_pool_release(ctx->pool, x);
        clremat_pool_release(ctx->pool, y);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_gelu_exp_form)
{
    enum { N = 60001 };
    clremat_ctx *ctx;
    float *hx = malloc(sizeof(float) * N), *r8 = malloc(sizeof(float) * N), *r1 = malloc(sizeof(float) * N);
    float *rb = malloc(sizeof(float) * N);
    clremat_buf *x, *y8, *y1, *yb, *pre;
    cl_int n = N, act = CLREMAT_ACT_GELU_TANH, units = 7, no_bias = 0;
    cl_mem mx, m8, m1, mb, mp;
    TEST_OPEN_CTX(ctx, 0);
    for (int i = 0; i < N; i++)
        hx[i] = -30.0f + 60.0f * (float)i / (float)(N - 1);
    x = upload(ctx, hx, N);
    pre = upload(ctx, hx, N);
    y8 = upload(ctx, hx, N);
    y1 = upload(ctx, hx, N);
    yb = upload(ctx, hx, N);
    mx = clremat_mem(x);
    mp = clremat_mem(pre);
    m8 = clremat_mem(y8);
    m1 = clremat_mem(y1);
    mb = clremat_mem(yb);
    ck_assert_int_eq(clremat_run1d(ctx, "clremat_act_fwd8", (N + 7) / 8, sizeof n, &n, sizeof act, &act, sizeof mx,
                                   &mx, sizeof m8, &m8, (size_t)0),
                     CLREMAT_OK);
    ck_assert_int_eq(clremat_run1d(ctx, "clremat_act_fwd", N, sizeof n, &n, sizeof act, &act, sizeof mx, &mx,
                                   sizeof m1, &m1, (size_t)0),
                     CLREMAT_OK);
    ck_assert_int_eq(clremat_run1d(ctx, "clremat_bias_act8", (N + 7) / 8, sizeof n, &n, sizeof units, &units,
                                   sizeof no_bias, &no_bias, sizeof act, &act, sizeof mx, &mx, sizeof mp, &mp,
                                   sizeof mb, &mb, (size_t)0),
                     CLREMAT_OK);
    download(ctx, y8, r8, N);
    download(ctx, y1, r1, N);
    download(ctx, yb, rb, N);
    expect_same(r8, r1, N, "gelu: act_fwd8 vs act_fwd", 0);
    expect_same(r8, rb, N, "gelu: act_fwd8 vs bias_act8", 0);
    for (int i = 0; i < N; i++) {
        /* 0.5 v (1 + tanh(u)) = v / (1 + exp(-2u)), the second without
         * the cancellation of 1 + tanh(u) for negative v; the float
         * argument -2u carries a relative rounding of a few 2^-24, which
         * exp turns into |2u| times that relative error of the result */
        const double v = hx[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
        const double ref = v / (1.0 + exp(-2.0 * u)), tol = (4e-7 + 3e-7 * fabs(2.0 * u)) * fabs(ref) + 1e-36;
        ck_assert_msg(fabs((double)r8[i] - ref) <= tol, "gelu(%.9g) = %.9g, expected %.9g", v, (double)r8[i], ref);
        if (v > -3.0) /* where the tanh form is accurate in double: the same function */
            ck_assert_msg(fabs(ref - 0.5 * v * (1.0 + tanh(u))) <= 1e-12 * fabs(ref) + 1e-15, "reference at %g", v);
    }
    clremat_pool_release(ctx->pool, x);
    clremat_pool_release(ctx->pool, pre);
    clremat_pool_release(ctx->pool, y8);
    clremat_pool_release(ctx->pool, y1);
    clremat_pool_release(ctx->pool, yb);
    free(hx);
    free(r8);
    free(r1);
    free(rb);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* The activations-mode plan of a bundled model: no RECOMPUTE_ACT of any
 * layer whose output only a multiply or a layernorm reads in the backward,
 * and at least want fused reads. */
static void expect_fused_reads(const char *file, int want)
{
    char path[1024];
    const char *dir = getenv("CLREMAT_MODELS");
    clremat_graph *g = NULL;
    clremat_policy pol;
    clremat_plan plan;
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "models", file);
    ck_assert_msg(clremat_graph_load(path, &g) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(clremat_policy_parse("activations", &pol), CLREMAT_OK);
    ck_assert_msg(clremat_plan_for(g, 4, &pol, 2 | CLREMAT_PLAN_FUSED_UPDATE, 0, NULL, &plan, NULL) == CLREMAT_OK,
                  "%s: %s", file, clremat_last_error());
    ck_assert_msg(plan.n_fused_act_reads >= want, "%s: %d fused activation reads, expected at least %d", file,
                  plan.n_fused_act_reads, want);
    for (int i = 0; i < plan.n_actions; i++)
        if (plan.actions[i].kind == CLREMAT_ACT_RECOMPUTE_ACT) {
            const int P = plan.actions[i].layer;
            for (int l = 0; l < g->n_layers; l++)
                for (int j = 0; j < g->layers[l].n_inputs; j++)
                    ck_assert_msg(g->layers[l].inputs[j] != P || (g->layers[l].type != CLREMAT_MULTIPLY &&
                                                                   g->layers[l].type != CLREMAT_LAYERNORM),
                                  "%s: %s recomputed for %s", file, g->layers[P].name, g->layers[l].name);
        }
    clremat_plan_free(&plan);
    clremat_graph_free(g);
}

START_TEST(test_fused_reads_multiply_layernorm)
{
    expect_fused_reads("llama_tiny.json", 4); /* the gate of each decoder block's SwiGLU */
    expect_fused_reads("resnet_mlp.json", 1); /* the stem, read by res_block_0/ln */
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("kernels8", 300, &tc);
    if (!test_have_device()) { /* the planner part needs no device */
        tcase_add_test(tc, test_fused_reads_multiply_layernorm);
        return test_run_suite(s);
    }
    tcase_add_test(tc, test_fused_reads_multiply_layernorm);
    tcase_add_test(tc, test_dropout8_bits);
    tcase_add_test(tc, test_add_copy8_bits);
    tcase_add_test(tc, test_colsum_widths_bits);
    tcase_add_test(tc, test_gelu_exp_form);
    return test_run_device_suite(s);
}
