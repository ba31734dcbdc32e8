/* mixed_precision.c: mixed precision at the layer boundary (see mixed_precision.h):
 * which tensors are 16-bit, the staging in a layer's cost, the converting
 * launches, and the conversion / scaling / counting operations. */
#include "mixed_precision.h"
#include "kernel_run.h"
#include <stdlib.h>
#include <string.h>

static int is_loss(const clremat_layer *L)
{
    return L->type == CLREMAT_SOFTMAX_CE || L->type == CLREMAT_MSE;
}

int clremat_mixed_slot16(const clremat_graph *g, int l, int s, const char *name)
{
    (void)s;
    if (!g || g->precision == CLREMAT_PREC_FLOAT32 || l < 0 || l >= g->n_layers || is_loss(&g->layers[l]))
        return 0;
    /* normalization statistics stay float32 (as Keras keeps them) */
    return !(name && (!strcmp(name, "stats") || !strcmp(name, "rstd")));
}

int clremat_mixed_input16(const clremat_graph *g, int l, int i)
{
    int P;
    if (!g || g->precision == CLREMAT_PREC_FLOAT32 || l < 0 || l >= g->n_layers || i < 0 ||
        i >= g->layers[l].n_inputs)
        return 0;
    P = g->layers[l].inputs[i];
    return P >= 0 && clremat_mixed_slot16(g, P, 0, "out");
}

static int64_t in_elems(const clremat_graph *g, int l, int i, int64_t batch)
{
    return batch * clremat_elems_of(&g->layers[l].in_shape[i]);
}

int clremat_mixed_fmt(const clremat_graph *g)
{
    return g->precision == CLREMAT_PREC_MIXED_FLOAT16 ? CLREMAT_FMT_F16 : CLREMAT_FMT_BF16;
}

void clremat_mixed_no_buffers(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    (void)g, (void)l, (void)batch;
    c->fwd_stage_bytes = 0;
    c->bwd_stage_bytes = 0;
}

int clremat_mixed_fusion_enabled(void)
{
    const char *e = getenv("CLREMAT_MIXED_STAGED");
    return !(e && *e && strcmp(e, "0") != 0);
}

void clremat_mixed_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c,
                        void (*cost16)(const clremat_graph *, int, int64_t, clremat_layer_cost *))
{
    const clremat_layer *L = &g->layers[l];
    size_t fwd = 0, bwd = 0;
    if (g->precision == CLREMAT_PREC_FLOAT32)
        return;
    for (int s = 0; s < c->n_slots; s++)
        if (clremat_mixed_slot16(g, l, s, c->slot_name[s])) {
            const size_t f32 = c->slot_bytes[s];
            c->slot16 |= 1u << s;
            c->slot_bytes[s] = f32 / 2;
            fwd += f32;                               /* the forward writes it in float32 */
            if (c->bwd_needs_slots >> s & 1u)
                bwd += f32;                           /* the backward reads it in float32 */
            if (s == 0)
                bwd += f32;                           /* the gradient of the output */
        }
    for (int i = 0; i < L->n_inputs; i++)
        if (clremat_mixed_input16(g, l, i)) {
            const size_t f32 = (size_t)in_elems(g, l, i, batch) * sizeof(float);
            c->in16 |= 1u << i;
            fwd += f32;
            if (c->bwd_needs_inputs >> i & 1u)
                bwd += f32;
            bwd += f32;                               /* the gradient of the input */
        }
    c->fwd_stage_bytes = fwd;
    c->bwd_stage_bytes = bwd;
    if (cost16) { /* fused: only the float32 buffers its kernels need */
        cost16(g, l, batch, c);
        c->mixed_fused = 1;
        fwd = c->fwd_stage_bytes;
        bwd = c->bwd_stage_bytes;
    }
    c->fwd_temp_bytes += fwd;
    c->bwd_temp_bytes += bwd;
    c->bwd_act_fusable_inputs = 0;
}

static int check16(clremat_ctx *ctx, const clremat_layer *L, const char *role, const clremat_buf *b, int64_t n)
{
    if (!b)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "layer %s: %s buffer missing", L->name, role);
    if (n < 0 || b->bytes < (size_t)n * 2)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "layer %s: 16-bit %s buffer holds %zu bytes, %lld needed", L->name, role, b->bytes,
                            (long long)n * 2);
    return CLREMAT_OK;
}

/* The staging of one launch: float32 buffers taken from the pool for the
 * launch's duration (what the cost added to the workspace). */
typedef struct stage {
    clremat_buf *buf[2 * CLREMAT_MAX_INPUTS + 2 * CLREMAT_MAX_SLOTS + 1];
    int n;
} stage;

