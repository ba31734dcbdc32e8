/* test_optim.c: optimizer defaults and SGD/Adam/AdamW steps on the device
 * against a double-precision host reference over several steps (with and
 * without weight decay), the step the device skips on a non-finite count
 * (clremat_opt_step_unless), plus the executor's elementwise ops
 * (add_inplace, count_nonfinite). Skips (77) without a device. */
#include "testutil.h"
#include "layers.h"
#include "optim.h"
#include <math.h>
#include <string.h>

enum { N = 1037, STEPS = 5 };

/* Host reference of one step, in double. */
static void ref_step(const clremat_opt_config *c, int64_t t, double *p, const double *g, double *s0, double *s1)
{
    for (int i = 0; i < N; i++) {
        if (c->kind == CLREMAT_OPT_SGD) {
            double gi = g[i] + (double)c->weight_decay * p[i];
            s0[i] = (double)c->momentum * s0[i] + gi;
            p[i] -= (double)c->lr * s0[i];
        } else {
            int dec = c->kind == CLREMAT_OPT_ADAMW;
            double gi = dec ? g[i] : g[i] + (double)c->weight_decay * p[i];
            double b1 = c->beta1, b2 = c->beta2, upd;
            s0[i] = b1 * s0[i] + (1 - b1) * gi;
            s1[i] = b2 * s1[i] + (1 - b2) * gi * gi;
            upd = (s0[i] / (1 - pow(b1, (double)t))) / (sqrt(s1[i] / (1 - pow(b2, (double)t))) + c->eps);
            if (dec)
                upd += (double)c->weight_decay * p[i];
            p[i] -= (double)c->lr * upd;
        }
    }
}

/* Steps optimizer name, with the hyperparameters of values whose bits are
 * in set applied over its defaults (lr 0.05 unless set), against the host
 * reference. */
static void check_optimizer_hp(const char *name, unsigned set, const clremat_opt_config *values)
{
    clremat_ctx *ctx;
    clremat_opt_config cfg;
    clremat_buf *bp, *bg, *st[2] = {NULL, NULL};
    static float hp[N], hg[N], out[N];
    static double rp[N], rg[N], r0[N], r1[N];
    float wd;
    int ns;
    ck_assert_int_eq(clremat_opt_defaults(name, &cfg), 0);
    cfg.lr = 0.05f;
    ck_assert_msg(clremat_opt_apply(&cfg, set, values) == CLREMAT_OK, "%s", clremat_last_error());
    wd = cfg.weight_decay;
    ns = clremat_opt_state_count(cfg.kind);
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hp, "p", &bp), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hg, "g", &bg), CLREMAT_OK);
    for (int s = 0; s < ns; s++) {
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hp, "state", &st[s]), CLREMAT_OK);
        ck_assert_int_eq(clremat_zero(ctx, st[s]), CLREMAT_OK);
    }
    for (int i = 0; i < N; i++) {
        hp[i] = sinf((float)i * 0.37f);
        rp[i] = hp[i];
        r0[i] = r1[i] = 0;
    }
    ck_assert_int_eq(clremat_write(ctx, bp, 0, sizeof hp, hp), CLREMAT_OK);
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++) {
            hg[i] = cosf((float)(i * t) * 0.11f) * (i % 7 == 0 ? 1e-3f : 1.0f);
            rg[i] = hg[i];
        }
        ck_assert_int_eq(clremat_write(ctx, bg, 0, sizeof hg, hg), CLREMAT_OK);
        ck_assert_int_eq(clremat_opt_step(ctx, &cfg, t, bp, bg, st, N), CLREMAT_OK);
        ref_step(&cfg, t, rp, rg, r0, r1);
    }
    ck_assert_int_eq(clremat_read(ctx, bp, 0, sizeof out, out), CLREMAT_OK);
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabs(out[i] - rp[i]) <= 2e-5 * (1 + fabs(rp[i])), "%s wd=%g: p[%d] = %.9g, reference %.9g",
                      name, wd, i, out[i], rp[i]);
    /* the parameters moved */
    ck_assert(fabs(rp[1] - sin(0.37)) > 1e-3);
    ck_assert_int_eq(clremat_read(ctx, st[0], 0, sizeof out, out), CLREMAT_OK);
    for (int i = 0; i < N; i++)
        ck_assert(fabs(out[i] - r0[i]) <= 2e-5 * (1 + fabs(r0[i])));
    clremat_pool_release(ctx->pool, bp);
    clremat_pool_release(ctx->pool, bg);
    for (int s = 0; s < ns; s++)
        clremat_pool_release(ctx->pool, st[s]);
    clremat_ctx_destroy(ctx);
}

