/* bytes.c: parsing of byte counts with KiB/MiB/GiB (binary) and KB/MB/GB
 * (decimal) suffixes, as accepted by --memory-limit and budget:BYTES, and
 * the host-memory check made before large host allocations. */
#include "error.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int clremat_parse_bytes(const char *text, uint64_t *bytes)
{
    static const struct { const char *suffix; double mult; } units[] = {
        {"", 1}, {"b", 1},
        {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3},
        {"m", 1048576.0}, {"mib", 1048576.0}, {"mb", 1e6},
        {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
        {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
    };
    char *end;
    double v;
    size_t digits;
    if (!text || !*text || isspace((unsigned char)*text) || *text == '-' || *text == '+')
        return -1;
    /* a plain decimal number: digits, optionally a fraction (no hex, no
     * exponent, no "inf" or "nan", which strtod would also take) */
    digits = strspn(text, "0123456789");
    if (digits == 0 || (text[digits] == '.' && strspn(text + digits + 1, "0123456789") == 0) ||
        (text[digits] == 'x' || text[digits] == 'X'))
        return -1;
    if (text[digits] == '.')
        digits += 1 + strspn(text + digits + 1, "0123456789");
    if (text[digits] == 'e' || text[digits] == 'E')
        return -1;
    v = strtod(text, &end);
    if (end == text || !isfinite(v) || v < 0)
        return -1;
    if (end != text + digits)
        return -1;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            double total = v * units[i].mult;
            if (!strchr(text, '.') || text + digits <= strchr(text, '.')) {
                /* a whole number: exact in 64 bits, whatever its size */
                unsigned long long w;
                uint64_t mult = (uint64_t)units[i].mult;
                errno = 0;
                w = strtoull(text, NULL, 10);
                if (errno == ERANGE || (mult && w > UINT64_MAX / mult))
                    return -1;
                *bytes = (uint64_t)w * mult;
                return 0;
            }
            if (total > 1.8e19 || total != floor(total))
                return -1;
            *bytes = (uint64_t)total;
            return 0;
        }
    }
    return -1;
}

/* Bytes of host memory available: MemAvailable of /proc/meminfo, else the
 * physical memory; 0 when unknown. */
static uint64_t host_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r"); /* a procfs file: never blocks */
    char line[256];
    unsigned long long kib;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (f) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
                fclose(f);
                return (uint64_t)kib * 1024u;
            }
        fclose(f);
    }
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

int clremat_host_alloc_check(uint64_t bytes, const char *what)
{
    uint64_t avail = host_available();
    if (avail && bytes > avail)
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY,
                                 "%s needs %llu bytes of host memory but %llu bytes are available",
                                 what ? what : "an allocation", (unsigned long long)bytes,
                                 (unsigned long long)avail);
    return CLREMAT_OK;
}