static int stage_take(clremat_layer_call *c, stage *sg, const clremat_layer *L, int64_t elems, clremat_buf **out)
{
    clremat_ctx *ctx = c->ctx;
    int st = clremat_pool_alloc(ctx->pool, (size_t)elems * sizeof(float),
                                c->stage_tag ? c->stage_tag : "mixed precision staging", out);
    if (st != CLREMAT_OK)
        return clremat_fail(ctx, st, "layer %s: float32 staging of %lld bytes: %s", L->name,
                            (long long)elems * 4, clremat_pool_last_error(ctx->pool));
    sg->buf[sg->n++] = *out;
    return CLREMAT_OK;
}

int clremat_mixed_take(clremat_layer_call *c, int64_t elems, clremat_buf **out)
{
    stage sg = {{0}, 0};
    *out = NULL;
    return stage_take(c, &sg, &c->g->layers[c->layer], elems, out);
}

static void stage_release(clremat_ctx *ctx, stage *sg)
{
    for (int k = 0; k < sg->n; k++)
        clremat_pool_release(ctx->pool, sg->buf[k]);
    sg->n = 0;
}

/* Conversions of one launch gathered into clremat_cvt16x8_multi launches
 * of up to four buffers (the floats of clremat_op_convert without
 * activation, scale 1, no accumulation): a staged layer's boundary is one
 * or two launches instead of one per tensor. */
typedef struct cvt_batch {
    int n;
    cl_int cnt[4], sf[4], df[4];
    cl_mem src[4], dst[4];
} cvt_batch;

static int cvt_flush(clremat_ctx *ctx, cvt_batch *b)
{
    cl_int4 n4, s4, d4;
    cl_float one = 1.0f;
    size_t blocks = 0;
    cl_mem m[8];
    if (b->n == 0)
        return CLREMAT_OK;
    for (int j = 0; j < 4; j++) {
        const int k = j < b->n ? j : 0;
        n4.s[j] = j < b->n ? b->cnt[j] : 0;
        s4.s[j] = b->sf[k];
        d4.s[j] = b->df[k];
        m[2 * j] = b->src[k];
        m[2 * j + 1] = b->dst[k];
        blocks += (size_t)(n4.s[j] + 7) / 8;
    }
    b->n = 0;
    return clremat_run1d(ctx, "clremat_cvt16x8_multi", blocks, sizeof n4, &n4, sizeof s4, &s4, sizeof d4, &d4,
                         sizeof one, &one, sizeof m[0], &m[0], sizeof m[1], &m[1], sizeof m[2], &m[2], sizeof m[3],
                         &m[3], sizeof m[4], &m[4], sizeof m[5], &m[5], sizeof m[6], &m[6], sizeof m[7], &m[7],
                         (size_t)0);
}

/* A conversion of n > 0 elements from src (format sfmt: 0 float32, else
 * 16-bit) to dst (dfmt) fits a launch and both buffers. */
static int cvt_check(clremat_ctx *ctx, const clremat_buf *src, int sfmt, const clremat_buf *dst, int dfmt, int64_t n)
{
    if (n > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "convert: %lld elements exceed 2^31", (long long)n);
    if (!src || !dst || src->bytes < (size_t)n * (sfmt ? 2 : 4) || dst->bytes < (size_t)n * (dfmt ? 2 : 4))
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "convert: %lld elements do not fit the buffers",
                            (long long)n);
    return CLREMAT_OK;
}

static int cvt_add(clremat_ctx *ctx, cvt_batch *b, const clremat_buf *src, int sfmt, clremat_buf *dst, int dfmt,
                   int64_t n)
{
    int st;
    if (n <= 0)
        return CLREMAT_OK;
    if ((st = cvt_check(ctx, src, sfmt, dst, dfmt, n)) != CLREMAT_OK)
        return st;
    if (b->n == 4 && (st = cvt_flush(ctx, b)) != CLREMAT_OK)
        return st;
    b->cnt[b->n] = (cl_int)n;
    b->sf[b->n] = sfmt;
    b->df[b->n] = dfmt;
    b->src[b->n] = clremat_mem(src);
    b->dst[b->n] = clremat_mem(dst);
    b->n++;
    return CLREMAT_OK;
}

/* Forward inputs: a float32 copy of each 16-bit input (want: the inputs to
 * convert; the other 16-bit ones are hidden from the launch). */
