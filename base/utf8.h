/* utf8.h: UTF-8 validation for the writers of JSON, CSV and SVG reports,
 * which must stay valid whatever bytes a path, a device name or a model
 * name holds. Pure C, header only, so planner/ (no OpenCL) can use it. */
#ifndef CLREMAT_UTF8_H
#define CLREMAT_UTF8_H

#include <stddef.h>

/** Length (1 to 4) of the well-formed UTF-8 sequence starting at s (s[0]
 * non-zero), or 0 when s[0] does not start one: a stray continuation byte,
 * a truncated sequence, an overlong form, a surrogate or a code point above
 * U+10FFFF. */
static inline size_t clremat_utf8_seq(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) /* also stops at the terminating NUL */
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

#endif
