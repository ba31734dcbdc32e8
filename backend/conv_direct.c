/* conv_direct.c: launchers of the direct NHWC convolution kernels (the
 * native GEMM path's conv2d for groups 1 and depthwise; see conv_direct.h
 * and the conv12 block of kernels.cl). Grids, groups 1, with T = nv x the
 * kernels' vector width (cd_nv, cd_vw): forward (ceil(F / T), batch * OH),
 * input gradient (ceil(C / T), batch * H * stride_w: one stride phase of
 * an input row each), weight gradient (filter x channel tiles, taps, row
 * chunks) then a reduction of the chunk partials in chunk order;
 * depthwise: tiles of 16 channels. */
#include "conv_direct.h"

#define CD_GEOM(g, kh, kw)                                                                                         \
    SEQ_I((g)->h.in), SEQ_I((g)->w.in), SEQ_I((g)->cin), SEQ_I((g)->h.out), SEQ_I((g)->w.out), SEQ_I(kh),          \
        SEQ_I(kw), SEQ_I((g)->h.stride), SEQ_I((g)->w.stride), SEQ_I((g)->h.dil), SEQ_I((g)->w.dil),               \
        SEQ_I((g)->h.pad_before), SEQ_I((g)->w.pad_before)
#define CD_L(x) sizeof(cl_long), (const void *)&(cl_long){(cl_long)(x)}

static const size_t one[3] = {1, 1, 1};

/* Floats of the kernels' vector (CD_VW in kernels.cl: 16 where the native
 * GEMM tile is 12 x 32, else 8) and the vectors of filters (forward,
 * weight gradient) or channels (input gradient) a work-item holds: one
 * when n fits one vector, else two. */
static int cd_vw(const clremat_ctx *ctx) { return ctx->gemm_nr >= 32 ? 16 : 8; }
static int cd_nv(const clremat_ctx *ctx, int64_t n) { return n <= cd_vw(ctx) ? 1 : 2; }
/* Channels of a weight-gradient work-item with nv vectors of filters
 * (CD_WC in kernels.cl: 16 / nv on 16-wide devices, else 12 or 4). */
static int cd_wc(const clremat_ctx *ctx, int nv) { return cd_vw(ctx) == 16 ? 16 / nv : nv == 1 ? 12 : 4; }

void clremat_conv_wgrad_chunks(int64_t rows, int64_t *rows_per_chunk, int64_t *chunks)
{
    int64_t rc = (rows + 63) / 64;
    if (rc < 256)
        rc = 256;
    *rows_per_chunk = rc;
    *chunks = rows > 0 ? (rows + rc - 1) / rc : 1;
}

int64_t clremat_conv_direct_bwd_elems(const clremat_conv_geom *g, int64_t rows, int kh, int kw, int depthwise)
{
    int64_t rc, nch, kf = (int64_t)kh * kw * g->cg * g->cout;
    int64_t part, wt = depthwise ? 0 : kf;
    clremat_conv_wgrad_chunks(rows, &rc, &nch);
    part = nch > 1 ? nch * kf : 0;
    return part > wt ? part : wt;
}

int clremat_conv_direct_forward(clremat_ctx *ctx, const clremat_conv_geom *g, int64_t batch, int kh, int kw,
                                int depthwise, const clremat_buf *x, const clremat_buf *w, const clremat_buf *bias,
                                int act, clremat_buf *pre, clremat_buf *out)
{
    const int nv = cd_nv(ctx, g->cout), tile = nv * cd_vw(ctx);
    const size_t gl[2] = {(size_t)((g->cout + 15) / 16), (size_t)(batch * g->h.out)};
    const size_t gt[2] = {(size_t)((g->cout + tile - 1) / tile), (size_t)(batch * g->h.out)};
    if (depthwise)
        return clremat_run(ctx, "conv_dw_fwd", 2, gl, one, CD_GEOM(g, kh, kw), SEQ_I(g->cout), SEQ_I(g->fg),
                           SEQ_I(bias != NULL), SEQ_I(act), SEQ_M(x), SEQ_M(w), SEQ_M(bias ? bias : w), SEQ_M(pre),
                           SEQ_M(out ? out : pre), SEQ_END);
    return clremat_run(ctx, "conv_fwd_direct", 2, gt, one, CD_GEOM(g, kh, kw), SEQ_I(g->cout), SEQ_I(nv),
                       SEQ_I(bias != NULL),
                       SEQ_I(act), SEQ_M(x), SEQ_M(w), SEQ_M(bias ? bias : w), SEQ_M(pre), SEQ_M(out ? out : pre),
                       SEQ_END);
}

