/* test_rng.c: the kernels.cl copy of the counter-based generator
 * (clremat_hash) gives the same bits as host/rng.h, for seeds with both
 * halves set, several steps and layers. Skips (77) without a device. */
#include "testutil.h"
#include "kernel_run.h"
#include "rng.h"

START_TEST(test_hash_matches_host)
{
    enum { N = 1003 };
    static const uint64_t seeds[] = {0, 1, 0x123456789abcdef0ULL, 0xffffffffffffffffULL};
    clremat_ctx *ctx;
    clremat_buf *b;
    uint32_t out[N];
    size_t global = N;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof out, "hash", &b), CLREMAT_OK);
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++)
        for (cl_uint step = 0; step < 3; step++) {
            cl_int n = N;
            cl_uint lo = (cl_uint)seeds[s], hi = (cl_uint)(seeds[s] >> 32), layer = 7 + step * 5;
            cl_mem m = clremat_mem(b);
            ck_assert_int_eq(clremat_run(ctx, "clremat_hash_fill", 1, &global, NULL, sizeof n, &n, sizeof lo, &lo,
                                         sizeof hi, &hi, sizeof step, &step, sizeof layer, &layer, sizeof m, &m,
                                         (size_t)0), CLREMAT_OK);
            ck_assert_int_eq(clremat_read(ctx, b, 0, sizeof out, out), CLREMAT_OK);
            for (int i = 0; i < N; i++) {
                uint32_t h = clremat_hash(seeds[s], step, layer, (uint32_t)i);
                ck_assert_uint_eq(out[i], h);
                ck_assert(clremat_uniform(h) >= 0.0f && clremat_uniform(h) < 1.0f);
            }
        }
    clremat_pool_release(ctx->pool, b);
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("rng", 120, &tc);
    tcase_add_test(tc, test_hash_matches_host);
    return test_run_device_suite(s);
}
