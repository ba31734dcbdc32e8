/* atomic_file.c: temporary file + fsync + rename, for report files. */
#include "atomic_file.h"
#include "backend.h"
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
    const char *dir, *base;
    int fd;
    memset(a, 0, sizeof *a);
    if (!d || !b) {
        free(d);
        free(b);
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
    }
    dir = dirname(d);
    base = basename(b);
    a->tmp = malloc(strlen(dir) + strlen(base) + 16);
    a->path = strdup(path);
    if (!a->tmp || !a->path) {
        free(d);
        free(b);
        clremat_afile_abort(a);
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
    }
    sprintf(a->tmp, "%s/.%s.XXXXXX", dir, base);
    fd = mkstemp(a->tmp);
    if (fd < 0) {
        int e = errno;
        clremat_set_error(CLREMAT_ERR_IO, "%s: cannot create a file in '%s': %s", path, dir, strerror(e));
        free(d);
        free(b);
        free(a->tmp);
        free(a->path);
        memset(a, 0, sizeof *a);
        return CLREMAT_ERR_IO;
    }
    free(d);
    free(b);
    (void)fchmod(fd, 0644);
    a->f = fdopen(fd, "w");
    if (!a->f) {
        close(fd);
        clremat_afile_abort(a);
        return clremat_set_error(CLREMAT_ERR_IO, "%s: cannot open for writing", path);
    }
    return 0;
}

int clremat_afile_commit(clremat_afile *a)
{
    int ok = !ferror(a->f) && fflush(a->f) == 0 && fsync(fileno(a->f)) == 0;
    int e = errno;
    if (fclose(a->f) != 0)
        ok = 0;
    a->f = NULL;
    if (ok && rename(a->tmp, a->path) == 0) {
        free(a->tmp);
        free(a->path);
        memset(a, 0, sizeof *a);
        return 0;
    }
    e = errno ? errno : e;
    clremat_set_error(CLREMAT_ERR_IO, "%s: writing failed: %s", a->path, strerror(e));
    clremat_afile_abort(a);
    return CLREMAT_ERR_IO;
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