int clremat_conv_direct_wgrad(clremat_ctx *ctx, const clremat_conv_geom *g, int64_t batch, int kh, int kw,
                              int depthwise, const clremat_buf *x, const clremat_buf *dz, clremat_buf *ws,
                              clremat_buf *dw)
{
    const int64_t rows = batch * g->h.out * g->w.out, kf = (int64_t)kh * kw * g->cg * g->cout;
    int64_t rc, nch;
    clremat_buf *part;
    int st;
    clremat_conv_wgrad_chunks(rows, &rc, &nch);
    part = nch > 1 ? ws : dw; /* one chunk: its partial is the gradient */
    if (depthwise) {
        const size_t gl[3] = {(size_t)((g->cout + 15) / 16), (size_t)(kh * kw), (size_t)nch};
        st = clremat_run(ctx, "conv_dw_wgrad", 3, gl, one, SEQ_I(rows), SEQ_I(rc), SEQ_I(g->h.in), SEQ_I(g->w.in),
                         SEQ_I(g->cin), SEQ_I(g->h.out), SEQ_I(g->w.out), SEQ_I(kw), SEQ_I(g->h.stride),
                         SEQ_I(g->w.stride), SEQ_I(g->h.dil), SEQ_I(g->w.dil), SEQ_I(g->h.pad_before),
                         SEQ_I(g->w.pad_before), SEQ_I(g->cout), SEQ_I(g->fg), CD_L(kf), SEQ_M(x), SEQ_M(dz),
                         SEQ_M(part), SEQ_END);
    } else {
        const int nv = cd_nv(ctx, g->cout), tile = nv * cd_vw(ctx), cc = cd_wc(ctx, nv);
        const size_t gl[3] = {(size_t)(((g->cout + tile - 1) / tile) * ((g->cin + cc - 1) / cc)),
                              (size_t)(kh * kw), (size_t)nch};
        st = clremat_run(ctx, "conv_wgrad_direct", 3, gl, one, SEQ_I(rows), SEQ_I(rc), SEQ_I(g->h.in),
                         SEQ_I(g->w.in), SEQ_I(g->cin), SEQ_I(g->h.out), SEQ_I(g->w.out), SEQ_I(kw),
                         SEQ_I(g->h.stride), SEQ_I(g->w.stride), SEQ_I(g->h.dil), SEQ_I(g->w.dil),
                         SEQ_I(g->h.pad_before), SEQ_I(g->w.pad_before), SEQ_I(g->cout), SEQ_I(nv), CD_L(kf), SEQ_M(x),
                         SEQ_M(dz), SEQ_M(part), SEQ_END);
    }
    if (st != CLREMAT_OK || nch == 1)
        return st;
    return clremat_run1d(ctx, "conv_wgrad_reduce", (kf + 7) / 8, CD_L(kf), SEQ_I(nch), SEQ_M(ws), SEQ_M(dw),
                         SEQ_END);
}

int clremat_conv_direct_dgrad(clremat_ctx *ctx, const clremat_conv_geom *g, int64_t batch, int kh, int kw,
                              int depthwise, const clremat_buf *dz, const clremat_buf *w, clremat_buf *ws, int acc,
                              clremat_buf *dx)
{
    const int nv = cd_nv(ctx, g->cin), tile = nv * cd_vw(ctx);
    const size_t gl[2] = {(size_t)((g->cin + 15) / 16), (size_t)(batch * g->h.in)};
    const size_t gt[2] = {(size_t)((g->cin + tile - 1) / tile), (size_t)(batch * g->h.in * g->w.stride)};
    const int64_t kf = (int64_t)kh * kw * g->cg * g->cout;
    int st;
    if (depthwise)
        return clremat_run(ctx, "conv_dw_bwd_data", 2, gl, one, CD_GEOM(g, kh, kw), SEQ_I(g->cout), SEQ_I(g->fg),
                           SEQ_I(acc), SEQ_M(dz), SEQ_M(w), SEQ_M(dx), SEQ_END);
    if ((st = clremat_run1d(ctx, "conv_wt_transpose", kf, SEQ_I(kf), SEQ_I(g->cin), SEQ_I(g->cout), SEQ_M(w),
                            SEQ_M(ws), SEQ_END)) != CLREMAT_OK)
        return st;
    return clremat_run(ctx, "conv_bwd_data_direct", 2, gt, one, CD_GEOM(g, kh, kw), SEQ_I(g->cout), SEQ_I(nv),
                       SEQ_I(acc),
                       SEQ_M(dz), SEQ_M(ws), SEQ_M(dx), SEQ_END);
}
