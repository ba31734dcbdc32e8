/* fit.h: the advisor behind `clremat fit`: for each memory size and each
 * configuration (a remat mode, or a budget plan at that size), the predicted
 * peak, whether it fits, the recompute share and a predicted step time; and
 * the largest batch that fits for each configuration at each size, searched
 * with the exact predictor (planning only, no device). Step times come from
 * a per-device calibration: one profiled step measured on the device.
 * Computes and returns; never prints (tools/cli_fit.c reports). */
#ifndef CLREMAT_FIT_H
#define CLREMAT_FIT_H

#include <stdint.h>
#include "backend.h"
#include "graph.h"
#include "optim.h"
#include "plan.h"

/** One configuration: a row of the advisor's table at every memory size:
 * a remat policy, a gradient accumulation and offload (each combination one
 * more configuration: clremat_fit_with_accumulate, clremat_fit_with_offload).
 * Zero-initialize one built by hand: zero means no accumulation, no offload. */
typedef struct clremat_fit_config {
    char label[96];           /**< as reported: "none", "list_of_layers:block_0", "auto", "full, accumulate 4" */
    clremat_policy policy;    /**< auto: planned for each memory size (the budget planner at that size) */
    int accumulate;           /**< micro-batches per step (0 or 1: none): planned per micro-batch, the
                                   accumulation buffer in the fixed bytes; the largest batch is then a
                                   multiple of it */
    int offload;              /**< 1: every kept output the backward reads offloaded to host memory
                                   (--offload all on top of the mode) */
} clremat_fit_config;

/** Every configuration of in (n_in), then each again with offload (label
 * ", offload"). *out is malloc'ed (free it); *n its length (2 n_in). */
int clremat_fit_with_offload(const clremat_fit_config *in, int n_in, clremat_fit_config **out, int *n);

/** Every configuration of in (n_in) once per accumulation ks[0..nk) (each
 * >= 1): the ks[0] copies first, then the ks[1] ones, ...; labels of K > 1
 * get ", accumulate K". *out is malloc'ed (free it); *n its length. */
int clremat_fit_with_accumulate(const clremat_fit_config *in, int n_in, const int64_t *ks, int nk,
                                clremat_fit_config **out, int *n);

/** Builds the default configurations of g: none, full, activations,
 * larger_than (1024), list_of_layers:B for each top-level block B, then
 * auto. *out is malloc'ed (free it); *n its length. */
int clremat_fit_default_configs(const clremat_graph *g, clremat_fit_config **out, int *n);

/** Parses a comma-separated list of remat modes (clremat_split_modes: the
 * names of list_of_layers:A,B stay together) into configurations. An
 * unknown mode fails with CLREMAT_ERR_INVALID_ARGUMENT naming it; a
 * list_of_layers naming a layer or block g lacks fails with
 * CLREMAT_ERR_PLAN naming it and listing the names there are. */
int clremat_fit_parse_configs(const clremat_graph *g, const char *list, clremat_fit_config **out, int *n);

/** A device's step-time calibration: one step measured at batch. The
 * prediction for a plan at another batch scales each layer's measured
 * forward and backward time by its FLOPs at that batch over its FLOPs here,
 * adds one forward time per recomputation (an activation-only
 * recomputation a share of it, clremat_plan_recompute_cost), and adds the
 * optimizer update and the host overhead unchanged (they do not grow with
 * the batch). Device times are scaled so that they add up to at most the
 * measured wall time of an unprofiled step: at the calibration's own plan
 * and batch the prediction is the measured step time. */
typedef struct clremat_fit_calibration {
    char device[256];         /**< the device's name */
    int64_t batch;            /**< batch of the measured steps */
    char remat[96];           /**< the plan measured: "none", or "auto" when none did not fit */
    int n_layers;
    double *fwd_ms;           /**< per layer: forward device time of the profiled step */
    double *bwd_ms;           /**< per layer: backward device time */
    double *fwd_flops;        /**< per layer: forward FLOPs at batch (cost model) */
    double *bwd_flops;        /**< per layer: backward FLOPs at batch */
    double device_scale;      /**< measured device times were multiplied by this (<= 1) so that
                                   they add up to at most the step's wall time */
    double update_ms;         /**< optimizer update and other per-step device time */
    double overhead_ms;       /**< measured step wall time minus all device time (>= 0) */
    int times_from_flops;     /**< 1: the device's profiling events carry no timing
                                   (clremat_trainer_profile_usable), so fwd_ms and bwd_ms are the
                                   measured step time split by FLOPs, with no update or overhead time */
    double step_ms;           /**< median wall time of the timed steps (profiling off) */
    double offload_ms_per_byte; /**< a byte copied to the host and back (transfer calibration; 0: not known,
                                     offload adds no time) */
} clremat_fit_calibration;

/** Measures a calibration on ctx: a warm-up step, a profiled step (per
 * layer device times) and `steps` (>= 1) timed steps at batch with the
 * none plan (auto when none exceeds the device's memory) on synthetic data
 * for g seeded by seed. Trains a throw-away set of parameters. */
int clremat_fit_calibrate(clremat_ctx *ctx, clremat_graph *g, int64_t batch, const clremat_opt_config *opt,
                          uint64_t seed, int steps, clremat_fit_calibration *out);