static int stage_inputs(clremat_layer_call *c, const clremat_layer_cost *cost, int64_t batch, unsigned want,
                        stage *sg, cvt_batch *cb)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int fmt = clremat_mixed_fmt(c->g);
    int st = CLREMAT_OK;
    for (int i = 0; i < L->n_inputs && st == CLREMAT_OK; i++) {
        const int64_t n = in_elems(c->g, c->layer, i, batch);
        clremat_buf *f = NULL;
        if (!(cost->in16 >> i & 1u))
            continue;
        if (!(want >> i & 1u)) {
            c->in[i] = NULL;
            continue;
        }
        if ((st = stage_take(c, sg, L, n, &f)) != CLREMAT_OK)
            break;
        if (c->in[i] && (st = check16(c->ctx, L, "input", c->in[i], n)) == CLREMAT_OK)
            st = cvt_add(c->ctx, cb, c->in[i], fmt, f, CLREMAT_FMT_F32, n);
        c->in[i] = f;
    }
    return st;
}

/* Writes slot 0 of a layer with a separate activation as round(act(source))
 * from its stored source (the kernel of clremat_mixed_recompute_act). */
static int act_from_source(clremat_layer_call *c, const clremat_layer_cost *cost, clremat_buf *const *in,
                           clremat_buf *const *slot)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int fmt = clremat_mixed_fmt(c->g), k = cost->act_source;
    const clremat_buf *src = cost->act_from_input ? in[k] : slot[k];
    const int sfmt = (cost->act_from_input ? cost->in16 : cost->slot16) >> k & 1u ? fmt : CLREMAT_FMT_F32;
    const int64_t n = (int64_t)(cost->slot_bytes[0] / 2);
    int st;
    if (!(cost->slot16 & 1u))
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "layer %s: float32 activation output", L->name);
    if ((st = check16(c->ctx, L, "out", slot[0], n)) != CLREMAT_OK)
        return st;
    if (!src)
        return clremat_fail(c->ctx, CLREMAT_ERR_INVALID_ARGUMENT, "layer %s: activation source missing", L->name);
    return clremat_op_convert(c->ctx, src, sfmt, slot[0], fmt, n, (int)L->act, 1.0f, 0);
}

int clremat_mixed_forward(clremat_layer_call *c, const clremat_layer_cost *cost, int (*fn)(clremat_layer_call *))
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int64_t batch = c->alloc_batch > 0 ? c->alloc_batch : c->batch;
    const int fmt = clremat_mixed_fmt(c->g);
    clremat_buf *in16[CLREMAT_MAX_INPUTS], *slot16[CLREMAT_MAX_SLOTS];
    stage sg = {{0}, 0};
    cvt_batch cb = {0};
    int st;
    memcpy(in16, c->in, sizeof in16);
    memcpy(slot16, c->slot, sizeof slot16);
    st = stage_inputs(c, cost, batch, cost->in16, &sg, &cb);
    if (st == CLREMAT_OK)
        st = cvt_flush(c->ctx, &cb);
    for (int s = 0; s < cost->n_slots && st == CLREMAT_OK; s++)
        if (cost->slot16 >> s & 1u)
            st = stage_take(c, &sg, L, (int64_t)(cost->slot_bytes[s] / 2), &c->slot[s]);
    if (st == CLREMAT_OK)
        st = fn(c);
    for (int s = 0; s < cost->n_slots && st == CLREMAT_OK; s++) {
        const int64_t n = (int64_t)(cost->slot_bytes[s] / 2);
        if (!(cost->slot16 >> s & 1u) || (s == 0 && cost->act_source >= 0))
            continue;
        if ((st = check16(c->ctx, L, cost->slot_name[s] ? cost->slot_name[s] : "slot", slot16[s], n)) == CLREMAT_OK)
            st = cvt_add(c->ctx, &cb, c->slot[s], CLREMAT_FMT_F32, slot16[s], fmt, n);
    }
    if (st == CLREMAT_OK)
        st = cvt_flush(c->ctx, &cb);
    /* an activation output is rounded from its rounded source, as its
     * recomputation rounds it: the same bits under every remat mode */
    if (st == CLREMAT_OK && cost->act_source >= 0)
        st = act_from_source(c, cost, in16, slot16);
    memcpy(c->in, in16, sizeof in16);
    memcpy(c->slot, slot16, sizeof slot16);
    stage_release(c->ctx, &sg);
    return st;
}

