/* error.h: the thread's last-error message, set together with a status code
 * by every module (pure C: no OpenCL). The OpenCL context keeps a copy of its
 * own (backend.h, clremat_fail); clremat_last_error() in clremat.h reads the
 * thread's. */
#ifndef CLREMAT_ERROR_H
#define CLREMAT_ERROR_H

#include "clremat.h"
#include <stdarg.h>
#include <stddef.h>

/** Capacity of a last-error message, terminating NUL included. */
#define CLREMAT_ERRMSG_LEN 8192

/** Sets the thread's last error (printf-style) and returns status, so that a
 * failing path reads `return clremat_set_error(CLREMAT_ERR_..., "...", ...);`. */
int clremat_set_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Formats an error message into dst (cap bytes, at least 64). One that does
 * not fit keeps its beginning and its end around "[... N bytes left out
 * ...]": a message quoting a long value ("'VALUE': why") keeps the why. The
 * arguments may point into dst (the message being replaced). */
void clremat_error_vformat(char *dst, size_t cap, const char *fmt, va_list ap);

/** The thread's last-error buffer, for modules that keep a per-object copy
 * (the OpenCL context) and mirror it here. Never NULL. */
char *clremat_thread_error_buffer(void);

/** Structured details of a failure, kept per thread beside the message for
 * callers that act on them (the embedding API, include/clremat_api.h). A
 * module that knows them records them right after setting the error; they
 * stay until clremat_error_details_clear(). */
typedef struct clremat_error_details {
    int has_bytes;                  /**< 1: bytes_needed and bytes_available are set (out of memory) */
    uint64_t bytes_needed, bytes_available;
    int has_pos;                    /**< 1: file, line and col are set (a model file's error) */
    char file[1024];
    int line, col;
} clremat_error_details;

/** Records the bytes an allocation or a plan needed and the bytes there were. */
void clremat_error_set_bytes(uint64_t needed, uint64_t available);

/** Records the file, line and column (1-based) a model error is at. */
void clremat_error_set_pos(const char *file, int line, int col);

/** Forgets the thread's recorded details. */
void clremat_error_details_clear(void);

/** The thread's recorded details. Never NULL. */
const clremat_error_details *clremat_error_details_get(void);

#endif /* CLREMAT_ERROR_H */
