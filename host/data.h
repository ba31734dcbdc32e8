/* data.h: training and validation data: built-in seeded synthetic tasks and
 * user data from safetensors files. Samples are float32 (token and class
 * ids stored as exact integers in float). */
#ifndef CLREMAT_DATA_H
#define CLREMAT_DATA_H

#include <stdint.h>
#include "graph.h"

/** A dataset split in host memory: n samples of x (x_elems floats each) and
 * y (y_elems floats each). */
typedef struct clremat_split {
    int64_t n;
    int64_t x_elems, y_elems;
    float *x, *y;
} clremat_split;

typedef struct clremat_dataset {
    char name[64];              /**< task name or file path */
    clremat_split train, val;
    clremat_shape x_shape, y_shape; /**< per-sample shapes */
    int y_ids;                  /**< 1: labels are class ids */
    int64_t classes;            /**< class count for ids (0 for regression) */
} clremat_dataset;

/** Builds the synthetic task that fits the model's input and labels
 * (g->io): "clusters" (Gaussian-cluster classification, vector input, class
 * labels), "sequence" (token ids -> per-token targets: the reversed
 * sequence... see docs), or "regression" (vector input, float targets), with
 * n_train and n_val samples from seed. task NULL picks by the model's io. */
int clremat_data_synthetic(const clremat_graph *g, const char *task, uint64_t seed, int64_t n_train,
                           int64_t n_val, clremat_dataset *out);

/** Loads a safetensors file with tensors "train_x", "train_y", "val_x",
 * "val_y" (float32; ids as F32 or I32/I64, converted), checking them against
 * the model's io; a mismatch names both shapes. */
int clremat_data_load(const clremat_graph *g, const char *path, clremat_dataset *out);

/** Frees the dataset's arrays. */
void clremat_data_free(clremat_dataset *d);

/** Copies batch number b (wrapping around, in a seeded shuffled order per
 * epoch) of size batch from split s into x and y. */
void clremat_data_batch(const clremat_split *s, uint64_t seed, int64_t b, int64_t batch, float *x, float *y);

#endif
