/* gemm_select.c: which GEMM path a context uses. Forced by
 * clremat_ctx_set_gemm or $CLREMAT_GEMM; CLBlast on a device that is not
 * a CPU (the native kernel is written for CPUs); otherwise chosen by a short
 * calibration (gemm_calibrate.c) whose result is cached in memory for the
 * process and on disk per device, driver, rule version and kernels source
 * ($XDG_CACHE_HOME/clremat/gemm-<key>.txt, written atomically); the path
 * with the smaller total time wins (clremat_gemm_decide). A cache file that does not parse, is of another
 * rule version or names another device, driver or kernels source is
 * ignored and rewritten by a new calibration. */
#include "atomic_file.h"
#include "gemm.h"
#include <clblast_c.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define CACHE_MAGIC "clremat-gemm-cache " STR(CLREMAT_GEMM_CAL_VERSION)

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

/* Hash of the kernels source: a change to the native kernels recalibrates.
 * Computed once per process (the source is a constant of the library). */
static uint64_t kernels_hash_value;
static pthread_once_t kernels_hash_once = PTHREAD_ONCE_INIT;

static void kernels_hash_compute(void)
{
    kernels_hash_value = clremat_hash64(0, clremat_kernels_source, strlen(clremat_kernels_source));
}

static uint64_t kernels_hash(void)
{
    pthread_once(&kernels_hash_once, kernels_hash_compute);
    return kernels_hash_value;
}

/* Key of the cache file: platform, device name, driver and device versions,
 * the rule version, the kernels source and, where there is one, the loop
 * budget (loop_budget.h): a calibration under $CLREMAT_LOOP_BUDGET, whose
 * native products may be refused, must not decide for runs without it
 * (one did: a test run's cached "clblast" made the MLP step 9x slower). */
static uint64_t device_key(const clremat_ctx *ctx)
{
    uint64_t h = clremat_hash64(0, ctx->info.platform, strlen(ctx->info.platform) + 1);
    h = clremat_hash64(h, ctx->info.name, strlen(ctx->info.name) + 1);
    h = clremat_hash64(h, ctx->info.driver_version, strlen(ctx->info.driver_version) + 1);
    h = clremat_hash64(h, ctx->info.device_version, strlen(ctx->info.device_version) + 1);
    h = clremat_hash64(h, CACHE_MAGIC, sizeof CACHE_MAGIC);
    if (ctx->loop_budget > 0)
        h = clremat_hash64(h, &(int64_t){ctx->loop_budget}, sizeof(int64_t));
    return clremat_hash64(h, &(uint64_t){kernels_hash()}, sizeof(uint64_t));
}

static int valid_time(double t) { return isfinite(t) && t > 0; }

int clremat_gemm_decide(const double *native_s, const double *clblast_s, int n)
{
    double nat = 0, clb = 0;
    int nat_ok = n > 0, clb_ok = n > 0;
    for (int i = 0; i < n; i++) {
        if (valid_time(native_s[i]))
            nat += native_s[i];
        else
            nat_ok = 0;
        if (valid_time(clblast_s[i]))
            clb += clblast_s[i];
        else
            clb_ok = 0;
    }
    return clb_ok && (!nat_ok || clb < nat) ? CLREMAT_GEMM_CLBLAST : CLREMAT_GEMM_NATIVE;
}

int clremat_gemm_cache_file(const clremat_ctx *ctx, char *out, size_t len)
{
    char dir[4096];
    if (!clremat_cache_dir(dir, sizeof dir))
        return 0;
    return snprintf(out, len, "%s/gemm-%016" PRIx64 ".txt", dir, device_key(ctx)) < (int)len;
}

/* Appends " %.3f" of each time in ms to out at *at; 0 when it does not fit. */
static int put_times(char *out, size_t len, size_t *at, const char *name, const double *s)
{
    int n = snprintf(out + *at, len - *at, "%s", name);
    if (n < 0 || (size_t)n >= len - *at)
        return 0;
    *at += (size_t)n;
    for (int i = 0; i < CLREMAT_GEMM_CAL_SHAPES; i++) {
        n = snprintf(out + *at, len - *at, " %.3f", s[i] * 1e3);
        if (n < 0 || (size_t)n >= len - *at)
            return 0;
        *at += (size_t)n;
    }
    n = snprintf(out + *at, len - *at, "\n");
    if (n < 0 || (size_t)n >= len - *at)
        return 0;
    *at += (size_t)n;
    return 1;
}

int clremat_gemm_cache_format(char *out, size_t len, const char *device, const char *driver, uint64_t kernels,
                              int path, const clremat_gemm_calibration *cal)
{
    size_t at;
    int n = snprintf(out, len,
                     CACHE_MAGIC "\ndevice %s\ndriver %s\nkernels %016" PRIx64 "\npath %s\nnative_gflops %.3f\n"
                                 "clblast_gflops %.3f\n",
                     device, driver, kernels, clremat_gemm_path_name(path), cal->native_gflops, cal->clblast_gflops);
    if (n < 0 || (size_t)n >= len)
        return -1;
    at = (size_t)n;
    if (cal->seconds > 0) {
        if (!put_times(out, len, &at, "native_ms", cal->native_s) || !put_times(out, len, &at, "clblast_ms",
                                                                                 cal->clblast_s))
            return -1;
        n = snprintf(out + at, len - at, "calibration_s %.3f\n", cal->seconds);
        if (n < 0 || (size_t)n >= len - at)
            return -1;
        at += (size_t)n;
    }
    return (int)at;
}

