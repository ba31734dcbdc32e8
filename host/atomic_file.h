/* atomic_file.h: writing a report file atomically: a temporary file beside
 * the target, flushed and synced, renamed into place on commit, removed on
 * abort, so a crash or an error never leaves a partial file. */
#ifndef CLREMAT_ATOMIC_FILE_H
#define CLREMAT_ATOMIC_FILE_H

#include <stdio.h>

typedef struct clremat_afile {
    FILE *f;            /**< write through this */
    char *tmp;          /**< temporary path */
    char *path;         /**< final path */
} clremat_afile;

/** Opens a temporary file beside path. CLREMAT_ERR_IO naming the folder on failure. */
int clremat_afile_open(clremat_afile *a, const char *path);

/** Flushes, syncs and renames the file into place; on any failure removes it
 * and returns CLREMAT_ERR_IO naming the path. */
int clremat_afile_commit(clremat_afile *a);

/** Removes the temporary file and frees a. */
void clremat_afile_abort(clremat_afile *a);

#endif
