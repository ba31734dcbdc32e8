/* conv_bench.c: times the three passes of the direct NHWC convolution
 * kernels (backend/conv_direct.c: forward, weight gradient, input
 * gradient) on one device. Usage:
 *   conv_bench [--device SEL] [--reps N] [--batch B] SHAPE...
 * SHAPE is HxWxCxF with optional :kK (square kernel, default 3), :sS
 * (stride, default 1) and "same" padding. Prints per pass the median ms and
 * GFLOP/s over N timed runs after one warm-up (host clock around
 * clFinish), and GFLOP per CPU-second of the process (all threads: robust
 * to other load on the machine). */
#include "bench_util.h"
#include "layers.h"
#include "conv_direct.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static void axis(clremat_conv_axis *a, int64_t in, int k, int s)
{
    int64_t tot;
    a->in = in;
    a->k = k;
    a->stride = s;
    a->dil = 1;
    a->out = (in + s - 1) / s;
    tot = (a->out - 1) * s + k - in;
    a->pad_before = tot > 0 ? tot / 2 : 0;
}

int main(int argc, char **argv)
{
    const char *device = NULL;
    int reps = 5, first = 1;
    long long batch = 64;
    clremat_ctx *ctx;
    for (; first + 1 < argc && strncmp(argv[first], "--", 2) == 0; first += 2) {
        if (strcmp(argv[first], "--device") == 0)
            device = argv[first + 1];
        else if (strcmp(argv[first], "--reps") == 0)
            reps = atoi(argv[first + 1]);
        else if (strcmp(argv[first], "--batch") == 0)
            batch = atoll(argv[first + 1]);
    }
    if (reps < 1 || reps > 1000 || batch < 1) {
        fprintf(stderr, "conv_bench: bad --reps or --batch\n");
        return 2;
    }
    if (clremat_ctx_create(device, 0, &ctx) != CLREMAT_OK) {
        fprintf(stderr, "conv_bench: %s\n", clremat_last_error());
        return 1;
    }
    for (int a = first; a < argc; a++) {
        long long H, W, C, F;
        int k = 3, s = 1;
        const char *p;
        clremat_conv_geom g;
        clremat_buf *x, *w, *z, *dz, *dw, *dx, *ws;
        int64_t rows, wse;
        double flop;
        if (sscanf(argv[a], "%lldx%lldx%lldx%lld", &H, &W, &C, &F) != 4 || H < 1 || W < 1 || C < 1 || F < 1) {
            fprintf(stderr, "conv_bench: bad shape %s (HxWxCxF[:kK][:sS])\n", argv[a]);
            return 2;
        }
        if ((p = strstr(argv[a], ":k")))
            k = atoi(p + 2);
        if ((p = strstr(argv[a], ":s")))
            s = atoi(p + 2);
        memset(&g, 0, sizeof g);
        axis(&g.h, H, k, s);
        axis(&g.w, W, k, s);
        g.cin = C;
        g.cout = F;
        g.groups = 1;
        g.cg = C;
        g.fg = F;
        rows = batch * g.h.out * g.w.out;
        flop = 2.0 * (double)rows * (double)(k * k * C) * (double)F;
        wse = clremat_conv_direct_bwd_elems(&g, rows, k, k, 0);
        x = bench_filled(ctx, (size_t)(batch * H * W * C), 0.0625f, -0.375f);
        dx = bench_filled(ctx, (size_t)(batch * H * W * C), 0.0625f, -0.375f);
        w = bench_filled(ctx, (size_t)(k * k * C * F), 0.0625f, -0.375f);
        dw = bench_filled(ctx, (size_t)(k * k * C * F), 0.0625f, -0.375f);
        z = bench_filled(ctx, (size_t)(rows * F), 0.0625f, -0.375f);
        dz = bench_filled(ctx, (size_t)(rows * F), 0.0625f, -0.375f);
        ws = bench_filled(ctx, (size_t)(wse > 0 ? wse : 1), 0.0625f, -0.375f);
        if (!x || !dx || !w || !dw || !z || !dz || !ws) {
            fprintf(stderr, "conv_bench: out of device memory for %s\n", argv[a]);
            return 1;
        }
        for (int pass = 0; pass < 3; pass++) {
            static const char *names[3] = {"fwd", "wgrad", "dgrad"};
            double *t = calloc((size_t)reps, sizeof(double)), c0 = 0, c1;
            int st = CLREMAT_OK;
            for (int r = -1; r < reps && st == CLREMAT_OK; r++) {
                double t0 = clremat_now_s();
                if (r == 0)
                    c0 = bench_cpu_s();
                if (pass == 0)
                    st = clremat_conv_direct_forward(ctx, &g, batch, k, k, 0, x, w, NULL, 0, z, NULL);
                else if (pass == 1)
                    st = clremat_conv_direct_wgrad(ctx, &g, batch, k, k, 0, x, dz, ws, dw);
                else
                    st = clremat_conv_direct_dgrad(ctx, &g, batch, k, k, 0, dz, w, ws, 0, dx);
                if (st == CLREMAT_OK)
                    st = clremat_finish(ctx);
                if (r >= 0)
                    t[r] = clremat_now_s() - t0;
            }
            if (st != CLREMAT_OK) {
                fprintf(stderr, "conv_bench: %s: %s\n", argv[a], clremat_ctx_last_error(ctx));
                return 1;
            }
            c1 = bench_cpu_s();
            qsort(t, (size_t)reps, sizeof *t, bench_cmp_d);
            printf("%-20s %-6s median %8.2f ms %7.2f GFLOP/s  best %7.2f GFLOP/s  cpu %7.2f GFLOP per CPU-second\n",
                   argv[a], names[pass], 1e3 * t[reps / 2], flop / t[reps / 2] * 1e-9, flop / t[0] * 1e-9,
                   flop * reps / (c1 - c0) * 1e-9);
            fflush(stdout);
            free(t);
        }
        clremat_pool_release(ctx->pool, x);
        clremat_pool_release(ctx->pool, dx);
        clremat_pool_release(ctx->pool, w);
        clremat_pool_release(ctx->pool, dw);
        clremat_pool_release(ctx->pool, z);
        clremat_pool_release(ctx->pool, dz);
        clremat_pool_release(ctx->pool, ws);
    }
    clremat_ctx_destroy(ctx);
    return 0;
}
