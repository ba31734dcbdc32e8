/* ref_seq.c: double-precision host references of layernorm, embedding,
 * multi-head attention, softmax cross-entropy and mse (see ref_seq.h). */
#include "ref_seq.h"
#include "ref_llm.h"
#include "rng.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int ref_clamp_id(double f, int n)
{
    if (!(f >= 0.0))
        return 0;
    if (f >= (double)(n - 1))
        return n - 1;
    return (int)f;
}

void ref_layernorm_fwd(int rows, int D, double eps, const double *x, const double *gamma, const double *beta,
                       double *y, double *stats)
{
    for (int r = 0; r < rows; r++) {
        const double *xr = x + (size_t)r * D;
        double mean = 0, var = 0, rstd;
        for (int d = 0; d < D; d++)
            mean += xr[d];
        mean /= D;
        for (int d = 0; d < D; d++)
            var += (xr[d] - mean) * (xr[d] - mean);
        var /= D;
        rstd = 1.0 / sqrt(var + eps);
        for (int d = 0; d < D; d++)
            y[(size_t)r * D + d] = gamma[d] * (xr[d] - mean) * rstd + beta[d];
        if (stats) {
            stats[2 * r] = mean;
            stats[2 * r + 1] = rstd;
        }
    }
}

void ref_layernorm_bwd(int rows, int D, double eps, const double *x, const double *gamma, const double *dy,
                       double *dx, double *dgamma, double *dbeta)
{
    if (dgamma)
        memset(dgamma, 0, sizeof(double) * (size_t)D);
    if (dbeta)
        memset(dbeta, 0, sizeof(double) * (size_t)D);
    for (int r = 0; r < rows; r++) {
        const double *xr = x + (size_t)r * D, *dyr = dy + (size_t)r * D;
        double mean = 0, var = 0, rstd, a = 0, b = 0;
        for (int d = 0; d < D; d++)
            mean += xr[d];
        mean /= D;
        for (int d = 0; d < D; d++)
            var += (xr[d] - mean) * (xr[d] - mean);
        var /= D;
        rstd = 1.0 / sqrt(var + eps);
        for (int d = 0; d < D; d++) {
            double xhat = (xr[d] - mean) * rstd;
            a += gamma[d] * dyr[d];
            b += gamma[d] * dyr[d] * xhat;
            if (dgamma)
                dgamma[d] += dyr[d] * xhat;
            if (dbeta)
                dbeta[d] += dyr[d];
        }
        if (dx)
            for (int d = 0; d < D; d++) {
                double xhat = (xr[d] - mean) * rstd;
                dx[(size_t)r * D + d] = rstd * (gamma[d] * dyr[d] - a / D - xhat * b / D);
            }
    }
}

void ref_embedding_fwd(int ntok, int dim, int vocab, int T, int positions, const double *ids, const double *table,
                       const double *pos, double *out)
{
    for (int t = 0; t < ntok; t++) {
        int id = ref_clamp_id(ids[t], vocab);
        for (int d = 0; d < dim; d++)
            out[(size_t)t * dim + d] =
                table[(size_t)id * dim + d] + (positions ? pos[(size_t)(t % T) * dim + d] : 0.0);
    }
}

void ref_embedding_bwd(int ntok, int dim, int vocab, int T, int positions, const double *ids, const double *dout,
                       double *gtable, double *gpos)
{
    if (gtable)
        memset(gtable, 0, sizeof(double) * (size_t)vocab * dim);
    if (gpos && positions)
        memset(gpos, 0, sizeof(double) * (size_t)T * dim);
    for (int t = 0; t < ntok; t++) {
        int id = ref_clamp_id(ids[t], vocab);
        for (int d = 0; d < dim; d++) {
            if (gtable)
                gtable[(size_t)id * dim + d] += dout[(size_t)t * dim + d];
            if (gpos && positions)
                gpos[(size_t)(t % T) * dim + d] += dout[(size_t)t * dim + d];
        }
    }
}

double ref_attn_keep(const ref_attn *a, uint32_t e)
{
    float rate = (float)a->rate;
    if (!(rate > 0.0f))
        return 1.0;
    return clremat_uniform(clremat_hash(a->seed, a->step, a->layer, e)) >= rate ? 1.0 / (1.0 - (double)rate)
                                                                                 : 0.0;
}

/* out[r, n] = sum_k in[r, k] w[k, n] + b[n] for rows r. */
static void ref_linear(int rows, int K, int N, const double *in, const double *w, const double *b, double *out)
{
    for (int r = 0; r < rows; r++)
        for (int n = 0; n < N; n++) {
            double s = b ? b[n] : 0.0;
            for (int k = 0; k < K; k++)
                s += in[(size_t)r * K + k] * w[(size_t)k * N + n];
            out[(size_t)r * N + n] = s;
        }
}

