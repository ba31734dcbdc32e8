/* layer_batchnorm.c: batch normalization over the last dimension (Keras
 * BatchNormalization(axis=-1)): training normalizes with the batch's mean
 * and biased variance, evaluation (the trainer's evaluation graph,
 * L->bn_eval) with the moving statistics. Parameters in Keras's order:
 * gamma (scale), beta (center), moving_mean, moving_variance; the last two
 * are frozen state, never touched by the optimizer.
 *
 * Slots {out, stats}: stats holds per channel (mean, rstd, var) of the
 * batch. The moving statistics are updated in the BACKWARD launch, from the
 * saved stats: the backward of a layer runs exactly once per step whatever
 * the remat plan, while its forward may run again as a recomputation (which
 * rebuilds the stats bit for bit from the same input and never writes the
 * moving statistics). So after N steps they are bitwise the same under
 * every remat mode. With several batches a step (gradient accumulation's
 * micro-batches, data-parallel ranks) the backward only adds its batch's
 * statistics into the step's sums (clremat_layer_call.bn_moving_acc) and
 * clremat_bn_moving_finish makes the step's one update from the combined
 * batch. Backward workspace: two floats per channel. */
#include "layer_seq.h"

/* Rows, channels, and the parameter indices (-1 when absent). */
typedef struct bn_dims {
    int64_t rows, C;
    int gamma, beta, mm, mv;
} bn_dims;

static int bn_dims_of(clremat_ctx *ctx, const clremat_layer *L, int64_t batch, bn_dims *d)
{
    int p = 0, st;
    d->C = clremat_last_dim(&L->in_shape[0]);
    d->rows = seq_rows(&L->in_shape[0], batch);
    d->gamma = L->scale ? p++ : -1;
    d->beta = L->center ? p++ : -1;
    d->mm = p++;
    d->mv = p++;
    if (L->in_shape[0].rank < 1 || d->C < 1 || L->n_params != p)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "batchnorm layer %s: needs rank >= 1 input and %d parameters",
                            L->name, p);
    for (int i = 0; i < p; i++)
        if (L->params[i].elems != d->C)
            return clremat_fail(ctx, CLREMAT_ERR_SHAPE, "batchnorm layer %s: parameter %s has %lld elements, the "
                                "last dimension is %lld", L->name, L->params[i].name, (long long)L->params[i].elems,
                                (long long)d->C);
    if ((st = seq_check_int(ctx, L->name, "input", d->rows * d->C)) != CLREMAT_OK)
        return st;
    return CLREMAT_OK;
}

static int bn_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const clremat_layer *L = &g->layers[l];
    bn_dims d;
    int st = bn_dims_of(NULL, L, batch, &d);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 2;
    c->slot_bytes[0] = seq_fbytes(d.rows * d.C);
    c->slot_name[0] = "out";
    c->slot_bytes[1] = seq_fbytes(3 * d.C);
    c->slot_name[1] = "stats";
    c->bwd_needs_inputs = 1u;
    c->bwd_needs_slots = 1u << 1;
    c->act_source = -1;
    c->bwd_temp_bytes = seq_fbytes(2 * d.C);
    c->fwd_flops = 8.0 * (double)d.rows * (double)d.C;
    c->bwd_flops = 10.0 * (double)d.rows * (double)d.C;
    c->param_bytes = seq_param_bytes(L);
    return CLREMAT_OK;
}

static const clremat_buf *opt_param(const clremat_layer_call *c, int i) { return i >= 0 ? c->param[i] : NULL; }

static int bn_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    bn_dims d;
    int64_t n;
    int st = bn_dims_of(c->ctx, L, c->batch, &d);
    if (st != CLREMAT_OK)
        return st;
    n = d.rows * d.C;
    if ((st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], n)) ||
        (st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], n)) ||
        (st = clremat_check_buf(c->ctx, L->name, "stats", c->slot[1], 3 * d.C)))
        return st;
    for (int p = 0; p < L->n_params; p++)
        if ((st = clremat_check_buf(c->ctx, L->name, L->params[p].name, c->param[p], d.C)))
            return st;
    /* training: batch statistics into the stats slot (the moving ones are untouched here) */
    if (!L->bn_eval && (st = clremat_run1d(c->ctx, "bn_stats", d.C, SEQ_I(d.rows), SEQ_I(d.C), SEQ_F(L->eps),
                                           SEQ_M(c->in[0]), SEQ_M(c->slot[1]), SEQ_END)) != CLREMAT_OK)
        return st;
    return clremat_run1d(c->ctx, "bn_apply", n, SEQ_I(n), SEQ_I(d.C), SEQ_I(L->bn_eval != 0), SEQ_F(L->eps),
                         SEQ_M(c->in[0]), SEQ_M(c->slot[1]), SEQ_M(c->param[d.mm]), SEQ_M(c->param[d.mv]),
                         SEQ_M(opt_param(c, d.gamma)), SEQ_M(opt_param(c, d.beta)), SEQ_M(c->slot[0]), SEQ_END);
}

