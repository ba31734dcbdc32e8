/* ref_llm.h: double-precision host references of the small-language-model
 * layers (rmsnorm, rope, multiply; issue 13). Attention's grouped-query
 * heads, optional biases and RoPE are in ref_seq.c, which uses ref_rope. */
#ifndef CLREMAT_REF_LLM_H
#define CLREMAT_REF_LLM_H

/** RMSNorm over rows of D: y = scale * x / sqrt(mean(x^2) + eps). */
void ref_rmsnorm_fwd(int rows, int D, double eps, const double *x, const double *scale, double *y);

/** RMSNorm backward for upstream dy: dx and dscale (each may be NULL). */
void ref_rmsnorm_bwd(int rows, int D, double eps, const double *x, const double *scale, const double *dy,
                     double *dx, double *dscale);

/** Rotary embedding in place over rows of ld values: nh chunks of dh from
 * column off, position row % T, pair (i, i + dh/2) rotated by
 * (row % T) * theta^(-2i/dh); inverse rotates back. */
void ref_rope(int rows, int T, int ld, int off, int nh, int dh, double theta, int inverse, double *x);

#endif
