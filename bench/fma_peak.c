/* fma_peak.c: the machine's float32 FLOP limit, measured, for
 * bench/bench.py: the rate of independent vector FMAs on every CPU at
 * once, and the clock the cores run at meanwhile. Computed limits are
 * not limits here: /proc/cpuinfo's "cpu MHz" on a virtual machine is the
 * nominal (TSC) clock, which cores in turbo exceed (on the 2-core VMs
 * OpenBLAS measured 341 GFLOP/s at 2048 cubed against 332.8 computed from
 * 2.60 GHz), and a scalar clock overstates the clock of AVX-512 work.
 * Usage: fma_peak [--threads N]   (default: the online CPUs)
 * One thread per CPU, all started together. Each times, 5 tries of about
 * 0.1 s:
 *  - fma: 12 independent chains of vfmadd231ps on zmm registers (16
 *    lanes, 32 FLOPs each; ymm, 8 lanes, where the CPU lacks AVX-512F),
 *    enough to fill two FMA units of latency 4 to 6;
 *  - clock: a chain of dependent register-to-register 64-bit adds (one a
 *    cycle on x86-64 cores; not adds of an immediate, whose chains newer
 *    cores fold at renaming: they read 23 GHz here).
 * Prints per thread "thread I fma GFLOPS clock GHZ" (the best try of each),
 * then "lanes L", "fma_gflops G" (the sum over threads) and "clock_ghz C"
 * (their median). On other architectures: "fma_gflops nan". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TRIES 5
#define CLOCK_ITERS 2000000L /* x 100 adds */
#define FMA_ITERS 400000L    /* x 10 x 12 FMAs */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static pthread_barrier_t start;
static int lanes; /* 16 (zmm), 8 (ymm) or 0 (not x86-64) */

typedef struct {
    double fma_gflops, clock_ghz;
} result;

#if defined(__x86_64__)
#define FMA12(R)                                                                                                   \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "2\n\t"                                                                 \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "3\n\t"                                                                 \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "4\n\t"                                                                 \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "5\n\t"                                                                 \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "6\n\t"                                                                 \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "7\n\t"                                                                 \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "8\n\t"                                                                 \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "9\n\t"                                                                 \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "10\n\t"                                                                \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "11\n\t"                                                                \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "12\n\t"                                                                \
    "vfmadd231ps %%" R "0, %%" R "1, %%" R "13\n\t"

/* Zeroes registers 0 to 13 of kind R ("zmm" or "ymm") with ZERO (vpxord
 * or vxorps), then runs FMA_ITERS x 10 x FMA12(R). */
#define MOV13(R)                                                                                                   \
    "vmovaps %%" R "0, %%" R "1\n\tvmovaps %%" R "0, %%" R "2\n\tvmovaps %%" R "0, %%" R "3\n\t"                 \
    "vmovaps %%" R "0, %%" R "4\n\tvmovaps %%" R "0, %%" R "5\n\tvmovaps %%" R "0, %%" R "6\n\t"                  \
    "vmovaps %%" R "0, %%" R "7\n\tvmovaps %%" R "0, %%" R "8\n\tvmovaps %%" R "0, %%" R "9\n\t"                  \
    "vmovaps %%" R "0, %%" R "10\n\tvmovaps %%" R "0, %%" R "11\n\tvmovaps %%" R "0, %%" R "12\n\t"               \
    "vmovaps %%" R "0, %%" R "13\n\t"
#define FMA_RUN(R, ZERO)                                                                                           \
    do {                                                                                                           \
        __asm__ volatile(ZERO " %%" R "0, %%" R "0, %%" R "0\n\t" MOV13(R)::                                      \
                             : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",       \
                               "xmm10", "xmm11", "xmm12", "xmm13");                                                \
        for (long i = 0; i < FMA_ITERS; i++)                                                                       \
            __asm__ volatile(".rept 10\n\t" FMA12(R) ".endr" ::                                                    \
                                 : "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", \
                                   "xmm12", "xmm13");                                                              \
    } while (0)

/* FMA_ITERS x 120 FMAs on zeroed registers (no denormals, data-independent
 * timing); seconds taken. */
static double fma_run(void)
{
    const double t0 = now();
    if (lanes == 16)
        FMA_RUN("zmm", "vpxord");
    else
        FMA_RUN("ymm", "vxorps");
    __asm__ volatile("vzeroupper" ::: "xmm0");
    return now() - t0;
}

/* CLOCK_ITERS x 100 dependent adds; seconds taken. */
static double clock_run(uint64_t seed)
{
    uint64_t x = seed, y = seed | 1u;
    const double t0 = now();
    for (long i = 0; i < CLOCK_ITERS; i++)
        __asm__ volatile(".rept 100\n\taddq %1, %0\n\t.endr" : "+r"(x) : "r"(y));
    const double s = now() - t0;
    if (x == 0) /* never: keeps x live */
        fputs("", stderr);
    return s;
}
#endif

/* The best of TRIES tries of each measurement, on this thread. */
static void *measure(void *out)
{
    result *r = out;
    r->fma_gflops = r->clock_ghz = 0.0;
    pthread_barrier_wait(&start);
#if defined(__x86_64__)
    for (int t = 0; t < TRIES; t++) {
        double s = fma_run(), v = (double)FMA_ITERS * 120.0 * 2.0 * lanes / s * 1e-9;
        if (s > 0.0 && v > r->fma_gflops)
            r->fma_gflops = v;
        s = clock_run((uint64_t)t);
        v = (double)CLOCK_ITERS * 100.0 / s * 1e-9;
        if (s > 0.0 && v > r->clock_ghz)
            r->clock_ghz = v;
    }
#endif
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (argc == 3 && strcmp(argv[1], "--threads") == 0)
        n = atol(argv[2]);
    else if (argc != 1) {
        fprintf(stderr, "usage: fma_peak [--threads N]\n");
        return 2;
    }
    if (n < 1 || n > 1024) {
        fprintf(stderr, "fma_peak: bad thread count %ld (1 to 1024)\n", n);
        return 2;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    lanes = __builtin_cpu_supports("avx512f") ? 16 : __builtin_cpu_supports("fma") ? 8 : 0;
#endif
    if (lanes == 0) {
        printf("fma_gflops nan\nclock_ghz nan\n");
        return 0;
    }
    pthread_t *th = calloc((size_t)n, sizeof *th);
    result *res = calloc((size_t)n, sizeof *res);
    double *ghz = calloc((size_t)n, sizeof *ghz), total = 0.0;
    if (!th || !res || !ghz || pthread_barrier_init(&start, NULL, (unsigned)n) != 0) {
        fprintf(stderr, "fma_peak: out of memory\n");
        return 1;
    }
    for (long i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, measure, &res[i]) != 0) {
            fprintf(stderr, "fma_peak: cannot start thread %ld\n", i);
            return 1;
        }
    for (long i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    for (long i = 0; i < n; i++) {
        printf("thread %ld fma %.1f clock %.3f\n", i, res[i].fma_gflops, res[i].clock_ghz);
        total += res[i].fma_gflops;
        ghz[i] = res[i].clock_ghz;
    }
    qsort(ghz, (size_t)n, sizeof *ghz, cmp_d);
    printf("lanes %d\nfma_gflops %.1f\nclock_ghz %.3f\n", lanes, total,
           n % 2 ? ghz[n / 2] : 0.5 * (ghz[n / 2 - 1] + ghz[n / 2]));
    free(th);
    free(res);
    free(ghz);
    return 0;
}
