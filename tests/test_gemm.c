/* test_gemm.c: clremat_gemm against a double-precision host GEMM: all four
 * transpose combinations, odd sizes, offsets, padded leading dimensions,
 * batches, alpha/beta (beta 0 ignores NaN in C), untouched memory around C,
 * bitwise determinism, and rejection of operands outside their buffers.
 * Every case runs on both GEMM paths (native kernels and CLBlast, with the
 * CLBlast workspace taken from the pool), and the dense epilogue (bias and
 * activation fused into the GEMM) is checked against the reference and
 * against the activation recompute kernel bit for bit. The native kernel's
 * two register tiles give the same bits on every product kind. Skips (77)
 * without a device. */
#include "testutil.h"
#include "layers.h"
#include "gemm.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Small deterministic generator for test data. */
static uint32_t lcg_state = 12345u;
static float frand(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)((lcg_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

typedef struct gcase {
    int tA, tB;
    int64_t M, N, K;
    int64_t offA, offB, offC, pad;   /* pad: extra leading-dim floats */
    int64_t batch;
    float alpha, beta;
} gcase;

static clremat_buf *upload(clremat_ctx *ctx, const float *h, size_t n)
{
    clremat_buf *b;
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, n * sizeof(float), "test", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, b, 0, n * sizeof(float), h), CLREMAT_OK);
    return b;
}

