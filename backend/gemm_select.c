/* gemm_select.c: which GEMM path a context uses. Forced by
 * clremat_ctx_set_gemm or $CLREMAT_GEMM; otherwise chosen by a short
 * calibration (one 512^3 GEMM on each path, best of three after a warm-up)
 * whose result is cached in memory for the process and on disk per device
 * and driver version ($XDG_CACHE_HOME/clremat/gemm-<key>.txt, written
 * atomically). A cache file that does not parse or names another device or
 * driver is ignored and rewritten by a new calibration. */
#include "gemm.h"
#include <clblast_c.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAL_N 512
#define CACHE_MAGIC "clremat-gemm-cache 1"

/* This process's earlier choices, by device and driver key. */
static struct { uint64_t key; int path; } memo[16];
static int n_memo;

static clremat_gemm_path settle(clremat_ctx *ctx, int path);

const char *clremat_gemm_path_name(clremat_gemm_path path)
{
    switch (path) {
    case CLREMAT_GEMM_NATIVE:
        return "native";
    case CLREMAT_GEMM_CLBLAST:
        return "clblast";
    default:
        return "auto";
    }
}

int clremat_gemm_path_parse(const char *text, clremat_gemm_path *out)
{
    if (text && strcmp(text, "auto") == 0)
        *out = CLREMAT_GEMM_AUTO;
    else if (text && strcmp(text, "native") == 0)
        *out = CLREMAT_GEMM_NATIVE;
    else if (text && strcmp(text, "clblast") == 0)
        *out = CLREMAT_GEMM_CLBLAST;
    else
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "unknown GEMM path '%s': use auto, native or clblast",
                                 text ? text : "(null)");
    return CLREMAT_OK;
}

int clremat_ctx_set_gemm(clremat_ctx *ctx, clremat_gemm_path path)
{
    if (path != CLREMAT_GEMM_AUTO && path != CLREMAT_GEMM_NATIVE && path != CLREMAT_GEMM_CLBLAST)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "unknown GEMM path %d", (int)path);
    if (path == CLREMAT_GEMM_AUTO)
        ctx->gemm_path = path;
    else
        settle(ctx, path);
    return CLREMAT_OK;
}

clremat_gemm_path clremat_ctx_gemm(clremat_ctx *ctx) { return clremat_gemm_resolve(ctx); }

/* Key of the device and driver: platform, device name, driver and device versions. */
static uint64_t device_key(const clremat_ctx *ctx)
{
    uint64_t h = clremat_hash64(0, ctx->info.platform, strlen(ctx->info.platform) + 1);
    h = clremat_hash64(h, ctx->info.name, strlen(ctx->info.name) + 1);
    h = clremat_hash64(h, ctx->info.driver_version, strlen(ctx->info.driver_version) + 1);
    return clremat_hash64(h, ctx->info.device_version, strlen(ctx->info.device_version) + 1);
}

int clremat_gemm_cache_file(const clremat_ctx *ctx, char *out, size_t len)
{
    char dir[4096];
    if (!clremat_cache_dir(dir, sizeof dir))
        return 0;
    return snprintf(out, len, "%s/gemm-%016" PRIx64 ".txt", dir, device_key(ctx)) < (int)len;
}

int clremat_gemm_cache_load(const clremat_ctx *ctx)
{
    char path[4200], line[512], want[512];
    int result = 0, ok_dev = 0, ok_drv = 0;
    FILE *f;
    if (!clremat_gemm_cache_file(ctx, path, sizeof path) || !(f = fopen(path, "r")))
        return 0;
    if (!fgets(line, sizeof line, f) || strncmp(line, CACHE_MAGIC, strlen(CACHE_MAGIC)) != 0)
        goto done;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        snprintf(want, sizeof want, "device %s", ctx->info.name);
        if (strcmp(line, want) == 0)
            ok_dev = 1;
        snprintf(want, sizeof want, "driver %s", ctx->info.driver_version);
        if (strcmp(line, want) == 0)
            ok_drv = 1;
        if (strcmp(line, "path native") == 0)
            result = CLREMAT_GEMM_NATIVE;
        else if (strcmp(line, "path clblast") == 0)
            result = CLREMAT_GEMM_CLBLAST;
    }
    if (!ok_dev || !ok_drv)
        result = 0;
done:
    fclose(f);
    return result;
}

