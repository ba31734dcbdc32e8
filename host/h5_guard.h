/* h5_guard.h: reads (and the export's write) through the HDF5 library in a
 * child process, so that a corrupt or hostile file that crashes or hangs the
 * library (libhdf5 1.10's global-heap reader does both on damaged vlen
 * strings) ends in an error naming the file and what was being done, not in
 * a crash or a hang of clremat. */
#ifndef CLREMAT_H5_GUARD_H
#define CLREMAT_H5_GUARD_H

#include <stddef.h>

/** A read or write run in the child: on success it returns CLREMAT_OK and a
 *  malloc'd result in *out (*len bytes, may be 0); on failure a status
 *  with the error set (clremat_set_error), which the parent re-raises. */
typedef int (*clremat_h5_job)(void *arg, unsigned char **out, size_t *len);

/** Runs job(arg) in a forked child and returns its result in *out (malloc'd,
 *  *len bytes; the caller frees it) or its error. When the child dies by a
 *  signal or does not finish within 10 s plus 1 s per 10 MB of image_len
 *  (the size of the HDF5 file it works on), the child is killed and the
 *  error is CLREMAT_ERR_PARSE naming origin (the file) and doing, what the
 *  child was doing as a phrase that follows "crashed" / "did not finish"
 *  ("reading dataset 'x'", "writing the trained weights"). */
int clremat_h5_guarded(const char *origin, const char *doing, size_t image_len, clremat_h5_job job, void *arg,
                       unsigned char **out, size_t *len);

/** clremat_h5_guarded with the result read straight into dst (not NULL),
 *  which must receive exactly dst_len bytes (else CLREMAT_ERR_INTERNAL): the parent
 *  holds no second copy of a large result (the weights). */
int clremat_h5_guarded_into(const char *origin, const char *doing, size_t image_len, clremat_h5_job job, void *arg,
                            void *dst, size_t dst_len);

#endif