int clremat_mixed_backward(clremat_layer_call *c, const clremat_layer_cost *cost, int (*fn)(clremat_layer_call *))
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int64_t batch = c->alloc_batch > 0 ? c->alloc_batch : c->batch;
    const int fmt = clremat_mixed_fmt(c->g);
    const float scale = is_loss(L) && c->loss_scale > 0.0f ? c->loss_scale : 1.0f;
    clremat_layer_call saved = *c;
    stage sg = {{0}, 0};
    cvt_batch cb = {0};
    int st = stage_inputs(c, cost, batch, cost->bwd_needs_inputs, &sg, &cb);
    for (int s = 0; s < cost->n_slots && st == CLREMAT_OK; s++) {
        const int64_t n = (int64_t)(cost->slot_bytes[s] / 2);
        clremat_buf *f = NULL;
        if (!(cost->slot16 >> s & 1u))
            continue;
        if (!(cost->bwd_needs_slots >> s & 1u)) {
            c->slot[s] = NULL;
            continue;
        }
        if ((st = stage_take(c, &sg, L, n, &f)) != CLREMAT_OK)
            break;
        if ((st = check16(c->ctx, L, cost->slot_name[s] ? cost->slot_name[s] : "slot", saved.slot[s], n)) ==
            CLREMAT_OK)
            st = cvt_add(c->ctx, &cb, saved.slot[s], fmt, f, CLREMAT_FMT_F32, n);
        c->slot[s] = f;
    }
    if (st == CLREMAT_OK && (cost->slot16 & 1u)) { /* the output's gradient */
        const int64_t n = (int64_t)(cost->slot_bytes[0] / 2);
        clremat_buf *f = NULL;
        if ((st = stage_take(c, &sg, L, n, &f)) == CLREMAT_OK && saved.dout &&
            (st = check16(c->ctx, L, "dout", saved.dout, n)) == CLREMAT_OK)
            st = cvt_add(c->ctx, &cb, saved.dout, fmt, f, CLREMAT_FMT_F32, n);
        c->dout = f;
    }
    if (st == CLREMAT_OK)
        st = cvt_flush(c->ctx, &cb);
    for (int i = 0; i < L->n_inputs && st == CLREMAT_OK; i++) { /* the inputs' gradients, written fresh */
        clremat_buf *f = NULL;
        if (!(cost->in16 >> i & 1u))
            continue;
        if ((st = stage_take(c, &sg, L, in_elems(c->g, c->layer, i, batch), &f)) != CLREMAT_OK)
            break;
        c->din[i] = saved.din[i] ? f : NULL;
        c->din_accumulate[i] = 0;
    }
    if (st == CLREMAT_OK)
        st = fn(c);
    /* rounded into the 16-bit gradients, added in float32 where they
     * accumulate (the order of the float32 path: old + new) */
    for (int i = 0; i < L->n_inputs && st == CLREMAT_OK; i++) {
        const int64_t n = in_elems(c->g, c->layer, i, batch);
        if (!(cost->in16 >> i & 1u) || !saved.din[i])
            continue;
        if ((st = check16(c->ctx, L, "input grad", saved.din[i], n)) == CLREMAT_OK)
            st = clremat_op_convert(c->ctx, c->din[i], CLREMAT_FMT_F32, saved.din[i], fmt, n, 0, scale,
                                    saved.din_accumulate[i]);
    }
    stage_release(c->ctx, &sg);
    *c = saved;
    return st;
}

int clremat_mixed_recompute_act(clremat_layer_call *c, const clremat_layer_cost *cost)
{
    if (cost->act_source < 0)
        return clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "layer %s has no separate activation to recompute",
                            c->g->layers[c->layer].name);
    return act_from_source(c, cost, c->in, c->slot);
}

int clremat_op_convert(clremat_ctx *ctx, const clremat_buf *src, int sfmt, clremat_buf *dst, int dfmt, int64_t n,
                       int act, float scale, int acc)
{
    cl_int in = (cl_int)n, iact = act, isf = sfmt, idf = dfmt, iacc = acc ? 1 : 0;
    cl_float fs = scale;
    cl_mem ms, md;
    int st;
    if (n <= 0)
        return CLREMAT_OK;
    if ((st = cvt_check(ctx, src, sfmt, dst, dfmt, n)) != CLREMAT_OK)
        return st;
    ms = clremat_mem(src);
    md = clremat_mem(dst);
    return clremat_run1d(ctx, clremat_ew_name(ctx, act, "clremat_cvt16w", "clremat_cvt16x8"),
                         clremat_ew_items(ctx, act, n), sizeof in, &in, sizeof iact, &iact, sizeof fs, &fs, sizeof iacc,
                         &iacc, sizeof isf, &isf, sizeof ms, &ms, sizeof idf, &idf, sizeof md, &md, (size_t)0);
}

