/* kernel_run.h: one-call kernel launch (look up, set arguments, enqueue
 * through clremat_launch) and small helpers shared by the layer launchers
 * (element counts of per-sample shapes, argument checks). */
#ifndef CLREMAT_KERNEL_RUN_H
#define CLREMAT_KERNEL_RUN_H

#include "backend.h"
#include "graph.h"

/** Looks up kernel kname, sets its arguments from (size_t size, const void
 * *value) pairs ended by a size of 0, and enqueues it through clremat_launch
 * over dims dimensions (global rounded up to local; local may be NULL). */
int clremat_run(clremat_ctx *ctx, const char *kname, cl_uint dims, const size_t *global,
                const size_t *local, ...);

/** Enqueues a 1-D elementwise kernel over n items (local size chosen by the
 * runtime) with the argument pairs that follow, ended by a size of 0. */
int clremat_run1d(clremat_ctx *ctx, const char *kname, int64_t n, ...);

/** Elements of a per-sample shape (1 for rank 0); does not need base/graph.c. */
static inline int64_t clremat_elems_of(const clremat_shape *s)
{
    int64_t e = 1;
    for (int i = 0; i < s->rank; i++)
        e *= s->dims[i];
    return e;
}

/** Last dimension of a shape (1 for rank 0). */
static inline int64_t clremat_last_dim(const clremat_shape *s)
{
    return s->rank > 0 ? s->dims[s->rank - 1] : 1;
}

/** Checks that buf is non-NULL and holds at least floats floats; names the
 * layer, the role of the buffer and both sizes on failure. */
int clremat_check_buf(clremat_ctx *ctx, const char *layer, const char *role, const clremat_buf *buf,
                      int64_t floats);

/** clremat_check_buf for n elements of storage format fmt (0: float32,
 * else a 16-bit format of mixed precision, two bytes each). */
int clremat_check_buf_fmt(clremat_ctx *ctx, const char *layer, const char *role, const clremat_buf *buf, int64_t n,
                          int fmt);

#endif
