/* layercheck.c: the gradient-check harness of layercheck.h: device forward
 * and backward of one layer against double-precision host references, and
 * finite differences on both the reference and the device forward. */
#include "layercheck.h"
#include "kernel_run.h"
#include "gemm.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Everything one check holds. */
typedef struct lc_state {
    clremat_ctx *ctx;
    lc_spec s;
    clremat_layer_cost cost;
    const clremat_layer *L;
    uint32_t rng;
    int64_t n_in[CLREMAT_MAX_INPUTS], n_par[CLREMAT_MAX_PARAMS], n_out;
    float *in_f[CLREMAT_MAX_INPUTS], *par_f[CLREMAT_MAX_PARAMS], *dout_f;
    double *in_d[CLREMAT_MAX_INPUTS], *par_d[CLREMAT_MAX_PARAMS], *dout_d, *labels_d;
    clremat_buf *in[CLREMAT_MAX_INPUTS], *par[CLREMAT_MAX_PARAMS], *grad[CLREMAT_MAX_PARAMS];
    clremat_buf *slot[CLREMAT_MAX_SLOTS], *din[CLREMAT_MAX_INPUTS], *dout, *temp_f, *temp_b, *labels;
} lc_state;

static float lc_uniform(lc_state *st, double scale)
{
    st->rng = st->rng * 1664525u + 1013904223u;
    return (float)(((double)(st->rng >> 8) / 16777216.0 * 2.0 - 1.0) * scale);
}

int64_t lc_out_elems(const lc_spec *s)
{
    clremat_layer_cost c;
    if (clremat_layer_cost_of(s->g, s->layer, s->batch > 0 ? s->batch : 2, &c) != CLREMAT_OK)
        return -1;
    return (int64_t)(c.slot_bytes[0] / sizeof(float));
}

void lc_graph_of_layer(clremat_graph *g, clremat_layer *layer)
{
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "layercheck");
    g->layers = layer;
    g->n_layers = g->cap_layers = 1;
    g->open_block = -1;
    g->finalized = 1;
    if (layer->n_inputs == 0)
        layer->n_inputs = 1;
    for (int i = 0; i < layer->n_inputs; i++)
        layer->inputs[i] = -1;
    layer->block = -1;
    g->io.input = layer->in_shape[0]; /* the graph's input is the layer's (first) input */
}

clremat_shape lc_shape(int rank, const int64_t *dims)
{
    clremat_shape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    for (int i = 0; i < rank; i++)
        s.dims[i] = dims[i];
    return s;
}

void lc_small_loop_budget(clremat_ctx *ctx, int64_t budget)
{
    (void)clremat_gemm_resolve(ctx);
    ctx->loop_budget = budget;
    ctx->loop_budget_env = 1;
    ctx->gemm_max_iterations = 0;
}

void lc_set_param(clremat_layer *l, int p, const char *name, int rank, const int64_t *dims)
{
    clremat_param *pp = &l->params[p];
    memset(pp, 0, sizeof *pp);
    snprintf(pp->name, sizeof pp->name, "%s", name);
    pp->shape = lc_shape(rank, dims);
    pp->elems = 1;
    for (int i = 0; i < rank; i++)
        pp->elems *= dims[i];
    if (l->n_params < p + 1)
        l->n_params = p + 1;
}

static clremat_buf *lc_alloc(lc_state *st, size_t bytes, const char *tag)
{
    clremat_buf *b = NULL;
    if (bytes == 0)
        return NULL;
    ck_assert_msg(clremat_pool_alloc(st->ctx->pool, bytes, tag, &b) == CLREMAT_OK, "layercheck: alloc %s: %s", tag,
                  clremat_pool_last_error(st->ctx->pool));
    return b;
}

static void lc_upload(lc_state *st, clremat_buf *b, const float *h, int64_t n)
{
    ck_assert_msg(clremat_write(st->ctx, b, 0, (size_t)n * sizeof(float), h) == CLREMAT_OK, "layercheck write: %s",
                  clremat_ctx_last_error(st->ctx));
}

