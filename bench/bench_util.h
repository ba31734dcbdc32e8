/* bench_util.h: what the C benchmarks share: the wall clock (clremat_now_s,
 * base/clock.h), the process's CPU time (all threads: robust to other load
 * on the machine), a comparison for qsort (medians), and a pool buffer
 * filled with a fixed pattern. */
#ifndef CLREMAT_BENCH_UTIL_H
#define CLREMAT_BENCH_UTIL_H

#include "clock.h"
#include "layers.h"
#include <stdlib.h>
#include <sys/resource.h>

/* CPU seconds (user + system) of this process, all threads. */
static inline double bench_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* qsort comparison of doubles, ascending. */
static inline int bench_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* n floats from the pool holding ((i * 7) % 13) * scale + offset, or NULL
 * when the host or the pool has no room. */
static inline clremat_buf *bench_filled(clremat_ctx *ctx, size_t n, float scale, float offset)
{
    clremat_buf *b = NULL;
    float *h = malloc(n * sizeof(float));
    if (!h || clremat_pool_alloc(ctx->pool, n * sizeof(float), "bench", &b) != CLREMAT_OK) {
        free(h);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((i * 7) % 13) * scale + offset;
    clremat_write(ctx, b, 0, n * sizeof(float), h);
    free(h);
    return b;
}

#endif
