/* testutil.h: helpers shared by the Check suites: building and running a
 * suite with the project's conventions (test_suite, test_run_suite,
 * test_run_device_suite), running the clremat command (test_run_tool), and
 * finding out (in a forked child, since OpenCL runtimes do not survive
 * fork) whether any OpenCL device exists. */
#ifndef CLREMAT_TESTUTIL_H
#define CLREMAT_TESTUTIL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "clremat.h"

/* 1 when an OpenCL device exists. Asked in a child process so the test
 * runner's own process never initialises an OpenCL runtime before forking. */
static inline int test_have_device(void)
{
    int status = 0;
    pid_t pid = fork();
    if (pid == 0) {
        clremat_device_info *d = NULL;
        size_t n = 0;
        _exit(clremat_list_devices(&d, &n) == CLREMAT_OK && n > 0 ? 0 : 1);
    }
    if (pid < 0 || waitpid(pid, &status, 0) < 0)
        return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Exit status telling automake the test was skipped. */
#define TEST_SKIP 77

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

/* In AddressSanitizer builds, runs LeakSanitizer's check at the end of each
 * test, in the test's child, while the OpenCL runtime's threads are alive
 * and idle, instead of at exit: at exit the runtimes' destructors stop their
 * worker threads while LeakSanitizer's stop-the-world tracer walks them,
 * which made the tracer die with "Tracer caught signal 11" (docs/testing.md,
 * "Sanitizers"). The check is the same one, with the same suppressions; the
 * exit-time check then does not run again. A no-op in other builds. */
static inline void test_leak_check_now(void)
{
#if defined(__SANITIZE_ADDRESS__)
    __lsan_do_leak_check();
#endif
}

/* A suite named name holding one test case of the same name, with a
 * per-test timeout of timeout_s seconds (0: Check's default); *tc receives
 * the test case, for the caller to add its tests to. */
static inline Suite *test_suite(const char *name, double timeout_s, TCase **tc)
{
    Suite *s = suite_create(name);
    *tc = tcase_create(name);
    if (timeout_s > 0)
        tcase_set_timeout(*tc, timeout_s);
    tcase_add_checked_fixture(*tc, NULL, test_leak_check_now);
    suite_add_tcase(s, *tc);
    return s;
}

/* Runs a suite and returns the process exit status (0 pass, 1 fail). */
static inline int test_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* main()'s end for a suite that needs an OpenCL device: without one, says
 * so on stderr, frees the suite and returns TEST_SKIP (77); otherwise runs
 * it like test_run_suite (0 pass, 1 fail). */
static inline int test_run_device_suite(Suite *s)
{
    if (!test_have_device()) {
        srunner_free(srunner_create(s)); /* frees the suite */
        fprintf(stderr, "no OpenCL device: skipping\n");
        return TEST_SKIP;
    }
    return test_run_suite(s);
}

/* Runs the clremat command ($CLREMAT_TOOL, else tools/clremat) with args
 * (a shell word list); returns its exit status (-1 if it did not exit) and
 * its stderr, NUL-terminated and cut to len - 1 bytes, in err. */
static inline int test_run_tool(const char *args, char *err, size_t len)
{
    char cmd[4096];
    FILE *p;
    size_t n;
    int st;
    const char *tool = getenv("CLREMAT_TOOL");
    int w = snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/null", tool ? tool : "tools/clremat", args);
    ck_assert_msg(w > 0 && (size_t)w < sizeof cmd, "command line too long: %s", args);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    n = fread(err, 1, len - 1, p);
    err[n] = 0;
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs the clremat command with args like test_run_tool, asserting it exits
 * 0; its stdout (stderr dropped), NUL-terminated and cut to len - 1 bytes,
 * goes to out (for --json reports). */
static inline void test_tool_stdout(const char *args, char *out, size_t len)
{
    char cmd[4096];
    FILE *p;
    size_t n;
    const char *tool = getenv("CLREMAT_TOOL");
    int w = snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", tool ? tool : "tools/clremat", args);
    ck_assert_msg(w > 0 && (size_t)w < sizeof cmd, "command line too long: %s", args);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    n = fread(out, 1, len - 1, p);
    out[n] = 0;
    ck_assert_msg(pclose(p) == 0, "clremat %s failed", args);
}

/* The integer after the first "key": in the JSON text s (a test fails when
 * the key is missing). */
static inline long long test_json_int(const char *s, const char *key)
{
    char k[128];
    const char *p;
    snprintf(k, sizeof k, "\"%s\": ", key);
    p = strstr(s, k);
    ck_assert_msg(p != NULL, "no %s in %s", key, s);
    return strtoll(p + strlen(k), NULL, 10);
}

/* 1 when $CLREMAT_TEST_REDUCED is set and not "0": device tests then use
 * small shapes and few steps (slow implementations such as rusticl on
 * llvmpipe, and oclgrind; see docs/testing.md). */
static inline int test_reduced(void)
{
    const char *v = getenv("CLREMAT_TEST_REDUCED");
    return v && *v && !(v[0] == '0' && v[1] == 0);
}

/* Opens a context on $CLREMAT_TEST_DEVICE (or the default device) inside a
 * test, failing the test with the library's message when it cannot. */
#define TEST_OPEN_CTX(ctxvar, limit)                                                  \
    do {                                                                              \
        int st_ = clremat_ctx_create(getenv("CLREMAT_TEST_DEVICE"), (limit), &(ctxvar)); \
        ck_assert_msg(st_ == CLREMAT_OK, "context: %s (%s)", clremat_last_error(),   \
                      clremat_status_str(st_));                                       \
    } while (0)

#endif
