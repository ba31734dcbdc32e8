/* train.h: the training loop behind `clremat train`: data, seeded steps,
 * warm-up, validation, step-time statistics, memory high-water, weights
 * load/save, and the run's results for reports. */
#ifndef CLREMAT_TRAIN_H
#define CLREMAT_TRAIN_H

#include "data.h"
#include "executor.h"

typedef struct clremat_train_config {
    const char *model_path;
    const char *device;             /**< selection, NULL: default */
    int64_t batch;                  /**< default 32 */
    int64_t steps;                  /**< default 200 */
    int64_t warmup;                 /**< steps excluded from timing (default 5) */
    double lr;                      /**< > 0: the learning rate; else the optimizer's default (or, when
                                         resuming, the saved one) */
    const char *optimizer;          /**< "sgd", "adam", "adamw"; NULL: the optimizer of the state being
                                         resumed (load), else "adam" */
    unsigned opt_set;               /**< CLREMAT_OPT_SET_* bits: which of momentum .. weight_decay below are
                                         given; the others are the optimizer's defaults (clremat_opt_config)
                                         or, when resuming, the saved values. One the optimizer does not use
                                         is refused (CLREMAT_ERR_INVALID_ARGUMENT), as is one out of range */
    double momentum, beta1, beta2, epsilon, weight_decay; /**< hyperparameters, see opt_set */
    uint64_t seed;                  /**< seed of data, initialization and dropout; resuming needs the saved one */
    const char *data;               /**< safetensors path or synthetic task name; NULL: by model */
    const char *load, *save;        /**< weights files; load resumes the optimizer state, step count and
                                         data position saved with the weights (clremat_weights_save) */
    int weights_only;               /**< with load: take the weights alone (a fresh optimizer at step 0) */
    int save_hf;                    /**< save writes a Hugging Face checkpoint (hf_llama.h); a load that is one
                                         (clremat_hf_is_checkpoint) is read as one, weights alone */
    const char *remat;              /**< --remat MODE (default none) */
    uint64_t memory_limit;          /**< 0: the device's global memory */
    uint64_t auto_budget;           /**< auto plans for this many bytes instead of the limit (0: the limit) */
    int64_t val_samples;            /**< synthetic validation size (default 512) */
    int64_t train_samples;          /**< synthetic training size (default 4096) */
    int progress;                   /**< progress lines on stderr */
    int profile;                    /**< collect a per-layer profile of the last step */
    int timeline;                   /**< record live bytes over the last step */
    int overlap;                    /**< recompute on a second queue, overlapping backward */
    int costs_measured;             /**< budget/auto: plan from measured per-layer times (a profiled warm-up) */
    const char *gemm;               /**< GEMM path: "native", "clblast", "auto" or NULL (auto) */
    const char *memory_trace;       /**< write the last step's live tensors (Chrome trace JSON) here; NULL: no */
    int no_fused_update;            /**< --no-fused-update: keep gradients, update after the backward */
    int64_t accumulate;             /**< gradient accumulation: micro-batches per step (0 or 1: none); batch
                                         must be a multiple of it */
    const char *offload;            /**< offload to host: "all" or layer names (NULL: none) */
    /* embedding (host/api.c): data in memory and a progress callback */
    const struct clremat_st_file *data_arrays; /**< not NULL: the data is these tensors (train_x, train_y,
                                                     val_x, val_y, checked as a data file's) instead of data */
    int (*on_step)(void *user, int64_t step, int64_t steps, float loss); /**< not NULL: called after every
                                         finished step (1-based step); a non-zero return stops the run with
                                         CLREMAT_ERR_INVALID_ARGUMENT, the result holding the steps run
                                         and final_params (the parameters after the last of them) */
    void *on_step_user;             /**< passed to on_step */
    const char *precision;          /**< --precision: overrides the model file's "precision" (NULL: keep) */
} clremat_train_config;

