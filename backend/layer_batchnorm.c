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
 * batch.
 *
 * The sums over rows are split into fixed blocks of rows (bn_blocks: a
 * function of the row count only), each summed by one work item into
 * partials, then combined in block order: parallel, and the same bits on
 * every run. Workspace: the partials, 2 NB C floats, in the forward
 * (training only) and after the backward's 2 C sums. */
#include "layer_seq.h"

/* Rows, channels, and the parameter indices (-1 when absent). */
typedef struct bn_dims {
    int64_t rows, C;
    int gamma, beta, mm, mv;
} bn_dims;

/* The reductions' blocks: at least BN_MIN_ROWS rows each (so a block's
 * work outweighs its partials), at most BN_MAX_BLOCKS of them. */
enum { BN_MIN_ROWS = 128, BN_MAX_BLOCKS = 1024, BN_ROWS_PER_ITEM = 16 };

/* Rows per block and number of blocks for R rows (R >= 1). */
static void bn_blocks(int64_t R, int64_t *rb, int64_t *nb)
{
    int64_t b = (R + BN_MAX_BLOCKS - 1) / BN_MAX_BLOCKS;
    *rb = b > BN_MIN_ROWS ? b : BN_MIN_ROWS;
    *nb = (R + *rb - 1) / *rb;
}

/* A bound on the blocks of any row count up to R (non-decreasing in R, so
 * the workspace sized at the allocation batch holds a smaller batch's). */
static int64_t bn_blocks_max(int64_t R)
{
    const int64_t n = (R + BN_MIN_ROWS - 1) / BN_MIN_ROWS;
    return n < BN_MAX_BLOCKS ? n : BN_MAX_BLOCKS;
}

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
    /* the partials of the reductions; the backward's 2 C sums before them */
    c->fwd_temp_bytes = L->bn_eval ? 0 : seq_fbytes(2 * bn_blocks_max(d.rows) * d.C);
    c->bwd_temp_bytes = seq_fbytes(2 * d.C + 2 * bn_blocks_max(d.rows) * d.C);
    c->fwd_flops = 8.0 * (double)d.rows * (double)d.C;
    c->bwd_flops = 10.0 * (double)d.rows * (double)d.C;
    c->param_bytes = seq_param_bytes(L);
    return CLREMAT_OK;
}

static const clremat_buf *opt_param(const clremat_layer_call *c, int i) { return i >= 0 ? c->param[i] : NULL; }

/* Global size of the per-block kernels (channel groups of 8, blocks) and
 * of the elementwise ones (channel groups, BN_ROWS_PER_ITEM rows each). */
static void bn_grid(const bn_dims *d, int64_t nb, size_t gl[2])
{
    gl[0] = (size_t)((d->C + 7) / 8);
    gl[1] = (size_t)nb;
}

static int bn_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    bn_dims d;
    int64_t n, rb, nb;
    size_t gl[2];
    int st = bn_dims_of(c->ctx, L, c->batch, &d);
    if (st != CLREMAT_OK)
        return st;
    n = d.rows * d.C;
    bn_blocks(d.rows, &rb, &nb);
    if ((st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], n)) ||
        (st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], n)) ||
        (st = clremat_check_buf(c->ctx, L->name, "stats", c->slot[1], 3 * d.C)) ||
        (!L->bn_eval && (st = clremat_check_buf(c->ctx, L->name, "workspace", c->temp, 2 * nb * d.C))))
        return st;
    for (int p = 0; p < L->n_params; p++)
        if ((st = clremat_check_buf(c->ctx, L->name, L->params[p].name, c->param[p], d.C)))
            return st;
    /* training: batch statistics into the stats slot (the moving ones are untouched here) */
    bn_grid(&d, nb, gl);
    if (!L->bn_eval &&
        ((st = clremat_run(c->ctx, "bn_stats_part", 2, gl, NULL, SEQ_I(d.rows), SEQ_I(d.C), SEQ_I(rb),
                           SEQ_I(nb), SEQ_M(c->in[0]), SEQ_M(c->temp), SEQ_END)) ||
         (st = clremat_run1d(c->ctx, "bn_stats_finish", d.C, SEQ_I(d.rows), SEQ_I(d.C), SEQ_I(rb), SEQ_I(nb),
                             SEQ_F(L->eps), SEQ_M(c->temp), SEQ_M(c->slot[1]), SEQ_END))))
        return st;
    bn_grid(&d, (d.rows + BN_ROWS_PER_ITEM - 1) / BN_ROWS_PER_ITEM, gl);
    return clremat_run(c->ctx, "bn_apply", 2, gl, NULL, SEQ_I(d.rows), SEQ_I(d.C), SEQ_I(BN_ROWS_PER_ITEM),
                       SEQ_I(L->bn_eval != 0), SEQ_F(L->eps), SEQ_M(c->in[0]), SEQ_M(c->slot[1]),
                       SEQ_M(c->param[d.mm]), SEQ_M(c->param[d.mv]), SEQ_M(opt_param(c, d.gamma)),
                       SEQ_M(opt_param(c, d.beta)), SEQ_M(c->slot[0]), SEQ_END);
}

