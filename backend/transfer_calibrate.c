/* transfer_calibrate.c: what offloading a byte to host memory costs on a
 * device: the copy bandwidth device -> host and host -> device (blocking
 * copies of an 8 MiB buffer, warm-up then the median of three) and the
 * device's GEMM rate (native 256^3 product, the same), so the budget
 * planner can weigh a transfer against recomputation in FLOPs. Measured once
 * per device and driver, then cached like the GEMM calibration
 * ($XDG_CACHE_HOME/clremat/transfer-KEY.txt). Like the GEMM calibration its
 * buffers are made directly with OpenCL, outside the pool, before anything
 * is planned. */
#include "transfer.h"
#include "atomic_file.h"
#include "clock.h"
#include "gemm.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRANSFER_MAGIC "clremat-transfer-1"
#define TRANSFER_BYTES ((size_t)8 << 20)
#define GEMM_N 256
#define REPS 3

static uint64_t transfer_key(const clremat_ctx *ctx)
{
    uint64_t h = clremat_hash64(0, ctx->info.platform, strlen(ctx->info.platform) + 1);
    h = clremat_hash64(h, ctx->info.name, strlen(ctx->info.name) + 1);
    h = clremat_hash64(h, ctx->info.driver_version, strlen(ctx->info.driver_version) + 1);
    h = clremat_hash64(h, ctx->info.device_version, strlen(ctx->info.device_version) + 1);
    return clremat_hash64(h, TRANSFER_MAGIC, sizeof TRANSFER_MAGIC);
}

int clremat_transfer_cache_file(const clremat_ctx *ctx, char *out, size_t len)
{
    char dir[4096];
    if (!clremat_cache_dir(dir, sizeof dir))
        return 0;
    return snprintf(out, len, "%s/transfer-%016" PRIx64 ".txt", dir, transfer_key(ctx)) < (int)len;
}

/* Reads a cache file written for this device and driver; 0 when absent or not this one's. */
static int cache_load(const clremat_ctx *ctx, clremat_transfer_calibration *out)
{
    char path[4200], line[512], dev[512] = "", drv[512] = "";
    double th = 0, td = 0, gf = 0;
    int got = 0;
    FILE *f;
    /* without blocking, regular files only: a FIFO in the cache must not hang the command */
    if (!clremat_transfer_cache_file(ctx, path, sizeof path) ||
        clremat_open_regular(path, "transfer calibration cache", &f, NULL) != CLREMAT_OK)
        return 0;
    if (!fgets(line, sizeof line, f) || strncmp(line, TRANSFER_MAGIC "\n", sizeof TRANSFER_MAGIC) != 0) {
        fclose(f);
        return 0;
    }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "device ", 7))
            snprintf(dev, sizeof dev, "%s", line + 7), got |= 1;
        else if (!strncmp(line, "driver ", 7))
            snprintf(drv, sizeof drv, "%s", line + 7), got |= 2;
        else if (sscanf(line, "to_host_gbs %lf", &th) == 1)
            got |= 4;
        else if (sscanf(line, "to_device_gbs %lf", &td) == 1)
            got |= 8;
        else if (sscanf(line, "gemm_gflops %lf", &gf) == 1)
            got |= 16;
    }
    fclose(f);
    if (got != 31 || strcmp(dev, ctx->info.name) || strcmp(drv, ctx->info.driver_version) || !(th > 0) ||
        !(td > 0) || !(gf > 0) || !isfinite(th) || !isfinite(td) || !isfinite(gf))
        return 0;
    out->to_host_gbs = th;
    out->to_device_gbs = td;
    out->gemm_gflops = gf;
    out->from_cache = 1;
    return 1;
}

