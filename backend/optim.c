/* optim.c: optimizer defaults, hyperparameter checks, and one update step on
 * the device (SGD with momentum, Adam, AdamW), each a single elementwise
 * kernel of kernels.cl (eight floats per work-item, through clremat_opt8,
 * which the updates fused into the backward share: backend/fused_update.c).
 * Adam's bias corrections are computed on the host in double. */
#include "optim.h"
#include "kernel_run.h"
#include <math.h>
#include <stddef.h>
#include <string.h>

int clremat_opt_defaults(const char *name, clremat_opt_config *out)
{
    clremat_opt_config c = {CLREMAT_OPT_SGD, 0.01f, 0.9f, 0.9f, 0.999f, 1e-8f, 0.0f, 0};
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

const char *clremat_opt_name(clremat_opt_kind kind)
{
    switch (kind) {
    case CLREMAT_OPT_SGD: return "sgd";
    case CLREMAT_OPT_ADAM: return "adam";
    case CLREMAT_OPT_ADAMW: return "adamw";
    }
    return "?";
}

int clremat_opt_uses(clremat_opt_kind kind, unsigned bit)
{
    switch (bit) {
    case CLREMAT_OPT_SET_LR:
    case CLREMAT_OPT_SET_WEIGHT_DECAY:
        return 1;
    case CLREMAT_OPT_SET_MOMENTUM:
        return kind == CLREMAT_OPT_SGD;
    case CLREMAT_OPT_SET_BETA1:
    case CLREMAT_OPT_SET_BETA2:
    case CLREMAT_OPT_SET_EPS:
        return kind == CLREMAT_OPT_ADAM || kind == CLREMAT_OPT_ADAMW;
    }
    return 0;
}

/* The hyperparameters by bit: name, who uses them, the range as text, and
 * where the value lives in a config. */
static const struct {
    unsigned bit;
    const char *name, *users, *range;
    size_t off;
} hparams[] = {
    {CLREMAT_OPT_SET_LR, "lr", "every optimizer", "a positive finite number", offsetof(clremat_opt_config, lr)},
    {CLREMAT_OPT_SET_MOMENTUM, "momentum", "sgd", "in [0, 1)", offsetof(clremat_opt_config, momentum)},
    {CLREMAT_OPT_SET_BETA1, "beta1", "adam and adamw", "in [0, 1)", offsetof(clremat_opt_config, beta1)},
    {CLREMAT_OPT_SET_BETA2, "beta2", "adam and adamw", "in [0, 1)", offsetof(clremat_opt_config, beta2)},
    {CLREMAT_OPT_SET_EPS, "epsilon", "adam and adamw", "a positive finite number", offsetof(clremat_opt_config, eps)},
    {CLREMAT_OPT_SET_WEIGHT_DECAY, "weight_decay", "every optimizer", "a finite number >= 0",
     offsetof(clremat_opt_config, weight_decay)},
};

static int hparam_index(unsigned bit)
{
    for (size_t i = 0; i < sizeof hparams / sizeof hparams[0]; i++)
        if (hparams[i].bit == bit)
            return (int)i;
    return -1;
}

int clremat_opt_check(unsigned bit, float v, const char *name)
{
    int i = hparam_index(bit), ok;
    if (i < 0)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "clremat_opt_check: unknown hyperparameter bit 0x%x",
                                 bit);
    switch (bit) {
    case CLREMAT_OPT_SET_MOMENTUM:
    case CLREMAT_OPT_SET_BETA1:
    case CLREMAT_OPT_SET_BETA2:
        ok = v >= 0.0f && v < 1.0f;
        break;
    case CLREMAT_OPT_SET_WEIGHT_DECAY:
        ok = v >= 0.0f && isfinite(v);
        break;
    default: /* lr, epsilon */
        ok = v > 0.0f && isfinite(v);
        break;
    }
    if (!ok)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s must be %s, got %g", name ? name : hparams[i].name,
                                 hparams[i].range, (double)v);
    return CLREMAT_OK;
}

int clremat_opt_apply(clremat_opt_config *cfg, unsigned set, const clremat_opt_config *values)
{
    clremat_opt_config c;
    if (!cfg || (set && !values))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "clremat_opt_apply: NULL argument");
    if (set & ~(unsigned)0x3f)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "clremat_opt_apply: unknown bits 0x%x in set",
                                 set & ~(unsigned)0x3f);
    c = *cfg;
    for (size_t i = 0; i < sizeof hparams / sizeof hparams[0]; i++) {
        float v;
        int st;
        if (!(set & hparams[i].bit))
            continue;
        memcpy(&v, (const char *)values + hparams[i].off, sizeof v);
        if (!clremat_opt_uses(c.kind, hparams[i].bit))
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s applies to %s, not to %s (got %g)",
                                     hparams[i].name, hparams[i].users, clremat_opt_name(c.kind), (double)v);
        if ((st = clremat_opt_check(hparams[i].bit, v, NULL)))
            return st;
        memcpy((char *)&c + hparams[i].off, &v, sizeof v);
    }
    *cfg = c;
    return CLREMAT_OK;
}

int clremat_opt_state_count(clremat_opt_kind kind)
{
    return kind == CLREMAT_OPT_SGD ? 1 : 2;
}

int clremat_opt_step(clremat_ctx *ctx, const clremat_opt_config *cfg, int64_t t, clremat_buf *param,
                     const clremat_buf *grad, clremat_buf *const state[2], int64_t n)
{
    return clremat_opt_step_unless(ctx, cfg, t, param, grad, state, n, NULL);
}

int clremat_opt_step_unless(clremat_ctx *ctx, const clremat_opt_config *cfg, int64_t t, clremat_buf *param,
                            const clremat_buf *grad, clremat_buf *const state[2], int64_t n,
                            const clremat_buf *skip)
{
    cl_int in = (cl_int)n;
    cl_mem mp, mg, m0, m1, ms = skip ? clremat_mem(skip) : NULL; /* a NULL buffer argument: no skip */
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
        return clremat_run1d(ctx, "clremat_sgd_step", (n + 7) / 8, sizeof in, &in, sizeof cfg->lr, &cfg->lr,
                             sizeof cfg->momentum, &cfg->momentum, sizeof cfg->weight_decay, &cfg->weight_decay,
                             sizeof mp, &mp, sizeof mg, &mg, sizeof m0, &m0, sizeof ms, &ms, (size_t)0);
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
        return clremat_run1d(ctx, "clremat_adam_step", (n + 7) / 8, sizeof in, &in, sizeof cfg->lr, &cfg->lr,
                             sizeof cfg->beta1, &cfg->beta1, sizeof cfg->beta2, &cfg->beta2, sizeof cfg->eps,
                             &cfg->eps, sizeof cfg->weight_decay, &cfg->weight_decay, sizeof decoupled, &decoupled,
                             sizeof bc1, &bc1, sizeof bc2, &bc2, sizeof mp, &mp, sizeof mg, &mg, sizeof m0, &m0,
                             sizeof m1, &m1, sizeof ms, &ms, (size_t)0);
    }
    }
    return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "unknown optimizer kind %d", (int)cfg->kind);
}
