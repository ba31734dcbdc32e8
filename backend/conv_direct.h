/* conv_direct.h: launchers of the direct NHWC convolution kernels of
 * kernels.cl (conv12 block: conv_fwd_direct, conv_bwd_data_direct,
 * conv_wgrad_direct, conv_dw_*, conv_wgrad_reduce), used by conv2d on the
 * native GEMM path (layer_conv2d.c decides which layer shapes use them),
 * and the workspace they need. */
#ifndef CLREMAT_CONV_DIRECT_H
#define CLREMAT_CONV_DIRECT_H

#include "layer_seq.h"
#include "conv_geom.h"

/** Rows per chunk and number of chunks of the weight gradient's reduction
 * over rows (batch * OH * OW): fixed by rows alone (at least 256 rows a
 * chunk, at most 64 chunks), so the summation order never depends on the
 * device or the plan. */
void clremat_conv_wgrad_chunks(int64_t rows, int64_t *rows_per_chunk, int64_t *chunks);

/** Floats of backward workspace the direct kernels need for a layer of
 * geometry g at rows output rows, kernel kh x kw (groups 1, or depthwise
 * when depthwise != 0): the weight gradient's chunk partials (when there is
 * more than one chunk) and, for groups 1, the transposed kernel of the
 * input gradient (both never live at once: the larger). */
int64_t clremat_conv_direct_bwd_elems(const clremat_conv_geom *g, int64_t rows, int kh, int kw, int depthwise);

/** Forward: pre = conv(x, w) (+ bias), out = act(pre) when act is not
 * CLREMAT_ACT_NONE. depthwise: groups = C (kernel [kh][kw][1][C dm]). */
int clremat_conv_direct_forward(clremat_ctx *ctx, const clremat_conv_geom *g, int64_t batch, int kh, int kw,
                                int depthwise, const clremat_buf *x, const clremat_buf *w, const clremat_buf *bias,
                                int act, clremat_buf *pre, clremat_buf *out);

/** Weight gradient dw of dz (the output gradient, already through the
 * activation's derivative) and x; ws: backward workspace of at least
 * clremat_conv_direct_bwd_elems floats. */
int clremat_conv_direct_wgrad(clremat_ctx *ctx, const clremat_conv_geom *g, int64_t batch, int kh, int kw,
                              int depthwise, const clremat_buf *x, const clremat_buf *dz, clremat_buf *ws,
                              clremat_buf *dw);

/** Input gradient dx (= or, with acc, +=) of dz through kernel w; ws as
 * for the weight gradient (groups 1 store the transposed kernel there). */
int clremat_conv_direct_dgrad(clremat_ctx *ctx, const clremat_conv_geom *g, int64_t batch, int kh, int kw,
                              int depthwise, const clremat_buf *dz, const clremat_buf *w, clremat_buf *ws, int acc,
                              clremat_buf *dx);

#endif
