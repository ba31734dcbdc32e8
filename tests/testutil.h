/* testutil.h: helpers shared by the Check suites: running a suite with the
 * project's conventions, and finding out (in a forked child, since OpenCL
 * runtimes do not survive fork) whether any OpenCL device exists. */
#ifndef CLREMAT_TESTUTIL_H
#define CLREMAT_TESTUTIL_H

#include <check.h>
#include <stdlib.h>
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

/* 1 when $CLREMAT_TEST_REDUCED is set and not "0": device tests then use
 * small shapes and few steps (slow implementations such as rusticl on
 * llvmpipe, and oclgrind; see docs/testing.md). */
static inline int test_reduced(void)
{
    const char *v = getenv("CLREMAT_TEST_REDUCED");
    return v && *v && !(v[0] == '0' && v[1] == 0);
}

/* Exit status telling automake the test was skipped. */
#define TEST_SKIP 77

/* Opens a context on $CLREMAT_TEST_DEVICE (or the default device) inside a
 * test, failing the test with the library's message when it cannot. */
#define TEST_OPEN_CTX(ctxvar, limit)                                                  \
    do {                                                                              \
        int st_ = clremat_ctx_create(getenv("CLREMAT_TEST_DEVICE"), (limit), &(ctxvar)); \
        ck_assert_msg(st_ == CLREMAT_OK, "context: %s (%s)", clremat_last_error(),   \
                      clremat_status_str(st_));                                       \
    } while (0)

#endif
