/* dp.c: data-parallel gradient averaging in the executor's step: buckets in
 * backward order, staging through mapped pool buffers, a rank-ordered sum
 * (see dp.h). The transport is given from outside (host/dist.c for MPI). */
#include "dp.h"
#include "clock.h"
#include <stdlib.h>
#include <string.h>

static clremat_dp_transport g_tr;
static int g_on;

void clremat_dp_set_transport(const clremat_dp_transport *tr)
{
    g_on = tr && tr->nranks >= 2;
    if (g_on)
        g_tr = *tr;
}

const clremat_dp_transport *clremat_dp_transport_get(void) { return g_on ? &g_tr : NULL; }

const clremat_dp_transport *clremat_dp_suspend(void)
{
    const clremat_dp_transport *t = clremat_dp_transport_get();
    g_on = 0;
    return t;
}

void clremat_dp_resume(const clremat_dp_transport *tr) { g_on = tr != NULL; }

struct clremat_dp_state {
    clremat_dp_transport tr;
    int n_buckets;
    int *bucket_of;         /* per layer: its bucket, -1 without parameters */
    int64_t *layer_off;     /* per layer: its first float in the bucket */
    int *n_layers_of;       /* per bucket: layers with parameters */
    int *pending;           /* per bucket: of those, not yet copied this step */
    unsigned char *copied;  /* per layer: copied into staging this step */
    int64_t *count;         /* per bucket: floats per part (nranks parts) */
    clremat_buf **stage;    /* per bucket: staging buffer */
    cl_event *ready;        /* per bucket: its map, when enqueued */
    float **mapped;         /* per bucket: host pointer while mapped */
    double comm_ms, wait_ms;
};

static int64_t layer_floats(const clremat_layer *L)
{
    int64_t n = 0;
    for (int p = 0; p < L->n_params; p++)
        if (!L->params[p].frozen) /* frozen (batchnorm's moving statistics, LoRA's base): no gradient */
            n += L->params[p].elems;
    return n;
}

/* Walks the buckets of g for nranks and bucket_bytes: bucket_of and
 * layer_off per layer, count per bucket (either may be NULL); returns the
 * number of buckets. */
static int layout(const clremat_graph *g, int nranks, uint64_t bucket_bytes, int *bucket_of, int64_t *layer_off,
                  int64_t *count)
{
    int k = 0;
    int64_t floats = 0;
    for (int l = g->n_layers - 1; l >= 0; l--) {
        int64_t n = layer_floats(&g->layers[l]);
        if (bucket_of)
            bucket_of[l] = n > 0 ? k : -1;
        if (n == 0)
            continue;
        if (layer_off)
            layer_off[l] = floats;
        floats += n;
        if ((uint64_t)floats * sizeof(float) >= bucket_bytes || l == 0) {
            if (count)
                count[k] = (floats + nranks - 1) / nranks;
            k++;
            floats = 0;
        }
    }
    if (floats > 0) { /* the last bucket (layer 0 had no parameters) */
        if (count)
            count[k] = (floats + nranks - 1) / nranks;
        k++;
    }
    return k;
}

int clremat_dp_bucket_count(const clremat_graph *g)
{
    return g_on ? layout(g, g_tr.nranks, g_tr.bucket_bytes, NULL, NULL, NULL) : 0;
}

uint64_t clremat_dp_staging_bytes(const clremat_graph *g)
{
    int n;
    int64_t *count;
    uint64_t bytes = 0;
    if (!g_on || (n = layout(g, g_tr.nranks, g_tr.bucket_bytes, NULL, NULL, NULL)) == 0)
        return 0;
    if (!(count = calloc((size_t)n, sizeof *count)))
        return 0; /* attach fails on the same shortage */
    layout(g, g_tr.nranks, g_tr.bucket_bytes, NULL, NULL, count);
    for (int k = 0; k < n; k++)
        bytes += (uint64_t)count[k] * (uint64_t)g_tr.nranks * sizeof(float);
    free(count);
    return bytes;
}

void clremat_dp_detach(clremat_trainer *t)
{
    clremat_dp_state *d = t->dp;
    if (!d)
        return;
    clremat_dp_reset(t);
    for (int k = 0; d->stage && k < d->n_buckets; k++)
        if (d->stage[k])
            clremat_pool_release(t->ctx->pool, d->stage[k]);
    free(d->bucket_of);
    free(d->layer_off);
    free(d->n_layers_of);
    free(d->pending);
    free(d->copied);
    free(d->count);
    free(d->stage);
    free(d->ready);
    free(d->mapped);
    free(d);
    t->dp = NULL;
}

