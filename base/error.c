/* error.c: the per-thread last-error message (error.h). */
#include "error.h"
#include <stdarg.h>
#include <stdio.h>

static _Thread_local char thread_error[CLREMAT_ERRMSG_LEN];

const char *clremat_last_error(void) { return thread_error; }

char *clremat_thread_error_buffer(void) { return thread_error; }

int clremat_set_error(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(thread_error, sizeof thread_error, fmt, ap);
    va_end(ap);
    return status;
}
