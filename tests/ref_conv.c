/* ref_conv.c: double references of the convolutional layers (ref_conv.h):
 * direct loops over output pixels and taps; backward by the same loops with
 * the adjoint accumulation. */
#include "ref_conv.h"
#include "ref_core.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_conv_axis(int64_t in, int k, int s, int d, int same, int64_t *out, int64_t *pad_before)
{
    int64_t span = (int64_t)(k - 1) * d + 1;
    if (same) {
        int64_t total;
        *out = (in + s - 1) / s;
        total = (*out - 1) * s + span - in;
        *pad_before = total > 0 ? total / 2 : 0;
    } else {
        *out = (in - span) / s + 1;
        *pad_before = 0;
    }
}

typedef struct geo {
    int64_t B, H, W, C, OH, OW, F, G, CG, FG, PH, PW;
    int KH, KW, SH, SW, DH, DW;
} geo;

static geo geo_of(const lc_io *io)
{
    const clremat_layer *L = &io->g->layers[io->layer];
    geo q;
    int conv = L->type == CLREMAT_CONV2D;
    memset(&q, 0, sizeof q);
    q.B = io->batch;
    q.H = L->in_shape[0].dims[0];
    q.W = L->in_shape[0].dims[1];
    q.C = L->in_shape[0].dims[2];
    q.KH = L->ksize[0];
    q.KW = L->ksize[1];
    q.SH = L->strides[0];
    q.SW = L->strides[1];
    q.DH = conv ? L->dilation[0] : 1;
    q.DW = conv ? L->dilation[1] : 1;
    ref_conv_axis(q.H, q.KH, q.SH, q.DH, L->pad_same, &q.OH, &q.PH);
    ref_conv_axis(q.W, q.KW, q.SW, q.DW, L->pad_same, &q.OW, &q.PW);
    q.G = conv ? (L->depth_multiplier > 0 ? q.C : L->groups) : 1;
    q.F = conv ? (L->depth_multiplier > 0 ? q.C * L->depth_multiplier : L->filters) : q.C;
    q.CG = q.C / q.G;
    q.FG = q.F / q.G;
    return q;
}

/* Pre-activation of output (b, oh, ow, f). */
static double conv_z(const lc_io *io, const geo *q, int64_t b, int64_t oh, int64_t ow, int64_t f)
{
    const clremat_layer *L = &io->g->layers[io->layer];
    int64_t g = f / q->FG;
    double z = L->use_bias ? io->param[1][f] : 0.0;
    for (int kh = 0; kh < q->KH; kh++)
        for (int kw = 0; kw < q->KW; kw++) {
            int64_t ih = oh * q->SH - q->PH + kh * q->DH, iw = ow * q->SW - q->PW + kw * q->DW;
            if (ih < 0 || ih >= q->H || iw < 0 || iw >= q->W)
                continue;
            for (int64_t ci = 0; ci < q->CG; ci++)
                z += io->in[0][((b * q->H + ih) * q->W + iw) * q->C + g * q->CG + ci] *
                     io->param[0][((kh * q->KW + kw) * q->CG + ci) * q->F + f];
        }
    return z;
}

void ref_conv2d_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = &io->g->layers[io->layer];
    geo q = geo_of(io);
    for (int64_t b = 0; b < q.B; b++)
        for (int64_t oh = 0; oh < q.OH; oh++)
            for (int64_t ow = 0; ow < q.OW; ow++)
                for (int64_t f = 0; f < q.F; f++)
                    out[((b * q.OH + oh) * q.OW + ow) * q.F + f] = ref_act(L->act, conv_z(io, &q, b, oh, ow, f));
}

void ref_conv2d_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = &io->g->layers[io->layer];
    geo q = geo_of(io);
    memset(grad[0], 0, (size_t)(q.KH * q.KW * q.CG * q.F) * sizeof(double));
    if (L->use_bias)
        memset(grad[1], 0, (size_t)q.F * sizeof(double));
    if (din[0])
        memset(din[0], 0, (size_t)(q.B * q.H * q.W * q.C) * sizeof(double));
    for (int64_t b = 0; b < q.B; b++)
        for (int64_t oh = 0; oh < q.OH; oh++)
            for (int64_t ow = 0; ow < q.OW; ow++)
                for (int64_t f = 0; f < q.F; f++) {
                    const int64_t o = ((b * q.OH + oh) * q.OW + ow) * q.F + f, g = f / q.FG;
                    const double dz = dout[o] * ref_act_deriv(L->act, conv_z(io, &q, b, oh, ow, f));
                    if (L->use_bias)
                        grad[1][f] += dz;
                    for (int kh = 0; kh < q.KH; kh++)
                        for (int kw = 0; kw < q.KW; kw++) {
                            int64_t ih = oh * q.SH - q.PH + kh * q.DH, iw = ow * q.SW - q.PW + kw * q.DW;
                            if (ih < 0 || ih >= q.H || iw < 0 || iw >= q.W)
                                continue;
                            for (int64_t ci = 0; ci < q.CG; ci++) {
                                const int64_t xi = ((b * q.H + ih) * q.W + iw) * q.C + g * q.CG + ci;
                                const int64_t wi = ((kh * q.KW + kw) * q.CG + ci) * q.F + f;
                                grad[0][wi] += dz * io->in[0][xi];
                                if (din[0])
                                    din[0][xi] += dz * io->param[0][wi];
                            }
                        }
                }
}

