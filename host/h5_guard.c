/* h5_guard.c: clremat_h5_guarded, HDF5 reads and writes in a child process with a time
 * limit (see h5_guard.h). The child writes a header (status, length) and
 * the result or its error message to a pipe and leaves with _exit; the
 * parent reads the pipe against a deadline and waits for the child. */
#include "h5_guard.h"
#include "clremat.h"
#include "error.h"
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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
    unsigned char *out = NULL;
    size_t len = 0;
    struct guard_header h;
    int st = job(arg, &out, &len);
    const char *msg = st == CLREMAT_OK ? (const char *)out : clremat_last_error();
    h.status = st;
    h.len = st == CLREMAT_OK ? len : strlen(msg);
    _exit(write_all(fd, &h, sizeof h) || write_all(fd, msg, (size_t)h.len) ? 1 : 0);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Reads the child's whole output into *buf (*got bytes) before the
 * deadline: 0 at end of file, 1 past the deadline, -1 on an error. */
static int read_until(int fd, double deadline, unsigned char **buf, size_t *got)
{
    size_t cap = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        const double left = deadline - now_s();
        int r;
        if (left <= 0)
            return 1;
        r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            continue; /* the deadline is checked at the top */
        if (*got == cap) {
            size_t ncap = cap ? 2 * cap : 65536;
            unsigned char *nb = realloc(*buf, ncap);
            if (!nb)
                return -1;
            *buf = nb;
            cap = ncap;
        }
        ssize_t n = read(fd, *buf + *got, cap - *got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        *got += (size_t)n;
    }
}

int clremat_h5_guarded(const char *origin, const char *doing, size_t image_len, clremat_h5_job job, void *arg,
                       unsigned char **out, size_t *len)
{
    const int limit = 10 + (int)(image_len / 10000000);
    unsigned char *buf = NULL;
    size_t got = 0;
    struct guard_header h;
    int fd[2], ws = 0, rd;
    pid_t pid;
    *out = NULL;
    *len = 0;
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
    rd = read_until(fd[0], now_s() + limit, &buf, &got);
    close(fd[0]);
    if (rd != 0)
        kill(pid, SIGKILL);
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (rd == 1) {
        free(buf);
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the HDF5 library did not finish %s within %d s: "
                                 "the file is corrupt", origin, doing, limit);
    }
    if (rd < 0 || WIFSIGNALED(ws)) {
        free(buf);
        if (rd == 0 && WIFSIGNALED(ws))
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the HDF5 library crashed %s (signal %d, %s): "
                                     "the file is corrupt", origin, doing, WTERMSIG(ws), strsignal(WTERMSIG(ws)));
        return clremat_set_error(CLREMAT_ERR_IO, "%s: %s: the HDF5 child process's output was lost", origin,
                                 doing);
    }
    if (got < sizeof h || (memcpy(&h, buf, sizeof h), got - sizeof h != h.len) || !WIFEXITED(ws) ||
        WEXITSTATUS(ws) != 0) {
        free(buf);
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the HDF5 child process stopped %s (exit status %d)",
                                 origin, doing, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    }
    if (h.status != CLREMAT_OK) {
        int st = clremat_set_error(h.status, "%.*s", (int)h.len, (const char *)buf + sizeof h);
        free(buf);
        return st;
    }
    memmove(buf, buf + sizeof h, (size_t)h.len);
    *out = buf;
    *len = (size_t)h.len;
    return CLREMAT_OK;
}
