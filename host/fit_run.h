/* fit_run.h: what `clremat fit` computes, callable from the command and the
 * embedding API (include/clremat_api.h) alike: the configurations, the
 * step-time calibration on a device (cached), and the advisor's rows. */
#ifndef CLREMAT_FIT_RUN_H
#define CLREMAT_FIT_RUN_H

#include "fit.h"

/** The options of `clremat fit`. */
typedef struct clremat_fit_options {
    const char *model_path;
    const char *device;         /**< step times from this device (and, without sizes, its memory); NULL:
                                     only when no sizes are given, the default device */
    const uint64_t *sizes;      /**< memory sizes in bytes */
    int n_sizes;                /**< 0: the device's memory */
    const char *remat;          /**< modes separated by commas (NULL: the default list) */
    const clremat_opt_config *opt; /**< optimizer */
    int64_t batch, max_batch;   /**< the batch, the largest-batch search's cap */
    int64_t steps;              /**< timed steps of the calibration */
    int64_t calibration_batch;  /**< batch of the calibration (0: batch) */
    const int64_t *accumulate;  /**< each configuration once per K (n_accumulate of them; 0: 1 alone); each K
                                     must divide batch (else refused before any calibration) */
    int n_accumulate;
    int offload;                /**< every configuration again with offload */
    int recalibrate;            /**< measure step times even when cached */
    int notes;                  /**< say on stderr what the calibration does */
    const char *precision;      /**< overrides the model file's precision (NULL: keep) */
} clremat_fit_options;

/** A finished `fit`: the request and its rows (clremat_fit_outcome_free). */
typedef struct clremat_fit_outcome {
    clremat_graph *gr;
    clremat_fit_config *configs;
    clremat_fit_calibration cal;
    clremat_fit_request rq;
    clremat_fit_row *rows;      /**< rq.n_sizes x rq.n_configs */
    clremat_ctx *ctx;
    uint64_t dev_size[1];
    int from_cache;             /**< the calibration came from the cache */
} clremat_fit_outcome;

/** Runs fit as o asks into *out (zeroed first; free it with
 * clremat_fit_outcome_free whatever the result). On failure a status with
 * the message in clremat_last_error(); *usage is set to 1 when the failure
 * is a bad option value (a remat mode, an accumulation, no sizes and no
 * device), else 0. */
int clremat_fit_execute(const clremat_fit_options *o, clremat_fit_outcome *out, int *usage);

/** Frees what clremat_fit_execute made. */
void clremat_fit_outcome_free(clremat_fit_outcome *out);

#endif
