/* test_pool.c: the device memory pool without any device: reuse, high-water
 * marks, the byte limit, allocator failures, fault injection, the
 * live-bytes timeline, and fenced releases (overlapped queues), over a
 * counting host allocator and host-side fake fences. */
#include "testutil.h"
#include <string.h>

typedef struct fake_alloc {
    int created, released;
    int fail_next;          /* the next create fails like a device refusing */
    size_t live_handles;
} fake_alloc;

static void *fake_create(void *user, size_t bytes, int *status)
{
    fake_alloc *f = user;
    if (f->fail_next) {
        f->fail_next = 0;
        *status = -4; /* CL_MEM_OBJECT_ALLOCATION_FAILURE */
        return NULL;
    }
    f->created++;
    f->live_handles++;
    *status = 0;
    return malloc(bytes);
}

static void fake_release(void *user, void *mem)
{
    fake_alloc *f = user;
    f->released++;
    f->live_handles--;
    free(mem);
}

static clremat_pool *make_pool(fake_alloc *f, uint64_t limit, uint64_t max_alloc)
{
    clremat_allocator a = {fake_create, fake_release, f};
    memset(f, 0, sizeof *f);
    return clremat_pool_new(&a, limit, max_alloc);
}

/* One "training step" of allocations; returns the largest live total seen. */
static uint64_t run_sequence(clremat_pool *p)
{
    static const size_t sizes[] = {4096, 1000, 65536, 4096, 12, 300000};
    clremat_buf *b[6];
    uint64_t live = 0, max_live = 0;
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(clremat_pool_alloc(p, sizes[i], "t", &b[i]), CLREMAT_OK);
        live += sizes[i];
        if (live > max_live)
            max_live = live;
        if (i == 3) { /* free two in the middle, as a forward pass would */
            clremat_pool_release(p, b[1]);
            clremat_pool_release(p, b[0]);
            live -= sizes[0] + sizes[1];
        }
    }
    for (int i = 2; i < 6; i++)
        clremat_pool_release(p, b[i]);
    return max_live;
}

START_TEST(test_reuse_and_high_water)
{
    fake_alloc f;
    clremat_pool *p = make_pool(&f, 0, 0);
    uint64_t max_live = run_sequence(p);
    clremat_pool_stats s1 = clremat_pool_get_stats(p);
    int created_first = f.created;
    ck_assert_uint_eq(s1.live_peak, max_live);
    ck_assert_uint_eq(s1.live_bytes, 0);
    ck_assert_uint_eq(s1.created, (uint64_t)created_first);
    run_sequence(p);
    {
        clremat_pool_stats s2 = clremat_pool_get_stats(p);
        ck_assert_int_eq(f.created, created_first);  /* no new buffer in the second pass */
        ck_assert_uint_eq(s2.created, s1.created);
        ck_assert_uint_eq(s2.reused, 6);
        ck_assert_uint_eq(s2.live_peak, max_live);
        ck_assert_uint_eq(s2.reserved_peak, s1.reserved_peak);
        ck_assert_uint_ge(s2.reserved_bytes, s2.live_peak);
    }
    clremat_pool_free_all(p);
    ck_assert_int_eq(f.live_handles, 0);
}
END_TEST

START_TEST(test_limit_refuses_and_pool_stays_usable)
{
    fake_alloc f;
    clremat_pool *p = make_pool(&f, 10000, 0);
    clremat_buf *a, *b, *c;
    ck_assert_int_eq(clremat_pool_alloc(p, 6000, "a", &a), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(p, 5000, "big", &b), CLREMAT_ERR_OUT_OF_MEMORY);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(clremat_pool_last_error(p), "5000 bytes"));
    ck_assert_ptr_nonnull(strstr(clremat_pool_last_error(p), "6000 bytes live"));
    ck_assert_ptr_nonnull(strstr(clremat_pool_last_error(p), "10000 bytes allowed"));
    ck_assert_uint_eq(clremat_pool_get_stats(p).failed, 1);
    ck_assert_uint_eq(clremat_pool_get_stats(p).live_bytes, 6000);
    /* still usable: what fits is served */
    ck_assert_int_eq(clremat_pool_alloc(p, 4000, "c", &c), CLREMAT_OK);
    ck_assert_uint_eq(clremat_pool_get_stats(p).live_peak, 10000);
    clremat_pool_release(p, a);
    clremat_pool_release(p, c);
    /* the cache is trimmed so reserved bytes stay within the limit */
    ck_assert_int_eq(clremat_pool_alloc(p, 9000, "d", &b), CLREMAT_OK);
    ck_assert_uint_le(clremat_pool_get_stats(p).reserved_bytes, 10000);
    clremat_pool_release(p, b);
    clremat_pool_free_all(p);
    ck_assert_int_eq(f.live_handles, 0);
}
END_TEST