static void lc_download(lc_state *st, const clremat_buf *b, float *h, int64_t n)
{
    ck_assert_msg(clremat_read(st->ctx, b, 0, (size_t)n * sizeof(float), h) == CLREMAT_OK, "layercheck read: %s",
                  clremat_ctx_last_error(st->ctx));
}

static void lc_fill(lc_state *st, clremat_buf *b, int64_t n, float v)
{
    float *h = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        h[i] = v;
    lc_upload(st, b, h, n);
    free(h);
}

static lc_io lc_io_of(const lc_state *st)
{
    lc_io io;
    memset(&io, 0, sizeof io);
    io.g = st->s.g;
    io.layer = st->s.layer;
    io.batch = st->s.batch;
    io.seed = st->s.seed;
    io.step = st->s.step;
    for (int i = 0; i < st->L->n_inputs; i++)
        io.in[i] = st->in_d[i];
    for (int p = 0; p < st->L->n_params; p++)
        io.param[p] = st->par_d[p];
    io.labels = st->labels_d;
    return io;
}

static clremat_layer_call lc_call(const lc_state *st, int backward)
{
    clremat_layer_call c;
    memset(&c, 0, sizeof c);
    c.ctx = st->ctx;
    c.g = st->s.g;
    c.layer = st->s.layer;
    c.batch = st->s.batch;
    c.seed = st->s.seed;
    c.step = st->s.step;
    for (int i = 0; i < st->L->n_inputs; i++)
        c.in[i] = st->in[i];
    for (int k = 0; k < st->cost.n_slots; k++)
        c.slot[k] = st->slot[k];
    for (int p = 0; p < st->L->n_params; p++) {
        c.param[p] = st->par[p];
        c.grad[p] = st->grad[p];
    }
    c.dout = st->dout;
    c.temp = backward ? st->temp_b : st->temp_f;
    c.labels = st->labels;
    return c;
}

/* Device forward; returns slot 0 in out (n_out floats). */
static void lc_dev_forward(lc_state *st, float *out)
{
    clremat_layer_call c = lc_call(st, 0);
    int rc = clremat_layer_forward(&c);
    ck_assert_msg(rc == CLREMAT_OK, "layer %s forward: %s (%s)", st->L->name, clremat_ctx_last_error(st->ctx),
                  clremat_status_str(rc));
    if (out)
        lc_download(st, st->slot[0], out, st->n_out);
}

static double lc_loss_of(const lc_state *st, const double *out_d, const float *out_f)
{
    double L = 0;
    for (int64_t i = 0; i < st->n_out; i++)
        L += st->dout_d[i] * (out_d ? out_d[i] : (double)out_f[i]);
    return L;
}

static int lc_close(double got, double ref, double rtol, double atol, double mag)
{
    return isfinite(got) && fabs(got - ref) <= rtol * fabs(ref) + atol * (mag > 1 ? mag : 1);
}

