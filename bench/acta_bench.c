/* acta_bench.c: what the activations mode's fused recomputation costs in
 * the GEMMs that carry it (issue 21). For each shape MxNxK:tAtB it times,
 * alternating within every rep so that load from other processes hits all
 * alike, on the native GEMM path:
 *   plain   C = op(A) op(B)                      (clremat_gemm_on)
 *   acta    C = op(act(A)) op(B), act applied while packing A
 *                                                 (clremat_gemm_acta_native)
 *   upd     the fused SGD update, no activation (clremat_gemm_update_native,
 *           only where K fits one k-block)
 *   upd_act the fused SGD update with act applied while packing A
 *   pass    one act pass over A alone (clremat_act_fwd8 on M x K floats):
 *           what a separate recomputation would cost
 *   dact    C = (op(A) op(B)) * act'(X), X M x N: an activation's backward
 *           in the epilogue (clremat_gemm_dact_native)
 *   dact_act the same, and X = act(X) in place (store_act: the activations
 *           mode's recomputation where dense's input gradient reads the
 *           pre-activation for the last time)
 * Usage: acta_bench [--device SEL] [--reps N] [--act NAME] SHAPE...
 * Prints one line per shape: median ms of each, and the overheads
 * acta - plain, upd_act - upd and dact_act - dact in ms and as a ratio to
 * pass (a pass over M x K floats: for dact_act, whose activation runs on
 * M x N, the MLP's dx shape 256x1024x1024:nt has M x N = M x K). */
#include "bench_util.h"
#include "backend.h"
#include "gemm.h"
#include "kernel_run.h"
#include "layers.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { T_PLAIN, T_ACTA, T_UPD, T_UPD_ACT, T_PASS, T_DACT, T_DACT_ACT, T_COUNT };

