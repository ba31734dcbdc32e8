/* dp.h: data-parallel gradient averaging inside the executor's step,
 * independent of the transport. Parameter gradients are grouped into buckets
 * in backward order (reverse layer index); after a bucket's last backward
 * the device copies its gradients into the bucket's staging buffer (a pool
 * buffer, counted in the plan's fixed bytes) and maps it for the host, so
 * the exchange of one bucket runs while the device computes the backward of
 * earlier layers. The sum is deterministic: an in-place all-to-all gives
 * rank r every rank's part r of the bucket, rank r sums those parts in rank
 * order 0, 1, .., N-1 and divides by N, and an in-place all-gather hands
 * every rank every reduced part (docs/ARCHITECTURE.md, "Data parallel").
 * The transport (MPI in host/dist.c) is process-wide: set it once before
 * the trainer is made. Without one (one process) nothing here runs. */
#ifndef CLREMAT_DP_H
#define CLREMAT_DP_H

#include "executor.h"
#include <stdint.h>

typedef struct clremat_dp_state clremat_dp_state;

/** How ranks exchange floats; callbacks return CLREMAT_OK or a status with
 * the message set by clremat_set_error. */
typedef struct clremat_dp_transport {
    int rank, nranks;           /**< this process and how many train together (nranks >= 2) */
    uint64_t bucket_bytes;      /**< a bucket closes once it holds at least this many gradient bytes */
    void *user;
    /** In place on buf, nranks parts of count floats: afterwards part r holds
     * rank r's part `rank` (all-to-all). */
    int (*alltoall)(void *user, float *buf, int64_t count);
    /** In place on buf: afterwards part r holds rank r's part r (all-gather). */
    int (*allgather)(void *user, float *buf, int64_t count);
} clremat_dp_transport;

/** Sets the process-wide transport (copied); NULL or nranks < 2 turns data
 * parallelism off. Trainers made afterwards average their gradients. */
void clremat_dp_set_transport(const clremat_dp_transport *tr);

/** The transport in effect, or NULL (one process). */
const clremat_dp_transport *clremat_dp_transport_get(void);

/** Turns the transport off (returns it) or back on (clremat_dp_resume with
 * what suspend returned): for throw-away trainers that must not exchange
 * (clremat_measure_layer_ms). */
const clremat_dp_transport *clremat_dp_suspend(void);
void clremat_dp_resume(const clremat_dp_transport *tr);

/** Bytes of the staging buffers of g's gradients under the transport in
 * effect (0 without one): every bucket padded to a multiple of nranks
 * floats. Part of the plan's fixed bytes. */
uint64_t clremat_dp_staging_bytes(const clremat_graph *g);

/** Number of buckets of g under the transport in effect (0 without one). */
int clremat_dp_bucket_count(const clremat_graph *g);

/** Allocates the staging buffers of trainer t from its pool (t->dp); no-op
 * without a transport. */
int clremat_dp_attach(clremat_trainer *t);

/** Gives the staging buffers back; t->dp is NULL afterwards. */
void clremat_dp_detach(clremat_trainer *t);

/** Called after layer l's backward was enqueued: once every layer of its
 * bucket has run, enqueues the copies into staging and the map. */
int clremat_dp_after_backward(clremat_trainer *t, int l);

/** Averages every bucket across ranks (in bucket order, each as soon as the
 * device has mapped it) and enqueues the copies back into the gradients. */
int clremat_dp_reduce(clremat_trainer *t);

/** Replaces this rank's [loss, correct] by the mean loss over ranks (summed
 * in rank order) and the summed correct count. */
int clremat_dp_reduce_result(clremat_trainer *t, float result[2]);

/** This rank's index (the shard of the global batch it trains on). */
int clremat_dp_rank(const clremat_trainer *t);

/** Ranks training together (1 without data parallelism). */
int clremat_dp_nranks(const clremat_trainer *t);

/** Replaces buf's first n floats, on every rank, by the sum over the ranks
 * of their values, added in rank order (so every rank holds the same bits);
 * through host memory (small buffers: batchnorm's statistics sums). No-op
 * without data parallelism. */
int clremat_dp_sum_buffer(clremat_trainer *t, clremat_buf *buf, int64_t n);

/** Unmaps whatever a failed step left mapped and resets the bucket counters. */
void clremat_dp_reset(clremat_trainer *t);

/** Milliseconds the last step spent in the exchange (transport calls and
 * the host sum), and waiting for the device to map buckets. */
double clremat_dp_comm_ms(const clremat_trainer *t);
double clremat_dp_device_wait_ms(const clremat_trainer *t);

#endif
