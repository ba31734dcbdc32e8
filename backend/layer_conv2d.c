/* layer_conv2d.c: 2-D convolution over NHWC tensors with Keras's kernel
 * layout [kh, kw, C/groups, filters], strides, "valid"/"same" padding,
 * dilation, groups (depthwise: groups = C, filters = C * depth_multiplier),
 * bias and a fused activation. Slots: {out} without activation, {out,
 * preact} with one, as for dense. Lowered to GEMM through clremat_gemm (the
 * native kernels on CPU devices, CLBlast on GPUs): the forward gathers the
 * input into an im2col matrix col[rows][groups][kh*kw*C/groups] in the
 * layer's workspace (from the pool, planned: fwd_temp_bytes) and multiplies
 * it by the kernel, per group; a 1x1 conv with stride 1 and one group reads
 * the input directly and needs no workspace. Backward: dZ = dout *
 * act'(preact) in place, db = column sums of dZ, dW = col^T dZ (col rebuilt
 * in the backward workspace), dcol = dZ W^T over the same workspace, then
 * col2im gathers dcol into dx in a fixed order (deterministic). That is
 * the CLBlast path's (and grouped convs') lowering; on the native path
 * one-group and depthwise convs run the direct NHWC kernels of
 * conv_direct.c instead (conv_algo_of decides, in one place), with no
 * forward workspace and only the direct kernels' backward workspace: the
 * cost is per path (conv_cost_on), so each path plans what it uses. */
#include "layer_seq.h"
#include "conv_geom.h"
#include "colsum.h"
#include "conv_direct.h"
#include "gemm.h"

/* Geometry and the sizes the launches use. */
typedef struct conv_dims {
    clremat_conv_geom g;
    int64_t rows;   /* batch * OH * OW */
    int64_t K;      /* kh * kw * C/groups */
    int direct;     /* 1x1, stride 1, one group: col is the input itself */
} conv_dims;

static int conv_dims_of(clremat_ctx *ctx, const clremat_layer *L, int64_t batch, conv_dims *d)
{
    char why[256];
    int st;
    if (clremat_conv_geom_of(L, &d->g, why, sizeof why))
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "conv2d layer %s: %s", L->name, why);
    d->rows = batch * d->g.h.out * d->g.w.out;
    d->K = (int64_t)L->ksize[0] * L->ksize[1] * d->g.cg;
    d->direct = L->ksize[0] == 1 && L->ksize[1] == 1 && L->strides[0] == 1 && L->strides[1] == 1 && d->g.groups == 1;
    if (L->n_params < (L->use_bias ? 2 : 1) || L->params[0].elems != d->K * d->g.cout ||
        (L->use_bias && L->params[1].elems != d->g.cout) || clremat_last_dim(&L->out_shape) != d->g.cout)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "conv2d layer %s: kernel of %lld elements does not fit "
                            "[%d, %d, %lld, %lld]", L->name, (long long)L->params[0].elems, L->ksize[0],
                            L->ksize[1], (long long)d->g.cg, (long long)d->g.cout);
    if ((st = seq_check_int(ctx, L->name, "im2col matrix", d->rows * d->g.groups * d->K)) != CLREMAT_OK ||
        (st = seq_check_int(ctx, L->name, "input", batch * d->g.h.in * d->g.w.in * d->g.cin)) != CLREMAT_OK ||
        (st = seq_check_int(ctx, L->name, "output", d->rows * d->g.cout)) != CLREMAT_OK)
        return st;
    return CLREMAT_OK;
}

static int64_t col_elems(const conv_dims *d) { return d->direct ? 0 : d->rows * d->g.groups * d->K; }

/* How a conv2d layer runs. The one place that decides it, from the shape
 * and the GEMM path; the cost model plans the workspace of the algorithm
 * of the path it is asked for (conv_cost_on, the table's cost_on_path;
 * the executor asks for the context's path), so the plan reserves nothing
 * a path never touches. */
typedef enum conv_algo {
    CONV_GEMM_1X1, /* 1x1, stride 1, one group: one GEMM on the input itself (both paths) */
    CONV_IM2COL,   /* im2col + GEMM per group: the CLBlast path, and grouped (not depthwise) convs */
    CONV_NHWC,     /* direct NHWC kernels, one group (native path) */
    CONV_DEPTHWISE /* direct depthwise kernels, groups = C (native path) */
} conv_algo;

static int is_depthwise(const conv_dims *d) { return d->g.groups > 1 && d->g.groups == d->g.cin && d->g.cg == 1; }

