/* error.c: the per-thread last-error message (error.h). */
#include "error.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char thread_error[CLREMAT_ERRMSG_LEN];

const char *clremat_last_error(void) { return thread_error; }

char *clremat_thread_error_buffer(void) { return thread_error; }

void clremat_error_vformat(char *dst, size_t cap, const char *fmt, va_list ap)
{
    /* formatted aside first: an argument may be the message being replaced
     * ("...: %s", clremat_last_error()), and vsnprintf's source and
     * destination must not overlap */
    char small[CLREMAT_ERRMSG_LEN], *msg = small, mark[64];
    size_t len, head, tail;
    va_list again;
    int n;
    va_copy(again, ap);
    n = vsnprintf(small, sizeof small, fmt, ap);
    len = n < 0 ? 0 : (size_t)n;
    if (n < 0)
        snprintf(small, sizeof small, "(an error message could not be formatted)"), len = strlen(small);
    else if (len >= sizeof small) { /* the whole text, for its end */
        char *big = malloc(len + 1);
        if (big) {
            vsnprintf(big, len + 1, fmt, again);
            msg = big;
        } else {
            len = sizeof small - 1; /* only the beginning is known */
        }
    }
    va_end(again);
    if (len < cap) {
        memcpy(dst, msg, len);
        dst[len] = 0;
    } else { /* the beginning, what was left out, the end: cap - 1 bytes at most */
        head = (cap - 1 - sizeof mark) / 2;
        tail = cap - 1 - sizeof mark - head;
        snprintf(mark, sizeof mark, " [... %zu bytes left out ...] ", len - head - tail);
        memcpy(dst, msg, head);
        memcpy(dst + head, mark, strlen(mark));
        memcpy(dst + head + strlen(mark), msg + len - tail, tail);
        dst[head + strlen(mark) + tail] = 0;
    }
    if (msg != small)
        free(msg);
}

int clremat_set_error(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    clremat_error_vformat(thread_error, sizeof thread_error, fmt, ap);
    va_end(ap);
    return status;
}

static _Thread_local clremat_error_details thread_details;

void clremat_error_set_bytes(uint64_t needed, uint64_t available)
{
    thread_details.has_bytes = 1;
    thread_details.bytes_needed = needed;
    thread_details.bytes_available = available;
}

void clremat_error_set_pos(const char *file, int line, int col)
{
    thread_details.has_pos = 1;
    snprintf(thread_details.file, sizeof thread_details.file, "%s", file ? file : "");
    thread_details.line = line;
    thread_details.col = col;
}

void clremat_error_details_clear(void)
{
    thread_details.has_bytes = thread_details.has_pos = 0;
}

const clremat_error_details *clremat_error_details_get(void) { return &thread_details; }
