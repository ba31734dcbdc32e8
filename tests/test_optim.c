/* test_optim.c: optimizer defaults and SGD/Adam/AdamW steps on the device
 * against a double-precision host reference over several steps (with and
 * without weight decay), plus the executor's elementwise ops (add_inplace,
 * count_nonfinite). Skips (77) without a device. */
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

static void check_optimizer(const char *name, float wd)
{
    clremat_ctx *ctx;
    clremat_opt_config cfg;
    clremat_buf *bp, *bg, *st[2] = {NULL, NULL};
    static float hp[N], hg[N], out[N];
    static double rp[N], rg[N], r0[N], r1[N];
    int ns;
    ck_assert_int_eq(clremat_opt_defaults(name, &cfg), 0);
    cfg.weight_decay = wd;
    cfg.lr = 0.05f;
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

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("optim", 120, &tc);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_adam);
    tcase_add_test(tc, test_adamw);
    tcase_add_test(tc, test_elementwise);
    return test_run_device_suite(s);
}
