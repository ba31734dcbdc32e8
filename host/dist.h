/* dist.h: the MPI layer of data-parallel training (`mpirun -np N clremat
 * train`): start-up, the device of each rank, the gradient transport for
 * host/dp.c (deterministic, with a time limit on every wait), agreement on
 * start-up failures, the per-rank report gathered on rank 0, and ending the
 * job. Compiled only when configure found MPI (CLREMAT_HAVE_MPI). */
#ifndef CLREMAT_DIST_H
#define CLREMAT_DIST_H

#include "train.h"
#include <stddef.h>
#include <stdint.h>

/** This process's place in the job. */
typedef struct clremat_dist {
    int rank, nranks;           /**< in MPI_COMM_WORLD; nranks 1: not under mpirun */
    int local_rank, local_size; /**< among the ranks of this host (MPI_COMM_TYPE_SHARED) */
    char host[64];              /**< this host's name */
    double timeout_s;           /**< longest wait for the other ranks ($CLREMAT_MPI_TIMEOUT, default 300) */
} clremat_dist;

/** Starts MPI when the process runs under mpirun (Open MPI's or PMIx's
 * environment) and fills *d; otherwise *d says one rank and MPI is left
 * alone. With two or more ranks the gradient transport of host/dp.h is set
 * (bucket_bytes: gradient bytes per bucket, 0: 1 MiB). */
int clremat_dist_init(int *argc, char ***argv, uint64_t bucket_bytes, clremat_dist *d);

/** The device selection of this rank: with a comma-separated list, entry
 * local_rank (too few entries: CLREMAT_ERR_INVALID_ARGUMENT with the
 * numbers); otherwise the local rank's device among those selection (or
 * $CLREMAT_DEVICE, or by default the GPUs, else every device) matches, by
 * local_rank modulo their count, as "P:D" in out. */
int clremat_dist_pick_device(const clremat_dist *d, const char *selection, char *out, size_t len);

/** Collective: every rank gives its status and message; when any rank
 * failed, returns that first failing rank's status and writes to *why
 * "rank R of N (host H): message" for each failing rank. */
int clremat_dist_agree(const clremat_dist *d, int st, const char *msg, char *why, size_t len);

/** One rank's figures for rank 0's report. */
typedef struct clremat_dist_rank {
    int rank, local_rank;
    char host[64], device[128], platform[128], remat[256];
    int64_t local_batch, steps_run;
    uint64_t predicted_peak, measured_peak, staging_bytes;
    int buckets;
    double median_ms, comm_median_ms, comm_share, wait_median_ms;
    float final_loss;
    uint64_t losses_hash, params_hash; /**< FNV-1a of the per-step losses and of the final parameters */
} clremat_dist_rank;

/** Fills this rank's record from a finished run. */
void clremat_dist_rank_fill(const clremat_dist *d, const clremat_train_result *r, clremat_dist_rank *out);

/** Collective: gathers every rank's record on rank 0 (*all, malloc'd,
 * nranks records; NULL on the others). */
int clremat_dist_gather(const clremat_dist *d, const clremat_dist_rank *mine, clremat_dist_rank **all);

/** Ends the whole job at once: prints "clremat: rank R of N (host H): msg"
 * on stderr and calls MPI_Abort with exit status 1. */
void clremat_dist_abort(const clremat_dist *d, const char *msg) __attribute__((noreturn));

/** Ends MPI (after the last collective); no-op with one rank. */
void clremat_dist_finalize(const clremat_dist *d);

#endif
