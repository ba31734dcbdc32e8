/* pool.c: the device memory pool. Every device buffer of the project comes
 * from here. It caches freed buffers for reuse, counts live and reserved
 * bytes with their high-water marks, records a live-bytes timeline, enforces
 * a byte limit, and can inject allocation faults for tests. It knows nothing
 * of OpenCL: the allocator it is given does the real work, and the fence
 * operations it is given (if any) make one queue wait for a buffer released
 * by another (overlapped execution). */
#include "clremat.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pool_entry {
    clremat_buf buf;    /* first member: a clremat_buf* is a pool_entry* */
    int in_use;
    int quarantined;    /* freed while quarantine was on: not reusable yet */
    void *fence;        /* free buffer: its last use completes at this fence (NULL: none) */
    void *fence_queue;  /* the queue it was released from */
    uint64_t fence_seq; /* when it was released with the fence (earlier: less to wait for) */
} pool_entry;

struct clremat_pool {
    clremat_allocator allocator;
    uint64_t max_alloc;
    clremat_pool_stats st;
    pool_entry **entries;       /* every buffer held, live or cached */
    size_t n_entries, cap_entries;
    uint64_t fail_countdown;    /* fault injection: 0 off */
    int quarantine;             /* releases are held back from reuse */
    clremat_fence_ops fence_ops;
    int has_fence_ops;
    void *queue;                /* the queue allocations are for and releases come from */
    size_t n_fences;
    uint64_t fence_waits;
    int recording;
    clremat_pool_event *timeline;
    size_t n_timeline, cap_timeline;
    uint64_t seq;
    char last_error[512];
};

clremat_pool *clremat_pool_new(const clremat_allocator *allocator, uint64_t limit, uint64_t max_alloc)
{
    clremat_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->allocator = *allocator;
    p->st.limit = limit;
    p->max_alloc = max_alloc;
    return p;
}

static void drop_fence(clremat_pool *p, pool_entry *e)
{
    if (!e->fence)
        return;
    if (p->has_fence_ops && p->fence_ops.release)
        p->fence_ops.release(p->fence_ops.user, e->fence);
    e->fence = NULL;
    e->fence_queue = NULL;
    p->n_fences--;
}

/* 1 if handing e to the current queue needs a wait for its fence. A fence
 * found completed is dropped. */
static int needs_wait(clremat_pool *p, pool_entry *e)
{
    if (!e->fence)
        return 0;
    if (e->fence_queue == p->queue || !p->has_fence_ops || (p->fence_ops.done && p->fence_ops.done(p->fence_ops.user, e->fence))) {
        drop_fence(p, e);
        return 0;
    }
    return 1;
}

static void release_entry(clremat_pool *p, size_t i)
{
    pool_entry *e = p->entries[i];
    /* dropping a buffer the device may still use: the allocator's release
     * (clReleaseMemObject) defers the free until its commands finish */
    drop_fence(p, e);
    p->allocator.release(p->allocator.user, e->buf.mem);
    p->st.reserved_bytes -= e->buf.capacity;
    if (e->in_use)
        p->st.live_bytes -= e->buf.bytes;
    p->st.released++;
    free(e);
    p->entries[i] = p->entries[--p->n_entries];
}

void clremat_pool_free_all(clremat_pool *p)
{
    if (!p)
        return;
    while (p->n_entries)
        release_entry(p, p->n_entries - 1);
    free(p->entries);
    free(p->timeline);
    free(p);
}

static void record(clremat_pool *p, int64_t delta, const char *tag)
{
    p->seq++;
    if (!p->recording)
        return;
    if (p->n_timeline == p->cap_timeline) {
        size_t cap = p->cap_timeline ? 2 * p->cap_timeline : 256;
        clremat_pool_event *t = realloc(p->timeline, cap * sizeof *t);
        if (!t) { /* the timeline is a report aid: stop recording, keep going */
            p->recording = 0;
            return;
        }
        p->timeline = t;
        p->cap_timeline = cap;
    }
    p->timeline[p->n_timeline++] = (clremat_pool_event){p->seq, delta, p->st.live_bytes, tag};
}

static void mark_live(clremat_pool *p, pool_entry *e, size_t bytes, const char *tag)
{
    e->in_use = 1;
    e->buf.bytes = bytes;
    e->buf.tag = tag;
    p->st.live_bytes += bytes;
    if (p->st.live_bytes > p->st.live_peak)
        p->st.live_peak = p->st.live_bytes;
    p->st.allocs++;
    record(p, (int64_t)bytes, tag);
}

/* Largest cached buffer index, or n_entries when none is cached. */
static size_t largest_cached(const clremat_pool *p)
{
    size_t best = p->n_entries;
    for (size_t i = 0; i < p->n_entries; i++)
        if (!p->entries[i]->in_use &&
            (best == p->n_entries || p->entries[i]->buf.capacity > p->entries[best]->buf.capacity))
            best = i;
    return best;
}