/* Runs one case and compares with the host reference; returns C as computed. */
static void run_case(clremat_ctx *ctx, const gcase *c)
{
    const int64_t ar = c->tA ? c->K : c->M, ac = c->tA ? c->M : c->K;
    const int64_t br = c->tB ? c->N : c->K, bc = c->tB ? c->K : c->N;
    const int64_t lda = ac + c->pad, ldb = bc + c->pad, ldc = c->N + c->pad;
    const int64_t sa = ar * lda + 3, sb = br * ldb + 1, sc = c->M * ldc + 2;
    const size_t na = (size_t)(c->offA + c->batch * sa), nb = (size_t)(c->offB + c->batch * sb);
    const size_t nc = (size_t)(c->offC + c->batch * sc);
    float *ha = malloc(na * sizeof(float)), *hb = malloc(nb * sizeof(float));
    float *hc = malloc(nc * sizeof(float)), *out = malloc(nc * sizeof(float)), *out2 = malloc(nc * sizeof(float));
    clremat_buf *A, *B, *C;
    char what[160];
    snprintf(what, sizeof what, "tA=%d tB=%d M=%lld N=%lld K=%lld batch=%lld alpha=%g beta=%g", c->tA, c->tB,
             (long long)c->M, (long long)c->N, (long long)c->K, (long long)c->batch, c->alpha, c->beta);
    for (size_t i = 0; i < na; i++)
        ha[i] = frand();
    for (size_t i = 0; i < nb; i++)
        hb[i] = frand();
    for (size_t i = 0; i < nc; i++)
        hc[i] = c->beta == 0.0f ? NAN : frand();
    A = upload(ctx, ha, na);
    B = upload(ctx, hb, nb);
    C = upload(ctx, hc, nc);
    {
        /* the workspace the path needs comes from the pool, as in a step */
        size_t ws = 0;
        for (int64_t z = 0; z < c->batch; z++) {
            size_t w = clremat_gemm_workspace(ctx, c->tA, c->tB, c->M, c->N, c->K, c->offA + z * sa, lda, sa,
                                              c->offB + z * sb, ldb, sb, c->offC + z * sc, ldc, sc, c->batch);
            ws = w > ws ? w : ws;
        }
        ctx->gemm_ws = NULL;
        if (ws)
            ck_assert_int_eq(clremat_pool_alloc(ctx->pool, ws, "gemm workspace", &ctx->gemm_ws), CLREMAT_OK);
    }
    ck_assert_int_eq(clremat_gemm(ctx, c->tA, c->tB, c->M, c->N, c->K, c->alpha, A, c->offA, lda, sa, B, c->offB,
                                  ldb, sb, c->beta, C, c->offC, ldc, sc, c->batch), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, C, 0, nc * sizeof(float), out), CLREMAT_OK);
    /* every float not inside a C matrix is untouched */
    {
        char *inside = calloc(nc, 1);
        for (int64_t z = 0; z < c->batch; z++)
            for (int64_t m = 0; m < c->M; m++)
                for (int64_t n = 0; n < c->N; n++)
                    inside[c->offC + z * sc + m * ldc + n] = 1;
        for (size_t i = 0; i < nc; i++)
            if (!inside[i])
                ck_assert_msg(memcmp(&out[i], &hc[i], sizeof(float)) == 0, "%s: float %zu outside C changed",
                              what, i);
        free(inside);
    }
    for (int64_t z = 0; z < c->batch; z++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t n = 0; n < c->N; n++) {
                double acc = 0, mag = 0, ref, got;
                for (int64_t k = 0; k < c->K; k++) {
                    double a = c->tA ? ha[c->offA + z * sa + k * lda + m] : ha[c->offA + z * sa + m * lda + k];
                    double b = c->tB ? hb[c->offB + z * sb + n * ldb + k] : hb[c->offB + z * sb + k * ldb + n];
                    acc += a * b;
                    mag += fabs(a * b);
                }
                ref = c->alpha * acc;
                if (c->beta != 0.0f)
                    ref += (double)c->beta * hc[c->offC + z * sc + m * ldc + n];
                got = out[c->offC + z * sc + m * ldc + n];
                ck_assert_msg(isfinite(got) && fabs(got - ref) <= 1e-5 * (1.0 + fabs(c->alpha) * mag + 2.0),
                              "%s: C[%lld][%lld][%lld] = %.9g, reference %.9g", what, (long long)z, (long long)m,
                              (long long)n, got, ref);
            }
    /* same inputs, same bits */
    ck_assert_int_eq(clremat_write(ctx, C, 0, nc * sizeof(float), hc), CLREMAT_OK);
    ck_assert_int_eq(clremat_gemm(ctx, c->tA, c->tB, c->M, c->N, c->K, c->alpha, A, c->offA, lda, sa, B, c->offB,
                                  ldb, sb, c->beta, C, c->offC, ldc, sc, c->batch), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, C, 0, nc * sizeof(float), out2), CLREMAT_OK);
    ck_assert_msg(memcmp(out, out2, nc * sizeof(float)) == 0, "%s: not deterministic", what);
    clremat_pool_release(ctx->pool, A);
    clremat_pool_release(ctx->pool, B);
    clremat_pool_release(ctx->pool, C);
    clremat_pool_release(ctx->pool, ctx->gemm_ws);
    ctx->gemm_ws = NULL;
    free(ha);
    free(hb);
    free(hc);
    free(out);
    free(out2);
}

static const int64_t sizes[][3] = {
    {1, 1, 1}, {7, 13, 5}, {65, 33, 129}, {32, 32, 32}, {33, 1, 17}, {1, 40, 3}, {16, 48, 0},
    {150, 145, 300}, /* several native blocks in M, N and K, ragged edges */
    {333, 300, 280}, /* more rows and columns than the largest native block: evenly split blocks */
    {40, 1000, 70},  /* one row block, 8 column blocks walked by column groups of several (the last ragged) */
};

/* Loop index of the path-parameterized tests: bit 0 selects CLBlast. */
static void open_on_path(clremat_ctx **ctx, int clblast)
{
    TEST_OPEN_CTX(*ctx, 0);
    ck_assert_int_eq(clremat_ctx_set_gemm(*ctx, clblast ? CLREMAT_GEMM_CLBLAST : CLREMAT_GEMM_NATIVE), CLREMAT_OK);
    ck_assert_int_eq(clremat_ctx_gemm(*ctx), clblast ? CLREMAT_GEMM_CLBLAST : CLREMAT_GEMM_NATIVE);
}

