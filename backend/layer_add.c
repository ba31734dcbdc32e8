/* layer_add.c: y = a + b. b's per-sample shape equals a's or is a suffix of
 * it; a suffix b is broadcast over a's leading dimensions within each
 * sample (b holds batch * elems(b) floats, like every tensor). The backward
 * needs nothing saved: da = dout, db = dout or, for a broadcast b, dout
 * summed over the leading dimensions in a fixed order. */
#include "layer_impl.h"
#include "kernel_run.h"

/* Per-sample element counts of a and b; checks the suffix rule. */
static int add_dims(clremat_ctx *ctx, const clremat_layer *L, int64_t *ea, int64_t *eb)
{
    const clremat_shape *a = &L->in_shape[0], *b = &L->in_shape[1];
    int ok = L->n_inputs == 2 && b->rank <= a->rank;
    for (int i = 0; ok && i < b->rank; i++)
        ok = b->dims[b->rank - 1 - i] == a->dims[a->rank - 1 - i];
    *ea = clremat_elems_of(a);
    *eb = clremat_elems_of(b);
    if (!ok || *eb <= 0 || *ea % *eb != 0)
        return clremat_fail(ctx, CLREMAT_ERR_SHAPE,
                            "add layer %s: second input's shape is neither the first's nor a suffix of it", L->name);
    return CLREMAT_OK;
}

static int add_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const clremat_layer *L = &g->layers[l];
    int64_t ea, eb;
    int st = add_dims(NULL, L, &ea, &eb);
    if (st != CLREMAT_OK)
        return st;
    c->n_slots = 1;
    c->slot_bytes[0] = (size_t)(batch * ea) * sizeof(float);
    c->slot_name[0] = "out";
    c->act_source = -1;
    c->fwd_flops = (double)(batch * ea);
    c->bwd_flops = (double)(batch * ea);
    return CLREMAT_OK;
}

static int add_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t ea, eb;
    cl_int n, iea, ieb;
    cl_mem ma, mb, my;
    int st = add_dims(c->ctx, L, &ea, &eb);
    if (st != CLREMAT_OK)
        return st;
    if ((st = clremat_check_buf(c->ctx, L->name, "first input", c->in[0], c->batch * ea)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "second input", c->in[1], c->batch * eb)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], c->batch * ea)) != CLREMAT_OK)
        return st;
    n = (cl_int)(c->batch * ea);
    iea = (cl_int)ea;
    ieb = (cl_int)eb;
    ma = clremat_mem(c->in[0]);
    mb = clremat_mem(c->in[1]);
    my = clremat_mem(c->slot[0]);
    if (eb == ea) /* no broadcast: eight floats per work-item, the same sums */
        return clremat_run1d(c->ctx, "clremat_add8", (c->batch * ea + 7) / 8, sizeof n, &n, sizeof ma, &ma,
                             sizeof mb, &mb, sizeof my, &my, (size_t)0);
    return clremat_run1d(c->ctx, "clremat_add_bcast", c->batch * ea, sizeof n, &n, sizeof iea, &iea, sizeof ieb,
                         &ieb, sizeof ma, &ma, sizeof mb, &mb, sizeof my, &my, (size_t)0);
}

static int add_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    int64_t ea, eb;
    cl_mem md;
    int st = add_dims(c->ctx, L, &ea, &eb);
    if (st != CLREMAT_OK)
        return st;
    if ((st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, c->batch * ea)) != CLREMAT_OK)
        return st;
    md = clremat_mem(c->dout);
    for (int i = 0; i < 2; i++) {
        const int64_t e = i == 0 ? ea : eb;
        cl_int n = (cl_int)(c->batch * e), iea = (cl_int)ea, ieb = (cl_int)eb, acc = c->din_accumulate[i] ? 1 : 0;
        cl_mem mx;
        if (!c->din[i])
            continue;
        if ((st = clremat_check_buf(c->ctx, L->name, i == 0 ? "first input grad" : "second input grad", c->din[i],
                                    c->batch * e)) != CLREMAT_OK)
            return st;
        mx = clremat_mem(c->din[i]);
        if (e == ea)
            st = clremat_run1d(c->ctx, "clremat_copy_acc8", (c->batch * e + 7) / 8, sizeof n, &n, sizeof acc,
                               &acc, sizeof mx, &mx, sizeof md, &md, (size_t)0);
        else
            st = clremat_run1d(c->ctx, "clremat_sum_bcast", c->batch * e, sizeof n, &n, sizeof iea, &iea,
                               sizeof ieb, &ieb, sizeof acc, &acc, sizeof md, &md, sizeof mx, &mx, (size_t)0);
        if (st != CLREMAT_OK)
            return st;
    }
    return CLREMAT_OK;
}

const clremat_layer_impl clremat_impl_add = {add_cost, add_forward, add_backward, NULL, NULL};