/** clremat_fit_calibrate through an on-disk cache (host/fit_cache.c):
 * $XDG_CACHE_HOME/clremat/fit-KEY.txt, KEY hashing the device, its driver,
 * the kernels source, the context's GEMM path, model_hash (the caller's hash
 * of the model file), batch, the optimizer kind and steps. A valid file is
 * read (*from_cache 1); otherwise, or with refresh, the calibration is
 * measured and the file written atomically. offload_ms_per_byte is not
 * cached (it comes from the transfer calibration, cached on its own). */
int clremat_fit_calibrate_cached(clremat_ctx *ctx, clremat_graph *g, uint64_t model_hash, int64_t batch,
                                 const clremat_opt_config *opt, uint64_t seed, int steps, int refresh,
                                 clremat_fit_calibration *out, int *from_cache);

/** Path of that cache file; 0 without a cache directory. */
int clremat_fit_cache_file(clremat_ctx *ctx, uint64_t model_hash, int64_t batch, const clremat_opt_config *opt,
                           int steps, char *out, size_t len);

/** Frees the calibration's arrays. */
void clremat_fit_calibration_free(clremat_fit_calibration *c);

/** Predicted wall time (ms) of one step of plan, planned on in (same graph
 * as the calibration, any batch). With accumulation (plan->accumulate K >
 * 1; in->batch the micro-batch) the micro-batch's device time and the
 * host overhead count K times, and each micro-batch's gradient
 * accumulation is charged one optimizer update's time (an upper bound: the
 * accumulation pass moves fewer bytes than the update). */
double clremat_fit_predict_ms(const clremat_fit_calibration *c, const clremat_plan_input *in,
                              const clremat_plan *plan);

/** What the advisor is asked. */
typedef struct clremat_fit_request {
    const clremat_graph *g;
    int64_t batch;                      /**< the batch of the table (>= 1) */
    int opt_states;                     /**< optimizer state tensors per parameter, with CLREMAT_PLAN_FUSED_UPDATE
                                             (plan.h) when the update is fused */
    const uint64_t *sizes;              /**< memory sizes in bytes (each > 0) */
    int n_sizes;
    const clremat_fit_config *configs;
    int n_configs;
    clremat_ctx *ctx;                   /**< NULL: no device (native GEMM path, no workspace, no allocation cap) */
    const clremat_fit_calibration *cal; /**< NULL: step times not predicted (NaN) */
    int64_t max_batch_cap;              /**< the batch search stops here (0: 1 << 20) */
} clremat_fit_request;

/** One configuration at one memory size. */
typedef struct clremat_fit_row {
    int config;                 /**< index into the request's configs */
    int size;                   /**< index into the request's sizes */
    int planned;                /**< 1: a plan exists (peak and share valid); 0: see note */
    uint64_t peak_bytes;        /**< predicted peak of the plan at the request's batch */
    int fits;                   /**< planned and peak_bytes <= the size */
    double recompute_flops;     /**< of the plan */
    double recompute_share;     /**< recompute FLOPs / step FLOPs */
    double step_ms;             /**< predicted step time (NaN: no calibration, or no plan) */
    int fastest;                /**< 1 on the fitting row with the least predicted time at this size
                                     (without a calibration: the least recompute FLOPs); ties: smaller peak */
    int64_t max_batch;          /**< largest batch that fits (0: not even 1) */
    int max_batch_capped;       /**< 1: the search reached the cap and batch cap still fits */
    uint64_t max_batch_peak;    /**< peak at max_batch (0 when max_batch is 0) */
    double max_batch_step_ms;   /**< predicted step time at max_batch (NaN as step_ms) */
    char note[256];             /**< why there is no plan ("no plan within 1.0 GiB: ...") */
} clremat_fit_row;

/** Plans configuration c for memory size at batch (the step's batch; with
 * accumulation K the plan is at batch / K, and a batch not divisible by K
 * gives *planned 0 with the reason in the last error): *fits is 1 when a plan
 * exists and its peak is at most size. A configuration that cannot be
 * planned within the size (budget or auto below the smallest peak, or a
 * tensor above the device's largest allocation) gives *fits 0 and
 * CLREMAT_OK with *planned 0; other failures are returned. plan_out and
 * costs_out (may be NULL) receive the plan and its per-layer costs when
 * planned (free them). */
int clremat_fit_plan_one(const clremat_fit_request *rq, const clremat_fit_config *c, uint64_t size, int64_t batch,
                         int *planned, int *fits, clremat_plan *plan_out, clremat_layer_cost **costs_out);

/** The largest batch in [1, cap] at which configuration c fits size:
 * exponential search (1, 2, 4, ...) to bracket it, then binary search
 * (peaks grow with the batch). With accumulation K the search runs over
 * micro-batches and the batch is K times the largest that fits (a multiple
 * of K, at most cap). *out 0 when batch 1 (K) does not fit; *capped 1 when
 * the search reached the cap and the cap's largest multiple of K fits. */
int clremat_fit_max_batch(const clremat_fit_request *rq, const clremat_fit_config *c, uint64_t size, int64_t cap,
                          int64_t *out, int *capped);

/** Runs the advisor: n_sizes * n_configs rows, size-major (row s *
 * n_configs + c). *rows is malloc'ed (free it). */
int clremat_fit_run(const clremat_fit_request *rq, clremat_fit_row **rows);

#endif /* CLREMAT_FIT_H */