int main(int argc, char **argv)
{
    const char *device = NULL, *actname = "gelu";
    int reps = 11, first = 1, act;
    clremat_ctx *ctx;
    for (; first + 1 < argc && strncmp(argv[first], "--", 2) == 0; first += 2) {
        if (strcmp(argv[first], "--device") == 0)
            device = argv[first + 1];
        else if (strcmp(argv[first], "--reps") == 0)
            reps = atoi(argv[first + 1]);
        else if (strcmp(argv[first], "--act") == 0)
            actname = argv[first + 1];
        else
            break;
    }
    act = clremat_act_from_name(actname);
    if (reps < 1 || reps > 1000 || act <= 0 || first >= argc) {
        fprintf(stderr, "usage: acta_bench [--device SEL] [--reps N (1..1000)] [--act NAME] MxNxK[:tAtB]...\n");
        return 2;
    }
    if (clremat_ctx_create(device, 0, &ctx) != CLREMAT_OK) {
        fprintf(stderr, "acta_bench: %s\n", clremat_last_error());
        return 1;
    }
    printf("%-20s %9s %9s %9s %9s %9s %9s %9s %11s %11s %11s\n", "shape", "plain ms", "acta ms", "upd ms", "upd_act",
           "pass ms", "dact ms", "dact_act", "acta-plain", "upd_act-upd", "dact_a-dact");
    for (int a = first; a < argc; a++) {
        long long M, N, K;
        char tr[3] = "nn";
        int tA, tB, st = CLREMAT_OK, has_upd;
        clremat_buf *A, *B, *C, *P, *S, *Y, *X, *X2;
        double *t[T_COUNT], med[T_COUNT];
        const float hp[8] = {0.0f, 0.9f, 0, 0, 0, 1.0f, 1.0f, 0}; /* lr 0: the parameter stays put */
        if (sscanf(argv[a], "%lldx%lldx%lld:%2s", &M, &N, &K, tr) < 3 || M < 1 || N < 1 || K < 1 ||
            M * K > 2147483647) {
            fprintf(stderr, "acta_bench: bad shape %s (MxNxK[:nn|nt|tn|tt])\n", argv[a]);
            return 2;
        }
        tA = tr[0] == 't';
        tB = tr[1] == 't';
        has_upd = K <= ctx->gemm_kc;
        A = bench_filled(ctx, (size_t)(M * K), 0.25f, -1.5f);
        B = bench_filled(ctx, (size_t)(K * N), 0.25f, -1.5f);
        C = bench_filled(ctx, (size_t)(M * N), 0.25f, -1.5f);
        P = bench_filled(ctx, (size_t)(M * N), 0.25f, -1.5f);
        S = bench_filled(ctx, (size_t)(M * N), 0.25f, -1.5f);
        Y = bench_filled(ctx, (size_t)(M * K), 0.25f, -1.5f);
        X = bench_filled(ctx, (size_t)(M * N), 0.25f, -1.5f);
        X2 = bench_filled(ctx, (size_t)(M * N), 0.25f, -1.5f);
        if (!A || !B || !C || !P || !S || !Y || !X || !X2) {
            fprintf(stderr, "acta_bench: out of device memory for %s\n", argv[a]);
            return 1;
        }
        for (int k = 0; k < T_COUNT; k++)
            t[k] = calloc((size_t)reps, sizeof(double));
        for (int r = -1; r < reps && st == CLREMAT_OK; r++)
            for (int k = 0; k < T_COUNT && st == CLREMAT_OK; k++) {
                const int kk = (k + (r < 0 ? 0 : r)) % T_COUNT; /* rotate the order every rep */
                const double t0 = clremat_now_s();
                const cl_int n = (cl_int)(M * K), iact = act;
                cl_mem mx = clremat_mem(A), my = clremat_mem(Y);
                if (kk == T_PLAIN)
                    st = clremat_gemm_on(ctx, CLREMAT_GEMM_NATIVE, tA, tB, M, N, K, 1.0f, A, 0, tA ? M : K, 0, B, 0,
                                         tB ? K : N, 0, 0.0f, C, 0, N, 0, 1);
                else if (kk == T_ACTA)
                    st = clremat_gemm_acta_native(ctx, tA, tB, M, N, K, act, A, tA ? M : K, B, tB ? K : N, C);
                else if ((kk == T_UPD || kk == T_UPD_ACT) && has_upd)
                    st = clremat_gemm_update_native(ctx, tA, tB, M, N, K, A, tA ? M : K, B, tB ? K : N, P, S, NULL, 0,
                                                    hp, kk == T_UPD_ACT ? act : 0);
                else if (kk == T_DACT || kk == T_DACT_ACT) /* X2 becomes act(X2) each time: GELU keeps it bounded */
                    st = clremat_gemm_dact_native(ctx, tA, tB, M, N, K, A, tA ? M : K, B, tB ? K : N, C, act,
                                                  kk == T_DACT ? X : X2, kk == T_DACT_ACT);
                else if (kk == T_PASS)
                    st = clremat_run1d(ctx, "clremat_act_fwd8", (size_t)((M * K + 7) / 8), sizeof n, &n, sizeof iact,
                                       &iact, sizeof mx, &mx, sizeof my, &my, (size_t)0);
                if (st == CLREMAT_OK)
                    st = clremat_finish(ctx);
                if (r >= 0)
                    t[kk][r] = clremat_now_s() - t0;
            }
        if (st != CLREMAT_OK) {
            fprintf(stderr, "acta_bench: %s: %s\n", argv[a], clremat_ctx_last_error(ctx));
            return 1;
        }
        for (int k = 0; k < T_COUNT; k++) {
            qsort(t[k], (size_t)reps, sizeof(double), bench_cmp_d);
            med[k] = 1e3 * t[k][reps / 2];
            free(t[k]);
        }
        if (!has_upd)
            med[T_UPD] = med[T_UPD_ACT] = 0.0 / 0.0;
        printf("%-20s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %6.3f=%4.1fp %6.3f=%4.1fp %6.3f=%4.1fp\n", argv[a],
               med[T_PLAIN], med[T_ACTA], med[T_UPD], med[T_UPD_ACT], med[T_PASS], med[T_DACT], med[T_DACT_ACT],
               med[T_ACTA] - med[T_PLAIN], (med[T_ACTA] - med[T_PLAIN]) / med[T_PASS], med[T_UPD_ACT] - med[T_UPD],
               (med[T_UPD_ACT] - med[T_UPD]) / med[T_PASS], med[T_DACT_ACT] - med[T_DACT],
               (med[T_DACT_ACT] - med[T_DACT]) / med[T_PASS]);
        fflush(stdout);
        clremat_pool_release(ctx->pool, X2);
        clremat_pool_release(ctx->pool, X);
        clremat_pool_release(ctx->pool, Y);
        clremat_pool_release(ctx->pool, S);
        clremat_pool_release(ctx->pool, P);
        clremat_pool_release(ctx->pool, C);
        clremat_pool_release(ctx->pool, B);
        clremat_pool_release(ctx->pool, A);
    }
    printf("(median ms over reps; acta-plain, upd_act-upd and dact_a-dact: the activation's cost inside the GEMM, "
           "in ms and in separate act passes over A (p))\n");
    clremat_ctx_destroy(ctx);
    return 0;
}
