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
/** Whether n elements of activation act (clremat_act; CLREMAT_ACT_NONE for
 * a plain conversion) go through the wide elementwise kernels
 * (clremat_act_fwdw, clremat_act_bwdw, clremat_cvt16w, clremat_act_bwd16w:
 * kernels.cl's CLREMAT_EW, sixteen elements per work-item) rather than the
 * eight-wide ones they stand for (clremat_act_fwd8, clremat_act_bwd8,
 * clremat_cvt16x8, clremat_act_bwd16): where the program's native GEMM
 * tile is 12 x 32 (16-lane vector devices, backend/program.c) and act is
 * none, GELU (tanh form) or ReLU, whose sixteen-wide instance uses no math
 * builtins; the other activations keep the eight-wide kernels, since a
 * builtin may round differently in another kernel (rusticl's exp did, for
 * SiLU's derivative), and forward and recomputation must agree bit for bit. */
static inline int clremat_ew_wide(const clremat_ctx *ctx, int act)
{
    return ctx->gemm_nr >= 32 &&
           (act == CLREMAT_ACT_NONE || act == CLREMAT_ACT_GELU_TANH || act == CLREMAT_ACT_RELU);
}

/** The kernel for n elements of act: wide (clremat_ew_wide) or eight-wide. */
static inline const char *clremat_ew_name(const clremat_ctx *ctx, int act, const char *wide, const char *eight)
{
    return clremat_ew_wide(ctx, act) ? wide : eight;
}

/** The work-items of that kernel: ceil(n / 16) for a wide one, else ceil(n / 8). */
static inline int64_t clremat_ew_items(const clremat_ctx *ctx, int act, int64_t n)
{
    return clremat_ew_wide(ctx, act) ? (n + 15) / 16 : (n + 7) / 8;
}

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