static void check_optimizer(const char *name, float wd)
{
    clremat_opt_config v = {CLREMAT_OPT_SGD, 0, 0, 0, 0, 0, wd, 0};
    check_optimizer_hp(name, CLREMAT_OPT_SET_WEIGHT_DECAY, &v);
}

START_TEST(test_defaults)
{
    clremat_opt_config c;
    ck_assert_int_eq(clremat_opt_defaults("sgd", &c), 0);
    ck_assert_int_eq(c.kind, CLREMAT_OPT_SGD);
    ck_assert_float_eq(c.momentum, 0.9f);
    ck_assert_int_eq(clremat_opt_state_count(c.kind), 1);
    ck_assert_int_eq(clremat_opt_defaults("adam", &c), 0);
    ck_assert_int_eq(c.kind, CLREMAT_OPT_ADAM);
    ck_assert_float_eq(c.beta2, 0.999f);
    ck_assert_float_eq(c.weight_decay, 0.0f);
    ck_assert_int_eq(clremat_opt_defaults("adamw", &c), 0);
    ck_assert_int_eq(c.kind, CLREMAT_OPT_ADAMW);
    ck_assert_float_eq(c.weight_decay, 0.01f);
    ck_assert_int_eq(clremat_opt_state_count(c.kind), 2);
    ck_assert_int_eq(clremat_opt_defaults("rmsprop", &c), -1);
}
END_TEST

START_TEST(test_sgd) { check_optimizer("sgd", 0.0f); check_optimizer("sgd", 0.1f); }
END_TEST
START_TEST(test_adam) { check_optimizer("adam", 0.0f); check_optimizer("adam", 0.1f); }
END_TEST
START_TEST(test_adamw) { check_optimizer("adamw", 0.01f); check_optimizer("adamw", 0.3f); }
END_TEST

/* Every hyperparameter at a value other than its default reaches the
 * kernel: the device matches the reference computed with that value (a
 * launcher that kept the default would not). */
START_TEST(test_nondefault_hparams)
{
    clremat_opt_config v = {CLREMAT_OPT_SGD, 0.02f, 0.5f, 0.7f, 0.95f, 1e-2f, 0.05f, 0};
    check_optimizer_hp("sgd", CLREMAT_OPT_SET_LR | CLREMAT_OPT_SET_MOMENTUM | CLREMAT_OPT_SET_WEIGHT_DECAY, &v);
    check_optimizer_hp("sgd", CLREMAT_OPT_SET_MOMENTUM, &(clremat_opt_config){CLREMAT_OPT_SGD, 0, 0.0f, 0, 0, 0, 0, 0});
    check_optimizer_hp("adam", CLREMAT_OPT_SET_BETA1 | CLREMAT_OPT_SET_BETA2 | CLREMAT_OPT_SET_EPS, &v);
    check_optimizer_hp("adamw", CLREMAT_OPT_SET_BETA1 | CLREMAT_OPT_SET_BETA2 | CLREMAT_OPT_SET_EPS |
                                    CLREMAT_OPT_SET_WEIGHT_DECAY, &v);
}
END_TEST

/* clremat_opt_apply refuses what an optimizer does not use and values out
 * of range, naming them, and leaves the config unchanged then. */
