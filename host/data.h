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
    int x_borrowed, y_borrowed; /**< 1: x (y) is the caller's memory, read only and never freed here
                                     (clremat_data_from_tensors with borrow) */
} clremat_split;

typedef struct clremat_dataset {
    char name[64];              /**< task name or file path */
    clremat_split train, val;
    clremat_shape x_shape, y_shape; /**< per-sample shapes */
    int y_ids;                  /**< 1: labels are class ids */
    int64_t classes;            /**< class count for ids (0 for regression) */
} clremat_dataset;

/** Builds the synthetic task that fits the model's input and labels
 * (g->io), with n_train (> 0) and n_val (>= 0) samples from seed:
 *  - "clusters": float input (any shape, D elements), one class id per
 *    sample, K = io.classes >= 2: K seeded Gaussian centres N(0, 1) * 2 per
 *    dimension, redrawn while closer than 3.5 to another, samples centre +
 *    N(0, 1) * 0.7, class uniform in [0, K).
 *  - "sequence" (alias "reverse"), "copy", "sort": token-id input [T],
 *    class-id labels [T], tokens uniform in [0, vocab) where vocab is the
 *    first embedding layer's (else io.classes) and must equal io.classes;
 *    y[t] = x[T-1-t], y = x, or y = x sorted ascending.
 *  - "language" (same input and labels as "sequence"): next-token
 *    prediction on a seeded second-order Markov language: after tokens
 *    (a, b) comes one of 3 successors of (b, a mod 2) (fixed by the seed) with
 *    probabilities 0.6, 0.3, 0.1; x = s[0..T-1], y = s[1..T]. The best
 *    possible loss is about 0.90 nats per token (after the first), far below
 *    the unigram entropy (about ln vocab).
 *  - "regression": float input (D elements) x ~ N(0, 1), float targets (M
 *    elements) y = tanh(x A), A a fixed seeded D x M matrix N(0, 1/D).
 *  - "images": float input [H, W, C], one class id per sample, K >= 2
 *    classes: class c is a cosine grating of orientation pi c / K and period
 *    4 + 2 (c % 2) pixels, random phase and gain, the same on every channel,
 *    plus N(0, 1) * 0.6 noise per element (texture alone tells classes apart).
 * task NULL picks the model file's "task" (g->task) where it names one, else
 * "sequence" for token-id input, "regression" for float
 * targets, "images" for [H, W, C] input with class labels, else "clusters". Train and validation samples come from
 * disjoint hash streams; sample i is the same whatever n_train is. A task
 * that does not fit the model: CLREMAT_ERR_MISMATCH naming both (e.g. "task
 * 'sequence' needs token-id input [T] but the model's input is [32]
 * floats"); an unknown task or bad counts: CLREMAT_ERR_INVALID_ARGUMENT. */
int clremat_data_synthetic(const clremat_graph *g, const char *task, uint64_t seed, int64_t n_train,
                           int64_t n_val, clremat_dataset *out);

/** Checks that task names a synthetic task that fits g (finalized), as
 * clremat_data_synthetic does before drawing: CLREMAT_OK, or
 * CLREMAT_ERR_INVALID_ARGUMENT for an unknown name (listing the known ones),
 * CLREMAT_ERR_MISMATCH for a task the model cannot take (naming both), with
 * the message in clremat_last_error(). */
int clremat_data_task_check(const clremat_graph *g, const char *task);

/** Loads a safetensors file with tensors "train_x", "train_y", "val_x",
 * "val_y": dims[0] is the sample count (x and y agree, train has at least
 * one), the other dims must equal the model's per-sample input or label
 * shape. Float data is F32 or F64 and must be finite; ids (token inputs,
 * class labels) may be F32, F64, I32 or I64 and must be integers in [0,
 * vocab) for inputs, [0, classes) for labels; everything becomes float32.
 * Errors name the file, the tensor and both shapes ("train_x has per-sample
 * shape [30] but the model's input is [32]"): CLREMAT_ERR_IO (reading),
 * CLREMAT_ERR_PARSE (corrupt file, missing tensor, non-finite values),
 * CLREMAT_ERR_MISMATCH (shapes, dtypes, ids out of range). */
int clremat_data_load(const clremat_graph *g, const char *path, clremat_dataset *out);

struct clremat_st_file;

/** clremat_data_load's checks and conversion on tensors already in memory
 * (host/safetensors.h; each tensor's data in host byte order, little-endian
 * as a file's): train_x, train_y, val_x, val_y. path names them in errors.
 * The dataset gets its own float32 copy, as from a file; with borrow, an F32
 * tensor whose data is float-aligned is used in place instead (checked, never
 * written; it must outlive the dataset). */
int clremat_data_from_tensors(const clremat_graph *g, const char *path, const struct clremat_st_file *tensors,
                              int borrow, clremat_dataset *out);

/** Frees the dataset's arrays. */
void clremat_data_free(clremat_dataset *d);

/** Copies batch number b of size batch from split s into x and y (either
 * may be NULL): the samples at positions b*batch .. b*batch+batch-1 of an
 * endless stream in which epoch e = position / n visits every sample once in
 * an order seeded by (seed, e). Stateless: the same arguments give the same
 * batch, and the stream does not depend on the batch size. */
void clremat_data_batch(const clremat_split *s, uint64_t seed, int64_t b, int64_t batch, float *x, float *y);

/** The batch samples at positions pos .. pos+batch-1 of the same stream
 * (clremat_data_batch(s, seed, b, batch, ...) is position b*batch). The
 * training loop draws step by step from the trainer's data position, so a
 * resumed run continues the stream where the saved run stopped. */
void clremat_data_batch_at(const clremat_split *s, uint64_t seed, int64_t pos, int64_t batch, float *x, float *y);

#endif
