/* clremat_api.h: the embedding API of libclremat, for language bindings
 * (the Python package in python/ loads it with ctypes). Each call takes the
 * model as a file path (a clremat model file or a .keras file) and its
 * options as a JSON object text with the command's option names (see
 * docs/python.md), and hands back the very JSON report the command's --json
 * prints for the same options (docs/json-output.md), as a malloc'd string
 * to free with clremat_api_free.
 *
 * Every call returns CLREMAT_OK or a status (clremat.h); the message is
 * then clremat_last_error() on the calling thread, and the structured
 * details (bytes needed and available for CLREMAT_ERR_OUT_OF_MEMORY, file,
 * line and column for a bad model file) are read with
 * clremat_api_error_bytes and clremat_api_error_position. No call keeps
 * state between calls; calls on different threads are independent. */
#ifndef CLREMAT_API_H
#define CLREMAT_API_H

#include <stddef.h>
#include <stdint.h>
#include "clremat.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Frees a report string handed out by this API; NULL is ignored. */
void clremat_api_free(void *p);

/** 1 and the bytes when the last failure on this thread recorded what it
 * needed and what was available (an out-of-memory refusal), else 0. */
int clremat_api_error_bytes(uint64_t *needed, uint64_t *available);

/** 1 and the position when the last failure on this thread was in a model
 * file (*file valid until the next call on this thread), else 0. */
int clremat_api_error_position(const char **file, int *line, int *col);

/** `clremat devices --json`: every OpenCL device, into *json. */
int clremat_api_devices(char **json);

/** `clremat plan MODEL --json`. options (NULL or "{}": defaults): remat,
 * batch, accumulate, optimizer, memory_limit (bytes, or a text such as
 * "1GiB"), device, gemm, overlap, no_fused_update, offload, actions. */
int clremat_api_plan(const char *model, const char *options, char **json);

/** `clremat plan MODEL --pareto --json`. options: batch, accumulate,
 * optimizer, no_fused_update, points. */
int clremat_api_pareto(const char *model, const char *options, char **json);

/** `clremat compare MODEL --json`. options: devices, remat (modes separated
 * by commas), batch, steps, warmup, seed, data, optimizer, lr, momentum,
 * beta1, beta2, epsilon, weight_decay, memory_limit, accumulate. */
int clremat_api_compare(const char *model, const char *options, char **json);

/** `clremat fit MODEL --json`. options: device, memory (a byte count or a
 * list of them), remat (modes separated by commas), optimizer, batch,
 * max_batch, steps, calibration_batch, accumulate (a K or a list),
 * offload, recalibrate. */
int clremat_api_fit(const char *model, const char *options, char **json);

/** An in-memory tensor of training data (train_x, train_y, val_x, val_y),
 * read in place (host byte order, C order). */
typedef struct clremat_api_tensor {
    const char *name;           /**< "train_x", "train_y", "val_x" or "val_y" */
    int dtype;                  /**< CLREMAT_API_F32, _F64, _I32 or _I64 */
    int rank;                   /**< 1..8; dims[0] is the sample count */
    const int64_t *dims;
    const void *data;
} clremat_api_tensor;

#define CLREMAT_API_F32 0
#define CLREMAT_API_F64 1
#define CLREMAT_API_I32 2
#define CLREMAT_API_I64 3

/** Called after every training step (step 1-based of steps) with its loss;
 * a non-zero return stops the run (CLREMAT_ERR_INVALID_ARGUMENT). */
typedef int (*clremat_api_progress)(void *user, int64_t step, int64_t steps, double loss);

/** A finished training run: its report and its weights. */
typedef struct clremat_api_run clremat_api_run;

/** `clremat train MODEL --json`. options: device, batch, steps, warmup,
 * seed, data (a file or a synthetic task), optimizer, lr, momentum, beta1,
 * beta2, epsilon, weight_decay, remat, memory_limit, gemm, accumulate,
 * offload, overlap, no_fused_update, load, weights_only, save,
 * train_samples, val_samples. tensors[0..n_tensors), when n_tensors > 0,
 * are the data instead (all four, checked as a data file's). *run is set
 * on success and also on a failure after at least one step (the report
 * then holds the steps run; the weights are there when the progress
 * callback stopped the run, else none); free it with clremat_api_run_free. */
int clremat_api_train(const char *model, const char *options, const clremat_api_tensor *tensors, int n_tensors,
                      clremat_api_progress progress, void *user, clremat_api_run **run);

/** Frees a run and everything it owns; NULL is ignored. */
void clremat_api_run_free(clremat_api_run *run);

/** The run's --json report (owned by the run). */
const char *clremat_api_run_json(const clremat_api_run *run);

/** Parameter tensors of the trained model ("LAYER/PARAM", as in weights files). */
int clremat_api_run_weight_count(const clremat_api_run *run);

/** Weight i: its name, rank, dims and float32 data (owned by the run).
 * CLREMAT_ERR_INVALID_ARGUMENT for an i out of range. */
int clremat_api_run_weight(const clremat_api_run *run, int i, const char **name, int *rank, const int64_t **dims,
                           const float **data);

#ifdef __cplusplus
}
#endif

#endif /* CLREMAT_API_H */
