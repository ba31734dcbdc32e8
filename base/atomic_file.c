/* atomic_file.c: temporary file + flock + fsync + rename, output-path
 * validation, stale temporary files, and non-blocking opens of input files
 * (see atomic_file.h for the rules). */
#include "atomic_file.h"
#include "error.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_SUFFIX_LEN 6 /* mkstemp's XXXXXX */
/* what a temporary or scratch name adds to the target's: ".", ".XXXXXX" and the scratch suffix */
#define TEMP_EXTRA (2 + TMP_SUFFIX_LEN + (int)(sizeof CLREMAT_AFILE_SCRATCH_SUFFIX - 1))

/* What a non-regular file is, for messages. */
static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m))
        return "a folder";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISLNK(m))
        return "a symbolic link";
    return "of an unknown type";
}

/* The folder part of path ("." when there is none), malloc'd. */
static char *folder_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static const char *base_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Resolves the output target of path by the rules of atomic_file.h: *target
 * (malloc'd) is path, or a symbolic link's resolved target; *mode the
 * existing file's permission bits, or -1 when it does not exist. */
static int resolve_output(const char *path, const char *what, char **target, int *mode)
{
    struct stat sb;
    char *dir = NULL;
    int st = CLREMAT_OK;
    *target = NULL;
    *mode = -1;
    if (!path || !*path)
        return clremat_set_error(CLREMAT_ERR_IO, "%s: empty file name", what);
    if (path[strlen(path) - 1] == '/')
        return clremat_set_error(CLREMAT_ERR_IO, "%s %s: names a folder, not a file", what, path);
    if (lstat(path, &sb) == 0) {
        if (S_ISLNK(sb.st_mode)) {
            struct stat tb;
            if (stat(path, &tb) != 0)
                return clremat_set_error(CLREMAT_ERR_IO, "%s %s: symbolic link to a missing or unreachable file (%s)",
                                         what, path, strerror(errno));
            if (!S_ISREG(tb.st_mode))
                return clremat_set_error(CLREMAT_ERR_IO,
                                         "%s %s: symbolic link to %s, not a regular file; refusing to replace it",
                                         what, path, kind_of(tb.st_mode));
            if (!(*target = realpath(path, NULL)))
                return clremat_set_error(CLREMAT_ERR_IO, "%s %s: cannot resolve the symbolic link: %s", what, path,
                                         strerror(errno));
            *mode = (int)(tb.st_mode & 0777);
        } else if (!S_ISREG(sb.st_mode)) {
            return clremat_set_error(CLREMAT_ERR_IO, "%s %s: is %s, not a regular file; refusing to replace it", what,
                                     path, kind_of(sb.st_mode));
        } else {
            *mode = (int)(sb.st_mode & 0777);
        }
    } else if (errno != ENOENT) {
        return clremat_set_error(CLREMAT_ERR_IO, "%s %s: cannot check the path: %s", what, path, strerror(errno));
    }
    if (!*target && !(*target = strdup(path)))
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s %s: out of host memory", what, path);
    if (strlen(base_of(*target)) + TEMP_EXTRA > NAME_MAX) {
        st = clremat_set_error(CLREMAT_ERR_IO, "%s %s: file name too long for a temporary file beside it (%d bytes "
                               "at most)", what, path, NAME_MAX - TEMP_EXTRA);
        goto fail;
    }
    if (!(dir = folder_of(*target))) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s %s: out of host memory", what, path);
        goto fail;
    }
    if (stat(dir, &sb) != 0) {
        int e = errno;
        st = clremat_set_error(CLREMAT_ERR_IO, "%s %s: folder '%s' %s%s%s", what, path, dir,
                               e == ENOENT ? "does not exist (" : "cannot be reached (", strerror(e), ")");
        goto fail;
    }
    if (!S_ISDIR(sb.st_mode)) {
        st = clremat_set_error(CLREMAT_ERR_IO, "%s %s: '%s' is not a folder", what, path, dir);
        goto fail;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        st = clremat_set_error(CLREMAT_ERR_IO, "%s %s: folder '%s' is not writable: %s", what, path, dir,
                               strerror(errno));
        goto fail;
    }
    free(dir);
    return CLREMAT_OK;
fail:
    free(dir);
    free(*target);
    *target = NULL;
    return st;
}

int clremat_output_check(const char *path, const char *what)
{
    char *target = NULL;
    int mode, st = resolve_output(path, what ? what : "output file", &target, &mode);
    free(target);
    return st;
}