int clremat_buf_holds(const clremat_buf *b, int64_t n, int fmt)
{
    return b && b->bytes >= (size_t)n * (fmt ? 2 : 4);
}

int clremat_op_mul_dact(clremat_ctx *ctx, int64_t n, int act, const clremat_buf *x, int fx, const clremat_buf *dy,
                        int fdy, clremat_buf *z, int fz, int acc)
{
    cl_int in = (cl_int)n, iact = act, iacc = acc ? 1 : 0, ifx = fx, ifdy = fdy, ifz = fz;
    cl_mem mx, mdy, mz;
    if (n <= 0)
        return CLREMAT_OK;
    if (n > 2147483647 || !clremat_buf_holds(x, n, fx) || !clremat_buf_holds(dy, n, fdy) ||
        !clremat_buf_holds(z, n, fz))
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "act backward: %lld elements do not fit the buffers",
                            (long long)n);
    mx = clremat_mem(x);
    mdy = clremat_mem(dy);
    mz = clremat_mem(z);
    return clremat_run1d(ctx, clremat_ew_name(ctx, act, "clremat_act_bwd16w", "clremat_act_bwd16"),
                         clremat_ew_items(ctx, act, n), sizeof in, &in, sizeof iact, &iact, sizeof iacc, &iacc,
                         sizeof ifx, &ifx, sizeof mx, &mx, sizeof ifdy, &ifdy, sizeof mdy, &mdy, sizeof ifz, &ifz,
                         sizeof mz, &mz, (size_t)0);
}

int clremat_op_unscale_check(clremat_ctx *ctx, clremat_buf *const *g, const int64_t *n, int count, float inv,
                             clremat_buf *cnt)
{
    const cl_float fi = inv;
    const cl_mem mc = cnt ? clremat_mem(cnt) : NULL;
    int st;
    if (!cnt)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "unscale: counter buffer missing");
    for (int first = 0; first < count; first += 8) { /* eight gradients a launch */
        cl_int8 n8 = {{0}};
        cl_mem m[8];
        int64_t blocks = 0;
        for (int j = 0; j < 8; j++) {
            const int i = first + j;
            m[j] = clremat_mem(g[first]); /* an unused slot: any buffer, n = 0 */
            if (i >= count || n[i] <= 0)
                continue;
            if (n[i] > 2147483647 - 7)
                return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "unscale: %lld floats exceed 2^31", (long long)n[i]);
            if ((st = clremat_check_buf(ctx, "unscale", "gradient", g[i], n[i])) != CLREMAT_OK)
                return st;
            n8.s[j] = (cl_int)n[i];
            m[j] = clremat_mem(g[i]);
            blocks += (n[i] + 7) / 8;
        }
        if (blocks > 0 &&
            (st = clremat_run1d(ctx, "clremat_unscale_check8_multi", blocks, sizeof n8, &n8, sizeof fi, &fi,
                                sizeof m[0], &m[0], sizeof m[1], &m[1], sizeof m[2], &m[2], sizeof m[3], &m[3], sizeof m[4], &m[4],
                                sizeof m[5], &m[5], sizeof m[6], &m[6], sizeof m[7], &m[7], sizeof mc, &mc,
                                (size_t)0)) != CLREMAT_OK)
            return st;
    }
    return CLREMAT_OK;
}

int clremat_op_count_nonfinite_fmt(clremat_ctx *ctx, const clremat_buf *buf, int64_t n, int fmt, int64_t *count)
{
    clremat_buf *cnt;
    cl_int in = (cl_int)n, ifmt = fmt;
    cl_mem mx, mc;
    size_t local = 256, global = clremat_count_global(n);
    int st;
    if (fmt == CLREMAT_FMT_F32)
        return clremat_op_count_nonfinite(ctx, buf, n, count);
    *count = 0;
    if (n <= 0)
        return CLREMAT_OK;
    if (n > 2147483647 || !buf || buf->bytes < (size_t)n * 2)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "count_nonfinite: %lld 16-bit elements do not fit",
                            (long long)n);
    if ((st = clremat_counter_new(ctx, &cnt)) != CLREMAT_OK)
        return st;
    mx = clremat_mem(buf);
    mc = clremat_mem(cnt);
    if ((st = clremat_run(ctx, "clremat_count_nonfinite16", 1, &global, &local, sizeof in, &in, sizeof ifmt, &ifmt,
                          sizeof mx, &mx, sizeof mc, &mc, (size_t)0)) != CLREMAT_OK) {
        clremat_pool_release(ctx->pool, cnt);
        return st;
    }
    return clremat_counter_take(ctx, cnt, count);
}