/* Visits the real inputs of pooling window (b, oh, ow, c): their flat indices. */
static int window(const geo *q, int64_t b, int64_t oh, int64_t ow, int64_t c, int64_t *idx)
{
    int n = 0;
    for (int kh = 0; kh < q->KH; kh++)
        for (int kw = 0; kw < q->KW; kw++) {
            int64_t ih = oh * q->SH - q->PH + kh, iw = ow * q->SW - q->PW + kw;
            if (ih >= 0 && ih < q->H && iw >= 0 && iw < q->W)
                idx[n++] = ((b * q->H + ih) * q->W + iw) * q->C + c;
        }
    return n;
}

void ref_pool2d_fwd(const lc_io *io, double *out)
{
    const int avg = io->g->layers[io->layer].type == CLREMAT_AVG_POOL2D;
    geo q = geo_of(io);
    int64_t *idx = malloc((size_t)(q.KH * q.KW) * sizeof *idx);
    for (int64_t b = 0; b < q.B; b++)
        for (int64_t oh = 0; oh < q.OH; oh++)
            for (int64_t ow = 0; ow < q.OW; ow++)
                for (int64_t c = 0; c < q.C; c++) {
                    int n = window(&q, b, oh, ow, c, idx);
                    double s = avg ? 0.0 : -INFINITY;
                    for (int i = 0; i < n; i++)
                        s = avg ? s + io->in[0][idx[i]] : fmax(s, io->in[0][idx[i]]);
                    out[((b * q.OH + oh) * q.OW + ow) * q.C + c] = avg ? s / n : s;
                }
    free(idx);
}

void ref_pool2d_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const int avg = io->g->layers[io->layer].type == CLREMAT_AVG_POOL2D;
    geo q = geo_of(io);
    int64_t *idx = malloc((size_t)(q.KH * q.KW) * sizeof *idx);
    (void)grad;
    if (!din[0]) {
        free(idx);
        return;
    }
    memset(din[0], 0, (size_t)(q.B * q.H * q.W * q.C) * sizeof(double));
    for (int64_t b = 0; b < q.B; b++)
        for (int64_t oh = 0; oh < q.OH; oh++)
            for (int64_t ow = 0; ow < q.OW; ow++)
                for (int64_t c = 0; c < q.C; c++) {
                    const double d = dout[((b * q.OH + oh) * q.OW + ow) * q.C + c];
                    int n = window(&q, b, oh, ow, c, idx), arg = 0;
                    for (int i = 0; i < n; i++) {
                        if (avg)
                            din[0][idx[i]] += d / n;
                        else if (io->in[0][idx[i]] > io->in[0][idx[arg]])
                            arg = i;
                    }
                    if (!avg)
                        din[0][idx[arg]] += d;
                }
    free(idx);
}

void ref_gap_fwd(const lc_io *io, double *out)
{
    const clremat_shape *s = &io->g->layers[io->layer].in_shape[0];
    const int64_t HW = s->dims[0] * s->dims[1], C = s->dims[2];
    for (int64_t b = 0; b < io->batch; b++)
        for (int64_t c = 0; c < C; c++) {
            double t = 0;
            for (int64_t p = 0; p < HW; p++)
                t += io->in[0][(b * HW + p) * C + c];
            out[b * C + c] = t / (double)HW;
        }
}

void ref_gap_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_shape *s = &io->g->layers[io->layer].in_shape[0];
    const int64_t HW = s->dims[0] * s->dims[1], C = s->dims[2];
    (void)grad;
    if (din[0])
        for (int64_t b = 0; b < io->batch; b++)
            for (int64_t p = 0; p < HW; p++)
                for (int64_t c = 0; c < C; c++)
                    din[0][(b * HW + p) * C + c] = dout[b * C + c] / (double)HW;
}

void ref_zpad_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = &io->g->layers[io->layer];
    const int64_t H = L->in_shape[0].dims[0], W = L->in_shape[0].dims[1], C = L->in_shape[0].dims[2];
    const int64_t OH = H + L->zpad[0] + L->zpad[1], OW = W + L->zpad[2] + L->zpad[3];
    for (int64_t b = 0; b < io->batch; b++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++)
                for (int64_t c = 0; c < C; c++) {
                    int64_t ih = oh - L->zpad[0], iw = ow - L->zpad[2];
                    out[((b * OH + oh) * OW + ow) * C + c] =
                        ih >= 0 && ih < H && iw >= 0 && iw < W ? io->in[0][((b * H + ih) * W + iw) * C + c] : 0.0;
                }
}

