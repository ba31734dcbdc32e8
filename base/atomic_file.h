/* atomic_file.h: the one way clremat writes a file atomically (reports,
 * safetensors, the on-disk caches): a temporary file beside the target,
 * flushed and synced, renamed into place on commit, removed on abort or on
 * any failure, so a crash or an error never leaves a partial file. In
 * backend/ so that backend/, host/, planner/ and tools/ can all use it. */
#ifndef CLREMAT_ATOMIC_FILE_H
#define CLREMAT_ATOMIC_FILE_H

#include <stdio.h>

typedef struct clremat_afile {
    FILE *f;            /**< write through this */
    char *tmp;          /**< temporary path */
    char *path;         /**< final path */
} clremat_afile;

/** Creates a temporary file (mode 0644) beside path. On failure nothing is
 * left behind and the error names path, the folder and the errno text
 * (CLREMAT_ERR_IO, or CLREMAT_ERR_OUT_OF_MEMORY). */
int clremat_afile_open(clremat_afile *a, const char *path);

/** Flushes, syncs and renames the file into place (then syncs the folder,
 * best effort); on any failure removes it and returns CLREMAT_ERR_IO naming
 * the path and the errno text. Frees a either way. */
int clremat_afile_commit(clremat_afile *a);

/** Removes the temporary file and frees a. */
void clremat_afile_abort(clremat_afile *a);

#endif