START_TEST(test_transposes_and_sizes)
{
    clremat_ctx *ctx;
    const int t = _i >> 1; /* loop index: transpose combination and path */
    open_on_path(&ctx, _i & 1);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        gcase c = {t & 1, (t >> 1) & 1, sizes[s][0], sizes[s][1], sizes[s][2], 0, 0, 0, 0, 1, 1.0f, 0.0f};
        if (test_reduced() && sizes[s][0] * sizes[s][1] * sizes[s][2] > 10000000)
            continue; /* the 333x300x280 case would take Oclgrind hours; 150x145x300 stays */
        run_case(ctx, &c);
        c.beta = 1.0f;
        c.alpha = -0.5f;
        run_case(ctx, &c);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_offsets_batches)
{
    clremat_ctx *ctx;
    if (_i == 2) /* CLBlast with its indirect kernels (workspace) for every size */
        setenv("CLREMAT_CLBLAST_MIN_INDIRECT", "1", 1);
    open_on_path(&ctx, _i & 1 || _i == 2);
    for (int t = 0; t < 4; t++) {
        gcase c = {t & 1, t >> 1, 9, 37, 21, 5, 3, 7, 2, 3, 1.5f, 0.0f};
        run_case(ctx, &c);
        c.beta = 1.0f;
        run_case(ctx, &c);
        c.beta = 0.25f;
        c.M = 40;
        c.N = 3;
        c.K = 70;
        c.batch = 2;
        run_case(ctx, &c);
        c.M = 150, c.N = 145, c.K = 300, c.batch = 1, c.pad = 3;
        run_case(ctx, &c);
    }
    clremat_ctx_destroy(ctx);
    unsetenv("CLREMAT_CLBLAST_MIN_INDIRECT");
}
END_TEST

START_TEST(test_rejects_out_of_bounds)
{
    clremat_ctx *ctx;
    clremat_buf *a, *b, *c;
    open_on_path(&ctx, _i & 1);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, 4 * 4 * sizeof(float), "a", &a), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, 4 * 4 * sizeof(float), "b", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, 4 * 4 * sizeof(float), "c", &c), CLREMAT_OK);
    ck_assert_int_eq(clremat_gemm(ctx, 0, 0, 4, 4, 4, 1, a, 0, 4, 0, b, 0, 4, 0, 0, c, 0, 4, 0, 1), CLREMAT_OK);
    ck_assert_int_eq(clremat_gemm(ctx, 0, 0, 4, 4, 4, 1, a, 1, 4, 0, b, 0, 4, 0, 0, c, 0, 4, 0, 1),
                     CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_ctx_last_error(ctx), "gemm: A"));
    ck_assert_int_eq(clremat_gemm(ctx, 0, 0, 4, 4, 4, 1, a, 0, 4, 0, b, 0, 3, 0, 0, c, 0, 4, 0, 1),
                     CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_gemm(ctx, 0, 0, 4, 4, 4, 1, a, 0, 4, 0, b, 0, 4, 0, 0, c, 0, 4, 16, 2),
                     CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_ctx_last_error(ctx), "gemm: C"));
    ck_assert_int_eq(clremat_finish(ctx), CLREMAT_OK);
    clremat_pool_release(ctx->pool, a);
    clremat_pool_release(ctx->pool, b);
    clremat_pool_release(ctx->pool, c);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* clremat_gemm_dense: pre = x W + b, out = act(pre), against a double
 * reference; out equals the activation recompute kernel run on pre, bit
 * for bit (what the activations remat mode relies on). */
