/* error.h: the thread's last-error message, set together with a status code
 * by every module (pure C: no OpenCL). The OpenCL context keeps a copy of its
 * own (backend.h, clremat_fail); clremat_last_error() in clremat.h reads the
 * thread's. */
#ifndef CLREMAT_ERROR_H
#define CLREMAT_ERROR_H

#include "clremat.h"

/** Capacity of a last-error message, terminating NUL included. */
#define CLREMAT_ERRMSG_LEN 8192

/** Sets the thread's last error (printf-style) and returns status, so that a
 * failing path reads `return clremat_set_error(CLREMAT_ERR_..., "...", ...);`. */
int clremat_set_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** The thread's last-error buffer, for modules that keep a per-object copy
 * (the OpenCL context) and mirror it here. Never NULL. */
char *clremat_thread_error_buffer(void);

#endif /* CLREMAT_ERROR_H */