/* Backward of ref_linear for upstream dout [rows, N]: din [rows, K] =
 * dout w^T, dw [K, N] = in^T dout, db [N] = column sums of dout (each may
 * be NULL). */
static void ref_linear_bwd(int rows, int K, int N, const double *in, const double *w, const double *dout,
                           double *din, double *dw, double *db)
{
    if (din)
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < K; k++) {
                double s = 0;
                for (int n = 0; n < N; n++)
                    s += dout[(size_t)r * N + n] * w[(size_t)k * N + n];
                din[(size_t)r * K + k] = s;
            }
    if (dw)
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++) {
                double s = 0;
                for (int r = 0; r < rows; r++)
                    s += in[(size_t)r * K + k] * dout[(size_t)r * N + n];
                dw[(size_t)k * N + n] = s;
            }
    if (db)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int r = 0; r < rows; r++)
                s += dout[(size_t)r * N + n];
            db[n] = s;
        }
}

/* Probabilities of one (b, h): P[i][j] (T x T). */
/* kv heads and the qkv row width of a configuration */
static int ref_kv(const ref_attn *a) { return a->KV > 0 ? a->KV : a->H; }
static int ref_w3(const ref_attn *a) { return a->D + 2 * ref_kv(a) * (a->D / a->H); }

static void ref_attn_probs(const ref_attn *a, const double *qkv, int b, int h, double *P)
{
    const int T = a->T, D = a->D, dh = a->D / a->H, W3 = ref_w3(a), g = h / (a->H / ref_kv(a));
    const double scale = 1.0 / sqrt((double)dh);
    for (int i = 0; i < T; i++) {
        int lim = a->causal ? i + 1 : T;
        double m = -INFINITY, s = 0;
        double *p = P + (size_t)i * T;
        for (int j = 0; j < T; j++) {
            double d = 0;
            for (int c = 0; c < dh; c++)
                d += qkv[(size_t)(b * T + i) * W3 + h * dh + c] * qkv[(size_t)(b * T + j) * W3 + D + g * dh + c];
            p[j] = d * scale;
        }
        for (int j = 0; j < lim; j++)
            m = fmax(m, p[j]);
        for (int j = 0; j < lim; j++)
            s += (p[j] = exp(p[j] - m));
        for (int j = 0; j < T; j++)
            p[j] = j < lim ? p[j] / s : 0.0;
    }
}

void ref_attention_fwd(const ref_attn *a, const double *x, const double *wqkv, const double *bqkv,
                       const double *wo, const double *bo, double *out, double *qkv, double *probs, double *ctx)
{
    const int B = a->B, T = a->T, D = a->D, H = a->H, dh = D / H, rows = B * T, W3 = ref_w3(a);
    const int KV = ref_kv(a), grp = H / KV;
    double *q = malloc(sizeof(double) * (size_t)rows * W3);
    double *cx = malloc(sizeof(double) * (size_t)rows * D);
    double *P = malloc(sizeof(double) * (size_t)T * T);
    ref_linear(rows, D, W3, x, wqkv, bqkv, q);
    if (a->theta > 0)
        ref_rope(rows, T, W3, 0, H + KV, dh, a->theta, 0, q);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            uint32_t base = (uint32_t)((b * H + h) * T * T);
            ref_attn_probs(a, q, b, h, P);
            if (probs)
                memcpy(probs + base, P, sizeof(double) * (size_t)T * T);
            for (int i = 0; i < T; i++)
                for (int c = 0; c < dh; c++) {
                    double s = 0;
                    for (int j = 0; j < T; j++)
                        s += P[i * T + j] * ref_attn_keep(a, base + (uint32_t)(i * T + j)) *
                             q[(size_t)(b * T + j) * W3 + D + KV * dh + h / grp * dh + c];
                    cx[(size_t)(b * T + i) * D + h * dh + c] = s;
                }
        }
    ref_linear(rows, D, D, cx, wo, bo, out);
    if (qkv)
        memcpy(qkv, q, sizeof(double) * (size_t)rows * W3);
    if (ctx)
        memcpy(ctx, cx, sizeof(double) * (size_t)rows * D);
    free(q);
    free(cx);
    free(P);
}

