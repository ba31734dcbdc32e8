/* layer_elem16.c: add (without broadcast), dropout, activation and
 * layernorm layers under a mixed policy with the conversion fused into their kernels (issue
 * 16): each kernel loads its operands in their storage formats, computes in
 * float32 what the float32 kernel computes, and rounds once on store
 * (clremat_add16, clremat_dropout16, clremat_act_bwd16, clremat_cvt16,
 * ln_*16 of kernels.cl). No float32 buffer is needed: their cost plans
 * none (a large GELU layer plans its table, act_table.h). Bit for bit the staged launches of mixed_precision.c. */
#include "layer_impl.h"
#include "kernel_run.h"
#include "mixed_precision.h"
#include "loop_budget.h"
#include "act_table.h"

/* Format of input i, of the output (and its gradient). */
static int fin(const clremat_layer_call *c, const clremat_layer_cost *cost, int i)
{
    return (cost->in16 >> i & 1u) ? clremat_mixed_fmt(c->g) : CLREMAT_FMT_F32;
}

static int fout(const clremat_layer_call *c, const clremat_layer_cost *cost)
{
    return (cost->slot16 & 1u) ? clremat_mixed_fmt(c->g) : CLREMAT_FMT_F32;
}

static int64_t elems(const clremat_layer_call *c, int i)
{
    return c->batch * clremat_elems_of(&c->g->layers[c->layer].in_shape[i]);
}

static int too_small(clremat_layer_call *c, const char *what)
{
    return clremat_fail(c->ctx, CLREMAT_ERR_INVALID_ARGUMENT, "layer %s: %s buffer missing or too small",
                        c->g->layers[c->layer].name, what);
}

/* ---- add: y = a + b; da = db = dout */

static int add_fuses(const clremat_graph *g, int l)
{
    const clremat_layer *L = &g->layers[l];
    return L->n_inputs == 2 && clremat_elems_of(&L->in_shape[0]) == clremat_elems_of(&L->in_shape[1]);
}

static int add16_forward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    const int64_t n = elems(c, 0);
    cl_int in = (cl_int)n, fa = fin(c, cost, 0), fb = fin(c, cost, 1), fy = fout(c, cost);
    cl_mem ma, mb, my;
    if (n > 2147483647 || !clremat_buf_holds(c->in[0], n, fa) || !clremat_buf_holds(c->in[1], n, fb) ||
        !clremat_buf_holds(c->slot[0], n, fy))
        return too_small(c, "input or output");
    ma = clremat_mem(c->in[0]);
    mb = clremat_mem(c->in[1]);
    my = clremat_mem(c->slot[0]);
    return clremat_run1d(c->ctx, "clremat_add16", (n + 7) / 8, sizeof in, &in, sizeof fa, &fa, sizeof ma, &ma,
                         sizeof fb, &fb, sizeof mb, &mb, sizeof fy, &fy, sizeof my, &my, (size_t)0);
}

static int add16_backward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    const int64_t n = elems(c, 0);
    int st = CLREMAT_OK;
    for (int i = 0; i < 2 && st == CLREMAT_OK; i++)
        if (c->din[i])
            st = clremat_op_convert(c->ctx, c->dout, fout(c, cost), c->din[i], fin(c, cost, i), n, 0, 1.0f,
                                    c->din_accumulate[i]);
    return st;
}

const clremat_layer_impl16 clremat_impl16_add = {add_fuses, clremat_mixed_no_buffers, add16_forward, add16_backward};

/* ---- dropout: y = keep ? x * scale : 0, the backward on dout */

