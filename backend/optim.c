/* optim.c: optimizer defaults and one update step on the device (SGD with
 * momentum, Adam, AdamW), each a single elementwise kernel of kernels.cl.
 * Adam's bias corrections are computed on the host in double. */
#include "optim.h"
#include "kernel_run.h"
#include <math.h>
#include <string.h>

int clremat_opt_defaults(const char *name, clremat_opt_config *out)
{
    clremat_opt_config c = {CLREMAT_OPT_SGD, 0.01f, 0.9f, 0.9f, 0.999f, 1e-8f, 0.0f};
    if (!name || !out)
        return -1;
    if (strcmp(name, "sgd") == 0) {
        c.kind = CLREMAT_OPT_SGD;
    } else if (strcmp(name, "adam") == 0) {
        c.kind = CLREMAT_OPT_ADAM;
        c.lr = 1e-3f;
    } else if (strcmp(name, "adamw") == 0) {
        c.kind = CLREMAT_OPT_ADAMW;
        c.lr = 1e-3f;
        c.weight_decay = 0.01f;
    } else {
        return -1;
    }
    *out = c;
    return 0;
}

int clremat_opt_state_count(clremat_opt_kind kind)
{
    return kind == CLREMAT_OPT_SGD ? 1 : 2;
}

int clremat_opt_step(clremat_ctx *ctx, const clremat_opt_config *cfg, int64_t t, clremat_buf *param,
                     const clremat_buf *grad, clremat_buf *const state[2], int64_t n)
{
    cl_int in = (cl_int)n;
    cl_mem mp, mg, m0, m1;
    int st;
    if (!cfg || !state)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "optimizer step: no config or state");
    if (n <= 0)
        return CLREMAT_OK;
    if ((st = clremat_check_buf(ctx, "optimizer", "param", param, n)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, "optimizer", "grad", grad, n)) != CLREMAT_OK ||
        (st = clremat_check_buf(ctx, "optimizer", "state 0", state[0], n)) != CLREMAT_OK)
        return st;
    mp = clremat_mem(param);
    mg = clremat_mem(grad);
    m0 = clremat_mem(state[0]);
    switch (cfg->kind) {
    case CLREMAT_OPT_SGD:
        return clremat_run1d(ctx, "clremat_sgd_step", n, sizeof in, &in, sizeof cfg->lr, &cfg->lr,
                             sizeof cfg->momentum, &cfg->momentum, sizeof cfg->weight_decay, &cfg->weight_decay,
                             sizeof mp, &mp, sizeof mg, &mg, sizeof m0, &m0, (size_t)0);
    case CLREMAT_OPT_ADAM:
    case CLREMAT_OPT_ADAMW: {
        cl_int decoupled = cfg->kind == CLREMAT_OPT_ADAMW;
        float bc1, bc2;
        if (t < 1)
            return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "adam step count %lld: must be >= 1",
                                (long long)t);
        if ((st = clremat_check_buf(ctx, "optimizer", "state 1", state[1], n)) != CLREMAT_OK)
            return st;
        bc1 = (float)(1.0 - pow((double)cfg->beta1, (double)t));
        bc2 = (float)(1.0 - pow((double)cfg->beta2, (double)t));
        m1 = clremat_mem(state[1]);
        return clremat_run1d(ctx, "clremat_adam_step", n, sizeof in, &in, sizeof cfg->lr, &cfg->lr,
                             sizeof cfg->beta1, &cfg->beta1, sizeof cfg->beta2, &cfg->beta2, sizeof cfg->eps,
                             &cfg->eps, sizeof cfg->weight_decay, &cfg->weight_decay, sizeof decoupled, &decoupled,
                             sizeof bc1, &bc1, sizeof bc2, &bc2, sizeof mp, &mp, sizeof mg, &mg, sizeof m0, &m0,
                             sizeof m1, &m1, (size_t)0);
    }
    }
    return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "unknown optimizer kind %d", (int)cfg->kind);
}
