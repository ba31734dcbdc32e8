/* gemm_bench.c: times clremat_gemm on one device and GEMM path. Usage:
 *   gemm_bench [--device SEL] [--gemm native|clblast|auto] [--reps N] [--queued Q]
 *              [--fmt float32|bfloat16|float16] [--batch B] SHAPE...
 * --queued Q: each timed run enqueues Q GEMMs back to back and waits once
 * (as a training step's queue runs them), and its time is divided by Q;
 * the default 1 waits for every GEMM, so the device's launch latency (the
 * wake-up of its threads) is in each run's time.
 * --fmt: A and B stored in that format (16-bit: clremat_gemm_fmt, widened
 * while packing, the native path; C float32), to compare the mixed
 * precision GEMM with the float32 one on the same shapes.
 * --batch B: B products of the shape in one call (consecutive matrices, as
 * attention's per-head GEMMs), GFLOP/s over all of them.
 * SHAPE is MxNxK with an optional transpose suffix :nn, :nt, :tn or :tt
 * (A and B). Prints one line per shape: shape, path, median and best
 * GFLOP/s over N timed runs after one warm-up (host clock around clFinish),
 * and GFLOP per CPU-second of the process (all threads: robust to other
 * load on the machine, comparable with the same figure for numpy). */
#include "bench_util.h"
#include "layers.h"
#include "gemm.h"
#include "gemm16.h"
#include "mixed_precision.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