START_TEST(test_apply_refusals)
{
    static const struct {
        const char *opt;
        unsigned set;
        clremat_opt_config v;
        const char *want;
    } bad[] = {
        {"sgd", CLREMAT_OPT_SET_BETA1, {CLREMAT_OPT_SGD, 0, 0, 0.5f, 0, 0, 0, 0}, "beta1 applies to adam and adamw, not to sgd"},
        {"sgd", CLREMAT_OPT_SET_BETA2, {CLREMAT_OPT_SGD, 0, 0, 0, 0.5f, 0, 0, 0}, "beta2 applies"},
        {"sgd", CLREMAT_OPT_SET_EPS, {CLREMAT_OPT_SGD, 0, 0, 0, 0, 1e-3f, 0, 0}, "epsilon applies"},
        {"adam", CLREMAT_OPT_SET_MOMENTUM, {CLREMAT_OPT_SGD, 0, 0.5f, 0, 0, 0, 0, 0}, "momentum applies to sgd, not to adam"},
        {"adamw", CLREMAT_OPT_SET_MOMENTUM, {CLREMAT_OPT_SGD, 0, 0.5f, 0, 0, 0, 0, 0}, "not to adamw"},
        {"sgd", CLREMAT_OPT_SET_MOMENTUM, {CLREMAT_OPT_SGD, 0, 1.0f, 0, 0, 0, 0, 0}, "momentum must be in [0, 1), got 1"},
        {"sgd", CLREMAT_OPT_SET_MOMENTUM, {CLREMAT_OPT_SGD, 0, -0.1f, 0, 0, 0, 0, 0}, "got -0.1"},
        {"adam", CLREMAT_OPT_SET_BETA1, {CLREMAT_OPT_SGD, 0, 0, 1.5f, 0, 0, 0, 0}, "beta1 must be in [0, 1), got 1.5"},
        {"adam", CLREMAT_OPT_SET_BETA2, {CLREMAT_OPT_SGD, 0, 0, 0, NAN, 0, 0, 0}, "beta2 must be"},
        {"adam", CLREMAT_OPT_SET_EPS, {CLREMAT_OPT_SGD, 0, 0, 0, 0, 0.0f, 0, 0}, "epsilon must be a positive"},
        {"adam", CLREMAT_OPT_SET_EPS, {CLREMAT_OPT_SGD, 0, 0, 0, 0, INFINITY, 0, 0}, "epsilon must be"},
        {"adamw", CLREMAT_OPT_SET_WEIGHT_DECAY, {CLREMAT_OPT_SGD, 0, 0, 0, 0, 0, -1.0f, 0}, "weight_decay must be"},
        {"sgd", CLREMAT_OPT_SET_LR, {CLREMAT_OPT_SGD, 0, 0, 0, 0, 0, 0, 0}, "lr must be a positive"},
        {"sgd", 0x40u, {CLREMAT_OPT_SGD, 0, 0, 0, 0, 0, 0, 0}, "unknown bits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        clremat_opt_config c, before;
        ck_assert_int_eq(clremat_opt_defaults(bad[i].opt, &c), 0);
        before = c;
        ck_assert_int_eq(clremat_opt_apply(&c, bad[i].set, &bad[i].v), CLREMAT_ERR_INVALID_ARGUMENT);
        ck_assert_msg(strstr(clremat_last_error(), bad[i].want), "case %zu: '%s' lacks '%s'", i,
                      clremat_last_error(), bad[i].want);
        ck_assert_int_eq(memcmp(&c, &before, sizeof c), 0);
    }
    /* what applies is taken; boundaries included where the range says so */
    {
        clremat_opt_config c, v = {CLREMAT_OPT_SGD, 0.5f, 0.0f, 0.0f, 0.0f, 1e-30f, 0.0f, 0};
        ck_assert_int_eq(clremat_opt_defaults("adamw", &c), 0);
        ck_assert_int_eq(clremat_opt_apply(&c, CLREMAT_OPT_SET_LR | CLREMAT_OPT_SET_BETA1 | CLREMAT_OPT_SET_BETA2 |
                                                   CLREMAT_OPT_SET_EPS | CLREMAT_OPT_SET_WEIGHT_DECAY, &v),
                         CLREMAT_OK);
        ck_assert_int_eq(c.kind, CLREMAT_OPT_ADAMW);
        ck_assert_float_eq(c.lr, 0.5f);
        ck_assert_float_eq(c.beta1, 0.0f);
        ck_assert_float_eq(c.eps, 1e-30f);
        ck_assert_float_eq(c.weight_decay, 0.0f);
        ck_assert_float_eq(c.momentum, 0.9f); /* untouched */
    }
    ck_assert_str_eq(clremat_opt_name(CLREMAT_OPT_SGD), "sgd");
    ck_assert_str_eq(clremat_opt_name(CLREMAT_OPT_ADAMW), "adamw");
}
END_TEST

/* clremat_opt_check: one value against its range under the caller's name
 * (how a file format reports its own field) */
START_TEST(test_check_one_value)
{
    ck_assert_int_eq(clremat_opt_check(CLREMAT_OPT_SET_LR, 1e-3f, "learning_rate"), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_check(CLREMAT_OPT_SET_BETA2, 0.0f, NULL), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_check(CLREMAT_OPT_SET_LR, 0.0f, "learning_rate"), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(clremat_last_error(), "learning_rate must be a positive finite number, got 0");
    ck_assert_int_eq(clremat_opt_check(CLREMAT_OPT_SET_BETA1, 1.0f, NULL), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(clremat_last_error(), "beta1 must be in [0, 1), got 1");
    ck_assert_int_eq(clremat_opt_check(CLREMAT_OPT_SET_WEIGHT_DECAY, INFINITY, "wd"), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(clremat_last_error(), "wd must be a finite number >= 0, got inf");
    ck_assert_int_eq(clremat_opt_check(0x3u, 0.5f, NULL), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(clremat_last_error(), "unknown hyperparameter bit 0x3"), "%s", clremat_last_error());
}
END_TEST

START_TEST(test_elementwise)
{
    enum { M = 70000 };
    clremat_ctx *ctx;
    clremat_buf *a, *b;
    static float ha[M], hb[M], out[M];
    int64_t cnt = -1;
    TEST_OPEN_CTX(ctx, 0);
    for (int i = 0; i < M; i++) {
        ha[i] = (float)i * 0.25f;
        hb[i] = 1.0f - (float)i;
    }
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof ha, "a", &a), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hb, "b", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, a, 0, sizeof ha, ha), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, b, 0, sizeof hb, hb), CLREMAT_OK);
    ck_assert_int_eq(clremat_op_add_inplace(ctx, a, b, M - 1), CLREMAT_OK);
    ck_assert_int_eq(clremat_read(ctx, a, 0, sizeof out, out), CLREMAT_OK);
    for (int i = 0; i < M - 1; i++)
        ck_assert_float_eq(out[i], ha[i] + hb[i]);
    ck_assert_float_eq(out[M - 1], ha[M - 1]);
    ck_assert_int_eq(clremat_op_count_nonfinite(ctx, a, M, &cnt), CLREMAT_OK);
    ck_assert_int_eq(cnt, 0);
    out[3] = NAN;
    out[M - 1] = INFINITY;
    out[40000] = -INFINITY;
    ck_assert_int_eq(clremat_write(ctx, a, 0, sizeof out, out), CLREMAT_OK);
    ck_assert_int_eq(clremat_op_count_nonfinite(ctx, a, M, &cnt), CLREMAT_OK);
    ck_assert_int_eq(cnt, 3);
    ck_assert_int_eq(clremat_op_count_nonfinite(ctx, a, M - 1, &cnt), CLREMAT_OK);
    ck_assert_int_eq(cnt, 2);
    /* the counter's buffer went back to the pool */
    ck_assert_uint_eq(clremat_pool_get_stats(ctx->pool).live_bytes, 2 * sizeof ha);
    ck_assert_int_eq(clremat_op_add_inplace(ctx, a, b, M + 1), CLREMAT_ERR_INVALID_ARGUMENT);
    clremat_pool_release(ctx->pool, a);
    clremat_pool_release(ctx->pool, b);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* clremat_opt_step_unless: with the skip count at zero, the bits of
 * clremat_opt_step; at any other value, parameters and states untouched. */
START_TEST(test_step_unless)
{
    static const char *const names[3] = {"sgd", "adam", "adamw"};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int o = 0; o < 3; o++) {
        clremat_opt_config cfg;
        clremat_buf *bp[2], *bg, *st[2][2] = {{NULL, NULL}, {NULL, NULL}}, *cnt;
        static float hp[N], hg[N], hs[N], a[N], b[N];
        int ns;
        for (int i = 0; i < N; i++) {
            hp[i] = sinf((float)i * 0.37f);
            hg[i] = cosf((float)i * 0.11f);
            hs[i] = hg[i] * hg[i] + 0.5f; /* states as after some steps (a second moment is positive) */
        }
        ck_assert_int_eq(clremat_opt_defaults(names[o], &cfg), 0);
        ns = clremat_opt_state_count(cfg.kind);
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hg, "g", &bg), CLREMAT_OK);
        ck_assert_int_eq(clremat_write(ctx, bg, 0, sizeof hg, hg), CLREMAT_OK);
        for (int k = 0; k < 2; k++) { /* k 0: clremat_opt_step, k 1: _unless */
            ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hp, "p", &bp[k]), CLREMAT_OK);
            ck_assert_int_eq(clremat_write(ctx, bp[k], 0, sizeof hp, hp), CLREMAT_OK);
            for (int s = 0; s < ns; s++) {
                ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof hp, "state", &st[k][s]), CLREMAT_OK);
                ck_assert_int_eq(clremat_write(ctx, st[k][s], 0, sizeof hs, hs), CLREMAT_OK);
            }
        }
        ck_assert_int_eq(clremat_counter_new(ctx, &cnt), CLREMAT_OK);
        /* skip count 0: steps 1 and 2 as clremat_opt_step takes them */
        for (int t = 1; t <= 2; t++) {
            ck_assert_int_eq(clremat_opt_step(ctx, &cfg, t, bp[0], bg, st[0], N), CLREMAT_OK);
            ck_assert_int_eq(clremat_opt_step_unless(ctx, &cfg, t, bp[1], bg, st[1], N, cnt), CLREMAT_OK);
        }
        for (int s = -1; s < ns; s++) {
            ck_assert_int_eq(clremat_read(ctx, s < 0 ? bp[0] : st[0][s], 0, sizeof a, a), CLREMAT_OK);
            ck_assert_int_eq(clremat_read(ctx, s < 0 ? bp[1] : st[1][s], 0, sizeof b, b), CLREMAT_OK);
            ck_assert_msg(memcmp(a, b, sizeof a) == 0, "%s: skip count 0 changed %s %d", names[o],
                          s < 0 ? "the parameters" : "state", s);
            ck_assert_msg(memcmp(a, s < 0 ? hp : hs, sizeof a) != 0, "%s: no update of %s %d", names[o],
                          s < 0 ? "the parameters" : "state", s);
        }
        /* skip count 2: nothing changes */
        {
            const cl_int two = 2;
            ck_assert_int_eq(clremat_write(ctx, cnt, 0, sizeof two, &two), CLREMAT_OK);
        }
        ck_assert_int_eq(clremat_opt_step_unless(ctx, &cfg, 3, bp[1], bg, st[1], N, cnt), CLREMAT_OK);
        for (int s = -1; s < ns; s++) {
            ck_assert_int_eq(clremat_read(ctx, s < 0 ? bp[0] : st[0][s], 0, sizeof a, a), CLREMAT_OK);
            ck_assert_int_eq(clremat_read(ctx, s < 0 ? bp[1] : st[1][s], 0, sizeof b, b), CLREMAT_OK);
            ck_assert_msg(memcmp(a, b, sizeof a) == 0, "%s: a skipped step changed %s %d", names[o],
                          s < 0 ? "the parameters" : "state", s);
        }
        clremat_pool_release(ctx->pool, cnt);
        clremat_pool_release(ctx->pool, bg);
        for (int k = 0; k < 2; k++) {
            clremat_pool_release(ctx->pool, bp[k]);
            for (int s = 0; s < ns; s++)
                clremat_pool_release(ctx->pool, st[k][s]);
        }
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("optim", 120, &tc);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_adam);
    tcase_add_test(tc, test_adamw);
    tcase_add_test(tc, test_nondefault_hparams);
    tcase_add_test(tc, test_apply_refusals);
    tcase_add_test(tc, test_check_one_value);
    tcase_add_test(tc, test_elementwise);
    tcase_add_test(tc, test_step_unless);
    return test_run_device_suite(s);
}
