/* cache.c: the on-disk cache directory of clremat ($XDG_CACHE_HOME/clremat,
 * else $HOME/.cache/clremat), a 64-bit FNV-1a hash for cache keys, and
 * atomic file writes (temporary file, then rename), shared by the GEMM
 * calibration cache and the program-binary cache. */
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
    char tmp[4200];
    int fd, ok;
    FILE *f;
    if (snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path) >= (int)sizeof tmp)
        return -1;
    fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    ok = fwrite(data, 1, n, f) == n;
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (ok)
        chmod(tmp, 0644);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}
