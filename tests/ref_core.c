/* ref_core.c: double-precision host references of the core layers, written
 * plainly from the definitions (no shared code with the kernels). */
#include "ref_core.h"
#include "rng.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t shape_elems(const clremat_shape *s)
{
    int64_t e = 1;
    for (int i = 0; i < s->rank; i++)
        e *= s->dims[i];
    return e;
}

double ref_act(clremat_act act, double x)
{
    const double k = sqrt(2.0 / M_PI);
    switch (act) {
    case CLREMAT_ACT_RELU: return x > 0 ? x : 0;
    case CLREMAT_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(k * (x + 0.044715 * x * x * x)));
    case CLREMAT_ACT_GELU_EXACT: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case CLREMAT_ACT_TANH: return tanh(x);
    case CLREMAT_ACT_SIGMOID: return 1 / (1 + exp(-x));
    case CLREMAT_ACT_SILU: return x / (1 + exp(-x));
    default: return x;
    }
}

double ref_act_deriv(clremat_act act, double x)
{
    const double k = sqrt(2.0 / M_PI);
    switch (act) {
    case CLREMAT_ACT_RELU: return x > 0 ? 1 : 0;
    case CLREMAT_ACT_GELU_TANH: {
        double t = tanh(k * (x + 0.044715 * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
    }
    case CLREMAT_ACT_GELU_EXACT: return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    case CLREMAT_ACT_TANH: return 1 - tanh(x) * tanh(x);
    case CLREMAT_ACT_SIGMOID: {
        double s = 1 / (1 + exp(-x));
        return s * (1 - s);
    }
    case CLREMAT_ACT_SILU: {
        double s = 1 / (1 + exp(-x));
        return s + x * s * (1 - s);
    }
    default: return 1;
    }
}

/* ---------------------------------------------------------------- dense */

static void dense_dims(const lc_io *io, int64_t *rows, int64_t *in, int64_t *units)
{
    const clremat_layer *L = lc_layer(io);
    *in = L->in_shape[0].dims[L->in_shape[0].rank - 1];
    *units = L->units;
    *rows = io->batch * shape_elems(&L->in_shape[0]) / *in;
}

void ref_dense_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = lc_layer(io);
    int64_t rows, in, units;
    dense_dims(io, &rows, &in, &units);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t u = 0; u < units; u++) {
            double z = L->use_bias ? io->param[1][u] : 0;
            for (int64_t k = 0; k < in; k++)
                z += io->in[0][r * in + k] * io->param[0][k * units + u];
            out[r * units + u] = ref_act(L->act, z);
        }
}

void ref_dense_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = lc_layer(io);
    int64_t rows, in, units;
    double *dz;
    dense_dims(io, &rows, &in, &units);
    dz = malloc((size_t)(rows * units) * sizeof(double));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t u = 0; u < units; u++) {
            double z = L->use_bias ? io->param[1][u] : 0;
            for (int64_t k = 0; k < in; k++)
                z += io->in[0][r * in + k] * io->param[0][k * units + u];
            dz[r * units + u] = dout[r * units + u] * ref_act_deriv(L->act, z);
        }
    for (int64_t k = 0; k < in; k++)
        for (int64_t u = 0; u < units; u++) {
            double s = 0;
            for (int64_t r = 0; r < rows; r++)
                s += io->in[0][r * in + k] * dz[r * units + u];
            grad[0][k * units + u] = s;
        }
    if (L->use_bias)
        for (int64_t u = 0; u < units; u++) {
            double s = 0;
            for (int64_t r = 0; r < rows; r++)
                s += dz[r * units + u];
            grad[1][u] = s;
        }
    if (din[0])
        for (int64_t r = 0; r < rows; r++)
            for (int64_t k = 0; k < in; k++) {
                double s = 0;
                for (int64_t u = 0; u < units; u++)
                    s += dz[r * units + u] * io->param[0][k * units + u];
                din[0][r * in + k] = s;
            }
    free(dz);
}

/* ----------------------------------------------------------- activation */

void ref_activation_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = lc_layer(io);
    const int64_t n = io->batch * shape_elems(&L->in_shape[0]);
    for (int64_t i = 0; i < n; i++)
        out[i] = ref_act(L->act, io->in[0][i]);
}

void ref_activation_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = lc_layer(io);
    const int64_t n = io->batch * shape_elems(&L->in_shape[0]);
    (void)grad;
    if (din[0])
        for (int64_t i = 0; i < n; i++)
            din[0][i] = dout[i] * ref_act_deriv(L->act, io->in[0][i]);
}

/* -------------------------------------------------------------- dropout */

static double keep_scale(const lc_io *io, int64_t i)
{
    const clremat_layer *L = lc_layer(io);
    uint32_t h = clremat_hash(io->seed, (uint32_t)io->step, (uint32_t)io->layer, (uint32_t)i);
    return clremat_uniform(h) >= (float)L->rate ? 1.0 / (1.0 - L->rate) : 0.0;
}

void ref_dropout_fwd(const lc_io *io, double *out)
{
    const int64_t n = io->batch * shape_elems(&lc_layer(io)->in_shape[0]);
    for (int64_t i = 0; i < n; i++)
        out[i] = io->in[0][i] * keep_scale(io, i);
}

void ref_dropout_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const int64_t n = io->batch * shape_elems(&lc_layer(io)->in_shape[0]);
    (void)grad;
    if (din[0])
        for (int64_t i = 0; i < n; i++)
            din[0][i] = dout[i] * keep_scale(io, i);
}

/* ------------------------------------------------------------------ add */

void ref_add_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = lc_layer(io);
    const int64_t ea = shape_elems(&L->in_shape[0]), eb = shape_elems(&L->in_shape[1]);
    for (int64_t s = 0; s < io->batch; s++)
        for (int64_t j = 0; j < ea; j++)
            out[s * ea + j] = io->in[0][s * ea + j] + io->in[1][s * eb + j % eb];
}

void ref_add_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = lc_layer(io);
    const int64_t ea = shape_elems(&L->in_shape[0]), eb = shape_elems(&L->in_shape[1]);
    (void)grad;
    if (din[0])
        memcpy(din[0], dout, (size_t)(io->batch * ea) * sizeof(double));
    if (din[1]) {
        memset(din[1], 0, (size_t)(io->batch * eb) * sizeof(double));
        for (int64_t s = 0; s < io->batch; s++)
            for (int64_t j = 0; j < ea; j++)
                din[1][s * eb + j % eb] += dout[s * ea + j];
    }
}

/* -------------------------------------------------------------- reshape */

void ref_reshape_fwd(const lc_io *io, double *out)
{
    const int64_t n = io->batch * shape_elems(&lc_layer(io)->in_shape[0]);
    memcpy(out, io->in[0], (size_t)n * sizeof(double));
}

void ref_reshape_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const int64_t n = io->batch * shape_elems(&lc_layer(io)->in_shape[0]);
    (void)grad;
    if (din[0])
        memcpy(din[0], dout, (size_t)n * sizeof(double));
}