static int bn_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    bn_dims d;
    int64_t n;
    int st = bn_dims_of(c->ctx, L, c->batch, &d);
    if (st != CLREMAT_OK)
        return st;
    n = d.rows * d.C;
    if (L->bn_eval) /* the evaluation graph has no backward; its GEMM-workspace dry run asks anyway */
        return c->ctx->dry_run ? CLREMAT_OK
                               : clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "batchnorm layer %s: no backward in "
                                              "evaluation", L->name);
    if ((st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], n)) ||
        (st = clremat_check_buf(c->ctx, L->name, "stats", c->slot[1], 3 * d.C)) ||
        (st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, n)) ||
        (st = clremat_check_buf(c->ctx, L->name, "workspace", c->temp, 2 * d.C)) ||
        (c->din[0] && (st = clremat_check_buf(c->ctx, L->name, "input grad", c->din[0], n))))
        return st;
    for (int p = 0; p < L->n_params; p++)
        if ((st = clremat_check_buf(c->ctx, L->name, L->params[p].name, c->param[p], d.C)) ||
            (c->grad[p] && (st = clremat_check_buf(c->ctx, L->name, "gradient", c->grad[p], d.C))))
            return st;
    /* sums for dx, the parameter gradients, and the step's one update of the moving statistics */
    st = clremat_run1d(c->ctx, "bn_bwd_reduce", d.C, SEQ_I(d.rows), SEQ_I(d.C), SEQ_M(c->in[0]), SEQ_M(c->slot[1]),
                       SEQ_M(c->dout), SEQ_M(c->temp), SEQ_M(d.gamma >= 0 ? c->grad[d.gamma] : NULL),
                       SEQ_M(d.beta >= 0 ? c->grad[d.beta] : NULL), SEQ_I(c->bn_moving_acc == NULL),
                       SEQ_F(L->momentum), SEQ_M(c->param[d.mm]), SEQ_M(c->param[d.mv]), SEQ_M(c->grad[d.mm]),
                       SEQ_M(c->grad[d.mv]), SEQ_END);
    /* several batches a step: this one's statistics into the step's sums */
    if (st == CLREMAT_OK && c->bn_moving_acc &&
        ((st = clremat_check_buf(c->ctx, L->name, "moving-statistics sums", c->bn_moving_acc, 3 * d.C)) ||
         (st = clremat_run1d(c->ctx, "bn_moving_acc", d.C, SEQ_I(d.C), SEQ_I(c->bn_moving_first != 0),
                             SEQ_M(c->slot[1]), SEQ_M(c->param[d.mm]), SEQ_M(c->bn_moving_acc), SEQ_END))))
        return st;
    if (st != CLREMAT_OK || !c->din[0])
        return st;
    return clremat_run1d(c->ctx, "bn_bwd_dx", n, SEQ_I(n), SEQ_I(d.C), SEQ_I(d.rows), SEQ_I(c->din_accumulate[0] != 0),
                         SEQ_M(c->in[0]), SEQ_M(c->slot[1]), SEQ_M(opt_param(c, d.gamma)), SEQ_M(c->temp),
                         SEQ_M(c->dout), SEQ_M(c->din[0]), SEQ_END);
}

int clremat_bn_moving_finish(clremat_ctx *ctx, const clremat_graph *g, int l, clremat_buf *acc,
                             clremat_buf *const *params, int64_t n_batches)
{
    const clremat_layer *L = &g->layers[l];
    bn_dims d;
    int st = bn_dims_of(ctx, L, 1, &d);
    if (st != CLREMAT_OK)
        return st;
    if ((st = clremat_check_buf(ctx, L->name, "moving-statistics sums", acc, 3 * d.C)))
        return st;
    return clremat_run1d(ctx, "bn_moving_finish", d.C, SEQ_I(d.C), SEQ_F((float)n_batches), SEQ_F(L->momentum),
                         SEQ_M(acc), SEQ_M(params[d.mm]), SEQ_M(params[d.mv]), SEQ_END);
}

const clremat_layer_impl clremat_impl_batchnorm = {bn_cost, bn_forward, bn_backward, NULL};