int clremat_dp_attach(clremat_trainer *t)
{
    const clremat_graph *g = t->g;
    clremat_dp_state *d;
    int n, st;
    if (!g_on)
        return CLREMAT_OK;
    n = layout(g, g_tr.nranks, g_tr.bucket_bytes, NULL, NULL, NULL);
    if (!(d = calloc(1, sizeof *d)))
        return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    t->dp = d;
    d->tr = g_tr;
    d->n_buckets = n;
    d->bucket_of = calloc((size_t)g->n_layers + 1, sizeof *d->bucket_of);
    d->layer_off = calloc((size_t)g->n_layers + 1, sizeof *d->layer_off);
    d->copied = calloc((size_t)g->n_layers + 1, 1);
    d->n_layers_of = calloc((size_t)n + 1, sizeof *d->n_layers_of);
    d->pending = calloc((size_t)n + 1, sizeof *d->pending);
    d->count = calloc((size_t)n + 1, sizeof *d->count);
    d->stage = calloc((size_t)n + 1, sizeof *d->stage);
    d->ready = calloc((size_t)n + 1, sizeof *d->ready);
    d->mapped = calloc((size_t)n + 1, sizeof *d->mapped);
    if (!d->bucket_of || !d->layer_off || !d->copied || !d->n_layers_of || !d->pending || !d->count || !d->stage ||
        !d->ready || !d->mapped) {
        clremat_dp_detach(t);
        return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    }
    layout(g, g_tr.nranks, g_tr.bucket_bytes, d->bucket_of, d->layer_off, d->count);
    for (int l = 0; l < g->n_layers; l++)
        if (d->bucket_of[l] >= 0)
            d->n_layers_of[d->bucket_of[l]]++;
    for (int k = 0; k < n; k++) {
        size_t bytes = (size_t)d->count[k] * (size_t)g_tr.nranks * sizeof(float);
        if (d->count[k] > 0x7fffffff) {
            st = clremat_fail(t->ctx, CLREMAT_ERR_TOO_LARGE,
                              "gradient bucket %d has %lld floats per rank, more than one exchange carries (2^31 - 1)",
                              k, (long long)d->count[k]);
            clremat_dp_detach(t);
            return st;
        }
        if ((st = clremat_pool_alloc(t->ctx->pool, bytes, "gradient staging", &d->stage[k])) != CLREMAT_OK) {
            clremat_fail(t->ctx, st, "%s", clremat_pool_last_error(t->ctx->pool));
            clremat_dp_detach(t);
            return st;
        }
        d->pending[k] = d->n_layers_of[k];
    }
    return CLREMAT_OK;
}

void clremat_dp_reset(clremat_trainer *t)
{
    clremat_dp_state *d = t->dp;
    if (!d)
        return;
    for (int k = 0; k < d->n_buckets; k++) {
        if (d->mapped[k] || d->ready[k]) {
            if (d->ready[k])
                clWaitForEvents(1, &d->ready[k]);
            if (d->mapped[k])
                clEnqueueUnmapMemObject(t->ctx->queue, clremat_mem(d->stage[k]), d->mapped[k], 0, NULL, NULL);
        }
        if (d->ready[k])
            clReleaseEvent(d->ready[k]);
        d->ready[k] = NULL;
        d->mapped[k] = NULL;
        d->pending[k] = d->n_layers_of[k];
    }
    memset(d->copied, 0, (size_t)t->g->n_layers);
    clFinish(t->ctx->queue);
}

