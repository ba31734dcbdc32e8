/* cache.c: the on-disk cache directory of clremat ($XDG_CACHE_HOME/clremat,
 * else $HOME/.cache/clremat), a 64-bit FNV-1a hash for cache keys, and
 * whole-buffer atomic file writes (atomic_file.c), shared by the GEMM
 * calibration cache and the program-binary cache. */
#include "atomic_file.h"
#include "backend.h"
#include "gemm.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p for the last two components at most (base must exist or be creatable). */
static int make_dir(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0)
        return S_ISDIR(sb.st_mode) ? 0 : -1;
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    return -1;
}

int clremat_cache_dir(char *out, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[4096];
    int n;
    if (xdg && *xdg == '/')
        n = snprintf(base, sizeof base, "%s", xdg);
    else if (home && *home)
        n = snprintf(base, sizeof base, "%s/.cache", home);
    else
        return 0;
    if (n <= 0 || (size_t)n >= sizeof base || make_dir(base) != 0)
        return 0;
    n = snprintf(out, len, "%s/clremat", base);
    if (n <= 0 || (size_t)n >= len || make_dir(out) != 0)
        return 0;
    return 1;
}

uint64_t clremat_hash64(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    if (h == 0)
        h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

int clremat_write_atomic(const char *path, const void *data, size_t n)
{
    clremat_afile a;
    if (clremat_afile_open(&a, path) != CLREMAT_OK)
        return -1;
    fwrite(data, 1, n, a.f); /* a short write leaves the stream's error flag set: commit fails */
    return clremat_afile_commit(&a) == CLREMAT_OK ? 0 : -1;
}