START_TEST(test_device_failure_becomes_oom)
{
    fake_alloc f;
    clremat_pool *p = make_pool(&f, 0, 0);
    clremat_buf *a, *b;
    ck_assert_int_eq(clremat_pool_alloc(p, 100, "a", &a), CLREMAT_OK);
    clremat_pool_release(p, a);
    f.fail_next = 1; /* first create fails; the pool drops its cache and retries */
    ck_assert_int_eq(clremat_pool_alloc(p, 5000, "b", &b), CLREMAT_OK);
    ck_assert_int_eq(f.released, 1);
    clremat_pool_release(p, b);
    clremat_pool_free_all(p);
}
END_TEST

static void *always_fail(void *user, size_t bytes, int *status)
{
    (void)user; (void)bytes;
    *status = -5; /* CL_OUT_OF_RESOURCES */
    return NULL;
}

START_TEST(test_allocator_refusal_is_oom)
{
    clremat_allocator a = {always_fail, fake_release, NULL};
    clremat_pool *p = clremat_pool_new(&a, 0, 0);
    clremat_buf *b;
    ck_assert_int_eq(clremat_pool_alloc(p, 128, "x", &b), CLREMAT_ERR_OUT_OF_MEMORY);
    ck_assert_ptr_nonnull(strstr(clremat_pool_last_error(p), "CL_OUT_OF_RESOURCES"));
    ck_assert_uint_eq(clremat_pool_get_stats(p).live_bytes, 0);
    clremat_pool_free_all(p);
}
END_TEST

START_TEST(test_max_alloc_and_zero)
{
    fake_alloc f;
    clremat_pool *p = make_pool(&f, 0, 1024);
    clremat_buf *b;
    ck_assert_int_eq(clremat_pool_alloc(p, 1025, "huge", &b), CLREMAT_ERR_TOO_LARGE);
    ck_assert_ptr_nonnull(strstr(clremat_pool_last_error(p), "maximum allocation of 1024"));
    ck_assert_int_eq(clremat_pool_alloc(p, 0, "none", &b), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_pool_alloc(p, 1024, "ok", &b), CLREMAT_OK);
    clremat_pool_release(p, b);
    clremat_pool_free_all(p);
}
END_TEST

START_TEST(test_fault_injection)
{
    fake_alloc f;
    clremat_pool *p = make_pool(&f, 0, 0);
    clremat_buf *b[3];
    clremat_pool_fail_at(p, 2);
    ck_assert_int_eq(clremat_pool_alloc(p, 16, "a", &b[0]), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(p, 16, "b", &b[1]), CLREMAT_ERR_OUT_OF_MEMORY);
    ck_assert_ptr_nonnull(strstr(clremat_pool_last_error(p), "injected"));
    ck_assert_int_eq(clremat_pool_alloc(p, 16, "c", &b[2]), CLREMAT_OK);
    clremat_pool_release(p, b[0]);
    clremat_pool_release(p, b[2]);
    clremat_pool_free_all(p);
    ck_assert_int_eq(f.live_handles, 0);
}
END_TEST

START_TEST(test_timeline)
{
    fake_alloc f;
    clremat_pool *p = make_pool(&f, 0, 0);
    clremat_buf *a, *b;
    size_t n;
    const clremat_pool_event *ev;
    clremat_pool_record_timeline(p, 1);
    clremat_pool_alloc(p, 100, "a", &a);
    clremat_pool_alloc(p, 50, "b", &b);
    clremat_pool_release(p, a);
    clremat_pool_release(p, b);
    ev = clremat_pool_timeline(p, &n);
    ck_assert_uint_eq(n, 4);
    ck_assert_uint_eq(ev[0].live_bytes, 100);
    ck_assert_uint_eq(ev[1].live_bytes, 150);
    ck_assert_int_eq(ev[2].delta, -100);
    ck_assert_uint_eq(ev[3].live_bytes, 0);
    ck_assert_str_eq(ev[1].tag, "b");
    clremat_pool_free_all(p);
}
END_TEST

