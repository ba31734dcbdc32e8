/* compare.h: the acceptance protocol behind `clremat compare`: the same
 * model, data, batch and seed on each selected device and each remat mode,
 * warm-up excluded, the same measured window for every run; per run the
 * peaks, fit, step time, overhead against none, recompute, losses, accuracy
 * and the numerics checks. */
#ifndef CLREMAT_COMPARE_H
#define CLREMAT_COMPARE_H

#include "train.h"

typedef struct clremat_compare_config {
    const char *model_path;
    const char *devices;        /**< "all", or selections separated by commas */
    const char *modes;          /**< remat modes separated by commas */
    int64_t batch, steps, warmup;
    uint64_t seed;
    const char *data, *optimizer;
    double lr;                  /**< > 0: learning rate, else the optimizer's default */
    unsigned opt_set;           /**< CLREMAT_OPT_SET_* bits of the hyperparameters below that are given */
    double momentum, beta1, beta2, epsilon, weight_decay; /**< as in clremat_train_config */
    uint64_t memory_limit;      /**< memory a run must fit to count as fitting, and auto's budget
                                     (0: each device's global memory); runs themselves use the device */
    int progress;               /**< a line per run on stderr */
    int costs_measured;         /**< budget/auto plan from measured per-layer times */
    int64_t accumulate;         /**< gradient accumulation: micro-batches per step (0 or 1: none) */
    const char *precision;      /**< --precision: overrides the model file's (NULL: keep) */
} clremat_compare_config;

/** Outcome of one (device, mode) run. */
typedef struct clremat_compare_run {
    char device[128], device_id[32], platform[128], mode[256];
    int status;                 /**< CLREMAT_OK, CLREMAT_ERR_OUT_OF_MEMORY (does not fit the device), or another error */
    char error[1024];
    uint64_t limit;             /**< bytes the run must fit (--memory-limit, else the device's memory) */
    uint64_t predicted_peak, measured_peak, fixed_bytes;
    int fits;                   /**< predicted_peak <= limit */
    double median_ms, p10_ms, p90_ms;
    double overhead;            /**< median / none's median on this device (NaN without none) */
    double step_flops, recompute_flops;
    float final_loss, val_loss, val_accuracy;
    int finite;                 /**< every loss finite */
    int bitwise_none;           /**< 1 equal to none on this device, 0 differs, -1 not compared */
    double max_device_diff;     /**< largest |loss difference| against this mode on other devices (NaN: one device) */
    int64_t n_losses;
    float *losses;
    float *params;
    uint64_t param_bytes;
    clremat_pool_event *timeline;   /**< live bytes over the last step */
    size_t n_timeline;
} clremat_compare_run;

/** Splits "none,full,list_of_layers:a,b,budget:1MiB" into modes: a comma
 * starts a new mode only when what follows begins with a mode name. */
int clremat_split_modes(const char *text, char ***modes, int *n);

/** Runs the protocol; *runs holds devices x modes results in device order.
 * Runs that fail or do not fit are reported, not dropped; the call fails
 * only for bad arguments (model, devices, modes). */
int clremat_compare(const clremat_compare_config *cfg, clremat_compare_run **runs, int *n);

/** Frees what clremat_compare returned. */
void clremat_compare_free(clremat_compare_run *runs, int n);

/** Writes the SVG report (memory over the step per mode and device; step
 * time and peak per device and mode) atomically. */
int clremat_compare_svg(const char *path, const char *model, const clremat_compare_run *runs, int n);

#endif