START_TEST(test_dense_epilogue)
{
    static const int acts[] = {CLREMAT_ACT_NONE, CLREMAT_ACT_GELU_TANH, CLREMAT_ACT_RELU, CLREMAT_ACT_SIGMOID};
    const int64_t rows = 37, in = 300, units = 150;
    clremat_ctx *ctx;
    float *hx = malloc(sizeof(float) * rows * in), *hw = malloc(sizeof(float) * in * units), hb[150];
    float *pre = malloc(sizeof(float) * rows * units), *out = malloc(sizeof(float) * rows * units);
    float *rec = malloc(sizeof(float) * rows * units);
    clremat_buf *X, *W, *Bb, *P, *O, *R;
    open_on_path(&ctx, _i & 1);
    for (int64_t i = 0; i < rows * in; i++)
        hx[i] = frand();
    for (int64_t i = 0; i < in * units; i++)
        hw[i] = frand() * 0.1f;
    for (int64_t i = 0; i < units; i++)
        hb[i] = frand();
    X = upload(ctx, hx, (size_t)(rows * in));
    W = upload(ctx, hw, (size_t)(in * units));
    Bb = upload(ctx, hb, (size_t)units);
    P = upload(ctx, hx, (size_t)(rows * units));
    O = upload(ctx, hx, (size_t)(rows * units));
    R = upload(ctx, hx, (size_t)(rows * units));
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        size_t ws = clremat_gemm_workspace(ctx, 0, 0, rows, units, in, 0, in, 0, 0, units, 0, 0, units, 0, 1);
        ctx->gemm_ws = NULL;
        if (ws)
            ck_assert_int_eq(clremat_pool_alloc(ctx->pool, ws, "gemm workspace", &ctx->gemm_ws), CLREMAT_OK);
        ck_assert_int_eq(clremat_gemm_dense(ctx, rows, in, units, X, W, Bb, acts[a], P, acts[a] ? O : NULL),
                         CLREMAT_OK);
        ck_assert_int_eq(clremat_read(ctx, P, 0, sizeof(float) * rows * units, pre), CLREMAT_OK);
        for (int64_t m = 0; m < rows; m++)
            for (int64_t n = 0; n < units; n++) {
                double acc = hb[n], mag = fabs(hb[n]);
                for (int64_t k = 0; k < in; k++) {
                    acc += (double)hx[m * in + k] * hw[k * units + n];
                    mag += fabs((double)hx[m * in + k] * hw[k * units + n]);
                }
                ck_assert_msg(fabs(pre[m * units + n] - acc) <= 1e-5 * (mag + 1.0), "act %d: pre[%lld][%lld] = %.9g, "
                              "reference %.9g", acts[a], (long long)m, (long long)n, pre[m * units + n], acc);
            }
        if (acts[a]) {
            cl_int n = (cl_int)(rows * units), act = acts[a];
            cl_mem mp = clremat_mem(P), mr = clremat_mem(R);
            size_t global = (size_t)(n + 7) / 8;
            cl_kernel k;
            ck_assert_int_eq(clremat_kernel(ctx, "clremat_act_fwd8", &k), CLREMAT_OK);
            ck_assert_int_eq(clremat_set_args(ctx, k, "clremat_act_fwd8", sizeof n, &n, sizeof act, &act, sizeof mp,
                                              &mp, sizeof mr, &mr, (size_t)0), CLREMAT_OK);
            ck_assert_int_eq(clremat_launch(ctx, k, "clremat_act_fwd8", 1, &global, NULL), CLREMAT_OK);
            ck_assert_int_eq(clremat_read(ctx, O, 0, sizeof(float) * rows * units, out), CLREMAT_OK);
            ck_assert_int_eq(clremat_read(ctx, R, 0, sizeof(float) * rows * units, rec), CLREMAT_OK);
            ck_assert_msg(memcmp(out, rec, sizeof(float) * rows * units) == 0,
                          "act %d: fused activation differs from act(pre) recomputed", acts[a]);
        }
        clremat_pool_release(ctx->pool, ctx->gemm_ws);
        ctx->gemm_ws = NULL;
    }
    clremat_pool_release(ctx->pool, X);
    clremat_pool_release(ctx->pool, W);
    clremat_pool_release(ctx->pool, Bb);
    clremat_pool_release(ctx->pool, P);
    clremat_pool_release(ctx->pool, O);
    clremat_pool_release(ctx->pool, R);
    free(hx);
    free(hw);
    free(pre);
    free(out);
    free(rec);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* On the CLBlast path a GEMM whose workspace was not provided fails with a
 * message instead of letting CLBlast allocate outside the pool. */
