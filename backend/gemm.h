/* gemm.h: the GEMM paths behind clremat_gemm (layers.h) -- the native
 * kernels of kernels.cl written for CPU-class devices and CLBlast for GPUs --
 * their per-device choice (forced, or by a calibration cached per device and
 * driver version), the dense epilogue fused into the native kernel, the
 * workspace CLBlast needs (taken from the pool, planned by the cost model),
 * and the on-disk cache directory shared with the program-binary cache. */
#ifndef CLREMAT_GEMM_H
#define CLREMAT_GEMM_H

#include "layers.h"

/** Resolves the context's GEMM path if it is still CLREMAT_GEMM_AUTO:
 * $CLREMAT_GEMM, then this process's earlier choice for the same device and
 * driver, then the cache file, then a calibration (written to the cache).
 * Never fails: on any trouble the native path is used. */
clremat_gemm_path clremat_gemm_resolve(clremat_ctx *ctx);

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

/** Runs layer l's forward and backward launchers of g at batch without
 * enqueuing anything (a dry run over placeholder buffers of the sizes in
 * costs) and returns the largest GEMM workspace each phase asks for. 0 and
 * 0 on the native path without a dry run. */
int clremat_layer_gemm_workspace(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch,
                                 const clremat_layer_cost *costs, size_t *fwd, size_t *bwd);

/** Times the native and CLBlast GEMMs on the context's device (a few
 * milliseconds plus CLBlast's first compile) and returns each in GFLOP/s
 * (0 when a path fails). Buffers come straight from OpenCL, not the pool:
 * this probe runs before anything is planned and frees them at once. */
int clremat_gemm_calibrate(clremat_ctx *ctx, double *native_gflops, double *clblast_gflops);

/** Path of the context's GEMM cache file (per device and driver); 0 when
 * there is no usable cache directory. */
int clremat_gemm_cache_file(const clremat_ctx *ctx, char *out, size_t len);

/** The path recorded in the cache file for this device and driver; 0 when
 * the file is missing, does not parse, or names another device or driver. */
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
