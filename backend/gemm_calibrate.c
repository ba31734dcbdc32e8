/* gemm_calibrate.c: times both GEMM paths on a device (clremat_gemm_on
 * with each path named) on shapes a model's layers use: a dense layer's
 * three products forward and backward and a batched attention product. A
 * warm-up round takes the first-launch compiles, then three timed rounds
 * with the paths alternating; each shape's median is kept. gemm_select.c
 * decides and caches from these times. */
#include "gemm.h"
#include "clock.h"
#include <stdlib.h>
#include <string.h>

#define CAL_REPS 3 /* timed rounds after the warm-up round */

/* The calibration's shapes: row-major C (M x N) = op(A) op(B), batch
 * matrices. Sizes of the bundled models' layers, rounded up. */
static const struct cal_shape {
    int tA, tB, M, N, K, batch;
} cal_shapes[CLREMAT_GEMM_CAL_SHAPES] = {
    {0, 0, 256, 256, 256, 1}, /* dense forward: Y = X W */
    {0, 1, 256, 256, 256, 1}, /* dense backward: dX = dY W^T */
    {1, 0, 256, 256, 256, 1}, /* dense backward: dW = X^T dY */
    {0, 1, 32, 32, 32, 64},   /* attention scores per head: Q K^T, batched */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double clremat_gemm_median(double *v, int n)
{
    if (n < 1)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Wall time of one GEMM of shape s on path, enqueue to completion, in
 * seconds; 0 when it fails. */
static double time_shape(clremat_ctx *ctx, clremat_gemm_path path, const struct cal_shape *s, clremat_buf *a,
                         clremat_buf *b, clremat_buf *c)
{
    int64_t lda = s->tA ? s->M : s->K, ldb = s->tB ? s->K : s->N;
    double t0 = clremat_now_s();
    if (clremat_gemm_on(ctx, path, s->tA, s->tB, s->M, s->N, s->K, 1.0f, a, 0, lda, (int64_t)s->M * s->K, b, 0, ldb,
                     (int64_t)s->K * s->N, 0.0f, c, 0, s->N, (int64_t)s->M * s->N, s->batch) != CLREMAT_OK ||
        clFinish(ctx->active_queue) != CL_SUCCESS)
        return 0;
    return clremat_now_s() - t0;
}

int clremat_gemm_calibrate_times(clremat_ctx *ctx, clremat_gemm_calibration *cal)
{
    static const int paths[2] = {CLREMAT_GEMM_NATIVE, CLREMAT_GEMM_CLBLAST};
    double times[2][CLREMAT_GEMM_CAL_SHAPES][CAL_REPS], flops = 0, start = clremat_now_s();
    size_t elems = 0, ws = 0, bytes;
    clremat_buf bufs[4];
    cl_mem mem[4] = {NULL, NULL, NULL, NULL};
    int saved_prof = ctx->profiling, st = CLREMAT_OK, failed[2] = {0, 0};
    clremat_buf *saved_ws = ctx->gemm_ws;
    float *host = NULL;
    memset(cal, 0, sizeof *cal);
    ctx->profiling = 0;
    for (int s = 0; s < CLREMAT_GEMM_CAL_SHAPES; s++) {
        const struct cal_shape *c = &cal_shapes[s];
        size_t e = (size_t)c->batch * (size_t)(c->M > c->N ? c->M : c->N) * (size_t)(c->K > c->N ? c->K : c->N);
        size_t w = c->batch != 1 ? 0
                                 : clremat_gemm_workspace_on(ctx, CLREMAT_GEMM_CLBLAST, c->tA, c->tB, c->M, c->N, c->K,
                                                             0, c->tA ? c->M : c->K, 0, 0, c->tB ? c->K : c->N, 0, 0,
                                                             c->N, 0, 1);
        elems = e > elems ? e : elems;
        ws = w > ws ? w : ws;
        flops += 2.0 * c->M * c->N * (double)c->K * c->batch;
    }
    bytes = elems * sizeof(float);
    if (!(host = malloc(bytes))) {
        st = clremat_fail(ctx, CL_OUT_OF_HOST_MEMORY, "GEMM calibration: out of host memory");
        goto done;
    }
    for (size_t i = 0; i < elems; i++)
        host[i] = (float)(i % 7) * 0.125f - 0.375f;
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
    /* round 0 is the warm-up (first launches compile); the paths alternate
     * within each round so a change of load hits both alike */
    for (int r = 0; r <= CAL_REPS; r++)
        for (int p = 0; p < 2; p++) {
            for (int s = 0; s < CLREMAT_GEMM_CAL_SHAPES && !failed[p]; s++) {
                double t = time_shape(ctx, paths[p], &cal_shapes[s], &bufs[0], &bufs[1], &bufs[2]);
                if (t <= 0)
                    failed[p] = 1;
                else if (r > 0)
                    times[p][s][r - 1] = t;
            }
        }
    for (int s = 0; s < CLREMAT_GEMM_CAL_SHAPES; s++) {
        cal->native_s[s] = failed[0] ? 0 : clremat_gemm_median(times[0][s], CAL_REPS);
        cal->clblast_s[s] = failed[1] ? 0 : clremat_gemm_median(times[1][s], CAL_REPS);
    }
    for (int p = 0; p < 2; p++) {
        double total = 0;
        for (int s = 0; s < CLREMAT_GEMM_CAL_SHAPES; s++)
            total += p ? cal->clblast_s[s] : cal->native_s[s];
        *(p ? &cal->clblast_gflops : &cal->native_gflops) = failed[p] || total <= 0 ? 0 : flops / total * 1e-9;
    }
done:
    clFinish(ctx->active_queue);
    for (int i = 0; i < 4; i++)
        if (mem[i])
            clReleaseMemObject(mem[i]);
    ctx->gemm_ws = saved_ws;
    ctx->profiling = saved_prof;
    free(host);
    cal->seconds = clremat_now_s() - start;
    return st;
}

int clremat_gemm_calibrate(clremat_ctx *ctx, double *native_gflops, double *clblast_gflops)
{
    clremat_gemm_calibration cal;
    int st = clremat_gemm_calibrate_times(ctx, &cal);
    *native_gflops = cal.native_gflops;
    *clblast_gflops = cal.clblast_gflops;
    return st;
}

