/* test_device.c: device enumeration and selection, the context and its
 * queues, OpenCL-backed pool buffers, and a kernel smoke test (kernels.cl
 * builds and axpy computes the right numbers). Skips (77) without a device. */
#include "testutil.h"
#include "backend.h"
#include <stdio.h>
#include <string.h>

START_TEST(test_list_and_select)
{
    clremat_device_info *d = NULL, sel;
    size_t n = 0;
    char spec[32];
    ck_assert_int_eq(clremat_list_devices(&d, &n), CLREMAT_OK);
    ck_assert_uint_gt(n, 0);
    for (size_t i = 0; i < n; i++) {
        ck_assert(d[i].name[0] != 0);
        ck_assert(d[i].global_mem_bytes > 0);
        ck_assert(d[i].max_alloc_bytes > 0 && d[i].max_alloc_bytes <= d[i].global_mem_bytes);
        snprintf(spec, sizeof spec, "%u:%u", d[i].platform_index, d[i].device_index);
        ck_assert_int_eq(clremat_select_device(spec, &sel), CLREMAT_OK);
        ck_assert_str_eq(sel.name, d[i].name);
        ck_assert_int_eq(clremat_select_device(d[i].type, &sel), CLREMAT_OK);
        ck_assert_str_eq(sel.type, d[i].type);
    }
    ck_assert_int_eq(clremat_select_device("no-such-device-xyz", &sel), CLREMAT_ERR_DEVICE_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "matches no OpenCL device"));
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), d[0].name));
    ck_assert_int_eq(clremat_select_device("99:99", &sel), CLREMAT_ERR_DEVICE_NOT_FOUND);
    free(d);
}
END_TEST

START_TEST(test_kernel_smoke)
{
    clremat_ctx *ctx;
    clremat_buf *x, *y;
    cl_kernel k;
    enum { N = 1000 };
    float hx[N], hy[N], out[N];
    const float a = 2.5f;
    int n = N;
    size_t global = N;
    TEST_OPEN_CTX(ctx, 0);
    for (int i = 0; i < N; i++) {
        hx[i] = (float)i * 0.5f;
        hy[i] = 1.0f - (float)i;
    }
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hx, "x", &x), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hy, "y", &y), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, x, 0, sizeof hx, hx), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, y, 0, sizeof hy, hy), CLREMAT_OK);
    ck_assert_int_eq(clremat_kernel(ctx, "axpy", &k), CLREMAT_OK);
    {
        cl_mem mx = clremat_mem(x), my = clremat_mem(y);
        ck_assert_int_eq(clremat_set_args(ctx, k, "axpy", sizeof n, &n, sizeof a, &a, sizeof mx, &mx,
                                          sizeof my, &my, (size_t)0), CLREMAT_OK);
    }
    ck_assert_int_eq(clremat_launch(ctx, k, "axpy", 1, &global, NULL), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, y, 0, sizeof out, out), CLREMAT_OK);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(out[i], a * hx[i] + hy[i]);
    /* the kernel is cached: a second lookup gives the same object */
    {
        cl_kernel k2;
        ck_assert_int_eq(clremat_kernel(ctx, "axpy", &k2), CLREMAT_OK);
        ck_assert_ptr_eq(k, k2);
    }
    ck_assert_int_ne(clremat_kernel(ctx, "no_such_kernel", &k), CLREMAT_OK);
    ck_assert_ptr_nonnull(strstr(clremat_ctx_last_error(ctx), "no_such_kernel"));
    clremat_pool_release(ctx->pool, x);
    clremat_pool_release(ctx->pool, y);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_device_pool_limit_and_reuse)
{
    clremat_ctx *ctx;
    clremat_buf *a, *b;
    clremat_pool_stats s;
    TEST_OPEN_CTX(ctx, 1 << 20);
    ck_assert_uint_eq(clremat_pool_get_stats(ctx->pool).limit, 1 << 20);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, 800000, "a", &a), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, 400000, "b", &b), CLREMAT_ERR_OUT_OF_MEMORY);
    clremat_pool_release(ctx->pool, a);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, 800000, "a2", &a), CLREMAT_OK);
    s = clremat_pool_get_stats(ctx->pool);
    ck_assert_uint_eq(s.created, 1);
    ck_assert_uint_eq(s.reused, 1);
    ck_assert_int_eq(clremat_zero(ctx, a), CLREMAT_OK);
    clremat_pool_release(ctx->pool, a);
    /* a buffer above the device's max allocation is refused up front */
    clremat_pool_set_limit(ctx->pool, 0);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (size_t)ctx->info.max_alloc_bytes + 1, "huge", &b),
                     CLREMAT_ERR_TOO_LARGE);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_queues_and_errors)
{
    clremat_ctx *ctx;
    cl_command_queue q;
    int fell = -1;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_ptr_nonnull(ctx->queue);
    ck_assert_int_eq(clremat_ctx_open_queue(ctx, CL_QUEUE_PROFILING_ENABLE | CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE,
                                            &q, &fell), CLREMAT_OK);
    ck_assert_int_eq(fell, !ctx->info.out_of_order);
    clReleaseCommandQueue(q);
    ck_assert_str_eq(clremat_status_str(CLREMAT_ERR_OUT_OF_MEMORY), "CLREMAT_ERR_OUT_OF_MEMORY");
    ck_assert_str_eq(clremat_status_str(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES");
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_build_failure_carries_log)
{
    clremat_ctx *ctx = NULL;
    char path[] = "/tmp/clremat-badXXXXXX";
    int fd = mkstemp(path);
    const char *bad = "__kernel void broken(__global float *x) { x[0] = undeclared_name; }\n";
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, bad, strlen(bad)), (int)strlen(bad));
    close(fd);
    setenv("CLREMAT_KERNELS", path, 1);
    ck_assert_int_eq(clremat_ctx_create(getenv("CLREMAT_TEST_DEVICE"), 0, &ctx), CLREMAT_ERR_BUILD);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "undeclared_name"));
    setenv("CLREMAT_KERNELS", "/nonexistent/kernels.cl", 1);
    ck_assert_int_eq(clremat_ctx_create(getenv("CLREMAT_TEST_DEVICE"), 0, &ctx), CLREMAT_ERR_IO);
    unsetenv("CLREMAT_KERNELS");
    unlink(path);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("device", 300, &tc);
    tcase_add_test(tc, test_list_and_select);
    tcase_add_test(tc, test_kernel_smoke);
    tcase_add_test(tc, test_device_pool_limit_and_reuse);
    tcase_add_test(tc, test_queues_and_errors);
    tcase_add_test(tc, test_build_failure_carries_log);
    return test_run_device_suite(s);
}