typedef struct clremat_train_result {
    char device[128], platform[128];
    char remat[256];
    int64_t steps_run;
    int64_t start_step;             /**< steps done before this run (resumed from load), else 0 */
    clremat_opt_config opt;         /**< the optimizer and hyperparameters in effect */
    float *losses;                  /**< per step (steps_run) */
    double *step_ms;                /**< per step wall time, ms */
    double median_ms, p10_ms, p90_ms, min_ms, max_ms;
    int64_t warmup_excluded;        /**< steps left out of those statistics: the warm-up asked for, or 0
                                         when the run was no longer than it (every step then timed) */
    float final_loss;               /**< last training step's loss */
    float val_loss, val_accuracy;   /**< accuracy is NaN for regression */
    uint64_t predicted_peak, measured_peak;     /**< live bytes */
    uint64_t reserved_peak, fixed_bytes, param_bytes, kept_act_bytes;
    int fused_update;               /**< the update ran inside the backward (no gradient buffers) */
    uint64_t buffers_created_after_first_step;
    double step_flops, recompute_flops;
    int n_recompute_actions;
    int stopped_nonfinite;          /**< 1 if a non-finite loss stopped the run */
    int replans;                    /**< steps replanned and retried after running out of device memory */
    int64_t replan_step;            /**< the (0-based) step of the last replan */
    uint64_t replan_from_peak, replan_to_peak;  /**< predicted peaks before and after it */
    char replan_reason[512];        /**< the failure that caused it */
    char message[1024];             /**< why it stopped, when it did (a non-finite loss, or the error
                                         that ended a run after its steps had begun) */
    clremat_layer_profile *profile; /**< per layer (n_layers + 1: non-layer) when profiled */
    clremat_pool_event *timeline;   /**< live bytes at each allocation/free of the last step */
    size_t n_timeline;
    clremat_graph *g;               /**< the model (owned) */
    float *final_params;            /**< parameters after the run (param_bytes) */
    char gemm[16];                  /**< GEMM path the run used ("native" or "clblast") */
    clremat_kernel_profile *kernels; /**< per kernel of the profiled step, by device time (n_kernels) */
    int n_kernels;
    char profile_problem[512];      /**< not empty: the profile's kernel times are not real (the device's
                                         events carry no timing: clremat_trainer_profile_usable), and why */
    int accumulate;                 /**< micro-batches per step (1: no accumulation) */
    int64_t micro_batch;            /**< samples per micro-batch (the batch when accumulate is 1) */
    uint64_t accum_bytes;           /**< the accumulation buffer, part of fixed_bytes */
    uint64_t predicted_host_peak, measured_host_peak; /**< host bytes of offloaded tensors */
    uint64_t offload_bytes;         /**< bytes copied to the host (and back) per step */
    int n_offloads;                 /**< tensors offloaded per step */
    int host_unified;               /**< the device's memory is the host's (offload gains nothing) */
    /* data parallel (host/dp.h; under mpirun with two or more ranks, else nranks 1 and zeros) */
    int rank, nranks;
    int64_t local_batch;            /**< this rank's shard of the global batch (the batch with one rank) */
    uint64_t staging_bytes;         /**< gradient staging in the plan's fixed bytes */
    int buckets;                    /**< gradient buckets exchanged per step */
    double *comm_ms, *wait_ms;      /**< per step: time in the exchange, and waiting for the device to stage */
    double comm_median_ms, wait_median_ms; /**< medians over the timed steps */
    double comm_share;              /**< exchange time over step time, summed over the timed steps */
    /* mixed precision (issue 16) */
    int precision;                  /**< clremat_precision the run used */
    float loss_scale;               /**< mixed_float16: the loss scale after the last step (else 1) */
    int64_t skipped_steps;          /**< mixed_float16: steps whose update was skipped (non-finite gradients) */
} clremat_train_result;

/** Runs a whole training job. On failure returns a status with the message in
 * clremat_last_error(); the result is still filled as far as it got. */
int clremat_train_run(const clremat_train_config *cfg, clremat_train_result *res);

/** Runs a job on an open context (used by compare and by tests). */
int clremat_train_run_ctx(clremat_ctx *ctx, const clremat_train_config *cfg, clremat_train_result *res);

/** Frees the result's arrays. */
void clremat_train_result_free(clremat_train_result *res);

/** What a weights file records about the run that saved it
 * (clremat_checkpoint_info_read). */
typedef struct clremat_checkpoint_info {
    int has_state;                  /**< 1: the file holds optimizer state; the fields below are valid */
    clremat_opt_config opt;         /**< optimizer and hyperparameters */
    int64_t step;                   /**< steps done (Adam's step count; the dropout key of the next step) */
    int64_t data_position;          /**< training samples drawn (the next batch starts there) */
    uint64_t seed;                  /**< the run's seed (data, dropout) */
    int64_t batch;                  /**< the run's batch size */
} clremat_checkpoint_info;

/** Saves the trainer's parameters and its optimizer state to a safetensors
 * file, atomically (one file: weights, state tensors and metadata; the
 * layout is in docs/model-format.md, "Weights files"). */
int clremat_weights_save(clremat_trainer *t, const char *path);

/** Loads parameters from a safetensors file into the trainer; the first
 * mismatch (missing tensor, shape) is named. When the file also holds
 * optimizer state, the state tensors, the step count and the data position
 * are restored as well (the trainer's hyperparameters stay as they are); a
 * file whose state belongs to another optimizer is refused
 * (CLREMAT_ERR_MISMATCH). A file without state loads the weights alone. */
int clremat_weights_load(clremat_trainer *t, const char *path);

/** clremat_weights_load with with_state 0: the weights alone, any
 * optimizer state in the file ignored (the trainer's state, step count and
 * data position are untouched). */
int clremat_weights_load_opt(clremat_trainer *t, const char *path, int with_state);

/** Reads what a weights file records about its optimizer state (metadata
 * only; the tensors are checked when loading). A file without state gives
 * has_state 0. Malformed state metadata: CLREMAT_ERR_PARSE naming the
 * entry. */
int clremat_checkpoint_info_read(const char *path, clremat_checkpoint_info *out);

#endif