START_TEST(test_clblast_workspace_enforced)
{
    const int64_t n = 515; /* not a multiple of CLBlast's tiles: padding needs a workspace */
    setenv("CLREMAT_CLBLAST_MIN_INDIRECT", "1", 1); /* indirect kernels even for small GEMMs */
    clremat_ctx *ctx;
    clremat_buf *a, *b, *c;
    size_t ws;
    open_on_path(&ctx, 1);
    ws = clremat_gemm_workspace(ctx, 1, 0, n, n, n, 0, n, 0, 0, n, 0, 0, n, 0, 1);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (size_t)(n * n) * sizeof(float), "a", &a), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (size_t)(n * n) * sizeof(float), "b", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (size_t)(n * n) * sizeof(float), "c", &c), CLREMAT_OK);
    ck_assert_uint_gt(ws, 0);
    {
        ctx->gemm_ws = NULL;
        ck_assert_int_eq(clremat_gemm(ctx, 1, 0, n, n, n, 1, a, 0, n, 0, b, 0, n, 0, 0, c, 0, n, 0, 1),
                         CLREMAT_ERR_INTERNAL);
        ck_assert_ptr_nonnull(strstr(clremat_ctx_last_error(ctx), "workspace"));
    }
    clremat_pool_release(ctx->pool, a);
    clremat_pool_release(ctx->pool, b);
    clremat_pool_release(ctx->pool, c);
    clremat_ctx_destroy(ctx);
    unsetenv("CLREMAT_CLBLAST_MIN_INDIRECT");
}
END_TEST

/* Path names parse; CLREMAT_GEMM forces the path of a new context; the
 * cache file round-trips, a file of the previous format version (same
 * device and driver) or a corrupt one is ignored, and a fresh context with
 * an empty cache calibrates, caches its decision (the one
 * clremat_gemm_decide makes from the recorded times) and reads it back; on a
 * device that is not a CPU it takes CLBlast and writes nothing. */
/* Removes a test's cache folder and the XDG_CACHE_HOME pointing at it. */
static void rmdir_cache(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    unsetenv("XDG_CACHE_HOME");
}