static conv_algo conv_algo_on(const conv_dims *d, int native)
{
    if (d->direct)
        return CONV_GEMM_1X1;
    if (!native)
        return CONV_IM2COL;
    if (d->g.groups == 1)
        return CONV_NHWC;
    return is_depthwise(d) ? CONV_DEPTHWISE : CONV_IM2COL;
}

static conv_algo conv_algo_of(clremat_ctx *ctx, const conv_dims *d)
{
    return conv_algo_on(d, clremat_gemm_resolve(ctx) == CLREMAT_GEMM_NATIVE);
}

/* Forward workspace of algorithm a: the im2col matrix, or none (the
 * direct kernels and the 1x1 GEMM read the input itself). */
static int64_t conv_fwd_ws_elems(conv_algo a, const conv_dims *d) { return a == CONV_IM2COL ? col_elems(d) : 0; }

/* Backward workspace of algorithm a: the im2col matrix (rebuilt for the
 * weight gradient, then dcol) or what the direct kernels need. */
static int64_t conv_bwd_ws_elems(conv_algo a, const clremat_layer *L, const conv_dims *d)
{
    if (a == CONV_IM2COL)
        return col_elems(d);
    if (a == CONV_NHWC || a == CONV_DEPTHWISE)
        return clremat_conv_direct_bwd_elems(&d->g, d->rows, L->ksize[0], L->ksize[1], a == CONV_DEPTHWISE);
    return 0;
}

/* The cost on a GEMM path (native: 1, CLBlast: 0): the workspace is the
 * algorithm's of that path (im2col on CLBlast, the direct kernels' natively). */
static int conv_cost_on(const clremat_graph *g, int l, int64_t batch, int native, clremat_layer_cost *c)
{
    const clremat_layer *L = &g->layers[l];
    conv_dims d;
    int st = conv_dims_of(NULL, L, batch, &d);
    double mm, ew;
    conv_algo algo;
    if (st != CLREMAT_OK)
        return st;
    algo = conv_algo_on(&d, native);
    mm = 2.0 * (double)d.rows * (double)d.K * (double)d.g.cout;
    ew = (double)d.rows * (double)d.g.cout;
    c->n_slots = L->act != CLREMAT_ACT_NONE ? 2 : 1;
    c->slot_bytes[0] = seq_fbytes(d.rows * d.g.cout);
    c->slot_name[0] = "out";
    c->bwd_needs_inputs = 1u;
    c->act_source = -1;
    c->act_from_input = 0;
    if (L->act != CLREMAT_ACT_NONE) {
        c->slot_bytes[1] = c->slot_bytes[0];
        c->slot_name[1] = "preact";
        c->bwd_needs_slots = 1u << 1;
        c->act_source = 1;
    }
    c->fwd_temp_bytes = seq_fbytes(conv_fwd_ws_elems(algo, &d));
    c->bwd_temp_bytes = seq_fbytes(conv_bwd_ws_elems(algo, L, &d));
    /* im2col / col2im are copies; counted as one flop per element moved
     * (on every path: the planner's recompute weights stay path-free) */
    c->fwd_flops = mm + (double)col_elems(&d) + (L->use_bias ? ew : 0) + (L->act != CLREMAT_ACT_NONE ? ew : 0);
    c->bwd_flops = 2.0 * mm + 2.0 * (double)col_elems(&d) + (L->use_bias ? ew : 0) +
                   (L->act != CLREMAT_ACT_NONE ? ew : 0);
    c->param_bytes = seq_param_bytes(L);
    return CLREMAT_OK;
}

static int conv_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    return conv_cost_on(g, l, batch, 1, c);
}

/* Gathers the input x into col (the workspace). */
static int im2col(clremat_layer_call *c, const clremat_layer *L, const conv_dims *d, const clremat_buf *x,
                  clremat_buf *col)
{
    const clremat_conv_geom *g = &d->g;
    return clremat_run1d(c->ctx, "conv_im2col", col_elems(d), SEQ_I(col_elems(d)), SEQ_I(g->h.in), SEQ_I(g->w.in),
                         SEQ_I(g->cin), SEQ_I(g->h.out), SEQ_I(g->w.out), SEQ_I(L->ksize[0]), SEQ_I(L->ksize[1]),
                         SEQ_I(g->h.stride), SEQ_I(g->w.stride), SEQ_I(g->h.dil), SEQ_I(g->w.dil),
                         SEQ_I(g->h.pad_before), SEQ_I(g->w.pad_before), SEQ_I(g->groups), SEQ_I(g->cg), SEQ_M(x),
                         SEQ_M(col), SEQ_END);
}