/* Enqueues the copy of layer l's gradients into its bucket's staging. */
static int copy_in(clremat_trainer *t, int l, cl_command_queue q)
{
    clremat_dp_state *d = t->dp;
    const clremat_layer *L = &t->g->layers[l];
    size_t off = (size_t)d->layer_off[l] * sizeof(float);
    for (int p = 0; p < L->n_params; p++) {
        size_t bytes = (size_t)L->params[p].elems * sizeof(float);
        cl_int err;
        if (L->params[p].frozen) /* no gradient (layer_floats) */
            continue;
        err = clEnqueueCopyBuffer(q, clremat_mem(t->grads[l][p]), clremat_mem(d->stage[d->bucket_of[l]]), 0,
                                         off, bytes, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return clremat_fail(t->ctx, err, "staging the gradient of %s/%s failed: %s", L->name, L->params[p].name,
                                clremat_status_str(err));
        off += bytes;
    }
    d->copied[l] = 1;
    return CLREMAT_OK;
}

/* Enqueues the map of bucket k (non-blocking; d->ready[k] completes it). */
static int map_bucket(clremat_trainer *t, int k, cl_command_queue q)
{
    clremat_dp_state *d = t->dp;
    cl_int err = CL_SUCCESS;
    size_t bytes = (size_t)d->count[k] * (size_t)d->tr.nranks * sizeof(float);
    d->mapped[k] = clEnqueueMapBuffer(q, clremat_mem(d->stage[k]), CL_FALSE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0,
                                      NULL, &d->ready[k], &err);
    if (err == CL_SUCCESS)
        err = clFlush(q); /* the device starts it while the host goes on */
    if (err != CL_SUCCESS)
        return clremat_fail(t->ctx, err, "mapping gradient bucket %d (%zu bytes) failed: %s", k, bytes,
                            clremat_status_str(err));
    return CLREMAT_OK;
}

int clremat_dp_after_backward(clremat_trainer *t, int l)
{
    clremat_dp_state *d = t->dp;
    int k, st;
    if (!d || (k = d->bucket_of[l]) < 0 || d->copied[l])
        return CLREMAT_OK;
    if ((st = copy_in(t, l, t->ctx->active_queue)) != CLREMAT_OK)
        return st;
    if (--d->pending[k] == 0)
        return map_bucket(t, k, t->ctx->active_queue);
    return CLREMAT_OK;
}

/* The rank-ordered mean of bucket k's part `rank` after the all-to-all:
 * parts 0 .. nranks-1 summed in that order, divided by nranks, into part
 * `rank`. */
static void sum_parts(float *buf, int64_t count, int nranks, int rank)
{
    float *out = buf + (size_t)rank * (size_t)count;
    for (int64_t i = 0; i < count; i++) {
        float s = buf[i];
        for (int r = 1; r < nranks; r++)
            s += buf[(size_t)r * (size_t)count + (size_t)i];
        out[i] = s / (float)nranks;
    }
}

int clremat_dp_reduce(clremat_trainer *t)
{
    clremat_dp_state *d = t->dp;
    cl_command_queue q = t->ctx->queue;
    int st = CLREMAT_OK;
    if (!d)
        return CLREMAT_OK;
    d->comm_ms = d->wait_ms = 0;
    for (int k = 0; k < d->n_buckets && st == CLREMAT_OK; k++) {
        double a;
        cl_int err;
        if (!d->ready[k]) { /* a layer of it had no backward this step: stage it now */
            for (int l = 0; l < t->g->n_layers && st == CLREMAT_OK; l++)
                if (d->bucket_of[l] == k && !d->copied[l])
                    st = copy_in(t, l, q);
            if (st == CLREMAT_OK)
                st = map_bucket(t, k, q);
            if (st != CLREMAT_OK)
                break;
        }
        a = 1e3 * clremat_now_s();
        err = clWaitForEvents(1, &d->ready[k]);
        d->wait_ms += 1e3 * clremat_now_s() - a;
        if (err != CL_SUCCESS)
            return clremat_fail(t->ctx, err, "waiting for gradient bucket %d failed: %s", k, clremat_status_str(err));
        a = 1e3 * clremat_now_s();
        st = d->tr.alltoall(d->tr.user, d->mapped[k], d->count[k]);
        if (st == CLREMAT_OK) {
            sum_parts(d->mapped[k], d->count[k], d->tr.nranks, d->tr.rank);
            st = d->tr.allgather(d->tr.user, d->mapped[k], d->count[k]);
        }
        d->comm_ms += 1e3 * clremat_now_s() - a;
        if (st != CLREMAT_OK)
            return clremat_fail(t->ctx, st, "averaging gradient bucket %d across %d ranks: %s", k, d->tr.nranks,
                                clremat_last_error());
        err = clEnqueueUnmapMemObject(q, clremat_mem(d->stage[k]), d->mapped[k], 0, NULL, NULL);
        d->mapped[k] = NULL;
        clReleaseEvent(d->ready[k]);
        d->ready[k] = NULL;
        if (err != CL_SUCCESS)
            return clremat_fail(t->ctx, err, "unmapping gradient bucket %d failed: %s", k, clremat_status_str(err));
        for (int l = 0; l < t->g->n_layers; l++) { /* the averages back into the gradients */
            const clremat_layer *L = &t->g->layers[l];
            size_t off = (size_t)d->layer_off[l] * sizeof(float);
            if (d->bucket_of[l] != k)
                continue;
            for (int p = 0; p < L->n_params; p++) {
                size_t bytes = (size_t)L->params[p].elems * sizeof(float);
                if (L->params[p].frozen) /* no gradient (layer_floats) */
                    continue;
                err = clEnqueueCopyBuffer(q, clremat_mem(d->stage[k]), clremat_mem(t->grads[l][p]), off, 0, bytes, 0,
                                          NULL, NULL);
                if (err != CL_SUCCESS)
                    return clremat_fail(t->ctx, err, "writing back the averaged gradient of %s/%s failed: %s", L->name,
                                        L->params[p].name, clremat_status_str(err));
                off += bytes;
            }
            d->copied[l] = 0;
        }
        d->pending[k] = d->n_layers_of[k];
    }
    return st;
}

int clremat_dp_reduce_result(clremat_trainer *t, float result[2])
{
    clremat_dp_state *d = t->dp;
    float *buf;
    float loss, correct;
    double a;
    int st;
    if (!d)
        return CLREMAT_OK;
    if (!(buf = calloc((size_t)d->tr.nranks * 2, sizeof *buf)))
        return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    buf[2 * d->tr.rank] = result[0];
    buf[2 * d->tr.rank + 1] = result[1];
    a = 1e3 * clremat_now_s();
    st = d->tr.allgather(d->tr.user, buf, 2);
    d->comm_ms += 1e3 * clremat_now_s() - a;
    if (st != CLREMAT_OK) {
        free(buf);
        return clremat_fail(t->ctx, st, "gathering the losses of %d ranks: %s", d->tr.nranks, clremat_last_error());
    }
    loss = buf[0];
    correct = buf[1];
    for (int r = 1; r < d->tr.nranks; r++) {
        loss += buf[2 * r];
        correct += buf[2 * r + 1];
    }
    result[0] = loss / (float)d->tr.nranks;
    result[1] = correct;
    free(buf);
    return CLREMAT_OK;
}

int clremat_dp_rank(const clremat_trainer *t) { return t->dp ? t->dp->tr.rank : 0; }

double clremat_dp_comm_ms(const clremat_trainer *t) { return t->dp ? t->dp->comm_ms : 0; }
double clremat_dp_device_wait_ms(const clremat_trainer *t) { return t->dp ? t->dp->wait_ms : 0; }

int clremat_dp_nranks(const clremat_trainer *t) { return t->dp ? t->dp->tr.nranks : 1; }

int clremat_dp_sum_buffer(clremat_trainer *t, clremat_buf *buf, int64_t n)
{
    clremat_dp_state *d = t->dp;
    float *all;
    double a;
    int st;
    if (!d || n <= 0)
        return CLREMAT_OK;
    if (!(all = calloc((size_t)d->tr.nranks * (size_t)n, sizeof *all)))
        return clremat_fail(t->ctx, CLREMAT_ERR_INTERNAL, "out of host memory");
    st = clremat_read(t->ctx, buf, 0, (size_t)n * sizeof(float), all + (size_t)d->tr.rank * (size_t)n);
    a = 1e3 * clremat_now_s();
    if (st == CLREMAT_OK && (st = d->tr.allgather(d->tr.user, all, n)) != CLREMAT_OK)
        st = clremat_fail(t->ctx, st, "gathering batchnorm statistics of %d ranks: %s", d->tr.nranks,
                          clremat_last_error());
    d->comm_ms += 1e3 * clremat_now_s() - a;
    for (int r = 1; st == CLREMAT_OK && r < d->tr.nranks; r++)
        for (int64_t i = 0; i < n; i++)
            all[i] += all[(size_t)r * (size_t)n + (size_t)i];
    if (st == CLREMAT_OK)
        st = clremat_write(t->ctx, buf, 0, (size_t)n * sizeof(float), all);
    free(all);
    return st;
}