START_TEST(test_path_parse_and_cache)
{
    clremat_gemm_path p;
    clremat_ctx *ctx;
    char dir[256];
    /* Under Oclgrind (tests/run-oclgrind.sh sets CLREMAT_TEST_OCLGRIND) a
     * calibration's 256^3 products on both paths take hours: the cache
     * checks run, the two calibrations do not (they time host code; the
     * kernels they run are checked by the other cases). */
    const int simulated = getenv("CLREMAT_TEST_OCLGRIND") != NULL;
    ck_assert_int_eq(clremat_gemm_path_parse("native", &p), CLREMAT_OK);
    ck_assert_int_eq(p, CLREMAT_GEMM_NATIVE);
    ck_assert_int_eq(clremat_gemm_path_parse("clblast", &p), CLREMAT_OK);
    ck_assert_int_eq(p, CLREMAT_GEMM_CLBLAST);
    ck_assert_int_eq(clremat_gemm_path_parse("cublas", &p), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "native"));
    ck_assert_str_eq(clremat_gemm_path_name(CLREMAT_GEMM_CLBLAST), "clblast");
    setenv("CLREMAT_GEMM", "clblast", 1);
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_ctx_gemm(ctx), CLREMAT_GEMM_CLBLAST);
    clremat_ctx_destroy(ctx);
    unsetenv("CLREMAT_GEMM");
    /* a private cache directory: missing, stored, corrupt, other driver */
    snprintf(dir, sizeof dir, "/tmp/clremat-test-cache-%d", (int)getpid());
    setenv("XDG_CACHE_HOME", dir, 1);
    TEST_OPEN_CTX(ctx, 0);
    {
        double nat, clb;
        char path[4200];
        FILE *f;
        ck_assert_int_eq(clremat_gemm_cache_file(ctx, path, sizeof path), 1);
        ck_assert_ptr_nonnull(strstr(path, dir));
        ck_assert_int_eq(clremat_gemm_cache_load(ctx), 0);
        ck_assert_int_eq(clremat_gemm_cache_store(ctx, CLREMAT_GEMM_CLBLAST, 1.0, 2.0), 0);
        ck_assert_int_eq(clremat_gemm_cache_load(ctx), CLREMAT_GEMM_CLBLAST);
        f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs("clremat-gemm-cache 1\ndevice \x01garbage\npath clblast\n", f);
        fclose(f);
        ck_assert_int_eq(clremat_gemm_cache_load(ctx), 0); /* names another device: recalibrate */
        f = fopen(path, "w");
        fputs("\xff\xfe not a cache", f);
        fclose(f);
        ck_assert_int_eq(clremat_gemm_cache_load(ctx), 0);
        /* the previous rule's file for this very device and driver */
        f = fopen(path, "w");
        fprintf(f, "clremat-gemm-cache %d\ndevice %s\ndriver %s\npath clblast\n", CLREMAT_GEMM_CAL_VERSION - 1,
                ctx->info.name, ctx->info.driver_version);
        fclose(f);
        ck_assert_int_eq(clremat_gemm_cache_load(ctx), 0);
        if (simulated) { /* see below */
            clremat_ctx_destroy(ctx);
            rmdir_cache(dir);
            return;
        }
        ck_assert_int_eq(clremat_gemm_calibrate(ctx, &nat, &clb), CLREMAT_OK);
        ck_assert(nat > 0);
        ck_assert(clb > 0);
        ck_assert_int_eq(remove(path), 0);
    }
    clremat_ctx_destroy(ctx);
    /* a fresh context on an empty cache: AUTO calibrates and writes the file
     * on a CPU device; elsewhere it takes CLBlast without calibrating */
    TEST_OPEN_CTX(ctx, 0);
    if (strcmp(ctx->info.type, "cpu") != 0) {
        char path[4200];
        ck_assert_int_eq(clremat_ctx_gemm(ctx), CLREMAT_GEMM_CLBLAST);
        ck_assert_int_eq(clremat_gemm_cache_file(ctx, path, sizeof path), 1);
        ck_assert_msg(access(path, F_OK) != 0, "%s: a %s device calibrated (%s)", ctx->info.name, ctx->info.type,
                      path);
    } else {
        char path[4200], text[4096];
        double nat[CLREMAT_GEMM_CAL_SHAPES], clb[CLREMAT_GEMM_CAL_SHAPES];
        _Static_assert(CLREMAT_GEMM_CAL_SHAPES == 4, "the sscanf calls below read four times");
        clremat_gemm_path got = clremat_ctx_gemm(ctx);
        size_t n;
        FILE *f;
        const char *p;
        ck_assert(got == CLREMAT_GEMM_NATIVE || got == CLREMAT_GEMM_CLBLAST);
        ck_assert_int_eq(clremat_gemm_cache_file(ctx, path, sizeof path), 1);
        ck_assert_int_eq(clremat_gemm_cache_load(ctx), (int)got);
        f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        /* the recorded per-shape times give the same decision */
        p = strstr(text, "\nnative_ms ");
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(sscanf(p, " native_ms %lf %lf %lf %lf", &nat[0], &nat[1], &nat[2], &nat[3]), 4);
        p = strstr(text, "\nclblast_ms ");
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(sscanf(p, " clblast_ms %lf %lf %lf %lf", &clb[0], &clb[1], &clb[2], &clb[3]), 4);
        ck_assert_int_eq(clremat_gemm_decide(nat, clb, CLREMAT_GEMM_CAL_SHAPES), (int)got);
        fprintf(stderr, "%s: calibration picked %s:\n%s", ctx->info.name, clremat_gemm_path_name(got), text);
    }
    clremat_ctx_destroy(ctx);
    rmdir_cache(dir);
}
END_TEST

