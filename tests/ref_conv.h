/* ref_conv.h: double-precision host references of the convolutional layers
 * (conv2d, max_pool2d, avg_pool2d, global_avg_pool2d, zero_pad2d) in the
 * form tests/layercheck.h takes. Written directly from Keras's definitions
 * (NHWC, kernel [kh, kw, C/groups, filters], "same" padding with the odd
 * pixel after), independently of base/conv_geom.c. */
#ifndef CLREMAT_REF_CONV_H
#define CLREMAT_REF_CONV_H

#include "layercheck.h"

/** Keras output size and padding before for one axis. */
void ref_conv_axis(int64_t in, int k, int s, int d, int same, int64_t *out, int64_t *pad_before);

void ref_conv2d_fwd(const lc_io *io, double *out);
void ref_conv2d_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);
/** max_pool2d and avg_pool2d (by the layer's type). */
void ref_pool2d_fwd(const lc_io *io, double *out);
void ref_pool2d_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);
void ref_gap_fwd(const lc_io *io, double *out);
void ref_gap_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);
void ref_zpad_fwd(const lc_io *io, double *out);
void ref_zpad_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);
/** batchnorm in training mode (batch mean and biased variance); zero
 * gradients for the moving statistics. */
void ref_bn_fwd(const lc_io *io, double *out);
void ref_bn_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);
/** concat along the last dimension of every input. */
void ref_concat_fwd(const lc_io *io, double *out);
void ref_concat_bwd(const lc_io *io, const double *dout, double *din[], double *grad[]);

#endif