/* 1 when the line [p, p+n) is exactly "<key> <value>". */
static int line_is(const char *p, size_t n, const char *key, const char *value)
{
    size_t k = strlen(key), v = strlen(value);
    return n == k + 1 + v && memcmp(p, key, k) == 0 && p[k] == ' ' && memcmp(p + k + 1, value, v) == 0;
}

int clremat_gemm_cache_parse(const char *text, const char *device, const char *driver, uint64_t kernels)
{
    char khex[17];
    int result = 0, ok_dev = 0, ok_drv = 0, ok_ker = 0, first = 1;
    snprintf(khex, sizeof khex, "%016" PRIx64, kernels);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (first && !(n == strlen(CACHE_MAGIC) && memcmp(p, CACHE_MAGIC, n) == 0))
            return 0; /* another format version, or not a cache file */
        first = 0;
        ok_dev |= line_is(p, n, "device", device);
        ok_drv |= line_is(p, n, "driver", driver);
        ok_ker |= line_is(p, n, "kernels", khex);
        if (line_is(p, n, "path", "native"))
            result = CLREMAT_GEMM_NATIVE;
        else if (line_is(p, n, "path", "clblast"))
            result = CLREMAT_GEMM_CLBLAST;
        p = nl ? nl + 1 : p + n;
    }
    return ok_dev && ok_drv && ok_ker ? result : 0;
}

int clremat_gemm_cache_load(const clremat_ctx *ctx)
{
    char path[4200], text[4096];
    size_t n;
    FILE *f;
    if (!clremat_gemm_cache_file(ctx, path, sizeof path) || access(path, F_OK) != 0 ||
        clremat_open_regular(path, "GEMM cache file", &f, NULL) != CLREMAT_OK)
        return 0; /* absent, or not a regular file (never blocks on a FIFO) */
    n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    if (strlen(text) != n) /* a NUL inside: not ours */
        return 0;
    return clremat_gemm_cache_parse(text, ctx->info.name, ctx->info.driver_version, kernels_hash());
}

/* Writes the cache file of a calibration; 0 on success. */
static int cache_store_cal(const clremat_ctx *ctx, int path_choice, const clremat_gemm_calibration *cal)
{
    char path[4200], text[2048];
    int n;
    if (!clremat_gemm_cache_file(ctx, path, sizeof path))
        return -1;
    n = clremat_gemm_cache_format(text, sizeof text, ctx->info.name, ctx->info.driver_version, kernels_hash(),
                                  path_choice, cal);
    if (n <= 0)
        return -1;
    return clremat_write_atomic(path, text, (size_t)n);
}

int clremat_gemm_cache_store(const clremat_ctx *ctx, int path_choice, double native, double clblast)
{
    clremat_gemm_calibration cal = {.native_gflops = native, .clblast_gflops = clblast};
    return cache_store_cal(ctx, path_choice, &cal);
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
    clremat_gemm_calibration cal;
    if (ctx->gemm_path != CLREMAT_GEMM_AUTO)
        return (clremat_gemm_path)ctx->gemm_path;
    if (ctx->dry_run) /* never calibrate inside a dry run */
        return CLREMAT_GEMM_NATIVE;
    env = getenv("CLREMAT_GEMM");
    if (env && *env && clremat_gemm_path_parse(env, &forced) == CLREMAT_OK && forced != CLREMAT_GEMM_AUTO)
        return settle(ctx, forced);
    /* The native kernel runs one work-item per work-group, a CPU's design:
     * on an NVIDIA H200 the transformer's step took 16.33 ms on it against
     * 5.32 ms on CLBlast (two runs of one day), while the calibration's 256-cubed products, bound
     * by launches there, ran at 8-9 GFLOP/s on both and picked either by
     * noise. Elsewhere than on a CPU device the choice is CLBlast. */
    if (strcmp(ctx->info.type, "cpu") != 0)
        return settle(ctx, CLREMAT_GEMM_CLBLAST);
    key = device_key(ctx);
    for (int i = 0; i < n_memo; i++)
        if (memo[i].key == key)
            return settle(ctx, memo[i].path);
    path = clremat_gemm_cache_load(ctx);
    if (!path) {
        /* a path that failed has times of 0 and loses; a calibration
         * that could not run (no memory for its buffers) is not cached */
        int st = clremat_gemm_calibrate_times(ctx, &cal);
        path = clremat_gemm_decide(cal.native_s, cal.clblast_s, CLREMAT_GEMM_CAL_SHAPES);
        if (st == CLREMAT_OK)
            cache_store_cal(ctx, path, &cal);
    }
    if (n_memo < (int)(sizeof memo / sizeof memo[0])) {
        memo[n_memo].key = key;
        memo[n_memo++].path = path;
    }
    return settle(ctx, path);
}