static int drop16_apply(clremat_layer_call *c, const clremat_buf *x, int fx, clremat_buf *y, int fy, int acc)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int64_t n = elems(c, 0);
    if (!(L->rate >= 0.0 && L->rate < 1.0))
        return clremat_fail(c->ctx, CLREMAT_ERR_SHAPE, "dropout layer %s: rate %g is not in [0, 1)", L->name,
                            L->rate);
    if (n > 2147483647 || !clremat_buf_holds(x, n, fx) || !clremat_buf_holds(y, n, fy))
        return too_small(c, "source or destination");
    if (L->rate == 0.0)
        return clremat_op_convert(c->ctx, x, fx, y, fy, n, 0, 1.0f, acc);
    {
        cl_int in = (cl_int)n, iacc = acc ? 1 : 0, ifx = fx, ify = fy;
        float rate = (float)L->rate, scale = (float)(1.0 / (1.0 - L->rate));
        cl_uint lo = (cl_uint)c->seed, hi = (cl_uint)(c->seed >> 32), step = (cl_uint)c->step,
                layer = (cl_uint)c->layer, off = (cl_uint)(c->sample0 * clremat_elems_of(&L->in_shape[0]));
        cl_mem mx = clremat_mem(x), my = clremat_mem(y);
        /* sixteen a work-item on 16-lane devices (the same mask and bits) */
        const char *kernel = clremat_ew_name(c->ctx, CLREMAT_ACT_NONE, "clremat_dropout16w", "clremat_dropout16");
        return clremat_run1d(c->ctx, kernel, clremat_ew_items(c->ctx, CLREMAT_ACT_NONE, n), sizeof in, &in,
                             sizeof iacc, &iacc, sizeof rate, &rate, sizeof scale, &scale, sizeof lo, &lo, sizeof hi,
                             &hi, sizeof step, &step, sizeof layer, &layer, sizeof ifx, &ifx, sizeof mx, &mx,
                             sizeof ify, &ify, sizeof my, &my, sizeof off, &off, (size_t)0);
    }
}

static int drop16_forward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    return drop16_apply(c, c->in[0], fin(c, cost, 0), c->slot[0], fout(c, cost), 0);
}

static int drop16_backward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    if (!c->din[0])
        return CLREMAT_OK;
    return drop16_apply(c, c->dout, fout(c, cost), c->din[0], fin(c, cost, 0), c->din_accumulate[0]);
}

const clremat_layer_impl16 clremat_impl16_dropout = {NULL, clremat_mixed_no_buffers, drop16_forward, drop16_backward};

/* ---- activation: y = act(x) (clremat_cvt16 with act, the kernel its
 * recomputation uses); dx = dout * act'(x). Over a 16-bit x of a large
 * enough layer, GELU reads a table of act (act') instead (act_table.h),
 * planned as the launch's staging. */

static int64_t planned_elems(const clremat_layer_call *c)
{
    return (c->alloc_batch > 0 ? c->alloc_batch : c->batch) * clremat_elems_of(&c->g->layers[c->layer].in_shape[0]);
}

static void act16_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const int fx = (c->in16 & 1u) ? clremat_mixed_fmt(g) : CLREMAT_FMT_F32;
    const size_t table =
        clremat_act_table_bytes((int)g->layers[l].act, fx, batch * clremat_elems_of(&g->layers[l].in_shape[0]));
    c->fwd_stage_bytes = table;
    c->bwd_stage_bytes = table; /* 16-bit x comes from a layer: its gradient is always wanted */
}

static int act16_forward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    return clremat_act16_forward(c, elems(c, 0), planned_elems(c), (int)c->g->layers[c->layer].act, c->in[0],
                                 fin(c, cost, 0), c->slot[0], fout(c, cost));
}

static int act16_backward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    if (!c->din[0])
        return CLREMAT_OK;
    return clremat_act16_backward(c, elems(c, 0), planned_elems(c), (int)c->g->layers[c->layer].act, c->in[0],
                                  fin(c, cost, 0), c->dout, fout(c, cost), c->din[0], fin(c, cost, 0),
                                  c->din_accumulate[0]);
}

const clremat_layer_impl16 clremat_impl16_activation = {NULL, act16_cost, act16_forward, act16_backward};

/* ---- layernorm: the float32 kernels' arithmetic on 16-bit x, y, dy, dx
 * (stats, gamma, beta and their gradients float32), eight elements of a
 * row (of a row's columns for the parameter gradients) per load */

static void ln16_dims(const clremat_layer_call *c, int64_t *rows, int64_t *D)
{
    const clremat_shape *s = &c->g->layers[c->layer].in_shape[0];
    *D = clremat_last_dim(s);
    *rows = *D > 0 ? c->batch * (clremat_elems_of(s) / *D) : 0;
}

