/* atomic_file.c: temporary file + fsync + rename (see atomic_file.h). */
#include "atomic_file.h"
#include "error.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int clremat_afile_open(clremat_afile *a, const char *path)
{
    char *d = strdup(path), *b = strdup(path);
    const char *dir = NULL;
    int fd = -1, st = CLREMAT_OK;
    memset(a, 0, sizeof *a);
    a->path = strdup(path);
    if (d && b)
        dir = dirname(d);
    if (dir)
        a->tmp = malloc(strlen(dir) + strlen(b) + 16);
    if (!a->tmp || !a->path) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
        goto fail;
    }
    sprintf(a->tmp, "%s/.%s.XXXXXX", dir, basename(b));
    fd = mkstemp(a->tmp);
    if (fd < 0) {
        st = clremat_set_error(CLREMAT_ERR_IO, "%s: cannot create a temporary file in '%s': %s", path, dir,
                               strerror(errno));
        free(a->tmp);
        a->tmp = NULL; /* nothing was created */
        goto fail;
    }
    if (fchmod(fd, 0644) != 0 || !(a->f = fdopen(fd, "wb"))) {
        st = clremat_set_error(CLREMAT_ERR_IO, "%s: cannot open '%s' for writing: %s", path, a->tmp,
                               strerror(errno));
        close(fd);
        goto fail;
    }
    free(d);
    free(b);
    return CLREMAT_OK;
fail:
    free(d);
    free(b);
    clremat_afile_abort(a);
    return st;
}

/* fsync of the folder holding tmp, so that the rename itself is durable;
 * best effort (the file is complete either way). */
static void sync_folder(const char *tmp)
{
    const char *slash = strrchr(tmp, '/');
    char *dir = slash ? strndup(tmp, (size_t)(slash - tmp) + (slash == tmp)) : NULL;
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY) : -1;
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    free(dir);
}

int clremat_afile_commit(clremat_afile *a)
{
    int e = 0;
    if (ferror(a->f)) /* a write failed: errno is its error unless something reset it */
        e = errno ? errno : EIO;
    else if ((errno = 0, fflush(a->f) != 0 || fsync(fileno(a->f)) != 0))
        e = errno ? errno : EIO;
    if (fclose(a->f) != 0 && !e)
        e = errno ? errno : EIO;
    a->f = NULL;
    if (e) {
        clremat_set_error(CLREMAT_ERR_IO, "%s: writing failed: %s", a->path, strerror(e));
        clremat_afile_abort(a);
        return CLREMAT_ERR_IO;
    }
    if (rename(a->tmp, a->path) != 0) {
        clremat_set_error(CLREMAT_ERR_IO, "%s: cannot rename the temporary file into place: %s", a->path,
                          strerror(errno));
        clremat_afile_abort(a);
        return CLREMAT_ERR_IO;
    }
    sync_folder(a->tmp);
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