/* Fake fences: a flag the test completes, and reference counting. */
typedef struct fake_fence {
    int done;
    int refs;
} fake_fence;

typedef struct fence_log {
    int waits, releases, wait_status;
    void *last_fence, *last_from, *last_to;
} fence_log;

static int ff_done(void *user, void *fence)
{
    (void)user;
    return ((fake_fence *)fence)->done;
}

static int ff_wait(void *user, void *fence, void *from, void *to)
{
    fence_log *l = user;
    if (l->wait_status)
        return l->wait_status;
    l->waits++;
    l->last_fence = fence;
    l->last_from = from;
    l->last_to = to;
    return 0;
}

static void ff_release(void *user, void *fence)
{
    fence_log *l = user;
    l->releases++;
    ((fake_fence *)fence)->refs--;
}

static void set_ops(clremat_pool *p, fence_log *l)
{
    clremat_fence_ops ops = {ff_done, ff_wait, ff_release, l};
    memset(l, 0, sizeof *l);
    clremat_pool_set_fence_ops(p, &ops);
}

static int QA, QB; /* two queues: only their addresses matter */

/* The same queue reuses a fenced buffer without waiting; another queue waits
 * for a pending fence and not for a completed one; every fence is let go. */
START_TEST(test_fence_same_queue_other_queue)
{
    fake_alloc f;
    fence_log l;
    clremat_pool *p = make_pool(&f, 0, 0);
    fake_fence f1 = {0, 1}, f2 = {0, 1}, f3 = {1, 1};
    clremat_buf *a, *b;
    set_ops(p, &l);
    clremat_pool_set_queue(p, &QA);
    ck_assert_int_eq(clremat_pool_alloc(p, 1000, "a", &a), CLREMAT_OK);
    clremat_pool_release_fenced(p, a, &f1);
    ck_assert_uint_eq(clremat_pool_fence_count(p), 1);
    ck_assert_uint_eq(clremat_pool_get_stats(p).live_bytes, 0); /* live drops at once */
    /* same queue: in order, no wait */
    ck_assert_int_eq(clremat_pool_alloc(p, 1000, "a again", &b), CLREMAT_OK);
    ck_assert_ptr_eq(b, a);
    ck_assert_int_eq(l.waits, 0);
    ck_assert_int_eq(f1.refs, 0);
    ck_assert_uint_eq(clremat_pool_fence_count(p), 0);
    /* other queue, pending: it waits for exactly that fence, from QA to QB */
    clremat_pool_release_fenced(p, b, &f2);
    clremat_pool_set_queue(p, &QB);
    ck_assert_int_eq(clremat_pool_alloc(p, 1000, "on B", &b), CLREMAT_OK);
    ck_assert_ptr_eq(b, a);
    ck_assert_int_eq(l.waits, 1);
    ck_assert_ptr_eq(l.last_fence, &f2);
    ck_assert_ptr_eq(l.last_from, &QA);
    ck_assert_ptr_eq(l.last_to, &QB);
    ck_assert_int_eq(f2.refs, 0);
    ck_assert_uint_eq(clremat_pool_fence_waits(p), 1);
    /* other queue, completed: no wait */
    clremat_pool_release_fenced(p, b, &f3);
    clremat_pool_set_queue(p, &QA);
    ck_assert_int_eq(clremat_pool_alloc(p, 1000, "done", &b), CLREMAT_OK);
    ck_assert_int_eq(l.waits, 1);
    ck_assert_int_eq(f3.refs, 0);
    ck_assert_uint_eq(clremat_pool_get_stats(p).created, 1); /* one buffer all along */
    clremat_pool_release(p, b);
    clremat_pool_free_all(p);
    ck_assert_int_eq(f.live_handles, 0);
}
END_TEST