static int ln16_forward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, D;
    cl_int ir, iD, fx = fin(c, cost, 0), fy = fout(c, cost);
    cl_float eps = (cl_float)L->eps;
    cl_mem mx, mg, mb, my, ms;
    ln16_dims(c, &rows, &D);
    if (rows * D > 2147483647 || !clremat_buf_holds(c->in[0], rows * D, fx) ||
        !clremat_buf_holds(c->slot[0], rows * D, fy) || !clremat_buf_holds(c->slot[1], rows * 2, 0) ||
        !clremat_buf_holds(c->param[0], D, 0) || !clremat_buf_holds(c->param[1], D, 0))
        return too_small(c, "input, output, stats or parameter");
    ir = (cl_int)rows, iD = (cl_int)D;
    mx = clremat_mem(c->in[0]), mg = clremat_mem(c->param[0]), mb = clremat_mem(c->param[1]);
    my = clremat_mem(c->slot[0]), ms = clremat_mem(c->slot[1]);
    return clremat_run1d(c->ctx, "ln_forward16", rows, sizeof ir, &ir, sizeof iD, &iD, sizeof eps, &eps, sizeof fx,
                         &fx, sizeof mx, &mx, sizeof mg, &mg, sizeof mb, &mb, sizeof fy, &fy, sizeof my, &my,
                         sizeof ms, &ms, (size_t)0);
}

static int ln16_backward(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, D;
    cl_int ir, iD, fx = fin(c, cost, 0), fdy = fout(c, cost), acc = c->din_accumulate[0] != 0;
    cl_mem mx, ms, mdy;
    int st = CLREMAT_OK;
    ln16_dims(c, &rows, &D);
    if (c->in_act[0])
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "layernorm %s: a fused activation read under a mixed "
                            "policy", L->name);
    if (rows * D > 2147483647 || !clremat_buf_holds(c->in[0], rows * D, fx) ||
        !clremat_buf_holds(c->dout, rows * D, fdy) || !clremat_buf_holds(c->slot[1], rows * 2, 0) ||
        !clremat_buf_holds(c->param[0], D, 0) || (c->din[0] && !clremat_buf_holds(c->din[0], rows * D, fx)))
        return too_small(c, "input, gradient, stats or gamma");
    ir = (cl_int)rows, iD = (cl_int)D;
    mx = clremat_mem(c->in[0]), ms = clremat_mem(c->slot[1]), mdy = clremat_mem(c->dout);
    if (c->grad[0] || c->grad[1]) {
        cl_mem mgg, mgb;
        if (!clremat_buf_holds(c->grad[0], D, 0) || !clremat_buf_holds(c->grad[1], D, 0))
            return clremat_fail(c->ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                                "layernorm %s: gamma and beta gradients are written together", L->name);
        mgg = clremat_mem(c->grad[0]), mgb = clremat_mem(c->grad[1]);
        /* rows [r0, r1) a launch: all, or as many as a loop budget allows
         * (eight row walks at most a work-item), each continuing the sums */
        const int64_t chunk = clremat_loop_chunk(c->ctx, 8, 8, rows);
        for (int64_t r0 = 0, r1 = -1; st == CLREMAT_OK && clremat_loop_next(rows, chunk, &r0, &r1);) {
            cl_int ir0 = (cl_int)r0, ir1 = (cl_int)r1;
            st = clremat_run1d(c->ctx, "ln_backward_params16", (D + 7) / 8, sizeof ir1, &ir1, sizeof iD, &iD,
                               sizeof fx, &fx, sizeof mx, &mx, sizeof ms, &ms, sizeof fdy, &fdy, sizeof mdy, &mdy,
                               sizeof mgg, &mgg, sizeof mgb, &mgb, sizeof ir0, &ir0, (size_t)0);
        }
    }
    if (st == CLREMAT_OK && c->din[0]) {
        cl_mem mg = clremat_mem(c->param[0]), mdx = clremat_mem(c->din[0]);
        st = clremat_run1d(c->ctx, "ln_backward_dx16", rows, sizeof ir, &ir, sizeof iD, &iD, sizeof acc, &acc,
                           sizeof fx, &fx, sizeof mx, &mx, sizeof ms, &ms, sizeof mg, &mg, sizeof fdy, &fdy,
                           sizeof mdy, &mdy, sizeof fx, &fx, sizeof mdx, &mdx, (size_t)0);
    }
    return st;
}

const clremat_layer_impl16 clremat_impl16_layernorm = {NULL, clremat_mixed_no_buffers, ln16_forward, ln16_backward};
