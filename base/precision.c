/* precision.c: the names of the model precisions (issue 16) and the element
 * size of a stored activation under each. Pure C. */
#include "graph.h"
#include <string.h>

static const char *const names[CLREMAT_PREC_COUNT] = {"float32", "mixed_float16", "mixed_bfloat16"};

const char *clremat_precision_name(int precision)
{
    return precision >= 0 && precision < CLREMAT_PREC_COUNT ? names[precision] : NULL;
}

int clremat_precision_from_name(const char *name)
{
    for (int i = 0; name && i < CLREMAT_PREC_COUNT; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

size_t clremat_precision_act_bytes(int precision)
{
    return precision == CLREMAT_PREC_FLOAT32 ? 4 : 2;
}

/* Host conversions: the reference the device kernels are tested against. */
static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float clremat_bf16_to_float(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

uint16_t clremat_float_to_bf16(float f)
{
    const uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float clremat_half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) /* infinity or NaN (payload kept) */
        return u2f(sign | 0x7f800000u | (m << 13));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
        const float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t clremat_float_to_half(float f)
{
    const uint32_t u = f2u(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    uint32_t e, m, r;
    if (a > 0x7f800000u) /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    e = a >> 23;
    if (e < 113) { /* below 2^-14: a subnormal half (or zero), rounded to nearest even */
        const uint32_t shift = 126 - e; /* value = (1.m) * 2^(e-127) = mant * 2^(e-150) */
        uint32_t mant, q, rem, half;
        if (e == 0 || shift > 24 + 1)
            return (uint16_t)sign; /* float subnormals and tiny values round to zero */
        mant = (a & 0x7fffffu) | 0x800000u;
        /* half subnormal unit is 2^-24: q = mant * 2^(e-150+24) = mant >> (126-e) */
        q = mant >> shift;
        rem = mant & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    m = a & 0x7fffffu;
    r = ((e - 112u) << 10) | (m >> 13);
    /* round to nearest even on the 13 dropped bits (a carry may reach the exponent) */
    if ((m & 0x1fffu) > 0x1000u || ((m & 0x1fffu) == 0x1000u && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}
