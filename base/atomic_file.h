/* atomic_file.h: the one way clremat writes a file atomically (reports,
 * safetensors, the on-disk caches): a temporary file beside the target,
 * flushed and synced, renamed into place on commit, removed on abort or on
 * any failure, so a crash or an error never leaves a partial file. Also the
 * checks every input and output path goes through: inputs are opened
 * without blocking and must be regular files; outputs are validated before
 * any work starts. In backend/ so that backend/, host/, planner/ and tools/
 * can all use it.
 *
 * Rules for an output path (docs/user-guide.md, "Files"):
 * - it must not be empty; its folder must exist, be a folder, and be
 *   writable and searchable;
 * - the target must be absent or a regular file: a folder, FIFO, socket or
 *   device is refused, never replaced;
 * - a symbolic link is followed (the file it points to is replaced, the
 *   link stays); a link to nothing or to anything but a regular file is
 *   refused;
 * - a replaced file keeps its read/write/execute permission bits (not
 *   setuid, setgid or sticky); a new one gets 0666 less the umask;
 * - the temporary file is ".BASENAME.XXXXXX" in the target's folder (six
 *   mkstemp characters), held under an exclusive flock while it is written.
 *   A save that needs a scratch file too (a .keras archive zips a weights
 *   file written first) names it ".BASENAME.XXXXXX.scratch", beside its
 *   temporary file. A save killed before its rename leaves them behind;
 *   the next successful save of the same target removes every such
 *   temporary file whose lock nobody holds, and every scratch file whose
 *   temporary file is gone or unlocked. */
#ifndef CLREMAT_ATOMIC_FILE_H
#define CLREMAT_ATOMIC_FILE_H

#include <stdint.h>
#include <stdio.h>

/** Suffix of a save's scratch file: a->tmp followed by it (rules above). */
#define CLREMAT_AFILE_SCRATCH_SUFFIX ".scratch"

typedef struct clremat_afile {
    FILE *f;            /**< write through this */
    char *tmp;          /**< temporary path */
    char *path;         /**< final path (a symbolic link's target, resolved) */
} clremat_afile;

/** Checks that path can be written by clremat_afile_open, by the rules
 * above, without creating anything. what names the role in the message
 * ("--save", "--csv"). Returns CLREMAT_OK, or CLREMAT_ERR_IO with a message
 * "WHAT PATH: why". */
int clremat_output_check(const char *path, const char *what);

/** Creates a temporary file beside path (after the checks of
 * clremat_output_check). On failure nothing is left behind and the error
 * names path, the folder and the errno text (CLREMAT_ERR_IO, or
 * CLREMAT_ERR_OUT_OF_MEMORY). */
int clremat_afile_open(clremat_afile *a, const char *path);

/** Flushes, syncs and renames the file into place (then syncs the folder,
 * best effort, and removes stale temporary files of the same target); on
 * any failure removes it and returns CLREMAT_ERR_IO naming the path and the
 * errno text. Frees a either way. */
int clremat_afile_commit(clremat_afile *a);

/** Removes the temporary file and frees a. */
void clremat_afile_abort(clremat_afile *a);

/** 1 when paths a and b name the same file, else 0: an output must never
 * be one of the run's inputs, nor another output. Both existing: the same
 * device and inode (symbolic links followed). Neither existing: the same
 * place once created (folders resolved, "./out" and "out" alike, a
 * dangling link followed). One existing and one not: 0. */
int clremat_same_file(const char *a, const char *b);

/** A path a command reads or writes, for clremat_paths_distinct: role names
 * it in messages ("--svg", "model file"); path may be NULL (not given). */
typedef struct {
    const char *role;
    const char *path;
    int output; /* 1: the command writes it */
} clremat_path_role;

/** CLREMAT_OK when no output among p[0..n) is the same file
 * (clremat_same_file) as an input or as another output; else
 * CLREMAT_ERR_INVALID_ARGUMENT naming both roles and paths. An input that
 * does not exist is passed over (a synthetic --data task name, say). Commands call
 * it before any work, so nothing is overwritten and nothing is lost. */
int clremat_paths_distinct(const clremat_path_role *p, size_t n);

/** Opens path for reading without ever blocking (O_NONBLOCK, so a FIFO
 * without a writer cannot hang the caller), then refuses anything but a
 * regular file. what names the role ("model file", "--load"). On success
 * *f is open for binary reading and *size holds the file's size. Errors
 * (CLREMAT_ERR_IO) read "PATH: WHAT ...: why". */
int clremat_open_regular(const char *path, const char *what, FILE **f, uint64_t *size);

#endif
