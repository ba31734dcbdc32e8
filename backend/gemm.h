/* gemm.h: the GEMM paths behind clremat_gemm (layers.h) -- the native
 * kernels of kernels.cl written for CPU-class devices and CLBlast for GPUs --
 * their per-device choice (forced, or by a calibration cached per device,
 * driver version and kernels source), the dense epilogue fused into the
 * native kernel, the workspace CLBlast needs (taken from the pool, planned
 * by the cost model), and the on-disk cache directory shared with the
 * program-binary cache. */
#ifndef CLREMAT_GEMM_H
#define CLREMAT_GEMM_H

#include "layers.h"

/** Resolves the context's GEMM path if it is still CLREMAT_GEMM_AUTO:
 * $CLREMAT_GEMM, then CLBlast where the device is not a CPU, then this
 * process's earlier choice for the same device and driver, then the cache
 * file, then a calibration (written to the cache).
 * Never fails: on any trouble the native path is used. */
clremat_gemm_path clremat_gemm_resolve(clremat_ctx *ctx);

/** clremat_gemm on the path named (never CLREMAT_GEMM_AUTO), whatever the
 * context's own path: the calibration times each path through it. */
int clremat_gemm_on(clremat_ctx *ctx, clremat_gemm_path path, int tA, int tB, int64_t M, int64_t N, int64_t K,
                    float alpha, const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa,
                    const clremat_buf *B, int64_t offB, int64_t ldb, int64_t sb, float beta,
                    clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch);

/** clremat_gemm_workspace on the path named. */
size_t clremat_gemm_workspace_on(clremat_ctx *ctx, clremat_gemm_path path, int tA, int tB, int64_t M, int64_t N,
                                 int64_t K, int64_t offA, int64_t lda, int64_t sa, int64_t offB, int64_t ldb,
                                 int64_t sb, int64_t offC, int64_t ldc, int64_t sc, int64_t batch);

/** clremat_gemm_dense on the path named. */
int clremat_gemm_dense_on(clremat_ctx *ctx, clremat_gemm_path path, int64_t rows, int64_t in, int64_t units,
                          const clremat_buf *x, const clremat_buf *W, const clremat_buf *bias, int act,
                          clremat_buf *pre, clremat_buf *out);

/** Bytes of workspace the context's GEMM path needs for this call (0 on
 * the native path and for batched calls, which never use CLBlast). */
size_t clremat_gemm_workspace(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K,
                              int64_t offA, int64_t lda, int64_t sa, int64_t offB, int64_t ldb, int64_t sb,
                              int64_t offC, int64_t ldc, int64_t sc, int64_t batch);

/** Dense forward in one call: pre = x W (+ bias), out = act(pre) computed on
 * the stored float; x is rows x in, W in x units. On the native path the
 * bias and activation run in the GEMM's epilogue; on CLBlast as a separate
 * pass (clremat_bias_act). act is a clremat_act code; out is unused when
 * act is CLREMAT_ACT_NONE (then pre is the output). */
int clremat_gemm_dense(clremat_ctx *ctx, int64_t rows, int64_t in, int64_t units, const clremat_buf *x,
                       const clremat_buf *W, const clremat_buf *bias, int act, clremat_buf *pre, clremat_buf *out);

/** 1 when clremat_gemm_update can run a product with inner dimension K on
 * the context's path: the native path (the update is the kernel's
 * epilogue; CLBlast has none) with K within one k-block (ctx->gemm_kc), so
 * the gradient never needs storing between k-blocks. Without a context
 * (planning with no device): the native path's largest blocks, K <= 256. */
int clremat_gemm_update_fits(clremat_ctx *ctx, int64_t K);

