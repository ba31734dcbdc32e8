/* layer_layernorm.c: layer normalization over the last dimension,
 * y = gamma * (x - mean) * rstd + beta with rstd = 1 / sqrt(var + eps)
 * (biased variance). Slots {out, stats}: stats holds (mean, rstd) per row so
 * the backward needs only the input and stats. Parameter gradients are
 * column reductions in fixed row order (deterministic, no atomics). An
 * input that is a discarded activation output (the activations mode) is
 * read as act of its producer's kept pre-activation inside the backward's
 * kernels (ln_backward_*_act; bwd_act_fusable_inputs), never recomputed. */
#include "layer_seq.h"
#include "loop_budget.h"

/* Rows and width of layer l; checks the parameters match the last dim. */
static int ln_dims(clremat_ctx *ctx, const clremat_graph *g, int l, int64_t batch, int64_t *rows, int64_t *D)
{
    const clremat_layer *L = &g->layers[l];
    int st;
    if (L->in_shape[0].rank < 1 || L->n_params < 2)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "layernorm %s: needs a rank >= 1 input and gamma, beta",
                            L->name);
    *D = clremat_last_dim(&L->in_shape[0]);
    if (*D < 1)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "layernorm %s: empty last dimension", L->name);
    *rows = seq_rows(&L->in_shape[0], batch);
    if (L->params[0].elems != *D || L->params[1].elems != *D)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "layernorm %s: gamma/beta have %lld/%lld elements, last "
                            "dim is %lld", L->name, (long long)L->params[0].elems,
                            (long long)L->params[1].elems, (long long)*D);
    if ((st = seq_check_int(ctx, L->name, "input", *rows * *D)) != CLREMAT_OK)
        return st;
    return seq_check_int(ctx, L->name, "stats", *rows * 2);
}

static int ln_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    int64_t rows, D;
    int st = ln_dims(NULL, g, l, batch, &rows, &D);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 2;
    c->slot_bytes[0] = seq_fbytes(rows * D);
    c->slot_name[0] = "out";
    c->slot_bytes[1] = seq_fbytes(rows * 2);
    c->slot_name[1] = "stats";
    c->bwd_needs_inputs = 1u;
    c->bwd_act_fusable_inputs = 1u; /* x may be read as act(pre) (ln_backward_*_act), on every GEMM path */
    c->bwd_needs_slots = 1u << 1;
    c->fwd_temp_bytes = 0;
    c->bwd_temp_bytes = 0;
    /* sum, centred square sum, normalize + scale + shift */
    c->fwd_flops = 8.0 * (double)rows * (double)D;
    /* two row dot products and dx, plus the gamma/beta column sums */
    c->bwd_flops = 14.0 * (double)rows * (double)D;
    c->param_bytes = seq_param_bytes(&g->layers[l]);
    return CLREMAT_OK;
}

static int ln_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, D;
    int st = ln_dims(c->ctx, c->g, c->layer, c->batch, &rows, &D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], rows * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "gamma", c->param[0], D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "beta", c->param[1], D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], rows * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "stats", c->slot[1], rows * 2);
    if (st != CLREMAT_OK)
        return st;
    return clremat_run1d(c->ctx, "ln_forward", rows, SEQ_I(rows), SEQ_I(D), SEQ_F(L->eps), SEQ_M(c->in[0]),
                         SEQ_M(c->param[0]), SEQ_M(c->param[1]), SEQ_M(c->slot[0]), SEQ_M(c->slot[1]), SEQ_END);
}

static int ln_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t rows, D;
    int st = ln_dims(c->ctx, c->g, c->layer, c->batch, &rows, &D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], rows * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "stats", c->slot[1], rows * 2);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, rows * D);
    if (st == CLREMAT_OK)
        st = clremat_check_buf(c->ctx, L->name, "gamma", c->param[0], D);
    if (st == CLREMAT_OK && c->din[0])
        st = clremat_check_buf(c->ctx, L->name, "din", c->din[0], rows * D);
    if (st != CLREMAT_OK)
        return st;
    if (c->grad[0] || c->grad[1]) {
        if (!c->grad[0] || !c->grad[1])
            return clremat_fail(c->ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                                "layernorm %s: gamma and beta gradients are written together", L->name);
        if ((st = clremat_check_buf(c->ctx, L->name, "grad gamma", c->grad[0], D)) != CLREMAT_OK ||
            (st = clremat_check_buf(c->ctx, L->name, "grad beta", c->grad[1], D)) != CLREMAT_OK)
            return st;
        /* rows [r0, r1) a launch: all, or under a loop budget as many as
         * keep a work-item within it, each continuing the sums before */
        const int64_t chunk = clremat_loop_chunk(c->ctx, 1, 1, rows);
        for (int64_t r0 = 0, r1 = -1; st == CLREMAT_OK && clremat_loop_next(rows, chunk, &r0, &r1);) {
            if (c->in_act[0]) /* in[0] holds the pre-activation of x */
                st = clremat_run1d(c->ctx, "ln_backward_params_act", D, SEQ_I(r1), SEQ_I(D), SEQ_M(c->in[0]),
                                   SEQ_M(c->slot[1]), SEQ_M(c->dout), SEQ_M(c->grad[0]), SEQ_M(c->grad[1]),
                                   SEQ_I(c->in_act[0]), SEQ_I(r0), SEQ_END);
            else
                st = clremat_run1d(c->ctx, "ln_backward_params", D, SEQ_I(r1), SEQ_I(D), SEQ_M(c->in[0]),
                                   SEQ_M(c->slot[1]), SEQ_M(c->dout), SEQ_M(c->grad[0]), SEQ_M(c->grad[1]),
                                   SEQ_I(r0), SEQ_END);
        }
        if (st != CLREMAT_OK)
            return st;
    }
    if (!c->din[0])
        return CLREMAT_OK;
    if (c->in_act[0])
        return clremat_run1d(c->ctx, "ln_backward_dx_act", rows, SEQ_I(rows), SEQ_I(D),
                             SEQ_I(c->din_accumulate[0] != 0), SEQ_M(c->in[0]), SEQ_M(c->slot[1]),
                             SEQ_M(c->param[0]), SEQ_M(c->dout), SEQ_M(c->din[0]), SEQ_I(c->in_act[0]), SEQ_END);
    return clremat_run1d(c->ctx, "ln_backward_dx", rows, SEQ_I(rows), SEQ_I(D), SEQ_I(c->din_accumulate[0] != 0),
                         SEQ_M(c->in[0]), SEQ_M(c->slot[1]), SEQ_M(c->param[0]), SEQ_M(c->dout),
                         SEQ_M(c->din[0]), SEQ_END);
}

const clremat_layer_impl clremat_impl_layernorm = {ln_cost, ln_forward, ln_backward, NULL, NULL};
