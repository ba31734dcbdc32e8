/* test_gemm_select.c: the GEMM calibration's decision and cache text,
 * without a device: clremat_gemm_decide picks the path from measured times
 * (by the total over the shapes; a failed or invalid time loses; ties keep
 * the native path), clremat_gemm_median, and the cache file's text round
 * trip (clremat_gemm_cache_format / _parse) with its invalidation by another
 * format version, device, driver or kernels source. The file-level cache on
 * a real device and a real calibration are in test_gemm. */
#include "testutil.h"
#include "gemm.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define NS CLREMAT_GEMM_CAL_SHAPES

START_TEST(test_decide_by_total)
{
    /* CLBlast faster on every shape (rusticl-like: 5x) */
    double nat[NS] = {0.17, 0.17, 0.18, 0.035}, clb[NS] = {0.032, 0.034, 0.033, 0.0036};
    ck_assert_int_eq(clremat_gemm_decide(nat, clb, NS), CLREMAT_GEMM_CLBLAST);
    /* native faster on every shape (PoCL-like: 10x) */
    ck_assert_int_eq(clremat_gemm_decide(clb, nat, NS), CLREMAT_GEMM_NATIVE);
    /* mixed: native wins three shapes narrowly, CLBlast one by far: the
     * total decides (CLBlast: 0.10 + 0.10 + 0.10 + 0.01 = 0.31 against
     * 0.09 * 3 + 0.30 = 0.57) */
    {
        double n2[NS] = {0.09, 0.09, 0.09, 0.30}, c2[NS] = {0.10, 0.10, 0.10, 0.01};
        ck_assert_int_eq(clremat_gemm_decide(n2, c2, NS), CLREMAT_GEMM_CLBLAST);
        /* ... and the other way round */
        n2[3] = 0.02;
        ck_assert_int_eq(clremat_gemm_decide(n2, c2, NS), CLREMAT_GEMM_NATIVE);
    }
    /* a tie keeps the native path (no workspace) */
    ck_assert_int_eq(clremat_gemm_decide(nat, nat, NS), CLREMAT_GEMM_NATIVE);
    /* fewer shapes: only those count */
    {
        double n1[2] = {1.0, 0.001}, c1[2] = {0.5, 100.0};
        ck_assert_int_eq(clremat_gemm_decide(n1, c1, 1), CLREMAT_GEMM_CLBLAST);
        ck_assert_int_eq(clremat_gemm_decide(n1, c1, 2), CLREMAT_GEMM_NATIVE);
    }
}
END_TEST

START_TEST(test_decide_failures)
{
    double nat[NS] = {0.17, 0.17, 0.18, 0.035}, clb[NS] = {0.032, 0.034, 0.033, 0.0036};
    double c_fail[NS] = {0.032, 0.034, 0, 0.0036}, n_fail[NS] = {0.17, 0, 0.18, 0.035};
    double c_nan[NS] = {0.032, NAN, 0.033, 0.0036}, c_inf[NS] = {0.032, 0.034, INFINITY, 0.0036};
    double c_neg[NS] = {0.032, 0.034, 0.033, -1};
    double zero[NS] = {0, 0, 0, 0};
    /* a CLBlast shape that failed: native even though CLBlast was faster elsewhere */
    ck_assert_int_eq(clremat_gemm_decide(nat, c_fail, NS), CLREMAT_GEMM_NATIVE);
    ck_assert_int_eq(clremat_gemm_decide(nat, c_nan, NS), CLREMAT_GEMM_NATIVE);
    ck_assert_int_eq(clremat_gemm_decide(nat, c_inf, NS), CLREMAT_GEMM_NATIVE);
    ck_assert_int_eq(clremat_gemm_decide(nat, c_neg, NS), CLREMAT_GEMM_NATIVE);
    /* native failed, CLBlast ran: CLBlast, even if slower where native ran */
    ck_assert_int_eq(clremat_gemm_decide(n_fail, clb, NS), CLREMAT_GEMM_CLBLAST);
    {
        double slow[NS] = {9, 9, 9, 9};
        ck_assert_int_eq(clremat_gemm_decide(n_fail, slow, NS), CLREMAT_GEMM_CLBLAST);
    }
    /* both failed, or nothing measured: native */
    ck_assert_int_eq(clremat_gemm_decide(zero, zero, NS), CLREMAT_GEMM_NATIVE);
    ck_assert_int_eq(clremat_gemm_decide(n_fail, c_fail, NS), CLREMAT_GEMM_NATIVE);
    ck_assert_int_eq(clremat_gemm_decide(nat, clb, 0), CLREMAT_GEMM_NATIVE);
}
END_TEST

START_TEST(test_median)
{
    double a[3] = {5, 1, 3}, b[4] = {4, 1, 100, 2}, c[1] = {7}, d[3] = {0.2, 10.0, 0.1};
    ck_assert(clremat_gemm_median(a, 3) == 3);
    ck_assert(clremat_gemm_median(b, 4) == 3); /* mean of 2 and 4 */
    ck_assert(clremat_gemm_median(c, 1) == 7);
    ck_assert(clremat_gemm_median(c, 0) == 0);
    ck_assert(clremat_gemm_median(d, 3) == 0.2); /* one slow outlier does not move it */
}
END_TEST