void ref_zpad_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = &io->g->layers[io->layer];
    const int64_t H = L->in_shape[0].dims[0], W = L->in_shape[0].dims[1], C = L->in_shape[0].dims[2];
    const int64_t OH = H + L->zpad[0] + L->zpad[1], OW = W + L->zpad[2] + L->zpad[3];
    (void)grad;
    if (din[0])
        for (int64_t b = 0; b < io->batch; b++)
            for (int64_t ih = 0; ih < H; ih++)
                for (int64_t iw = 0; iw < W; iw++)
                    for (int64_t c = 0; c < C; c++)
                        din[0][((b * H + ih) * W + iw) * C + c] =
                            dout[((b * OH + ih + L->zpad[0]) * OW + iw + L->zpad[2]) * C + c];
}

/* ------------------------------------------------------------ batchnorm */

/* Training-mode batch normalization over the last dim: per channel mean
 * and biased variance of the R rows. Parameter indices in Keras's order. */
static void bn_ref_dims(const lc_io *io, int64_t *R, int64_t *C, int *gi, int *bi)
{
    const clremat_layer *L = &io->g->layers[io->layer];
    const clremat_shape *s = &L->in_shape[0];
    int p = 0;
    *C = s->dims[s->rank - 1];
    *R = io->batch;
    for (int i = 0; i + 1 < s->rank; i++)
        *R *= s->dims[i];
    *gi = L->scale ? p++ : -1;
    *bi = L->center ? p++ : -1;
}

static void bn_ref_stats(const lc_io *io, int64_t R, int64_t C, int64_t c, double *mean, double *rstd)
{
    const double eps = io->g->layers[io->layer].eps;
    double s = 0, q = 0;
    for (int64_t r = 0; r < R; r++)
        s += io->in[0][r * C + c];
    *mean = s / (double)R;
    for (int64_t r = 0; r < R; r++)
        q += (io->in[0][r * C + c] - *mean) * (io->in[0][r * C + c] - *mean);
    *rstd = 1.0 / sqrt(q / (double)R + eps);
}

void ref_bn_fwd(const lc_io *io, double *out)
{
    int64_t R, C;
    int gi, bi;
    bn_ref_dims(io, &R, &C, &gi, &bi);
    for (int64_t c = 0; c < C; c++) {
        double mean, rstd;
        bn_ref_stats(io, R, C, c, &mean, &rstd);
        for (int64_t r = 0; r < R; r++)
            out[r * C + c] = (io->in[0][r * C + c] - mean) * rstd * (gi >= 0 ? io->param[gi][c] : 1.0) +
                             (bi >= 0 ? io->param[bi][c] : 0.0);
    }
}

void ref_bn_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = &io->g->layers[io->layer];
    int64_t R, C;
    int gi, bi;
    bn_ref_dims(io, &R, &C, &gi, &bi);
    for (int64_t c = 0; c < C; c++) {
        double mean, rstd, s = 0, sx = 0, g;
        bn_ref_stats(io, R, C, c, &mean, &rstd);
        for (int64_t r = 0; r < R; r++) {
            s += dout[r * C + c];
            sx += dout[r * C + c] * (io->in[0][r * C + c] - mean) * rstd;
        }
        if (gi >= 0)
            grad[gi][c] = sx;
        if (bi >= 0)
            grad[bi][c] = s;
        /* the moving statistics do not enter the training forward */
        grad[L->n_params - 2][c] = 0.0;
        grad[L->n_params - 1][c] = 0.0;
        g = (gi >= 0 ? io->param[gi][c] : 1.0) * rstd;
        if (din[0])
            for (int64_t r = 0; r < R; r++) {
                const double xhat = (io->in[0][r * C + c] - mean) * rstd;
                din[0][r * C + c] = g * (dout[r * C + c] - (s + xhat * sx) / (double)R);
            }
    }
}

/* --------------------------------------------------------------- concat */

void ref_concat_fwd(const lc_io *io, double *out)
{
    const clremat_layer *L = &io->g->layers[io->layer];
    const clremat_shape *a = &L->in_shape[0];
    int64_t rows = io->batch, Ct = 0, off = 0;
    for (int k = 0; k + 1 < a->rank; k++)
        rows *= a->dims[k];
    for (int i = 0; i < L->n_inputs; i++)
        Ct += L->in_shape[i].dims[a->rank - 1];
    for (int i = 0; i < L->n_inputs; i++) {
        const int64_t Ci = L->in_shape[i].dims[a->rank - 1];
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < Ci; j++)
                out[r * Ct + off + j] = io->in[i][r * Ci + j];
        off += Ci;
    }
}

void ref_concat_bwd(const lc_io *io, const double *dout, double *din[], double *grad[])
{
    const clremat_layer *L = &io->g->layers[io->layer];
    const clremat_shape *a = &L->in_shape[0];
    int64_t rows = io->batch, Ct = 0, off = 0;
    (void)grad;
    for (int k = 0; k + 1 < a->rank; k++)
        rows *= a->dims[k];
    for (int i = 0; i < L->n_inputs; i++)
        Ct += L->in_shape[i].dims[a->rank - 1];
    for (int i = 0; i < L->n_inputs; i++) {
        const int64_t Ci = L->in_shape[i].dims[a->rank - 1];
        if (din[i])
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < Ci; j++)
                    din[i][r * Ci + j] = dout[r * Ct + off + j];
        off += Ci;
    }
}
