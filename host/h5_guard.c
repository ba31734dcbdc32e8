/* h5_guard.c: clremat_h5_guarded, HDF5 reads and writes in a child process with a time
 * limit (see h5_guard.h). The child writes a header (status, length) and
 * the result or its error message to a pipe and leaves with _exit; the
 * parent reads the pipe against a deadline and waits for the child. */
#include "h5_guard.h"
#include "clock.h"
#include "clremat.h"
#include "error.h"
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct guard_header {
    int32_t status;
    uint64_t len;
};

static int write_all(int fd, const void *p, size_t n)
{
    const unsigned char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static void run_child(int fd, clremat_h5_job job, void *arg)
{
    /* a crash is reported as a crash (the parent names the signal): the
     * handlers this process inherited (an embedding program's crash
     * reporter, Python's faulthandler, AddressSanitizer's) would turn it
     * into some exit status, or run the program's own code in the child */
    static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    unsigned char *out = NULL;
    size_t len = 0;
    struct guard_header h;
    int st;
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
        signal(crash_signals[i], SIG_DFL);
    st = job(arg, &out, &len);
    const char *msg = st == CLREMAT_OK ? (const char *)out : clremat_last_error();
    h.status = st;
    h.len = st == CLREMAT_OK ? len : strlen(msg);
    _exit(write_all(fd, &h, sizeof h) || write_all(fd, msg, (size_t)h.len) ? 1 : 0);
}

/* Reads n bytes of the child's output into dst before the deadline: 0 when
 * they came, 1 past the deadline, 2 at an early end of file, -1 on an
 * error. */
static int read_exact(int fd, double deadline, void *dst, size_t n)
{
    unsigned char *p = dst;
    size_t got = 0;
    while (got < n) {
        struct pollfd pf = {fd, POLLIN, 0};
        const double left = deadline - clremat_now_s();
        int r;
        ssize_t k;
        if (left <= 0)
            return 1;
        r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            continue; /* the deadline is checked at the top */
        k = read(fd, p + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            return 2;
        got += (size_t)k;
    }
    return 0;
}

/* What the parent took from the child: its header, then its result into
 * dst (dst_len bytes expected) or a malloc'd *buf, or its error message
 * into msg. rd as read_exact's, or 3 when the result's length is not
 * dst_len (the child then is killed unread). */
static int take_output(int fd, double deadline, struct guard_header *h, void *dst, size_t dst_len,
                       unsigned char **buf, char *msg, size_t msg_cap)
{
    int rd = read_exact(fd, deadline, h, sizeof *h);
    if (rd != 0)
        return rd;
    if (h->status != CLREMAT_OK) {
        if (h->len >= msg_cap)
            return -1; /* longer than any error message: not what the child writes */
        msg[h->len] = '\0';
        return read_exact(fd, deadline, msg, (size_t)h->len);
    }
    if (dst)
        return h->len != dst_len ? 3 : read_exact(fd, deadline, dst, dst_len);
    if (h->len >= SIZE_MAX || !(*buf = malloc((size_t)h->len + 1)))
        return -1;
    return read_exact(fd, deadline, *buf, (size_t)h->len);
}

/* clremat_h5_guarded and clremat_h5_guarded_into: the result in dst when
 * dst is given, else in *out. */
static int guarded(const char *origin, const char *doing, size_t image_len, clremat_h5_job job, void *arg,
                   unsigned char **out, size_t *len, void *dst, size_t dst_len)
{
    const int limit = 10 + (int)(image_len / 10000000);
    unsigned char *buf = NULL;
    char msg[CLREMAT_ERRMSG_LEN];
    struct guard_header h = {0, 0};
    int fd[2], ws = 0, rd;
    pid_t pid;
    if (out) {
        *out = NULL;
        *len = 0;
    }
    if (pipe(fd) != 0)
        return clremat_set_error(CLREMAT_ERR_IO, "%s: cannot start the HDF5 child process (pipe: %s)", origin,
                                 strerror(errno));
    if ((pid = fork()) < 0) {
        close(fd[0]);
        close(fd[1]);
        return clremat_set_error(CLREMAT_ERR_IO, "%s: cannot start the HDF5 child process (fork: %s)", origin,
                                 strerror(errno));
    }
    if (pid == 0) {
        close(fd[0]);
        run_child(fd[1], job, arg);
    }
    close(fd[1]);
    rd = take_output(fd[0], clremat_now_s() + limit, &h, dst, dst_len, &buf, msg, sizeof msg);
    close(fd[0]);
    if (rd == 1 || rd == -1 || rd == 3)
        kill(pid, SIGKILL);
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (rd != 0 || h.status != CLREMAT_OK || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        free(buf);
        buf = NULL;
    }
    if (rd == 1)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the HDF5 library did not finish %s within %d s: "
                                 "the file is corrupt", origin, doing, limit);
    if (rd == -1)
        return clremat_set_error(CLREMAT_ERR_IO, "%s: %s: the HDF5 child process's output was lost", origin,
                                 doing);
    if (rd == 3)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "%s: %s: the HDF5 child process returned %llu bytes, not "
                                 "%zu", origin, doing, (unsigned long long)h.len, dst_len);
    if (WIFSIGNALED(ws))
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the HDF5 library crashed %s (signal %d, %s): "
                                 "the file is corrupt", origin, doing, WTERMSIG(ws), strsignal(WTERMSIG(ws)));
    if (rd == 2 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the HDF5 child process stopped %s (exit status %d)",
                                 origin, doing, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    if (h.status != CLREMAT_OK)
        return clremat_set_error(h.status, "%s", msg);
    if (out) {
        *out = buf;
        *len = (size_t)h.len;
    }
    return CLREMAT_OK;
}

int clremat_h5_guarded(const char *origin, const char *doing, size_t image_len, clremat_h5_job job, void *arg,
                       unsigned char **out, size_t *len)
{
    return guarded(origin, doing, image_len, job, arg, out, len, NULL, 0);
}

int clremat_h5_guarded_into(const char *origin, const char *doing, size_t image_len, clremat_h5_job job, void *arg,
                            void *dst, size_t dst_len)
{
    return guarded(origin, doing, image_len, job, arg, NULL, NULL, dst, dst_len);
}
