/* fit_cache.c: `clremat fit`'s step-time calibration cached on disk like
 * the GEMM calibration: $XDG_CACHE_HOME/clremat/fit-KEY.txt, KEY hashing
 * the device (platform, name, driver and device versions), the kernels
 * source, the GEMM path, the model (a hash of its file given by the
 * caller), the batch, the optimizer and the timed steps. A file that is
 * missing, of another key, or malformed is never an error: the calibration
 * is measured again and the file rewritten atomically. */
#include "fit.h"
#include "atomic_file.h"
#include "error.h"
#include "gemm.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIT_MAGIC "clremat-fit-calibration-2"

static uint64_t fit_key(clremat_ctx *ctx, uint64_t model_hash, int64_t batch, const clremat_opt_config *opt,
                        int steps)
{
    const char *path = clremat_gemm_path_name(clremat_ctx_gemm(ctx));
    uint64_t h = clremat_hash64(0, ctx->info.platform, strlen(ctx->info.platform) + 1);
    h = clremat_hash64(h, ctx->info.name, strlen(ctx->info.name) + 1);
    h = clremat_hash64(h, ctx->info.driver_version, strlen(ctx->info.driver_version) + 1);
    h = clremat_hash64(h, ctx->info.device_version, strlen(ctx->info.device_version) + 1);
    h = clremat_hash64(h, clremat_kernels_source, strlen(clremat_kernels_source));
    h = clremat_hash64(h, path, strlen(path) + 1);
    h = clremat_hash64(h, &model_hash, sizeof model_hash);
    h = clremat_hash64(h, &batch, sizeof batch);
    h = clremat_hash64(h, &opt->kind, sizeof opt->kind);
    h = clremat_hash64(h, &steps, sizeof steps);
    return clremat_hash64(h, FIT_MAGIC, sizeof FIT_MAGIC);
}

int clremat_fit_cache_file(clremat_ctx *ctx, uint64_t model_hash, int64_t batch, const clremat_opt_config *opt,
                           int steps, char *out, size_t len)
{
    char dir[4096];
    if (!clremat_cache_dir(dir, sizeof dir))
        return 0;
    return snprintf(out, len, "%s/fit-%016" PRIx64 ".txt", dir, fit_key(ctx, model_hash, batch, opt, steps)) <
           (int)len;
}

