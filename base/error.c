/* error.c: the per-thread last-error message (error.h). */
#include "error.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char thread_error[CLREMAT_ERRMSG_LEN];

const char *clremat_last_error(void) { return thread_error; }

char *clremat_thread_error_buffer(void) { return thread_error; }

int clremat_set_error(int status, const char *fmt, ...)
{
    /* formatted aside first: an argument may be the message being replaced
     * ("...: %s", clremat_last_error()), and vsnprintf's source and
     * destination must not overlap */
    char msg[CLREMAT_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(thread_error, msg, sizeof msg);
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