static double median3(double *v)
{
    double a = v[0], b = v[1], c = v[2];
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* Measures on the device; CLREMAT_OK or an OpenCL status. */
static int measure(clremat_ctx *ctx, clremat_transfer_calibration *out)
{
    cl_int err = CL_SUCCESS;
    cl_mem big = NULL, m[3] = {NULL, NULL, NULL};
    float *host = malloc(TRANSFER_BYTES);
    double tr[REPS], tw[REPS], tg[REPS];
    const size_t gbytes = (size_t)GEMM_N * GEMM_N * sizeof(float);
    clremat_buf b[3];
    int st = CLREMAT_OK, saved_prof = ctx->profiling;
    if (!host)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    memset(host, 0, TRANSFER_BYTES);
    ctx->profiling = 0;
    big = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, TRANSFER_BYTES, NULL, &err);
    for (int i = 0; i < 3 && err == CL_SUCCESS; i++) {
        m[i] = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, gbytes, host, &err);
        b[i].mem = m[i];
        b[i].bytes = b[i].capacity = gbytes;
        b[i].tag = "transfer calibration";
    }
    for (int r = -1; r < REPS && err == CL_SUCCESS; r++) { /* round -1: warm-up */
        double t0 = clremat_now_s();
        err = clEnqueueWriteBuffer(ctx->queue, big, CL_TRUE, 0, TRANSFER_BYTES, host, 0, NULL, NULL);
        double t1 = clremat_now_s();
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(ctx->queue, big, CL_TRUE, 0, TRANSFER_BYTES, host, 0, NULL, NULL);
        double t2 = clremat_now_s();
        if (err == CL_SUCCESS && (st = clremat_gemm_on(ctx, CLREMAT_GEMM_NATIVE, 0, 0, GEMM_N, GEMM_N, GEMM_N, 1.0f,
                                                       &b[0], 0, GEMM_N, 0, &b[1], 0, GEMM_N, 0, 0.0f, &b[2], 0,
                                                       GEMM_N, 0, 1)) != CLREMAT_OK)
            break;
        if (err == CL_SUCCESS)
            err = clFinish(ctx->queue);
        if (r >= 0) {
            tw[r] = t1 - t0;
            tr[r] = t2 - t1;
            tg[r] = clremat_now_s() - t2;
        }
    }
    ctx->profiling = saved_prof;
    for (int i = 0; i < 3; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
    if (big)
        clReleaseMemObject(big);
    free(host);
    if (st != CLREMAT_OK)
        return st;
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "transfer calibration failed: %s", clremat_status_str(err));
    out->to_device_gbs = (double)TRANSFER_BYTES / fmax(median3(tw), 1e-9) / 1e9;
    out->to_host_gbs = (double)TRANSFER_BYTES / fmax(median3(tr), 1e-9) / 1e9;
    out->gemm_gflops = 2.0 * GEMM_N * GEMM_N * GEMM_N / fmax(median3(tg), 1e-9) / 1e9;
    return CLREMAT_OK;
}

int clremat_transfer_calibrate(clremat_ctx *ctx, clremat_transfer_calibration *out)
{
    char path[4200], text[1024];
    int st, n;
    memset(out, 0, sizeof *out);
    out->host_unified = ctx->info.host_unified;
    if (cache_load(ctx, out))
        return CLREMAT_OK;
    if ((st = measure(ctx, out)) != CLREMAT_OK)
        return st;
    n = snprintf(text, sizeof text,
                 TRANSFER_MAGIC "\ndevice %s\ndriver %s\nto_host_gbs %.4f\nto_device_gbs %.4f\ngemm_gflops %.4f\n",
                 ctx->info.name, ctx->info.driver_version, out->to_host_gbs, out->to_device_gbs, out->gemm_gflops);
    /* a cache that cannot be written is not an error: the next run measures again */
    if (n > 0 && (size_t)n < sizeof text && clremat_transfer_cache_file(ctx, path, sizeof path))
        clremat_write_atomic(path, text, (size_t)n);
    return CLREMAT_OK;
}

double clremat_transfer_cost_per_byte(const clremat_transfer_calibration *c, int in_ms)
{
    double s;
    if (c->host_unified || !(c->to_host_gbs > 0) || !(c->to_device_gbs > 0) || !(c->gemm_gflops > 0))
        return 0; /* host memory is the device's: offload frees nothing */
    s = 1.0 / (c->to_host_gbs * 1e9) + 1.0 / (c->to_device_gbs * 1e9); /* one byte out and back */
    return in_ms ? s * 1e3 : s * c->gemm_gflops * 1e9;
}