/* Reads a calibration of g from path; 0 when absent or not valid for g. */
static int load(const char *path, const clremat_graph *g, const char *device, clremat_fit_calibration *c)
{
    FILE *f;
    char line[1024];
    int n = -1, got = 0, rows = 0;
    long long batch = 0;
    /* without blocking, regular files only: a FIFO in the cache must not hang fit */
    if (clremat_open_regular(path, "fit calibration cache", &f, NULL) != CLREMAT_OK)
        return 0;
    memset(c, 0, sizeof *c);
    if (!fgets(line, sizeof line, f) || strcmp(line, FIT_MAGIC "\n") != 0)
        goto bad;
    if (!fgets(line, sizeof line, f) || strncmp(line, "device ", 7) != 0)
        goto bad;
    line[strcspn(line, "\n")] = 0;
    if (strcmp(line + 7, device) != 0)
        goto bad;
    snprintf(c->device, sizeof c->device, "%s", device);
    while (fgets(line, sizeof line, f)) {
        int l;
        double a, b, x, y;
        line[strcspn(line, "\n")] = 0;
        if (sscanf(line, "batch %lld", &batch) == 1)
            got |= 1;
        else if (!strncmp(line, "remat ", 6))
            snprintf(c->remat, sizeof c->remat, "%.95s", line + 6), got |= 2;
        else if (sscanf(line, "step_ms %lf", &c->step_ms) == 1)
            got |= 4;
        else if (sscanf(line, "device_scale %lf", &c->device_scale) == 1)
            got |= 8;
        else if (sscanf(line, "update_ms %lf", &c->update_ms) == 1)
            got |= 16;
        else if (sscanf(line, "overhead_ms %lf", &c->overhead_ms) == 1)
            got |= 32;
        else if (!strcmp(line, "times device") || !strcmp(line, "times flops"))
            c->times_from_flops = !strcmp(line, "times flops"), got |= 128;
        else if (sscanf(line, "layers %d", &n) == 1) {
            if (n != g->n_layers)
                goto bad;
            c->fwd_ms = calloc((size_t)n, sizeof(double));
            c->bwd_ms = calloc((size_t)n, sizeof(double));
            c->fwd_flops = calloc((size_t)n, sizeof(double));
            c->bwd_flops = calloc((size_t)n, sizeof(double));
            if (!c->fwd_ms || !c->bwd_ms || !c->fwd_flops || !c->bwd_flops)
                goto bad;
            got |= 64;
        } else if (n > 0 && sscanf(line, "layer %d %lf %lf %lf %lf", &l, &a, &b, &x, &y) == 5 && l >= 0 && l < n &&
                   l == rows) {
            c->fwd_ms[l] = a;
            c->bwd_ms[l] = b;
            c->fwd_flops[l] = x;
            c->bwd_flops[l] = y;
            rows++;
        } else {
            goto bad;
        }
    }
    fclose(f);
    if (got != 255 || rows != n || !(c->step_ms > 0) || !(c->device_scale > 0) || batch < 1) {
        clremat_fit_calibration_free(c);
        return 0;
    }
    c->batch = batch;
    c->n_layers = n;
    return 1;
bad:
    fclose(f);
    clremat_fit_calibration_free(c);
    return 0;
}

static int store(const char *path, const clremat_fit_calibration *c)
{
    size_t cap = 4096 + (size_t)c->n_layers * 128, at = 0;
    char *text = malloc(cap);
    int n, st;
    if (!text)
        return CLREMAT_ERR_INTERNAL;
    n = snprintf(text, cap,
                 FIT_MAGIC "\ndevice %s\nbatch %lld\nremat %s\nstep_ms %.17g\ndevice_scale %.17g\nupdate_ms %.17g\n"
                           "overhead_ms %.17g\ntimes %s\nlayers %d\n",
                 c->device, (long long)c->batch, c->remat, c->step_ms, c->device_scale, c->update_ms, c->overhead_ms,
                 c->times_from_flops ? "flops" : "device", c->n_layers);
    at = n > 0 ? (size_t)n : 0;
    for (int l = 0; l < c->n_layers && at < cap; l++) {
        n = snprintf(text + at, cap - at, "layer %d %.17g %.17g %.17g %.17g\n", l, c->fwd_ms[l], c->bwd_ms[l],
                     c->fwd_flops[l], c->bwd_flops[l]);
        at += n > 0 ? (size_t)n : 0;
    }
    st = at < cap ? clremat_write_atomic(path, text, at) : CLREMAT_ERR_INTERNAL;
    free(text);
    return st;
}

int clremat_fit_calibrate_cached(clremat_ctx *ctx, clremat_graph *g, uint64_t model_hash, int64_t batch,
                                 const clremat_opt_config *opt, uint64_t seed, int steps, int refresh,
                                 clremat_fit_calibration *out, int *from_cache)
{
    char path[4200];
    int have_path = clremat_fit_cache_file(ctx, model_hash, batch, opt, steps, path, sizeof path), st;
    *from_cache = 0;
    if (have_path && !refresh && load(path, g, clremat_ctx_device(ctx)->name, out)) {
        *from_cache = 1;
        return CLREMAT_OK;
    }
    if ((st = clremat_fit_calibrate(ctx, g, batch, opt, seed, steps, out)) != CLREMAT_OK)
        return st;
    if (have_path)
        store(path, out); /* a cache that cannot be written only costs the next run a calibration */
    return CLREMAT_OK;
}