/* Among fitting buffers of the same capacity the one needing no wait is
 * taken; a pending buffer is reused (with a wait) rather than a new buffer
 * created; a smaller pending buffer wins over a larger free one, as without
 * fences. */
START_TEST(test_fence_preference_never_grows)
{
    fake_alloc f;
    fence_log l;
    clremat_pool *p = make_pool(&f, 0, 0);
    fake_fence pend = {0, 1}, pend2 = {0, 1};
    clremat_buf *a, *b, *c, *d;
    set_ops(p, &l);
    clremat_pool_set_queue(p, &QA);
    ck_assert_int_eq(clremat_pool_alloc(p, 4096, "a", &a), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(p, 4096, "b", &b), CLREMAT_OK);
    clremat_pool_release_fenced(p, a, &pend); /* pending on QA */
    clremat_pool_release(p, b);               /* no fence */
    clremat_pool_set_queue(p, &QB);
    ck_assert_int_eq(clremat_pool_alloc(p, 4000, "c", &c), CLREMAT_OK);
    ck_assert_ptr_eq(c, b);
    ck_assert_int_eq(l.waits, 0);
    ck_assert_int_eq(pend.refs, 1); /* still held by the free buffer */
    /* only the pending one fits: reused with a wait, nothing created */
    ck_assert_int_eq(clremat_pool_alloc(p, 4096, "d", &d), CLREMAT_OK);
    ck_assert_ptr_eq(d, a);
    ck_assert_int_eq(l.waits, 1);
    ck_assert_int_eq(pend.refs, 0);
    ck_assert_uint_eq(clremat_pool_get_stats(p).created, 2);
    /* best fit first: a pending 4096 beats a free 4500 for 4000 bytes */
    clremat_pool_set_queue(p, &QA);
    ck_assert_int_eq(clremat_pool_alloc(p, 4500, "e", &a), CLREMAT_OK);
    clremat_pool_release(p, a);
    clremat_pool_release_fenced(p, d, &pend2);
    clremat_pool_set_queue(p, &QB);
    ck_assert_int_eq(clremat_pool_alloc(p, 4000, "f", &b), CLREMAT_OK);
    ck_assert_uint_eq(b->capacity, 4096);
    ck_assert_int_eq(l.waits, 2);
    clremat_pool_release(p, b);
    clremat_pool_release(p, c);
    clremat_pool_free_all(p);
    ck_assert_int_eq(f.live_handles, 0);
    ck_assert_int_eq(pend2.refs, 0);
}
END_TEST

/* All fitting buffers of the same capacity pending: the one released first
 * (least of the other queue's work to wait for) is taken. */
START_TEST(test_fence_earliest_pending)
{
    fake_alloc f;
    fence_log l;
    clremat_pool *p = make_pool(&f, 0, 0);
    fake_fence fs[3] = {{0, 1}, {0, 1}, {0, 1}};
    clremat_buf *b[3], *x;
    set_ops(p, &l);
    clremat_pool_set_queue(p, &QA);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(clremat_pool_alloc(p, 512, "t", &b[i]), CLREMAT_OK);
    clremat_pool_release_fenced(p, b[2], &fs[2]);
    clremat_pool_release_fenced(p, b[0], &fs[0]);
    clremat_pool_release_fenced(p, b[1], &fs[1]);
    clremat_pool_set_queue(p, &QB);
    ck_assert_int_eq(clremat_pool_alloc(p, 512, "x", &x), CLREMAT_OK);
    ck_assert_ptr_eq(x, b[2]);
    ck_assert_ptr_eq(l.last_fence, &fs[2]);
    clremat_pool_release(p, x);
    clremat_pool_free_all(p);
    ck_assert_int_eq(fs[0].refs + fs[1].refs + fs[2].refs, 0);
}
END_TEST

/* clear_fences, set_fence_ops(NULL) and free_all let go of every fence; a
 * failed wait leaves the pool as it was; without fence ops a fence is not
 * kept (it stays the caller's). */