int main(int argc, char **argv)
{
    const char *device = NULL, *gemm = "auto", *fmt_name = "float32";
    int reps = 5, queued = 1, first = 1, fmt;
    long long batch = 1;
    clremat_ctx *ctx;
    clremat_gemm_path path;
    for (; first < argc && strncmp(argv[first], "--", 2) == 0; first += 2) {
        if (first + 1 >= argc)
            break;
        if (strcmp(argv[first], "--device") == 0)
            device = argv[first + 1];
        else if (strcmp(argv[first], "--gemm") == 0)
            gemm = argv[first + 1];
        else if (strcmp(argv[first], "--reps") == 0)
            reps = atoi(argv[first + 1]);
        else if (strcmp(argv[first], "--queued") == 0)
            queued = atoi(argv[first + 1]);
        else if (strcmp(argv[first], "--fmt") == 0)
            fmt_name = argv[first + 1];
        else if (strcmp(argv[first], "--batch") == 0)
            batch = atoll(argv[first + 1]);
    }
    fmt = strcmp(fmt_name, "float32") == 0    ? CLREMAT_FMT_F32
          : strcmp(fmt_name, "bfloat16") == 0 ? CLREMAT_FMT_BF16
          : strcmp(fmt_name, "float16") == 0  ? CLREMAT_FMT_F16
                                              : -1;
    if (reps < 1 || reps > 1000 || queued < 1 || queued > 1000 || fmt < 0 || batch < 1 || batch > 4096 ||
        clremat_gemm_path_parse(gemm, &path) != CLREMAT_OK) {
        fprintf(stderr, "gemm_bench: bad --reps, --queued, --batch, --gemm or --fmt (float32, bfloat16, float16)\n");
        return 2;
    }
    if (clremat_ctx_create(device, 0, &ctx) != CLREMAT_OK) {
        fprintf(stderr, "gemm_bench: %s\n", clremat_last_error());
        return 1;
    }
    clremat_ctx_set_gemm(ctx, path);
    path = clremat_ctx_gemm(ctx);
    for (int a = first; a < argc; a++) {
        long long M, N, K;
        char tr[3] = "nn";
        int tA, tB, st = CLREMAT_OK;
        clremat_buf *A, *B, *C, *W = NULL;
        double *t = calloc((size_t)reps, sizeof(double)), c0 = 0, c1;
        size_t ws;
        if (sscanf(argv[a], "%lldx%lldx%lld:%2s", &M, &N, &K, tr) < 3 || M < 1 || N < 1 || K < 1) {
            fprintf(stderr, "gemm_bench: bad shape %s (MxNxK[:nn|nt|tn|tt])\n", argv[a]);
            return 2;
        }
        tA = tr[0] == 't';
        tB = tr[1] == 't';
        A = bench_filled(ctx, (size_t)(M * K * batch), 0.0625f, -0.375f);
        B = bench_filled(ctx, (size_t)(K * N * batch), 0.0625f, -0.375f);
        C = bench_filled(ctx, (size_t)(M * N * batch), 0.0625f, -0.375f);
        ws = clremat_gemm_workspace(ctx, tA, tB, M, N, K, 0, tA ? M : K, M * K, 0, tB ? K : N, K * N, 0, N, M * N,
                                    batch);
        if (ws && clremat_pool_alloc(ctx->pool, ws, "workspace", &W) != CLREMAT_OK)
            W = NULL;
        ctx->gemm_ws = W;
        if (!A || !B || !C || (ws && !W)) {
            fprintf(stderr, "gemm_bench: out of device memory for %s\n", argv[a]);
            return 1;
        }
        if (fmt != CLREMAT_FMT_F32) { /* A and B rounded to the 16-bit format, in place of the float32 ones */
            clremat_buf *A16 = NULL, *B16 = NULL;
            if (clremat_pool_alloc(ctx->pool, (size_t)(M * K * batch) * 2, "bench A16", &A16) != CLREMAT_OK ||
                clremat_pool_alloc(ctx->pool, (size_t)(K * N * batch) * 2, "bench B16", &B16) != CLREMAT_OK ||
                clremat_op_convert(ctx, A, 0, A16, fmt, M * K * batch, 0, 1.0f, 0) != CLREMAT_OK ||
                clremat_op_convert(ctx, B, 0, B16, fmt, K * N * batch, 0, 1.0f, 0) != CLREMAT_OK) {
                fprintf(stderr, "gemm_bench: 16-bit operands for %s: %s\n", argv[a], clremat_ctx_last_error(ctx));
                return 1;
            }
            clremat_pool_release(ctx->pool, A);
            clremat_pool_release(ctx->pool, B);
            A = A16;
            B = B16;
        }
        for (int r = -1; r < reps && st == CLREMAT_OK; r++) {
            double t0 = clremat_now_s();
            if (r == 0)
                c0 = bench_cpu_s();
            for (int q = 0; q < queued && st == CLREMAT_OK; q++)
                st = clremat_gemm_fmt(ctx, tA, tB, M, N, K, 1.0f, A, fmt, 0, tA ? M : K, M * K, B, fmt, 0, tB ? K : N,
                                      K * N, 0.0f, C, 0, N, M * N, batch);
            if (st == CLREMAT_OK)
                st = clremat_finish(ctx);
            if (r >= 0)
                t[r] = (clremat_now_s() - t0) / queued;
        }
        if (st != CLREMAT_OK) {
            fprintf(stderr, "gemm_bench: %s: %s\n", argv[a], clremat_ctx_last_error(ctx));
            return 1;
        }
        c1 = bench_cpu_s();
        qsort(t, (size_t)reps, sizeof *t, bench_cmp_d);
        printf("%-18s %-8s %-8s median %8.2f GFLOP/s  best %8.2f GFLOP/s  cpu %8.2f GFLOP per CPU-second\n", argv[a],
               fmt == CLREMAT_FMT_F32 ? clremat_gemm_path_name(path) : "native", fmt_name,
               2.0 * (double)M * (double)N * (double)K * (double)batch / t[reps / 2] * 1e-9,
               2.0 * (double)M * (double)N * (double)K * (double)batch / t[0] * 1e-9,
               2.0 * (double)M * (double)N * (double)K * (double)batch * reps * queued / (c1 - c0) * 1e-9);
        fflush(stdout);
        ctx->gemm_ws = NULL;
        clremat_pool_release(ctx->pool, W);
        clremat_pool_release(ctx->pool, A);
        clremat_pool_release(ctx->pool, B);
        clremat_pool_release(ctx->pool, C);
        free(t);
    }
    clremat_ctx_destroy(ctx);
    return 0;
}