static int oom(clremat_pool *p, size_t bytes, const char *tag, const char *why)
{
    p->st.failed++;
    snprintf(p->last_error, sizeof p->last_error,
             "out of device memory allocating %zu bytes for %s: %llu bytes live, "
             "%llu bytes allowed%s%s",
             bytes, tag ? tag : "buffer", (unsigned long long)p->st.live_bytes,
             (unsigned long long)p->st.limit, why ? "; " : "", why ? why : "");
    return CLREMAT_ERR_OUT_OF_MEMORY;
}

int clremat_pool_alloc(clremat_pool *p, size_t bytes, const char *tag, clremat_buf **out)
{
    size_t best = SIZE_MAX;
    pool_entry *e;
    int status = 0;
    void *mem;

    *out = NULL;
    if (bytes == 0) {
        snprintf(p->last_error, sizeof p->last_error, "zero-byte allocation for %s", tag ? tag : "buffer");
        p->st.failed++;
        return CLREMAT_ERR_INVALID_ARGUMENT;
    }
    if (p->max_alloc && bytes > p->max_alloc) {
        p->st.failed++;
        snprintf(p->last_error, sizeof p->last_error,
                 "buffer of %zu bytes for %s is larger than the device's maximum allocation "
                 "of %llu bytes", bytes, tag ? tag : "buffer", (unsigned long long)p->max_alloc);
        return CLREMAT_ERR_TOO_LARGE;
    }
    if (p->fail_countdown && --p->fail_countdown == 0)
        return oom(p, bytes, tag, "fault injected for testing");
    if (p->st.limit && p->st.live_bytes + bytes > p->st.limit)
        return oom(p, bytes, tag, NULL);

    /* Reuse: the smallest cached buffer that fits with at most 1/8 slack;
     * among those of that capacity, one that needs no wait for a fence, else
     * the one released earliest (the capacities reused, hence reserved
     * bytes, do not depend on fences). */
    for (size_t i = 0; i < p->n_entries; i++) {
        pool_entry *c = p->entries[i];
        if (c->in_use || c->quarantined || c->buf.capacity < bytes || c->buf.capacity - bytes > bytes / 8)
            continue;
        if (best == SIZE_MAX || c->buf.capacity < p->entries[best]->buf.capacity)
            best = i;
        else if (c->buf.capacity == p->entries[best]->buf.capacity && p->entries[best]->fence &&
                 needs_wait(p, p->entries[best]) &&
                 (!needs_wait(p, c) || c->fence_seq < p->entries[best]->fence_seq))
            best = i;
    }
    if (best != SIZE_MAX) {
        pool_entry *c = p->entries[best];
        if (needs_wait(p, c)) {
            int st = p->fence_ops.wait ? p->fence_ops.wait(p->fence_ops.user, c->fence, c->fence_queue, p->queue)
                                       : CLREMAT_ERR_INTERNAL;
            if (st != CLREMAT_OK) { /* the buffer stays free, fence and all */
                p->st.failed++;
                snprintf(p->last_error, sizeof p->last_error,
                         "allocating %zu bytes for %s: waiting for the queue that released the buffer failed (%s)",
                         bytes, tag ? tag : "buffer", clremat_status_str(st));
                return st;
            }
            p->fence_waits++;
            drop_fence(p, c);
        }
        p->st.reused++;
        mark_live(p, p->entries[best], bytes, tag);
        *out = &p->entries[best]->buf;
        return CLREMAT_OK;
    }

    /* A new buffer: keep reserved bytes within the limit by trimming the cache. */
    while (p->st.limit && p->st.reserved_bytes + bytes > p->st.limit) {
        size_t i = largest_cached(p);
        if (i == p->n_entries)
            break;
        release_entry(p, i);
    }
    if (p->n_entries == p->cap_entries) {
        size_t cap = p->cap_entries ? 2 * p->cap_entries : 64;
        pool_entry **n = realloc(p->entries, cap * sizeof *n);
        if (!n)
            return oom(p, bytes, tag, "host memory exhausted");
        p->entries = n;
        p->cap_entries = cap;
    }
    e = calloc(1, sizeof *e);
    if (!e)
        return oom(p, bytes, tag, "host memory exhausted");
    mem = p->allocator.create(p->allocator.user, bytes, &status);
    if (!mem) { /* the device said no: give back the whole cache and retry once */
        for (size_t i = largest_cached(p); i != p->n_entries; i = largest_cached(p))
            release_entry(p, i);
        mem = p->allocator.create(p->allocator.user, bytes, &status);
    }
    if (!mem) {
        char why[96];
        free(e);
        snprintf(why, sizeof why, "the device refused the allocation (%s)", clremat_status_str(status));
        return oom(p, bytes, tag, why);
    }
    e->buf.mem = mem;
    e->buf.capacity = bytes;
    p->entries[p->n_entries++] = e;
    p->st.created++;
    p->st.reserved_bytes += bytes;
    if (p->st.reserved_bytes > p->st.reserved_peak)
        p->st.reserved_peak = p->st.reserved_bytes;
    mark_live(p, e, bytes, tag);
    *out = &e->buf;
    return CLREMAT_OK;
}

