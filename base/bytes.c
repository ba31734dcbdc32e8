/* bytes.c: parsing of byte counts with KiB/MiB/GiB (binary) and KB/MB/GB
 * (decimal) suffixes, as accepted by --memory-limit and budget:BYTES. */
#include "clremat.h"
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    if (!text || !*text || isspace((unsigned char)*text) || *text == '-' || *text == '+')
        return -1;
    v = strtod(text, &end);
    if (end == text || !isfinite(v) || v < 0)
        return -1;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            double total = v * units[i].mult;
            if (total > 1.8e19 || total != floor(total))
                return -1;
            *bytes = (uint64_t)total;
            return 0;
        }
    }
    return -1;
}