int clremat_afile_open(clremat_afile *a, const char *path)
{
    char *dir = NULL;
    int fd = -1, mode, st;
    memset(a, 0, sizeof *a);
    if ((st = resolve_output(path, "output file", &a->path, &mode)) != CLREMAT_OK)
        return st;
    if (mode < 0) { /* a new file: what open(2) with 0666 would give */
        mode_t mask = umask(022);
        umask(mask);
        mode = (int)(0666 & ~mask);
    }
    dir = folder_of(a->path);
    if (dir)
        a->tmp = malloc(strlen(dir) + strlen(base_of(a->path)) + 16);
    if (!a->tmp) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
        goto fail;
    }
    sprintf(a->tmp, "%s/.%s.XXXXXX", dir, base_of(a->path));
    fd = mkstemp(a->tmp);
    if (fd < 0) {
        st = clremat_set_error(CLREMAT_ERR_IO, "%s: cannot create a temporary file in '%s': %s", path, dir,
                               strerror(errno));
        free(a->tmp);
        a->tmp = NULL; /* nothing was created */
        goto fail;
    }
    /* the lock marks the temporary file as in use until this process closes
     * it (or dies): stale-file cleanup by another save skips locked files.
     * On a file system without flock the lock fails here and in the
     * cleanup alike, which then removes nothing: not an error. */
    (void)flock(fd, LOCK_EX | LOCK_NB);
    if (fchmod(fd, (mode_t)mode) != 0 || !(a->f = fdopen(fd, "wb"))) {
        st = clremat_set_error(CLREMAT_ERR_IO, "%s: cannot open '%s' for writing: %s", path, a->tmp,
                               strerror(errno));
        close(fd);
        goto fail;
    }
    free(dir);
    return CLREMAT_OK;
fail:
    free(dir);
    clremat_afile_abort(a);
    return st;
}

/* fsync of the folder dir, so that the rename itself is durable; best
 * effort (the file is complete either way). */
static void sync_folder(const char *dir)
{
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
}

/* 1 when name is ".BASE.XXXXXX" for base (mkstemp's characters), 2 when
 * it is that temporary name's scratch file (CLREMAT_AFILE_SCRATCH_SUFFIX
 * after it), else 0. */
