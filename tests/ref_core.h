/* ref_core.h: double-precision host references of the core layers (dense,
 * activation, dropout, add, reshape) in the form tests/layercheck.h takes. */
#ifndef CLREMAT_REF_CORE_H
#define CLREMAT_REF_CORE_H

#include "layercheck.h"

/** act(x) in double, for every clremat_act. */
double ref_act(clremat_act act, double x);

/** act'(x) in double. */
double ref_act_deriv(clremat_act act, double x);

/** Dense: out = act(x W + b). */
void ref_dense_fwd(const lc_io *io, double *out);
/** Dense backward: din[0], grad kernel, grad bias. */
void ref_dense_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);

/** Activation layer forward and backward. */
void ref_activation_fwd(const lc_io *io, double *out);
void ref_activation_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);

/** Dropout with the host/rng.h mask (keep when clremat_uniform(hash) >= (float)rate). */
void ref_dropout_fwd(const lc_io *io, double *out);
void ref_dropout_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);

/** Add with b broadcast over a's leading per-sample dimensions. */
void ref_add_fwd(const lc_io *io, double *out);
void ref_add_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);

/** Reshape: identity on the floats. */
void ref_reshape_fwd(const lc_io *io, double *out);
void ref_reshape_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);

#endif