/** The optimizer update fused into a weight-gradient GEMM: G = op(A)
 * op(B) (M x N, row-major, alpha 1, beta 0) is never stored; each element
 * updates param (M x N, ldc N) and its states s0 (and s1 for Adam) with
 * the arithmetic of clremat_opt_step (okind 0 SGD, 1 Adam, 2 AdamW;
 * hyperparameters hp from clremat_opt_hparams), bit for bit. Fails unless
 * clremat_gemm_update_fits(ctx, K). actA != 0: A holds a pre-activation,
 * packed through that activation (clremat_gemm_acta). */
int clremat_gemm_update(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, const clremat_buf *A,
                        int64_t lda, const clremat_buf *B, int64_t ldb, clremat_buf *param, clremat_buf *s0,
                        clremat_buf *s1, int okind, const float hp[8], int actA);

/** clremat_gemm_update on the native path, whatever the context's path. */
int clremat_gemm_update_native(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K,
                               const clremat_buf *A, int64_t lda, const clremat_buf *B, int64_t ldb,
                               clremat_buf *param, clremat_buf *s0, clremat_buf *s1, int okind, const float hp[8],
                               int actA);

/** C = op(act(A)) op(B) (M x N, row-major, ldc N, alpha 1, beta 0) where A
 * holds a pre-activation and act (a clremat_act code) is applied while
 * packing A, bit for bit the activation the forward computed: a discarded
 * activation output read as a GEMM operand without materializing it. The
 * native path only (CLBlast cannot pack through a function); fails on
 * another path. */
int clremat_gemm_acta(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, int actA,
                      const clremat_buf *A, int64_t lda, const clremat_buf *B, int64_t ldb, clremat_buf *C);

/** C = (op(A) op(B)) * act'(X), elementwise (M x N, row-major, ldc N,
 * alpha 1, beta 0; X M x N, ldc N): an activation's backward dZ = dY *
 * act'(pre) fused into the GEMM that produces dY (dense's input gradient,
 * whose consumer is a dense layer with an activation). On the native path
 * the GEMM's last k-block multiplies before storing; elsewhere the GEMM
 * and then the activation-backward kernel, in place. Either way the bits
 * of the plain GEMM followed by clremat_act_bwdw (the unfused backward).
 * store_act != 0: X also becomes act(X) in place, with the forward's bits
 * (in the same epilogue on the native path, else clremat_op_act_forward
 * after): the activation's output recomputed where its pre-activation is
 * read for the last time, for a later product to read as it is. */
int clremat_gemm_dact(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, const clremat_buf *A,
                      int64_t lda, const clremat_buf *B, int64_t ldb, clremat_buf *C, int act, clremat_buf *X,
                      int store_act);

/** clremat_gemm_dact's fused launch on the native path, whatever the
 * context's path. */
int clremat_gemm_dact_native(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K,
                             const clremat_buf *A, int64_t lda, const clremat_buf *B, int64_t ldb, clremat_buf *C,
                             int act, clremat_buf *X, int store_act);

/** clremat_gemm_acta on the native path, whatever the context's path. */
int clremat_gemm_acta_native(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, int actA,
                             const clremat_buf *A, int64_t lda, const clremat_buf *B, int64_t ldb, clremat_buf *C);

/** Runs layer l's forward and backward launchers of g at batch without
 * enqueuing anything (a dry run over placeholder buffers of the sizes in
 * costs) and returns the largest GEMM workspace each phase asks for. 0 and
 * 0 on the native path without a dry run. */
int clremat_layer_gemm_workspace(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch,
                                 const clremat_layer_cost *costs, size_t *fwd, size_t *bwd);

/** Number of GEMM shapes the calibration times (listed in
 * gemm_calibrate.c: a dense layer's forward x W, backward dY W^T and
 * X^T dY at 256x256x256, and a batched attention product). */
#define CLREMAT_GEMM_CAL_SHAPES 4

/** Version of the calibration rule and of its cache files; part of the
 * cache key and the file's first line, so files of another rule are never
 * read. Bump it whenever what is measured or how it is decided changes. */
#define CLREMAT_GEMM_CAL_VERSION 3

