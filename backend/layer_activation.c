/* layer_activation.c: the activation layer, y = act(x), with relu, gelu
 * (tanh approximation), gelu_exact (erf), tanh, sigmoid and silu. The
 * backward computes the derivative from the layer's input; the output can be
 * recomputed from the input by the forward kernel alone. */
#include "layer_impl.h"
#include "kernel_run.h"

static int64_t act_elems(const clremat_layer *L, int64_t batch)
{
    return batch * clremat_elems_of(&L->in_shape[0]);
}

static int act_cost(const clremat_graph *g, int l, int64_t batch, clremat_layer_cost *c)
{
    const clremat_layer *L = &g->layers[l];
    const int64_t n = act_elems(L, batch);
    c->n_slots = 1;
    c->slot_bytes[0] = (size_t)n * sizeof(float);
    c->slot_name[0] = "out";
    c->bwd_needs_inputs = 1u;
    c->bwd_needs_slots = 0;
    c->act_source = 0;
    c->act_from_input = 1;
    c->fwd_flops = (double)n;
    c->bwd_flops = (double)n;
    c->param_bytes = 0;
    return CLREMAT_OK;
}

static int act_forward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int64_t n = act_elems(L, c->batch);
    cl_int in = (cl_int)n, act = (cl_int)L->act;
    cl_mem mx, my;
    int st;
    if ((st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], n)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "out", c->slot[0], n)) != CLREMAT_OK)
        return st;
    mx = clremat_mem(c->in[0]);
    my = clremat_mem(c->slot[0]);
    return clremat_run1d(c->ctx, clremat_ew_name(c->ctx, act, "clremat_act_fwdw", "clremat_act_fwd8"),
                         clremat_ew_items(c->ctx, act, n), sizeof in, &in, sizeof act, &act, sizeof mx, &mx, sizeof my,
                         &my, (size_t)0);
}

static int act_backward(clremat_layer_call *c)
{
    const clremat_layer *L = &c->g->layers[c->layer];
    const int64_t n = act_elems(L, c->batch);
    int st;
    if (!c->din[0])
        return CLREMAT_OK;
    if ((st = clremat_check_buf(c->ctx, L->name, "input", c->in[0], n)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "dout", c->dout, n)) != CLREMAT_OK ||
        (st = clremat_check_buf(c->ctx, L->name, "input grad", c->din[0], n)) != CLREMAT_OK)
        return st;
    return clremat_op_act_backward(c->ctx, (int)L->act, n, c->in[0], c->dout, c->din[0], c->din_accumulate[0]);
}

const clremat_layer_impl clremat_impl_activation = {act_cost, act_forward, act_backward, act_forward, NULL};
