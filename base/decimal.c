/* decimal.c: clremat_parse_decimal, the one strict reading of a decimal
 * number shared by the command's options and the checkpoint's metadata
 * (include/clremat.h). */
#include "clremat.h"
#include <stdlib.h>

int clremat_parse_decimal(const char *text, double *out)
{
    const char *p;
    char *end;
    int digits = 0;
    if (!text)
        return -1;
    p = text + (*text == '-');
    while (*p >= '0' && *p <= '9')
        p++, digits++;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            digits++;
    if (!digits)
        return -1;
    if (*p == 'e' || *p == 'E') {
        p += (p[1] == '+' || p[1] == '-') ? 2 : 1;
        if (!(*p >= '0' && *p <= '9'))
            return -1;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p)
        return -1;
    *out = strtod(text, &end) + 0.0; /* + 0.0: -0 becomes 0 */
    return end == p ? 0 : -1;
}