/** One calibration of both GEMM paths on a device. */
typedef struct {
    double native_s[CLREMAT_GEMM_CAL_SHAPES];  /**< per shape: median warm time on the native path, s (0: failed) */
    double clblast_s[CLREMAT_GEMM_CAL_SHAPES]; /**< per shape: median warm time on CLBlast, s (0: failed) */
    double native_gflops;                      /**< all shapes' FLOPs over the native total (0: failed) */
    double clblast_gflops;                     /**< the same on CLBlast (0: failed) */
    double seconds;                            /**< wall time the calibration took, compiles included */
} clremat_gemm_calibration;

/** The calibration's decision from measured times (seconds per shape, n
 * shapes): CLREMAT_GEMM_CLBLAST when every CLBlast time is valid (finite,
 * > 0) and either a native time is not or CLBlast's total is smaller;
 * otherwise CLREMAT_GEMM_NATIVE (ties and double failures included). Pure. */
int clremat_gemm_decide(const double *native_s, const double *clblast_s, int n);

/** Median of the n values of v (reordered in place; the mean of the middle
 * two when n is even); 0 when n < 1. */
double clremat_gemm_median(double *v, int n);

/** Times both GEMM paths on the context's device: CLREMAT_GEMM_CAL_SHAPES
 * shapes, one warm-up round (first-launch compiles of both paths, CLBlast's
 * included, fall there) and then three timed rounds, the paths alternating
 * within each round; fills cal with each shape's median (0 where a path
 * failed). Buffers (about 1 MiB) come straight from OpenCL, not the pool:
 * this probe runs before anything is planned and frees them at once. */
int clremat_gemm_calibrate_times(clremat_ctx *ctx, clremat_gemm_calibration *cal);

/** clremat_gemm_calibrate_times reduced to GFLOP/s of each path over all
 * shapes (0 when a path fails). */
int clremat_gemm_calibrate(clremat_ctx *ctx, double *native_gflops, double *clblast_gflops);

/** Writes the text of a cache file (format CLREMAT_GEMM_CAL_VERSION) for
 * the device, driver and kernels-source hash recording path and cal (the
 * per-shape times only when cal->seconds > 0) into out; its length, or -1
 * when it does not fit. Pure. */
int clremat_gemm_cache_format(char *out, size_t len, const char *device, const char *driver, uint64_t kernels,
                              int path, const clremat_gemm_calibration *cal);

/** The path a cache file's text records, when it has this format version's
 * first line and names this device, driver and kernels-source hash; else 0
 * (the caller recalibrates). Pure. */
int clremat_gemm_cache_parse(const char *text, const char *device, const char *driver, uint64_t kernels);

/** Path of the context's GEMM cache file (its name hashes platform,
 * device, driver and device versions, CLREMAT_GEMM_CAL_VERSION and the
 * kernels source); 0 when there is no usable cache directory. */
int clremat_gemm_cache_file(const clremat_ctx *ctx, char *out, size_t len);

/** The path recorded in the cache file for this device and driver; 0 when
 * the file is missing, does not parse, is of another format version, or
 * names another device, driver or kernels source (clremat_gemm_cache_parse). */
int clremat_gemm_cache_load(const clremat_ctx *ctx);

/** Records a calibration (path and GFLOP/s of both) atomically; 0 on success. */
int clremat_gemm_cache_store(const clremat_ctx *ctx, int path, double native_gflops, double clblast_gflops);

/** The cache directory ($XDG_CACHE_HOME/clremat, else $HOME/.cache/clremat),
 * created if missing; 0 when there is none usable. */
int clremat_cache_dir(char *out, size_t len);

/** 64-bit FNV-1a hash of n bytes, continuing from h (start with 0). */
uint64_t clremat_hash64(uint64_t h, const void *data, size_t n);

/** Writes n bytes to path atomically (a temporary file in the same
 * directory, then rename); 0 on success. */
int clremat_write_atomic(const char *path, const void *data, size_t n);

#endif /* CLREMAT_GEMM_H */