void clremat_pool_release(clremat_pool *p, clremat_buf *buf)
{
    pool_entry *e = (pool_entry *)buf;
    if (!buf || !e->in_use)
        return;
    e->in_use = 0;
    e->quarantined = p->quarantine;
    p->st.live_bytes -= buf->bytes;
    record(p, -(int64_t)buf->bytes, buf->tag);
}

void clremat_pool_release_fenced(clremat_pool *p, clremat_buf *buf, void *fence)
{
    pool_entry *e = (pool_entry *)buf;
    if (buf && e->in_use)
        clremat_pool_release(p, buf);
    else
        e = NULL;
    if (!fence || !p->has_fence_ops) /* no fence operations: the fence stays the caller's */
        return;
    if (!e) { /* nothing released: the pool has no use for the fence */
        if (p->fence_ops.release)
            p->fence_ops.release(p->fence_ops.user, fence);
        return;
    }
    e->fence = fence;
    e->fence_queue = p->queue;
    e->fence_seq = p->seq;
    p->n_fences++;
}

void clremat_pool_set_fence_ops(clremat_pool *p, const clremat_fence_ops *ops)
{
    if (!ops) {
        clremat_pool_clear_fences(p);
        p->has_fence_ops = 0;
        memset(&p->fence_ops, 0, sizeof p->fence_ops);
        return;
    }
    p->fence_ops = *ops;
    p->has_fence_ops = 1;
}

void clremat_pool_set_queue(clremat_pool *p, void *queue) { p->queue = queue; }

void clremat_pool_clear_fences(clremat_pool *p)
{
    for (size_t i = 0; i < p->n_entries && p->n_fences; i++)
        drop_fence(p, p->entries[i]);
}

size_t clremat_pool_fence_count(const clremat_pool *p) { return p->n_fences; }

uint64_t clremat_pool_fence_waits(const clremat_pool *p) { return p->fence_waits; }

void clremat_pool_quarantine(clremat_pool *p, int on)
{
    p->quarantine = on != 0;
    if (!on)
        for (size_t i = 0; i < p->n_entries; i++)
            p->entries[i]->quarantined = 0;
}

void clremat_pool_trim(clremat_pool *p)
{
    for (size_t i = largest_cached(p); i != p->n_entries; i = largest_cached(p))
        release_entry(p, i);
}

clremat_pool_stats clremat_pool_get_stats(const clremat_pool *p) { return p->st; }

void clremat_pool_reset_peaks(clremat_pool *p)
{
    p->st.live_peak = p->st.live_bytes;
    p->st.reserved_peak = p->st.reserved_bytes;
    p->st.host_peak = p->st.host_bytes;
}

int clremat_pool_host_alloc(clremat_pool *p, size_t bytes, void **out)
{
    *out = bytes ? malloc(bytes) : NULL;
    if (!*out) {
        snprintf(p->last_error, sizeof p->last_error, "out of host memory for an offloaded tensor of %zu bytes "
                 "(%llu host bytes in use)", bytes, (unsigned long long)p->st.host_bytes);
        return CLREMAT_ERR_OUT_OF_MEMORY;
    }
    p->st.host_bytes += bytes;
    if (p->st.host_bytes > p->st.host_peak)
        p->st.host_peak = p->st.host_bytes;
    return CLREMAT_OK;
}

void clremat_pool_host_free(clremat_pool *p, void *ptr, size_t bytes)
{
    if (!ptr)
        return;
    free(ptr);
    p->st.host_bytes -= bytes;
}

void clremat_pool_set_limit(clremat_pool *p, uint64_t limit) { p->st.limit = limit; }

void clremat_pool_fail_at(clremat_pool *p, uint64_t k) { p->fail_countdown = k; }

void clremat_pool_record_timeline(clremat_pool *p, int enabled)
{
    p->recording = enabled != 0;
    if (enabled)
        p->n_timeline = 0;
}

const clremat_pool_event *clremat_pool_timeline(const clremat_pool *p, size_t *count)
{
    *count = p->n_timeline;
    return p->timeline;
}

const char *clremat_pool_last_error(const clremat_pool *p) { return p->last_error; }