static int conv_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int has_act = L->act != CLREMAT_ACT_NONE;
    conv_dims d;
    const clremat_buf *A;
    clremat_buf *pre;
    int64_t F, G;
    conv_algo algo;
    int st = conv_dims_of(c->ctx, L, c->batch, &d);
    if (st != CLREMAT_OK)
        return st;
    F = d.g.cout;
    G = d.g.groups;
    algo = conv_algo_of(c->ctx, &d);
    if ((st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], c->batch * d.g.h.in * d.g.w.in * d.g.cin)) ||
        (st = clremat_check_buf(c->ctx, L->name, "kernel", c->param[0], d.K * F)) ||
        (L->use_bias && (st = clremat_check_buf(c->ctx, L->name, "bias", c->param[1], F))) ||
        (st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], d.rows * F)) ||
        (has_act && (st = clremat_check_buf(c->ctx, L->name, "preact", c->slot[1], d.rows * F))) ||
        (conv_fwd_ws_elems(algo, &d) > 0 &&
         (st = clremat_check_buf(c->ctx, L->name, "workspace", c->temp, conv_fwd_ws_elems(algo, &d)))))
        return st;
    pre = has_act ? c->slot[1] : c->slot[0];
    if (algo == CONV_NHWC || algo == CONV_DEPTHWISE)
        return clremat_conv_direct_forward(c->ctx, &d.g, c->batch, L->ksize[0], L->ksize[1], algo == CONV_DEPTHWISE,
                                           c->in[0], c->param[0], L->use_bias ? c->param[1] : NULL, (int)L->act,
                                           pre, has_act ? c->slot[0] : NULL);
    if (d.direct) {
        A = c->in[0];
    } else {
        if ((st = im2col(c, L, &d, c->in[0], c->temp)) != CLREMAT_OK)
            return st;
        A = c->temp;
    }
    if (G == 1) /* GEMM, bias and activation in one call (fused on the native path) */
        return clremat_gemm_dense(c->ctx, d.rows, d.K, F, A, c->param[0], L->use_bias ? c->param[1] : NULL,
                                  (int)L->act, pre, has_act ? c->slot[0] : NULL);
    /* per group: pre[:, g*FG..] = col[:, g, :] W[:, g*FG..] */
    if ((st = clremat_gemm(c->ctx, 0, 0, d.rows, d.g.fg, d.K, 1.0f, A, 0, G * d.K, d.K, c->param[0], 0, F, d.g.fg,
                           0.0f, pre, 0, F, d.g.fg, G)) != CLREMAT_OK)
        return st;
    if (!L->use_bias && !has_act)
        return CLREMAT_OK;
    return clremat_run1d(c->ctx, "clremat_bias_act8", (d.rows * F + 7) / 8, SEQ_I(d.rows * F), SEQ_I(F),
                         SEQ_I(L->use_bias), SEQ_I(L->act), SEQ_M(L->use_bias ? c->param[1] : pre), SEQ_M(pre),
                         SEQ_M(has_act ? c->slot[0] : pre), SEQ_END);
}

static int conv_recompute(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    conv_dims d;
    int st = conv_dims_of(c->ctx, L, c->batch, &d);
    int64_t n;
    if (st != CLREMAT_OK)
        return st;
    if (L->act == CLREMAT_ACT_NONE)
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "conv2d layer %s has no activation to recompute", L->name);
    n = d.rows * d.g.cout;
    if ((st = clremat_check_buf(c->ctx, L->name, "preact", c->slot[1], n)) ||
        (st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], n)))
        return st;
    return clremat_run1d(c->ctx, clremat_ew_name(c->ctx, L->act, "clremat_act_fwdw", "clremat_act_fwd8"),
                         clremat_ew_items(c->ctx, L->act, n), SEQ_I(n), SEQ_I(L->act), SEQ_M(c->slot[1]),
                         SEQ_M(c->slot[0]), SEQ_END);
}