START_TEST(test_fence_release_paths)
{
    fake_alloc f;
    fence_log l;
    clremat_pool *p = make_pool(&f, 0, 0);
    fake_fence fs[4] = {{0, 1}, {0, 1}, {0, 1}, {0, 1}};
    clremat_buf *b[4], *x;
    set_ops(p, &l);
    clremat_pool_set_queue(p, &QA);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(clremat_pool_alloc(p, 100 * (size_t)(i + 1), "t", &b[i]), CLREMAT_OK);
    clremat_pool_release_fenced(p, b[0], &fs[0]);
    clremat_pool_release_fenced(p, b[1], &fs[1]);
    ck_assert_uint_eq(clremat_pool_fence_count(p), 2);
    clremat_pool_clear_fences(p);
    ck_assert_uint_eq(clremat_pool_fence_count(p), 0);
    ck_assert_int_eq(fs[0].refs + fs[1].refs, 0);
    /* a wait that fails: the status comes back, nothing becomes live */
    clremat_pool_release_fenced(p, b[2], &fs[2]);
    clremat_pool_set_queue(p, &QB);
    l.wait_status = -5;
    ck_assert_int_eq(clremat_pool_alloc(p, 300, "w", &x), -5);
    ck_assert_ptr_null(x);
    ck_assert_ptr_nonnull(strstr(clremat_pool_last_error(p), "300 bytes"));
    ck_assert_uint_eq(clremat_pool_get_stats(p).live_bytes, 400);
    ck_assert_uint_eq(clremat_pool_fence_count(p), 1);
    l.wait_status = 0;
    ck_assert_int_eq(clremat_pool_alloc(p, 300, "w", &x), CLREMAT_OK);
    ck_assert_ptr_eq(x, b[2]);
    ck_assert_int_eq(fs[2].refs, 0);
    /* free_all lets go of a fence still held */
    clremat_pool_set_queue(p, &QA);
    clremat_pool_release_fenced(p, b[3], &fs[3]);
    clremat_pool_release(p, x);
    clremat_pool_free_all(p);
    ck_assert_int_eq(fs[3].refs, 0);
    ck_assert_int_eq(f.live_handles, 0);
    /* set_fence_ops(NULL) lets go too; afterwards fences are not kept */
    p = make_pool(&f, 0, 0);
    set_ops(p, &l);
    fs[0].refs = fs[1].refs = 1;
    ck_assert_int_eq(clremat_pool_alloc(p, 64, "t", &x), CLREMAT_OK);
    clremat_pool_release_fenced(p, x, &fs[0]);
    clremat_pool_set_fence_ops(p, NULL);
    ck_assert_int_eq(fs[0].refs, 0);
    ck_assert_int_eq(clremat_pool_alloc(p, 64, "t", &x), CLREMAT_OK);
    clremat_pool_release_fenced(p, x, &fs[1]);
    ck_assert_uint_eq(clremat_pool_fence_count(p), 0);
    ck_assert_int_eq(fs[1].refs, 1); /* still the caller's */
    clremat_pool_free_all(p);
}
END_TEST

/* The same sequence of allocations and releases, once plain and once with
 * releases fenced from two alternating queues (pending fences): live and
 * reserved peaks and the buffers created are the same. */
START_TEST(test_fences_do_not_change_reserved)
{
    enum { N = 400, SLOTS = 24 };
    clremat_pool_stats st[2];
    static fake_fence fences[N];
    for (int run = 0; run < 2; run++) {
        fake_alloc f;
        fence_log l;
        clremat_pool *p = make_pool(&f, 0, 0);
        clremat_buf *held[SLOTS] = {0};
        uint32_t r = 12345;
        if (run)
            set_ops(p, &l);
        for (int i = 0; i < N; i++) {
            int k;
            size_t bytes;
            r = r * 1103515245u + 12345u;
            k = (int)(r >> 8) % SLOTS;
            bytes = 256u << ((r >> 20) % 5); /* a few sizes: reuse is frequent */
            bytes += (r >> 4) % 16;
            clremat_pool_set_queue(p, (i / 7) % 2 ? (void *)&QB : (void *)&QA);
            if (held[k]) {
                fences[i] = (fake_fence){(int)(r >> 28) % 3 == 0, 1};
                if (run)
                    clremat_pool_release_fenced(p, held[k], &fences[i]);
                else
                    clremat_pool_release(p, held[k]);
                held[k] = NULL;
            } else {
                ck_assert_int_eq(clremat_pool_alloc(p, bytes, "t", &held[k]), CLREMAT_OK);
            }
            if (run && i % 50 == 49)
                clremat_pool_clear_fences(p); /* a join */
        }
        st[run] = clremat_pool_get_stats(p);
        if (run)
            ck_assert_int_gt(l.waits, 0);
        for (int k = 0; k < SLOTS; k++)
            clremat_pool_release(p, held[k]);
        clremat_pool_free_all(p);
        if (run)
            for (int i = 0; i < N; i++)
                ck_assert_int_eq(fences[i].refs, 0); /* every fence let go */
    }
    ck_assert_uint_eq(st[0].live_peak, st[1].live_peak);
    ck_assert_uint_eq(st[0].reserved_peak, st[1].reserved_peak);
    ck_assert_uint_eq(st[0].created, st[1].created);
    ck_assert_uint_eq(st[0].reused, st[1].reused);
}
END_TEST