/* A calibration as clremat_gemm_calibrate_times would fill it. */
static clremat_gemm_calibration sample_cal(void)
{
    clremat_gemm_calibration c = {{0.17, 0.17, 0.18, 0.035}, {0.032, 0.034, 0.033, 0.0036}, 0.6, 3.2, 3.5};
    return c;
}

START_TEST(test_cache_text_round_trip)
{
    char text[2048], magic[64];
    clremat_gemm_calibration cal = sample_cal();
    const uint64_t k = 0x0123456789abcdefULL;
    int n = clremat_gemm_cache_format(text, sizeof text, "llvmpipe (LLVM 15.0.6, 256 bits)", "22.3.6", k,
                                      CLREMAT_GEMM_CLBLAST, &cal);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq((int)strlen(text), n);
    snprintf(magic, sizeof magic, "clremat-gemm-cache %d\n", CLREMAT_GEMM_CAL_VERSION);
    ck_assert_msg(strncmp(text, magic, strlen(magic)) == 0, "first line of:\n%s", text);
    ck_assert_ptr_nonnull(strstr(text, "\nclblast_ms 32.000 34.000 33.000 3.600\n"));
    ck_assert_ptr_nonnull(strstr(text, "\ncalibration_s 3.500\n"));
    ck_assert_int_eq(clremat_gemm_cache_parse(text, "llvmpipe (LLVM 15.0.6, 256 bits)", "22.3.6", k),
                     CLREMAT_GEMM_CLBLAST);
    /* the other path round-trips too; without times (seconds 0) no times lines */
    cal.seconds = 0;
    n = clremat_gemm_cache_format(text, sizeof text, "dev", "drv", k, CLREMAT_GEMM_NATIVE, &cal);
    ck_assert_int_gt(n, 0);
    ck_assert_ptr_null(strstr(text, "_ms"));
    ck_assert_int_eq(clremat_gemm_cache_parse(text, "dev", "drv", k), CLREMAT_GEMM_NATIVE);
    /* too small a buffer: -1, not a truncated file */
    ck_assert_int_eq(clremat_gemm_cache_format(text, 40, "dev", "drv", k, CLREMAT_GEMM_NATIVE, &cal), -1);
}
END_TEST

START_TEST(test_cache_text_invalidated)
{
    char text[2048], old[2048], *p;
    clremat_gemm_calibration cal = sample_cal();
    const uint64_t k = 0x0123456789abcdefULL;
    ck_assert_int_gt(clremat_gemm_cache_format(text, sizeof text, "dev", "1.0", k, CLREMAT_GEMM_CLBLAST, &cal), 0);
    ck_assert_int_eq(clremat_gemm_cache_parse(text, "dev", "1.0", k), CLREMAT_GEMM_CLBLAST);
    /* another driver version, device or kernels source: recalibrate */
    ck_assert_int_eq(clremat_gemm_cache_parse(text, "dev", "1.1", k), 0);
    ck_assert_int_eq(clremat_gemm_cache_parse(text, "dev", "1.", k), 0); /* a prefix is not a match */
    ck_assert_int_eq(clremat_gemm_cache_parse(text, "dev2", "1.0", k), 0);
    ck_assert_int_eq(clremat_gemm_cache_parse(text, "dev", "1.0", k + 1), 0);
    /* the same text under the previous format version's first line (the
     * rule that timed one 512^3 GEMM): ignored */
    p = strchr(text, '\n');
    ck_assert_ptr_nonnull(p);
    snprintf(old, sizeof old, "clremat-gemm-cache %d%s", CLREMAT_GEMM_CAL_VERSION - 1, p);
    ck_assert_int_eq(clremat_gemm_cache_parse(old, "dev", "1.0", k), 0);
    snprintf(old, sizeof old, "clremat-gemm-cache %d0%s", CLREMAT_GEMM_CAL_VERSION, p);
    ck_assert_int_eq(clremat_gemm_cache_parse(old, "dev", "1.0", k), 0);
    /* a version 1 file exactly as that rule wrote it */
    ck_assert_int_eq(clremat_gemm_cache_parse("clremat-gemm-cache 1\ndevice dev\ndriver 1.0\npath clblast\n"
                                              "native_gflops 0.460\nclblast_gflops 0.353\n", "dev", "1.0", k), 0);
    /* no path line, garbage, empty */
    snprintf(old, sizeof old, "%.*s", (int)(strstr(text, "path ") - text), text);
    ck_assert_int_eq(clremat_gemm_cache_parse(old, "dev", "1.0", k), 0);
    ck_assert_int_eq(clremat_gemm_cache_parse("\xff\xfe not a cache", "dev", "1.0", k), 0);
    ck_assert_int_eq(clremat_gemm_cache_parse("", "dev", "1.0", k), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gemm_select");
    TCase *tc = tcase_create("gemm_select");
    tcase_add_test(tc, test_decide_by_total);
    tcase_add_test(tc, test_decide_failures);
    tcase_add_test(tc, test_median);
    tcase_add_test(tc, test_cache_text_round_trip);
    tcase_add_test(tc, test_cache_text_invalidated);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