static int conv_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int has_act = L->act != CLREMAT_ACT_NONE;
    conv_dims d;
    int64_t F, G, FG, nin;
    const clremat_conv_geom *g;
    conv_algo algo;
    int st = conv_dims_of(c->ctx, L, c->batch, &d);
    if (st != CLREMAT_OK)
        return st;
    g = &d.g;
    algo = conv_algo_of(c->ctx, &d);
    F = g->cout;
    G = g->groups;
    FG = g->fg;
    nin = c->batch * g->h.in * g->w.in * g->cin;
    if ((st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, d.rows * F)) ||
        (st = clremat_check_buf(c->ctx, L->name, "kernel", c->param[0], d.K * F)) ||
        (has_act && (st = clremat_check_buf(c->ctx, L->name, "preact", c->slot[1], d.rows * F))) ||
        (c->grad[0] && (st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], nin))) ||
        (c->grad[0] && (st = clremat_check_buf(c->ctx, L->name, "kernel grad", c->grad[0], d.K * F))) ||
        (L->use_bias && c->grad[1] && (st = clremat_check_buf(c->ctx, L->name, "bias grad", c->grad[1], F))) ||
        (c->din[0] && (st = clremat_check_buf(c->ctx, L->name, "input grad", c->din[0], nin))) ||
        ((c->grad[0] || c->din[0]) && conv_bwd_ws_elems(algo, L, &d) > 0 &&
         (st = clremat_check_buf(c->ctx, L->name, "workspace", c->temp, conv_bwd_ws_elems(algo, L, &d)))))
        return st;
    /* dZ = dout * act'(preact), in place */
    if (has_act &&
        (st = clremat_op_act_backward(c->ctx, (int)L->act, d.rows * F, c->slot[1], c->dout, c->dout, 0)) != CLREMAT_OK)
        return st;
    if (L->use_bias && c->grad[1] &&
        (st = clremat_colsum(c->ctx, L->name, d.rows, F, F, 0, c->dout, CLREMAT_FMT_F32, c->grad[1])) != CLREMAT_OK)
        return st;
    if (algo == CONV_NHWC || algo == CONV_DEPTHWISE) {
        const int dw = algo == CONV_DEPTHWISE;
        if (c->grad[0] && (st = clremat_conv_direct_wgrad(c->ctx, g, c->batch, L->ksize[0], L->ksize[1], dw, c->in[0],
                                                          c->dout, c->temp, c->grad[0])) != CLREMAT_OK)
            return st;
        if (!c->din[0])
            return CLREMAT_OK;
        return clremat_conv_direct_dgrad(c->ctx, g, c->batch, L->ksize[0], L->ksize[1], dw, c->dout, c->param[0],
                                         c->temp, c->din_accumulate[0] != 0, c->din[0]);
    }
    if (c->grad[0]) { /* dW[:, g*FG..] = col[:, g, :]^T dZ[:, g*FG..] */
        const clremat_buf *A = c->in[0];
        if (!d.direct) {
            if ((st = im2col(c, L, &d, c->in[0], c->temp)) != CLREMAT_OK)
                return st;
            A = c->temp;
        }
        if ((st = clremat_gemm(c->ctx, 1, 0, d.K, FG, d.rows, 1.0f, A, 0, G * d.K, d.K, c->dout, 0, F, FG, 0.0f,
                               c->grad[0], 0, F, FG, G)) != CLREMAT_OK)
            return st;
    }
    if (!c->din[0])
        return CLREMAT_OK;
    if (d.direct) /* dx = dZ W^T */
        return clremat_gemm(c->ctx, 0, 1, d.rows, d.K, F, 1.0f, c->dout, 0, F, 0, c->param[0], 0, F, 0,
                            c->din_accumulate[0] ? 1.0f : 0.0f, c->din[0], 0, d.K, 0, 1);
    /* dcol[:, g, :] = dZ[:, g*FG..] W[:, g*FG..]^T, then col2im */
    if ((st = clremat_gemm(c->ctx, 0, 1, d.rows, d.K, FG, 1.0f, c->dout, 0, F, FG, c->param[0], 0, F, FG, 0.0f,
                           c->temp, 0, G * d.K, d.K, G)) != CLREMAT_OK)
        return st;
    return clremat_run1d(c->ctx, "conv_col2im", nin, SEQ_I(nin), SEQ_I(c->din_accumulate[0] != 0), SEQ_I(g->h.in),
                         SEQ_I(g->w.in), SEQ_I(g->cin), SEQ_I(g->h.out), SEQ_I(g->w.out), SEQ_I(L->ksize[0]),
                         SEQ_I(L->ksize[1]), SEQ_I(g->h.stride), SEQ_I(g->w.stride), SEQ_I(g->h.dil),
                         SEQ_I(g->w.dil), SEQ_I(g->h.pad_before), SEQ_I(g->w.pad_before), SEQ_I(G), SEQ_I(g->cg),
                         SEQ_M(c->temp), SEQ_M(c->din[0]), SEQ_END);
}

const clremat_layer_impl clremat_impl_conv2d = {conv_cost, conv_forward, conv_backward, conv_recompute,
                                                  conv_cost_on};