START_TEST(test_parse_bytes)
{
    uint64_t b;
    ck_assert_int_eq(clremat_parse_bytes("1048576", &b), 0);
    ck_assert_uint_eq(b, 1048576);
    ck_assert_int_eq(clremat_parse_bytes("512KiB", &b), 0);
    ck_assert_uint_eq(b, 524288);
    ck_assert_int_eq(clremat_parse_bytes("1.5GiB", &b), 0);
    ck_assert_uint_eq(b, 1610612736ULL);
    ck_assert_int_eq(clremat_parse_bytes("64MB", &b), 0);
    ck_assert_uint_eq(b, 64000000);
    ck_assert_int_eq(clremat_parse_bytes("2 MiB", &b), 0);
    ck_assert_uint_eq(b, 2097152);
    ck_assert_int_eq(clremat_parse_bytes("-5", &b), -1);
    ck_assert_int_eq(clremat_parse_bytes("12parsecs", &b), -1);
    ck_assert_int_eq(clremat_parse_bytes("", &b), -1);
    ck_assert_int_eq(clremat_parse_bytes("0.5", &b), -1);
    /* strictly decimal: no hex, exponent, inf or nan (strtod takes them all) */
    ck_assert_int_eq(clremat_parse_bytes("0x100000", &b), -1);
    ck_assert_int_eq(clremat_parse_bytes("1e9", &b), -1);
    ck_assert_int_eq(clremat_parse_bytes("inf", &b), -1);
    ck_assert_int_eq(clremat_parse_bytes("nan", &b), -1);
    ck_assert_int_eq(clremat_parse_bytes(".5", &b), -1);
    ck_assert_int_eq(clremat_parse_bytes("1.", &b), -1);
    /* whole numbers are exact to 64 bits; past them, refused */
    ck_assert_int_eq(clremat_parse_bytes("9007199254740993", &b), 0);
    ck_assert_uint_eq(b, 9007199254740993ULL);
    ck_assert_int_eq(clremat_parse_bytes("18446744073709551615", &b), 0);
    ck_assert_uint_eq(b, 18446744073709551615ULL);
    ck_assert_int_eq(clremat_parse_bytes("18446744073709551616", &b), -1);
    ck_assert_int_eq(clremat_parse_bytes("17179869184GiB", &b), -1);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("pool", 0, &tc);
    tcase_add_test(tc, test_reuse_and_high_water);
    tcase_add_test(tc, test_limit_refuses_and_pool_stays_usable);
    tcase_add_test(tc, test_device_failure_becomes_oom);
    tcase_add_test(tc, test_allocator_refusal_is_oom);
    tcase_add_test(tc, test_max_alloc_and_zero);
    tcase_add_test(tc, test_fault_injection);
    tcase_add_test(tc, test_timeline);
    tcase_add_test(tc, test_fence_same_queue_other_queue);
    tcase_add_test(tc, test_fence_preference_never_grows);
    tcase_add_test(tc, test_fence_earliest_pending);
    tcase_add_test(tc, test_fence_release_paths);
    tcase_add_test(tc, test_fences_do_not_change_reserved);
    tcase_add_test(tc, test_parse_bytes);
    return test_run_suite(s);
}