/* Runs the tile test's products on a fresh native context opened with
 * $CLREMAT_GEMM_TILE = tile and returns their results, concatenated:
 * plain GEMMs in all four transposes with edges and K over one k-block,
 * the dense epilogue (bias, GELU), the activation applied while packing A
 * (both transposes of A) and the fused SGD update. */
static float *tile_results(const char *tile, int mr, size_t *n_out)
{
    static const int shapes[][5] = {{0, 0, 333, 77, 300}, {0, 1, 45, 290, 513}, {1, 0, 130, 64, 257},
                                    {1, 1, 29, 35, 31}};
    const int64_t M = 70, N = 50, K = 200;
    const float hp[8] = {0.01f, 0.9f, 0, 0, 0.001f, 0, 0, 0};
    size_t n = 0, cap = 0;
    float *res = NULL, *h;
    clremat_ctx *ctx;
    clremat_buf *A, *B, *C, *D, *E;
    ck_assert_int_eq(setenv("CLREMAT_GEMM_TILE", tile, 1), 0);
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_ctx_set_gemm(ctx, CLREMAT_GEMM_NATIVE), CLREMAT_OK);
    ck_assert_int_eq(ctx->gemm_mr, mr);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        cap += (size_t)shapes[i][2] * (size_t)shapes[i][3];
    cap += 2 * 37 * 150 + 3 * (size_t)(M * N);
    res = malloc(cap * sizeof(float));
    h = malloc(600 * 600 * sizeof(float));
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int tA = shapes[i][0], tB = shapes[i][1], m = shapes[i][2], nn = shapes[i][3], k = shapes[i][4];
        lcg_state = 777u + (uint32_t)i;
        for (int j = 0; j < 600 * 600; j++)
            h[j] = frand();
        A = upload(ctx, h, (size_t)m * k);
        B = upload(ctx, h + 1000, (size_t)k * nn);
        C = upload(ctx, h + 2000, (size_t)m * nn);
        ck_assert_int_eq(clremat_gemm(ctx, tA, tB, m, nn, k, 1.0f, A, 0, tA ? m : k, 0, B, 0, tB ? k : nn, 0, 0.5f, C,
                                      0, nn, 0, 1), CLREMAT_OK);
        ck_assert_int_eq(clremat_read(ctx, C, 0, (size_t)m * nn * sizeof(float), res + n), CLREMAT_OK);
        n += (size_t)m * nn;
        clremat_pool_release(ctx->pool, A);
        clremat_pool_release(ctx->pool, B);
        clremat_pool_release(ctx->pool, C);
    }
    lcg_state = 4242u;
    for (int j = 0; j < 600 * 600; j++)
        h[j] = frand();
    /* dense: 37 x 300 times 300 x 150, bias, GELU: pre and out */
    A = upload(ctx, h, 37 * 300);
    B = upload(ctx, h + 20000, 300 * 150);
    E = upload(ctx, h + 70000, 150);
    C = upload(ctx, h, 37 * 150);
    D = upload(ctx, h, 37 * 150);
    ck_assert_int_eq(clremat_gemm_dense(ctx, 37, 300, 150, A, B, E, CLREMAT_ACT_GELU_TANH, C, D), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, C, 0, 37 * 150 * sizeof(float), res + n), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, D, 0, 37 * 150 * sizeof(float), res + n + 37 * 150), CLREMAT_OK);
    n += 2 * 37 * 150;
    clremat_pool_release(ctx->pool, A);
    clremat_pool_release(ctx->pool, B);
    clremat_pool_release(ctx->pool, E);
    clremat_pool_release(ctx->pool, C);
    clremat_pool_release(ctx->pool, D);
    /* act(A) packed: op(A) of M x K with A stored K x M (tA) and M x K */
    A = upload(ctx, h + 100000, (size_t)(M * K));
    B = upload(ctx, h + 200000, (size_t)(K * N));
    C = upload(ctx, h, (size_t)(M * N));
    for (int tA = 0; tA < 2; tA++) {
        ck_assert_int_eq(clremat_gemm_acta_native(ctx, tA, 0, M, N, K, CLREMAT_ACT_GELU_TANH, A, tA ? M : K, B, N, C),
                         CLREMAT_OK);
        ck_assert_int_eq(clremat_read(ctx, C, 0, (size_t)(M * N) * sizeof(float), res + n), CLREMAT_OK);
        n += (size_t)(M * N);
    }
    /* the fused SGD update (K within one k-block): param C, momentum D */
    D = upload(ctx, h + 300000, (size_t)(M * N));
    ck_assert_int_eq(clremat_gemm_update_native(ctx, 1, 0, M, N, K < ctx->gemm_kc ? K : ctx->gemm_kc, A, M, B, N, C,
                                                D, NULL, 0, hp, 0), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, C, 0, (size_t)(M * N) * sizeof(float), res + n), CLREMAT_OK);
    n += (size_t)(M * N);
    clremat_pool_release(ctx->pool, A);
    clremat_pool_release(ctx->pool, B);
    clremat_pool_release(ctx->pool, C);
    clremat_pool_release(ctx->pool, D);
    clremat_ctx_destroy(ctx);
    free(h);
    ck_assert_uint_eq(n, cap);
    *n_out = n;
    return res;
}