int clremat_gemm_cache_store(const clremat_ctx *ctx, int path_choice, double native, double clblast)
{
    char path[4200], text[1024];
    int n;
    if (!clremat_gemm_cache_file(ctx, path, sizeof path))
        return -1;
    n = snprintf(text, sizeof text,
                 CACHE_MAGIC "\ndevice %s\ndriver %s\npath %s\nnative_gflops %.3f\nclblast_gflops %.3f\n",
                 ctx->info.name, ctx->info.driver_version, clremat_gemm_path_name(path_choice), native, clblast);
    if (n <= 0 || (size_t)n >= sizeof text)
        return -1;
    return clremat_write_atomic(path, text, (size_t)n);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of three timed GEMMs (after one warm-up) on the current path, GFLOP/s. */
static double time_path(clremat_ctx *ctx, clremat_buf *a, clremat_buf *b, clremat_buf *c)
{
    double best = 0;
    for (int r = 0; r < 4; r++) {
        double t0 = now_s(), dt;
        if (clremat_gemm(ctx, 0, 0, CAL_N, CAL_N, CAL_N, 1.0f, a, 0, CAL_N, 0, b, 0, CAL_N, 0, 0.0f, c, 0, CAL_N, 0,
                         1) != CLREMAT_OK ||
            clFinish(ctx->active_queue) != CL_SUCCESS)
            return 0;
        dt = now_s() - t0;
        if (r > 0 && (best == 0 || dt < best))
            best = dt;
    }
    return best > 0 ? 2.0 * CAL_N * CAL_N * (double)CAL_N / best * 1e-9 : 0;
}

int clremat_gemm_calibrate(clremat_ctx *ctx, double *native_gflops, double *clblast_gflops)
{
    const size_t bytes = (size_t)CAL_N * CAL_N * sizeof(float);
    clremat_buf bufs[4];
    cl_mem mem[4] = {NULL, NULL, NULL, NULL};
    int saved_path = ctx->gemm_path, saved_prof = ctx->profiling, st = CLREMAT_OK;
    clremat_buf *saved_ws = ctx->gemm_ws;
    size_t ws;
    float *host = malloc(bytes);
    *native_gflops = *clblast_gflops = 0;
    if (!host)
        return clremat_fail(ctx, CL_OUT_OF_HOST_MEMORY, "out of host memory");
    for (size_t i = 0; i < (size_t)CAL_N * CAL_N; i++)
        host[i] = (float)(i % 7) * 0.125f - 0.375f;
    ctx->profiling = 0;
    ctx->gemm_path = CLREMAT_GEMM_CLBLAST;
    ws = clremat_gemm_workspace(ctx, 0, 0, CAL_N, CAL_N, CAL_N, 0, CAL_N, 0, 0, CAL_N, 0, 0, CAL_N, 0, 1);
    for (int i = 0; i < 4; i++) {
        cl_int err;
        size_t sz = i < 3 ? bytes : (ws ? ws : 4);
        mem[i] = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE | (i < 2 ? CL_MEM_COPY_HOST_PTR : 0), sz,
                                i < 2 ? host : NULL, &err);
        if (err != CL_SUCCESS) {
            st = clremat_fail(ctx, err, "GEMM calibration: clCreateBuffer of %zu bytes failed", sz);
            goto done;
        }
        bufs[i] = (clremat_buf){mem[i], sz, sz, "calibration"};
    }
    ctx->gemm_ws = &bufs[3];
    ctx->gemm_path = CLREMAT_GEMM_NATIVE;
    *native_gflops = time_path(ctx, &bufs[0], &bufs[1], &bufs[2]);
    ctx->gemm_path = CLREMAT_GEMM_CLBLAST;
    *clblast_gflops = time_path(ctx, &bufs[0], &bufs[1], &bufs[2]);
done:
    clFinish(ctx->active_queue);
    for (int i = 0; i < 4; i++)
        if (mem[i])
            clReleaseMemObject(mem[i]);
    ctx->gemm_path = saved_path;
    ctx->gemm_ws = saved_ws;
    ctx->profiling = saved_prof;
    free(host);
    return st;
}

/* $CLREMAT_CLBLAST_MIN_INDIRECT=N sets CLBlast's XGEMM_MIN_INDIRECT_SIZE for
 * the device (GEMMs of at least N^3 multiply-adds use the indirect kernels,
 * which need a workspace): lets tests exercise the workspace accounting
 * on small models. */
static void clblast_overrides(clremat_ctx *ctx)
{
    const char *v = getenv("CLREMAT_CLBLAST_MIN_INDIRECT");
    const char *names[1] = {"XGEMM_MIN_INDIRECT_SIZE"};
    size_t val;
    if (!v || !*v)
        return;
    val = (size_t)strtoull(v, NULL, 10);
    CLBlastOverrideParameters(ctx->device, "GemmRoutine", CLBlastPrecisionSingle, 1, names, &val);
}

/* Records the resolved path in the context; applies the CLBlast overrides. */
static clremat_gemm_path settle(clremat_ctx *ctx, int path)
{
    ctx->gemm_path = path;
    if (path == CLREMAT_GEMM_CLBLAST)
        clblast_overrides(ctx);
    return (clremat_gemm_path)path;
}

clremat_gemm_path clremat_gemm_resolve(clremat_ctx *ctx)
{
    const char *env;
    clremat_gemm_path forced;
    uint64_t key;
    int path;
    double native, clblast;
    if (ctx->gemm_path != CLREMAT_GEMM_AUTO)
        return (clremat_gemm_path)ctx->gemm_path;
    if (ctx->dry_run) /* never calibrate inside a dry run */
        return CLREMAT_GEMM_NATIVE;
    env = getenv("CLREMAT_GEMM");
    if (env && *env && clremat_gemm_path_parse(env, &forced) == CLREMAT_OK && forced != CLREMAT_GEMM_AUTO)
        return settle(ctx, forced);
    key = device_key(ctx);
    for (int i = 0; i < n_memo; i++)
        if (memo[i].key == key)
            return settle(ctx, memo[i].path);
    path = clremat_gemm_cache_load(ctx);
    if (!path) {
        if (clremat_gemm_calibrate(ctx, &native, &clblast) != CLREMAT_OK)
            native = 1, clblast = 0;
        path = clblast > native ? CLREMAT_GEMM_CLBLAST : CLREMAT_GEMM_NATIVE;
        clremat_gemm_cache_store(ctx, path, native, clblast);
    }
    if (n_memo < (int)(sizeof memo / sizeof memo[0])) {
        memo[n_memo].key = key;
        memo[n_memo++].path = path;
    }
    return settle(ctx, path);
}
