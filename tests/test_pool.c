/* test_pool.c: the device memory pool without any device: reuse, high-water
 * marks, the byte limit, allocator failures, fault injection, and the
 * live-bytes timeline, over a counting host allocator. */
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
    tcase_add_test(tc, test_parse_bytes);
    return test_run_suite(s);
}