/* The native kernel's two register tiles ($CLREMAT_GEMM_TILE 6x16 and
 * 12x32) give the same bits on every product kind (each C element sums
 * its k products in the same order within the same k-blocks), and an
 * unknown tile is refused when a context opens, naming the variable. */
START_TEST(test_register_tiles_same_bits)
{
    const char *saved = getenv("CLREMAT_GEMM_TILE");
    char *keep = saved ? strdup(saved) : NULL;
    size_t n6, n12;
    float *r6 = tile_results("6x16", 6, &n6), *r12 = tile_results("12x32", 12, &n12);
    clremat_ctx *ctx = NULL;
    int st;
    ck_assert_uint_eq(n6, n12);
    for (size_t i = 0; i < n6; i++)
        ck_assert_msg(memcmp(&r6[i], &r12[i], sizeof(float)) == 0, "element %zu: %.9g (6x16) vs %.9g (12x32)", i,
                      r6[i], r12[i]);
    ck_assert_int_eq(setenv("CLREMAT_GEMM_TILE", "7x7", 1), 0);
    st = clremat_ctx_create(getenv("CLREMAT_TEST_DEVICE"), 0, &ctx);
    ck_assert_int_eq(st, CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "CLREMAT_GEMM_TILE is '7x7'"));
    if (keep)
        setenv("CLREMAT_GEMM_TILE", keep, 1);
    else
        unsetenv("CLREMAT_GEMM_TILE");
    free(keep);
    free(r6);
    free(r12);
}
END_TEST

int main(void)
{
    TCase *tc, *tiles;
    Suite *s = test_suite("gemm", 300, &tc);
    tcase_add_loop_test(tc, test_transposes_and_sizes, 0, 8);
    tcase_add_loop_test(tc, test_offsets_batches, 0, 3);
    tcase_add_loop_test(tc, test_rejects_out_of_bounds, 0, 2);
    tcase_add_loop_test(tc, test_dense_epilogue, 0, 2);
    tcase_add_loop_test(tc, test_clblast_workspace_enforced, 0, 1);
    tcase_add_test(tc, test_path_parse_and_cache);
    /* its own case and time limit: it builds the whole kernel program for
     * each register tile, which Mesa's llvmpipe compiler takes minutes to
     * do for the 12x32 tile (about 210 s on the CI machine in December
     * 2026, and growing with kernels.cl: it passed the suite's 300 s on
     * 2026-12-02); the checks are the same */
    tiles = tcase_create("tiles");
    tcase_set_timeout(tiles, 900);
    tcase_add_checked_fixture(tiles, NULL, test_leak_check_now);
    tcase_add_test(tiles, test_register_tiles_same_bits);
    suite_add_tcase(s, tiles);
    return test_run_device_suite(s);
}