static double lc_maxabs(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Compares a device tensor with a reference. */
static void lc_compare(const lc_state *st, const char *what, const float *got, const double *ref, int64_t n)
{
    const double mag = lc_maxabs(ref, n);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(lc_close(got[i], ref[i], st->s.rtol, st->s.atol, mag),
                      "layer %s batch %lld: %s[%lld] = %.9g, reference %.9g (max |ref| %.3g)", st->L->name,
                      (long long)st->s.batch, what, (long long)i, (double)got[i], ref[i], mag);
}

/* (a) forward, determinism, recomputation. */
static void lc_check_forward(lc_state *st)
{
    float *out = malloc((size_t)st->n_out * sizeof(float)), *out2 = malloc((size_t)st->n_out * sizeof(float));
    double *ref = calloc((size_t)st->n_out, sizeof(double));
    lc_io io = lc_io_of(st);
    lc_dev_forward(st, out);
    st->s.fwd(&io, ref);
    lc_compare(st, "forward out", out, ref, st->n_out);
    lc_fill(st, st->slot[0], st->n_out, NAN);
    lc_dev_forward(st, out2);
    ck_assert_msg(memcmp(out, out2, (size_t)st->n_out * sizeof(float)) == 0, "layer %s: forward not deterministic",
                  st->L->name);
    if (st->cost.act_source >= 0) {
        clremat_layer_call c = lc_call(st, 0);
        int rc;
        lc_fill(st, st->slot[0], st->n_out, NAN);
        rc = clremat_layer_recompute_activation(&c);
        ck_assert_msg(rc == CLREMAT_OK, "layer %s recompute: %s", st->L->name, clremat_ctx_last_error(st->ctx));
        lc_download(st, st->slot[0], out2, st->n_out);
        ck_assert_msg(memcmp(out, out2, (size_t)st->n_out * sizeof(float)) == 0,
                      "layer %s: recomputed activation differs from the forward's", st->L->name);
    }
    free(out);
    free(out2);
    free(ref);
}

/* (b) backward with accumulate 0/1 and with every din NULL. */
static void lc_check_backward(lc_state *st, double *din_ref[], double *grad_ref[])
{
    lc_io io = lc_io_of(st);
    st->s.bwd(&io, st->dout_d, din_ref, grad_ref);
    for (int mode = 0; mode < 3; mode++) { /* 0: overwrite, 1: accumulate, 2: no din */
        clremat_layer_call c;
        float *init[CLREMAT_MAX_INPUTS] = {NULL};
        int rc;
        lc_dev_forward(st, NULL);
        lc_upload(st, st->dout, st->dout_f, st->n_out);
        for (int p = 0; p < st->L->n_params; p++)
            lc_fill(st, st->grad[p], st->n_par[p], NAN);
        c = lc_call(st, 1);
        for (int i = 0; i < st->L->n_inputs; i++) {
            if (!st->din[i] || mode == 2)
                continue;
            c.din[i] = st->din[i];
            c.din_accumulate[i] = mode == 1;
            init[i] = malloc((size_t)st->n_in[i] * sizeof(float));
            for (int64_t k = 0; k < st->n_in[i]; k++)
                init[i][k] = mode == 1 ? lc_uniform(st, 1.0) : NAN;
            lc_upload(st, st->din[i], init[i], st->n_in[i]);
        }
        rc = clremat_layer_backward(&c);
        ck_assert_msg(rc == CLREMAT_OK, "layer %s backward: %s (%s)", st->L->name, clremat_ctx_last_error(st->ctx),
                      clremat_status_str(rc));
        for (int i = 0; i < st->L->n_inputs; i++) {
            float *got;
            double *ref;
            char what[64];
            if (!init[i])
                continue;
            got = malloc((size_t)st->n_in[i] * sizeof(float));
            ref = malloc((size_t)st->n_in[i] * sizeof(double));
            lc_download(st, st->din[i], got, st->n_in[i]);
            for (int64_t k = 0; k < st->n_in[i]; k++)
                ref[k] = din_ref[i][k] + (mode == 1 ? (double)init[i][k] : 0.0);
            snprintf(what, sizeof what, "din[%d] (%s)", i, mode == 1 ? "accumulate" : "overwrite");
            lc_compare(st, what, got, ref, st->n_in[i]);
            free(got);
            free(ref);
            free(init[i]);
        }
        for (int p = 0; p < st->L->n_params; p++) {
            float *got = malloc((size_t)st->n_par[p] * sizeof(float));
            char what[64];
            lc_download(st, st->grad[p], got, st->n_par[p]);
            snprintf(what, sizeof what, "grad %s (din mode %d)", st->L->params[p].name, mode);
            lc_compare(st, what, got, grad_ref[p], st->n_par[p]);
            free(got);
        }
    }
}

/* (c) finite differences of one tensor (input when is_input, else param). */
static void lc_check_fd_tensor(lc_state *st, int is_input, int t, const double *g_ref, const float *g_dev)
{
    const int64_t n = is_input ? st->n_in[t] : st->n_par[t];
    double *xd = is_input ? st->in_d[t] : st->par_d[t];
    float *xf = is_input ? st->in_f[t] : st->par_f[t];
    clremat_buf *xb = is_input ? st->in[t] : st->par[t];
    const char *name = is_input ? (t == 0 ? "input 0" : "input 1") : st->L->params[t].name;
    double *out_d = malloc((size_t)st->n_out * sizeof(double));
    float *out_f = malloc((size_t)st->n_out * sizeof(float));
    const double gmag = lc_maxabs(g_ref, n);
    const int coords = n < st->s.fd_coords ? (int)n : st->s.fd_coords;
    int kinks = 0; /* coordinates whose step crossed a kink */
    lc_io io = lc_io_of(st);
    for (int k = 0; k < coords; k++) {
        const int64_t i = coords == n ? k : (int64_t)((k * n) / coords + (int64_t)(st->rng >> 9) % (n / coords));
        const double x0 = xd[i];
        const float xf0 = xf[i];
        double Lp, Lm, fd, h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
        float xp, xm;
        double Ldp, Ldm, fd_dev, fd_ref_same;
        st->rng = st->rng * 1664525u + 1013904223u;
        /* reference in double */
        xd[i] = x0 + h;
        st->s.fwd(&io, out_d);
        Lp = lc_loss_of(st, out_d, NULL);
        xd[i] = x0 - h;
        st->s.fwd(&io, out_d);
        Lm = lc_loss_of(st, out_d, NULL);
        fd = (Lp - Lm) / (2 * h);
        ck_assert_msg(lc_close(fd, g_ref[i], 1e-4, 1e-6, gmag),
                      "layer %s: reference backward d/d%s[%lld] = %.9g, reference finite difference %.9g",
                      st->L->name, name, (long long)i, g_ref[i], fd);
        /* device in float */
        xp = (float)(xf0 + st->s.fd_step);
        xm = (float)(xf0 - st->s.fd_step);
        ck_assert(clremat_write(st->ctx, xb, (size_t)i * sizeof(float), sizeof(float), &xp) == CLREMAT_OK);
        lc_dev_forward(st, out_f);
        Ldp = lc_loss_of(st, NULL, out_f);
        xd[i] = xp;
        st->s.fwd(&io, out_d);
        Lp = lc_loss_of(st, out_d, NULL);
        ck_assert(clremat_write(st->ctx, xb, (size_t)i * sizeof(float), sizeof(float), &xm) == CLREMAT_OK);
        lc_dev_forward(st, out_f);
        Ldm = lc_loss_of(st, NULL, out_f);
        xd[i] = xm;
        st->s.fwd(&io, out_d);
        Lm = lc_loss_of(st, out_d, NULL);
        ck_assert(clremat_write(st->ctx, xb, (size_t)i * sizeof(float), sizeof(float), &xf0) == CLREMAT_OK);
        xd[i] = x0;
        fd_dev = (Ldp - Ldm) / ((double)xp - (double)xm);
        fd_ref_same = (Lp - Lm) / ((double)xp - (double)xm);
        /* The device's forward over the step agrees with the reference's
         * (a forward check: it says nothing about the gradient). */
        ck_assert_msg(lc_close(fd_dev, fd_ref_same, st->s.fd_rtol, st->s.fd_atol, gmag),
                      "layer %s: device finite difference d/d%s[%lld] (step %g) %.7g, reference finite difference "
                      "over the same step %.7g", st->L->name, name, (long long)i, st->s.fd_step, fd_dev, fd_ref_same);
        /* The step crossed a kink (relu at 0, dropout, argmax...) when the
         * reference's own finite difference over it disagrees with the
         * reference's gradient (at half the tolerance, so that a coordinate
         * kept is well inside it): the finite difference then measures no
         * derivative and the coordinate is not a gradient check. Anywhere
         * else the device gradient must match the device finite difference
         * on its own, whatever the reference gradient is. */
        if (!lc_close(fd_ref_same, g_ref[i], st->s.fd_rtol / 2, st->s.fd_atol / 2, gmag)) {
            kinks++;
            continue;
        }
        ck_assert_msg(lc_close(fd_dev, g_dev[i], st->s.fd_rtol, st->s.fd_atol, gmag),
                      "layer %s: device gradient d/d%s[%lld] = %.7g, device finite difference (step %g) %.7g "
                      "(reference finite difference %.7g)", st->L->name, name, (long long)i, (double)g_dev[i],
                      st->s.fd_step, fd_dev, fd_ref_same);
    }
    /* most coordinates must be real gradient checks */
    ck_assert_msg(2 * kinks <= coords, "layer %s: %d of %d finite-difference coordinates of %s crossed a kink",
                  st->L->name, kinks, coords, name);
    free(out_d);
    free(out_f);
}

static void lc_check_fd(lc_state *st, double *din_ref[], double *grad_ref[])
{
    /* device gradients with overwrite semantics */
    clremat_layer_call c;
    float *g_dev;
    int rc;
    lc_dev_forward(st, NULL);
    lc_upload(st, st->dout, st->dout_f, st->n_out);
    c = lc_call(st, 1);
    for (int i = 0; i < st->L->n_inputs; i++)
        c.din[i] = st->din[i];
    rc = clremat_layer_backward(&c);
    ck_assert_msg(rc == CLREMAT_OK, "layer %s backward: %s", st->L->name, clremat_ctx_last_error(st->ctx));
    for (int i = 0; i < st->L->n_inputs; i++) {
        if (!st->din[i])
            continue;
        g_dev = malloc((size_t)st->n_in[i] * sizeof(float));
        lc_download(st, st->din[i], g_dev, st->n_in[i]);
        lc_check_fd_tensor(st, 1, i, din_ref[i], g_dev);
        free(g_dev);
    }
    for (int p = 0; p < st->L->n_params; p++) {
        g_dev = malloc((size_t)st->n_par[p] * sizeof(float));
        lc_download(st, st->grad[p], g_dev, st->n_par[p]);
        lc_check_fd_tensor(st, 0, p, grad_ref[p], g_dev);
        free(g_dev);
    }
}

void lc_check_layer(clremat_ctx *ctx, const lc_spec *spec)
{
    lc_state st;
    double *din_ref[CLREMAT_MAX_INPUTS] = {NULL}, *grad_ref[CLREMAT_MAX_PARAMS] = {NULL};
    int rc;
    memset(&st, 0, sizeof st);
    st.ctx = ctx;
    st.s = *spec;
    if (st.s.batch <= 0) st.s.batch = 2;
    if (st.s.in_scale == 0) st.s.in_scale = 1;
    if (st.s.param_scale == 0) st.s.param_scale = 1;
    if (st.s.rtol == 0) st.s.rtol = 1e-4;
    if (st.s.atol == 0) st.s.atol = 1e-5;
    if (st.s.fd_step == 0) st.s.fd_step = 1e-2;
    if (st.s.fd_rtol == 0) st.s.fd_rtol = 5e-2;
    if (st.s.fd_atol == 0) st.s.fd_atol = 1e-2;
    if (st.s.fd_coords == 0) st.s.fd_coords = 8;
    st.rng = st.s.rng ? st.s.rng : 1;
    st.L = &st.s.g->layers[st.s.layer];
    rc = clremat_layer_cost_for(ctx, st.s.g, st.s.layer, st.s.batch, &st.cost); /* the workspace of ctx's path */
    ck_assert_msg(rc == CLREMAT_OK, "layer %s cost: %s", st.L->name, clremat_last_error());
    st.n_out = (int64_t)(st.cost.slot_bytes[0] / sizeof(float));
    ck_assert_msg(st.n_out > 0 && (!st.s.loss || st.n_out == 2), "layer %s: slot 0 has %lld floats", st.L->name,
                  (long long)st.n_out);
    for (int i = 0; i < st.L->n_inputs; i++) {
        st.n_in[i] = st.s.batch * clremat_elems_of(&st.L->in_shape[i]);
        st.in_f[i] = malloc((size_t)st.n_in[i] * sizeof(float));
        st.in_d[i] = malloc((size_t)st.n_in[i] * sizeof(double));
        for (int64_t k = 0; k < st.n_in[i]; k++) {
            st.in_f[i][k] = st.s.in_fixed[i] ? st.s.in_fixed[i][k] : lc_uniform(&st, st.s.in_scale);
            st.in_d[i][k] = st.in_f[i][k];
        }
        st.in[i] = lc_alloc(&st, (size_t)st.n_in[i] * sizeof(float), "lc input");
        lc_upload(&st, st.in[i], st.in_f[i], st.n_in[i]);
        if (!st.s.in_fixed[i]) {
            st.din[i] = lc_alloc(&st, (size_t)st.n_in[i] * sizeof(float), "lc din");
            din_ref[i] = calloc((size_t)st.n_in[i], sizeof(double));
        }
    }
    for (int p = 0; p < st.L->n_params; p++) {
        st.n_par[p] = st.L->params[p].elems;
        st.par_f[p] = malloc((size_t)st.n_par[p] * sizeof(float));
        st.par_d[p] = malloc((size_t)st.n_par[p] * sizeof(double));
        for (int64_t k = 0; k < st.n_par[p]; k++) {
            st.par_f[p][k] = st.s.param_fixed[p] ? st.s.param_fixed[p][k] : lc_uniform(&st, st.s.param_scale);
            st.par_d[p][k] = st.par_f[p][k];
        }
        st.par[p] = lc_alloc(&st, (size_t)st.n_par[p] * sizeof(float), "lc param");
        st.grad[p] = lc_alloc(&st, (size_t)st.n_par[p] * sizeof(float), "lc grad");
        lc_upload(&st, st.par[p], st.par_f[p], st.n_par[p]);
        grad_ref[p] = calloc((size_t)st.n_par[p], sizeof(double));
    }
    for (int k = 0; k < st.cost.n_slots; k++)
        st.slot[k] = lc_alloc(&st, st.cost.slot_bytes[k], "lc slot");
    st.temp_f = lc_alloc(&st, st.cost.fwd_temp_bytes, "lc fwd temp");
    st.temp_b = lc_alloc(&st, st.cost.bwd_temp_bytes, "lc bwd temp");
    st.dout = lc_alloc(&st, (size_t)st.n_out * sizeof(float), "lc dout");
    st.dout_f = malloc((size_t)st.n_out * sizeof(float));
    st.dout_d = malloc((size_t)st.n_out * sizeof(double));
    for (int64_t k = 0; k < st.n_out; k++) {
        st.dout_f[k] = st.s.loss ? (k == 0 ? 1.0f : 0.0f) : lc_uniform(&st, 1.0);
        st.dout_d[k] = st.dout_f[k];
    }
    if (st.s.labels && st.s.n_labels > 0) {
        st.labels = lc_alloc(&st, (size_t)st.s.n_labels * sizeof(float), "lc labels");
        lc_upload(&st, st.labels, st.s.labels, st.s.n_labels);
        st.labels_d = malloc((size_t)st.s.n_labels * sizeof(double));
        for (int64_t k = 0; k < st.s.n_labels; k++)
            st.labels_d[k] = st.s.labels[k];
    }

    lc_check_forward(&st);
    lc_check_backward(&st, din_ref, grad_ref);
    lc_check_fd(&st, din_ref, grad_ref);

    for (int i = 0; i < CLREMAT_MAX_INPUTS; i++) {
        free(st.in_f[i]);
        free(st.in_d[i]);
        free(din_ref[i]);
        clremat_pool_release(ctx->pool, st.in[i]);
        clremat_pool_release(ctx->pool, st.din[i]);
    }
    for (int p = 0; p < CLREMAT_MAX_PARAMS; p++) {
        free(st.par_f[p]);
        free(st.par_d[p]);
        free(grad_ref[p]);
        clremat_pool_release(ctx->pool, st.par[p]);
        clremat_pool_release(ctx->pool, st.grad[p]);
    }
    for (int k = 0; k < CLREMAT_MAX_SLOTS; k++)
        clremat_pool_release(ctx->pool, st.slot[k]);
    clremat_pool_release(ctx->pool, st.temp_f);
    clremat_pool_release(ctx->pool, st.temp_b);
    clremat_pool_release(ctx->pool, st.dout);
    clremat_pool_release(ctx->pool, st.labels);
    free(st.dout_f);
    free(st.dout_d);
    free(st.labels_d);
}
