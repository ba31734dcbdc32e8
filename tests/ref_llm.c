/* ref_llm.c: double-precision host references of rmsnorm and rotary
 * position embedding (see ref_llm.h); the multiply layer's reference is a
 * product the test writes inline. */
#include "ref_llm.h"
#include <math.h>
#include <stddef.h>

void ref_rmsnorm_fwd(int rows, int D, double eps, const double *x, const double *scale, double *y)
{
    for (int r = 0; r < rows; r++) {
        const double *xr = x + (size_t)r * D;
        double s = 0, rs;
        for (int d = 0; d < D; d++)
            s += xr[d] * xr[d];
        rs = 1.0 / sqrt(s / D + eps);
        for (int d = 0; d < D; d++)
            y[(size_t)r * D + d] = scale[d] * xr[d] * rs;
    }
}

void ref_rmsnorm_bwd(int rows, int D, double eps, const double *x, const double *scale, const double *dy,
                     double *dx, double *dscale)
{
    if (dscale)
        for (int d = 0; d < D; d++)
            dscale[d] = 0;
    for (int r = 0; r < rows; r++) {
        const double *xr = x + (size_t)r * D, *dyr = dy + (size_t)r * D;
        double s = 0, rs, b = 0;
        for (int d = 0; d < D; d++)
            s += xr[d] * xr[d];
        rs = 1.0 / sqrt(s / D + eps);
        /* y_d = w_d x_d rs, d rs / d x_k = -rs^3 x_k / D */
        for (int d = 0; d < D; d++)
            b += dyr[d] * scale[d] * xr[d];
        for (int d = 0; d < D; d++) {
            if (dx)
                dx[(size_t)r * D + d] = rs * scale[d] * dyr[d] - rs * rs * rs * xr[d] * b / D;
            if (dscale)
                dscale[d] += dyr[d] * xr[d] * rs;
        }
    }
}

void ref_rope(int rows, int T, int ld, int off, int nh, int dh, double theta, int inverse, double *x)
{
    const int half = dh / 2;
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < half; i++) {
                double ang = (double)(r % T) * pow(theta, -2.0 * i / dh);
                double c = cos(ang), s = inverse ? -sin(ang) : sin(ang);
                double *p = x + (size_t)r * ld + off + (size_t)h * dh + i;
                double x1 = p[0], x2 = p[half];
                p[0] = x1 * c - x2 * s;
                p[half] = x2 * c + x1 * s;
            }
}