static int is_temp_of(const char *name, const char *base)
{
    const size_t bl = strlen(base), nl = strlen(name), tl = bl + 2 + TMP_SUFFIX_LEN,
                 sl = sizeof CLREMAT_AFILE_SCRATCH_SUFFIX - 1;
    if (nl < tl || name[0] != '.' || strncmp(name + 1, base, bl) != 0 || name[bl + 1] != '.')
        return 0;
    if (nl != tl && !(nl == tl + sl && strcmp(name + tl, CLREMAT_AFILE_SCRATCH_SUFFIX) == 0))
        return 0;
    for (const char *p = name + bl + 2; p < name + tl; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            return 0;
    return nl == tl ? 1 : 2;
}

/* 1 when the regular file name in dir (no link followed) is this user's
 * and nobody holds its lock; it is then locked through *fd (open, for the
 * caller to close), else *fd is -1 or open and unlocked. */
static int unlocked_own(DIR *d, const char *name, int *fd)
{
    struct stat sb;
    *fd = openat(dirfd(d), name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    return *fd >= 0 && fstat(*fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
           flock(*fd, LOCK_EX | LOCK_NB) == 0;
}

/* Removes temporary files of target left by saves that died before their
 * rename: regular files of this user named like ours whose lock nobody
 * holds. keep is this save's own (already renamed) temporary name. Best
 * effort: nothing here fails the save. */
static void remove_stale(const char *dir, const char *target, const char *keep)
{
    const char *base = base_of(target);
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        const int kind = is_temp_of(e->d_name, base);
        int fd, owner = -1;
        if (!kind || !strcmp(e->d_name, keep))
            continue;
        if (kind == 2) {
            /* a scratch file: kept while its save's temporary file is locked */
            char tmp[NAME_MAX + 1];
            snprintf(tmp, sizeof tmp, "%.*s", (int)(strlen(e->d_name) - (sizeof CLREMAT_AFILE_SCRATCH_SUFFIX - 1)),
                     e->d_name);
            if (!strcmp(tmp, keep))
                continue;
            owner = openat(dirfd(d), tmp, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
            if (owner >= 0 && flock(owner, LOCK_EX | LOCK_NB) != 0) {
                close(owner);
                continue;
            }
        }
        if (unlocked_own(d, e->d_name, &fd))
            (void)unlinkat(dirfd(d), e->d_name, 0);
        if (fd >= 0)
            close(fd); /* releases the lock */
        if (owner >= 0)
            close(owner);
    }
    closedir(d);
}

int clremat_afile_commit(clremat_afile *a)
{
    struct stat sb;
    char *dir;
    int e = 0;
    if (ferror(a->f)) /* a write failed: errno is its error unless something reset it */
        e = errno ? errno : EIO;
    else if ((errno = 0, fflush(a->f) != 0 || fsync(fileno(a->f)) != 0))
        e = errno ? errno : EIO;
    if (e) {
        clremat_set_error(CLREMAT_ERR_IO, "%s: writing failed: %s", a->path, strerror(e));
        clremat_afile_abort(a);
        return CLREMAT_ERR_IO;
    }
    /* the target may have changed since the open: never replace a non-file */
    if (lstat(a->path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        clremat_set_error(CLREMAT_ERR_IO, "%s: is now %s, not a regular file; refusing to replace it", a->path,
                          kind_of(sb.st_mode));
        clremat_afile_abort(a);
        return CLREMAT_ERR_IO;
    }
    /* renamed while still open and locked, so no stale-file cleanup can take it */
    if (rename(a->tmp, a->path) != 0) {
        clremat_set_error(CLREMAT_ERR_IO, "%s: cannot rename the temporary file into place: %s", a->path,
                          strerror(errno));
        clremat_afile_abort(a);
        return CLREMAT_ERR_IO;
    }
    if (fclose(a->f) != 0)
        e = errno ? errno : EIO; /* data and rename are already synced; report it anyway */
    a->f = NULL;
    dir = folder_of(a->path);
    sync_folder(dir);
    if (dir)
        remove_stale(dir, a->path, base_of(a->tmp));
    free(dir);
    if (e) {
        clremat_set_error(CLREMAT_ERR_IO, "%s: closing failed: %s", a->path, strerror(e));
        free(a->tmp);
        free(a->path);
        memset(a, 0, sizeof *a);
        return CLREMAT_ERR_IO;
    }
    free(a->tmp);
    free(a->path);
    memset(a, 0, sizeof *a);
    return CLREMAT_OK;
}

void clremat_afile_abort(clremat_afile *a)
{
    if (a->f)
        fclose(a->f);
    if (a->tmp)
        unlink(a->tmp);
    free(a->tmp);
    free(a->path);
    memset(a, 0, sizeof *a);
}

int clremat_open_regular(const char *path, const char *what, FILE **f, uint64_t *size)
{
    struct stat sb;
    int fd, fl;
    *f = NULL;
    if (size)
        *size = 0;
    if (!path || !*path)
        return clremat_set_error(CLREMAT_ERR_IO, "%s: empty file name", what);
    /* O_NONBLOCK: opening a FIFO without a writer returns at once instead of
     * waiting; the type check below then refuses it */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return clremat_set_error(CLREMAT_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return clremat_set_error(CLREMAT_ERR_IO, "%s: cannot stat %s: %s", path, what, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return clremat_set_error(CLREMAT_ERR_IO, "%s: %s is %s, not a regular file", path, what, kind_of(sb.st_mode));
    }
    if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 || !(*f = fdopen(fd, "rb"))) {
        int e = errno;
        close(fd);
        return clremat_set_error(CLREMAT_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(e));
    }
    if (size)
        *size = (uint64_t)sb.st_size;
    return CLREMAT_OK;
}

/* Where a file that does not exist yet would be created: its folder
 * resolved (symbolic links, "." and "..") joined to its last component,
 * malloc'd; NULL when the folder does not resolve. A dangling symbolic link
 * is followed as far as it goes, as writing through it would. */
static char *future_location(const char *path, int depth)
{
    char link[PATH_MAX + 1], *dir, *real, *out = NULL;
    ssize_t n;
    if (depth >= 40) /* Linux's own limit of links followed */
        return NULL;
    if ((n = readlink(path, link, PATH_MAX)) > 0) { /* a dangling link: where it points, relative to its own folder */
        link[n] = '\0';
        if (link[0] != '/') {
            char *d = folder_of(path), *joined;
            if (!d || !(joined = malloc(strlen(d) + strlen(link) + 2))) {
                free(d);
                return NULL;
            }
            sprintf(joined, "%s/%s", d, link);
            free(d);
            out = future_location(joined, depth + 1);
            free(joined);
            return out;
        }
        return future_location(link, depth + 1);
    }
    if (!(dir = folder_of(path)))
        return NULL;
    real = realpath(dir, NULL);
    free(dir);
    if (real && (out = malloc(strlen(real) + strlen(base_of(path)) + 2)))
        sprintf(out, "%s/%s", strcmp(real, "/") ? real : "", base_of(path));
    free(real);
    return out;
}

int clremat_same_file(const char *a, const char *b)
{
    struct stat x, y;
    int ea, eb, same;
    char *la, *lb;
    if (!a || !b)
        return 0;
    ea = stat(a, &x) == 0;
    eb = stat(b, &y) == 0;
    if (ea && eb)
        return x.st_dev == y.st_dev && x.st_ino == y.st_ino;
    if (ea || eb) /* one exists and the other does not: two files */
        return 0;
    la = future_location(a, 0);
    lb = future_location(b, 0);
    same = la && lb && strcmp(la, lb) == 0;
    free(la);
    free(lb);
    return same;
}

int clremat_paths_distinct(const clremat_path_role *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!p[i].output || !p[i].path)
            continue;
        for (size_t j = 0; j < n; j++) {
            if (j == i || !p[j].path || (p[j].output && j > i))
                continue;
            if (!p[j].output && access(p[j].path, F_OK) != 0)
                continue; /* an input that is not there is never overwritten (its reader tells) */
            if (!clremat_same_file(p[i].path, p[j].path))
                continue;
            if (p[j].output)
                return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                         "%s %s and %s %s name the same file: each output needs its own",
                                         p[j].role, p[j].path, p[i].role, p[i].path);
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                     "%s %s: is the %s (%s); refusing to overwrite an input", p[i].role, p[i].path,
                                     p[j].role, p[j].path);
        }
    }
    return CLREMAT_OK;
}