void ref_attention_bwd(const ref_attn *a, const double *x, const double *wqkv, const double *bqkv,
                       const double *wo, const double *bo, const double *dout, double *dx, double *dwqkv,
                       double *dbqkv, double *dwo, double *dbo)
{
    const int B = a->B, T = a->T, D = a->D, H = a->H, dh = D / H, rows = B * T, D3 = ref_w3(a);
    const int KV = ref_kv(a), grp = H / KV;
    const double scale = 1.0 / sqrt((double)dh);
    double *out = malloc(sizeof(double) * (size_t)rows * D);
    double *q = malloc(sizeof(double) * (size_t)rows * D3);
    double *cx = malloc(sizeof(double) * (size_t)rows * D);
    double *dcx = calloc((size_t)rows * D, sizeof(double));
    double *dq = calloc((size_t)rows * D3, sizeof(double));
    double *P = malloc(sizeof(double) * (size_t)T * T);
    double *dS = malloc(sizeof(double) * (size_t)T * T);
    ref_attention_fwd(a, x, wqkv, bqkv, wo, bo, out, q, NULL, cx);
    /* output projection */
    ref_linear_bwd(rows, D, D, cx, wo, dout, dcx, dwo, dbo);
    /* per head */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            uint32_t base = (uint32_t)((b * H + h) * T * T);
#define QA(i, c) q[(size_t)(b * T + (i)) * D3 + h * dh + (c)]
#define KA(i, c) q[(size_t)(b * T + (i)) * D3 + D + h / grp * dh + (c)]
#define VA(i, c) q[(size_t)(b * T + (i)) * D3 + D + KV * dh + h / grp * dh + (c)]
#define DC(i, c) dcx[(size_t)(b * T + (i)) * D + h * dh + (c)]
#define DQ(i, c, part) dq[(size_t)(b * T + (i)) * D3 + ((part) ? D + ((part) - 1) * KV * dh + h / grp * dh \
                                                            : h * dh) + (c)]
            ref_attn_probs(a, q, b, h, P);
            for (int i = 0; i < T; i++) {
                double dot = 0;
                for (int j = 0; j < T; j++) {
                    double keep = ref_attn_keep(a, base + (uint32_t)(i * T + j)), dpd = 0;
                    for (int c = 0; c < dh; c++) {
                        dpd += DC(i, c) * VA(j, c);
                        DQ(j, c, 2) += P[i * T + j] * keep * DC(i, c);
                    }
                    dS[i * T + j] = dpd * keep;
                    dot += P[i * T + j] * dS[i * T + j];
                }
                for (int j = 0; j < T; j++)
                    dS[i * T + j] = scale * P[i * T + j] * (dS[i * T + j] - dot);
            }
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++)
                    for (int c = 0; c < dh; c++) {
                        DQ(i, c, 0) += dS[i * T + j] * KA(j, c);
                        DQ(j, c, 1) += dS[i * T + j] * QA(i, c);
                    }
#undef QA
#undef KA
#undef VA
#undef DC
#undef DQ
        }
    /* RoPE: dq, dk rotated back; then the input projection */
    if (a->theta > 0)
        ref_rope(rows, T, D3, 0, H + KV, dh, a->theta, 1, dq);
    ref_linear_bwd(rows, D, D3, x, wqkv, dq, dx, dwqkv, dbqkv);
    free(out);
    free(q);
    free(cx);
    free(dcx);
    free(dq);
    free(P);
    free(dS);
}

void ref_softmax_ce_fwd(int rows, int C, const double *logits, const double *labels, double *loss,
                        double *correct)
{
    double l = 0, k = 0;
    for (int r = 0; r < rows; r++) {
        const double *x = logits + (size_t)r * C;
        int y = ref_clamp_id(labels[r], C), am = 0;
        double m = x[0], s = 0;
        for (int j = 1; j < C; j++)
            if (x[j] > m) {
                m = x[j];
                am = j;
            }
        for (int j = 0; j < C; j++)
            s += exp(x[j] - m);
        l += log(s) + m - x[y];
        k += am == y;
    }
    *loss = l / rows;
    *correct = k;
}

void ref_softmax_ce_bwd(int rows, int C, const double *logits, const double *labels, double *din)
{
    for (int r = 0; r < rows; r++) {
        const double *x = logits + (size_t)r * C;
        int y = ref_clamp_id(labels[r], C);
        double m = x[0], s = 0;
        for (int j = 1; j < C; j++)
            m = fmax(m, x[j]);
        for (int j = 0; j < C; j++)
            s += exp(x[j] - m);
        for (int j = 0; j < C; j++)
            din[(size_t)r * C + j] = (exp(x[j] - m) / s - (j == y)) / rows;
    }
}

double ref_mse_fwd(int n, const double *p, const double *y)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (p[i] - y[i]) * (p[i] - y[i]);
    return s / n;
}

void ref_mse_bwd(int n, const double *p, const double *y, double *din)
{
    for (int i = 0; i < n; i++)
        din[i] = 2.0 * (p[i] - y[i]) / n;
}