static int bn_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    bn_dims d;
    int64_t n, rb, nb;
    size_t gl[2];
    int st = bn_dims_of(c->ctx, L, c->batch, &d);
    if (st != CLREMAT_OK)
        return st;
    n = d.rows * d.C;
    bn_blocks(d.rows, &rb, &nb);
    if (L->bn_eval) /* the evaluation graph has no backward; its GEMM-workspace dry run asks anyway */
        return c->ctx->dry_run ? CLREMAT_OK
                               : clremat_fail(c->ctx, CLREMAT_ERR_INTERNAL, "batchnorm layer %s: no backward in "
                                              "evaluation", L->name);
    if ((st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], n)) ||
        (st = clremat_check_buf(c->ctx, L->name, "stats", c->slot[1], 3 * d.C)) ||
        (st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, n)) ||
        (st = clremat_check_buf(c->ctx, L->name, "workspace", c->temp, 2 * d.C + 2 * nb * d.C)) ||
        (c->din[0] && (st = clremat_check_buf(c->ctx, L->name, "input grad", c->din[0], n))))
        return st;
    for (int p = 0; p < L->n_params; p++)
        if ((st = clremat_check_buf(c->ctx, L->name, L->params[p].name, c->param[p], d.C)) ||
            (c->grad[p] && (st = clremat_check_buf(c->ctx, L->name, "gradient", c->grad[p], d.C))))
            return st;
    /* sums for dx, the parameter gradients, and the step's one update of the moving statistics */
    bn_grid(&d, nb, gl);
    if ((st = clremat_run(c->ctx, "bn_bwd_part", 2, gl, NULL, SEQ_I(d.rows), SEQ_I(d.C), SEQ_I(rb), SEQ_I(nb),
                          SEQ_M(c->in[0]), SEQ_M(c->slot[1]), SEQ_M(c->dout), SEQ_M(c->temp), SEQ_END)) != CLREMAT_OK)
        return st;
    st = clremat_run1d(c->ctx, "bn_bwd_finish", d.C, SEQ_I(d.C), SEQ_I(nb), SEQ_M(c->slot[1]), SEQ_M(c->temp),
                       SEQ_M(d.gamma >= 0 ? c->grad[d.gamma] : NULL), SEQ_M(d.beta >= 0 ? c->grad[d.beta] : NULL),
                       SEQ_I(c->bn_moving_acc == NULL), SEQ_F(L->momentum), SEQ_M(c->param[d.mm]),
                       SEQ_M(c->param[d.mv]), SEQ_M(c->grad[d.mm]), SEQ_M(c->grad[d.mv]), SEQ_END);
    /* several batches a step: this one's statistics into the step's sums */
    if (st == CLREMAT_OK && c->bn_moving_acc &&
        ((st = clremat_check_buf(c->ctx, L->name, "moving-statistics sums", c->bn_moving_acc, 3 * d.C)) ||
         (st = clremat_run1d(c->ctx, "bn_moving_acc", d.C, SEQ_I(d.C), SEQ_I(c->bn_moving_first != 0),
                             SEQ_M(c->slot[1]), SEQ_M(c->param[d.mm]), SEQ_M(c->bn_moving_acc), SEQ_END))))
        return st;
    if (st != CLREMAT_OK || !c->din[0])
        return st;
    bn_grid(&d, (d.rows + BN_ROWS_PER_ITEM - 1) / BN_ROWS_PER_ITEM, gl);
    return clremat_run(c->ctx, "bn_bwd_dx", 2, gl, NULL, SEQ_I(d.rows), SEQ_I(d.C), SEQ_I(BN_ROWS_PER_ITEM),
                       SEQ_I(c->din_accumulate[0] != 0), SEQ_M(c->in[0]), SEQ_M(c->slot[1]),
                       SEQ_M(opt_param(c, d.gamma)), SEQ_M(c->temp), SEQ_M(c->dout), SEQ_M(c->din[0]), SEQ_END);
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

const clremat_layer_impl clremat_impl_batchnorm = {bn_cost, bn_forward, bn_backward, NULL, NULL};
