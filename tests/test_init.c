/* test_init.c: seeded parameter initialization without a device: the
 * statistics of each scheme on large parameters, fans for wqkv, and
 * reproducibility independent of call order. */
#include "testutil.h"
#include "init.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static clremat_layer layers[2];
static clremat_graph graph;

static void set_param(clremat_layer *l, int p, const char *name, int rank, int64_t d0, int64_t d1, int init)
{
    clremat_param *q = &l->params[p];
    snprintf(q->name, sizeof q->name, "%s", name);
    q->shape.rank = rank;
    q->shape.dims[0] = d0;
    q->shape.dims[1] = d1;
    q->elems = rank == 1 ? d0 : d0 * d1;
    q->init = init;
    if (l->n_params < p + 1)
        l->n_params = p + 1;
}

/* Two layers by hand: dense [256, 512] + bias, and a mix of the others. */
static void setup(void)
{
    memset(layers, 0, sizeof layers);
    memset(&graph, 0, sizeof graph);
    snprintf(layers[0].name, sizeof layers[0].name, "dense");
    set_param(&layers[0], 0, "kernel", 2, 256, 512, CLREMAT_INIT_GLOROT_UNIFORM);
    set_param(&layers[0], 1, "bias", 1, 512, 0, CLREMAT_INIT_ZEROS);
    set_param(&layers[0], 2, "gamma", 1, 300, 0, CLREMAT_INIT_ONES);
    snprintf(layers[1].name, sizeof layers[1].name, "mix");
    set_param(&layers[1], 0, "kernel", 2, 512, 256, CLREMAT_INIT_HE_NORMAL);
    set_param(&layers[1], 1, "table", 2, 1000, 128, CLREMAT_INIT_NORMAL_002);
    set_param(&layers[1], 2, "wqkv", 2, 128, 384, CLREMAT_INIT_GLOROT_UNIFORM);
    set_param(&layers[1], 3, "k2", 2, 512, 256, CLREMAT_INIT_HE_NORMAL);
    graph.layers = layers;
    graph.n_layers = graph.cap_layers = 2;
}

typedef struct stats {
    double mean, std, min, max, kurtosis;
} stats;

static stats stats_of(const float *x, int64_t n)
{
    stats s = {0, 0, INFINITY, -INFINITY, 0};
    double m2 = 0, m4 = 0;
    for (int64_t i = 0; i < n; i++) {
        s.mean += x[i];
        s.min = fmin(s.min, x[i]);
        s.max = fmax(s.max, x[i]);
    }
    s.mean /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - s.mean;
        m2 += d * d;
        m4 += d * d * d * d;
    }
    m2 /= (double)n;
    m4 /= (double)n;
    s.std = sqrt(m2);
    s.kurtosis = m4 / (m2 * m2);
    return s;
}

static float *init(int l, int p, uint64_t seed)
{
    float *x = malloc((size_t)layers[l].params[p].elems * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (int64_t i = 0; i < layers[l].params[p].elems; i++)
        x[i] = NAN; /* every element must be written */
    clremat_init_param(&graph, l, p, seed, x);
    return x;
}

/* LoRA's A: N(0, (1/r)^2) with r the last dim (8 here) */
START_TEST(normal_lora)
{
    float *x;
    set_param(&layers[0], 0, "lora_a", 2, 4096, 8, CLREMAT_INIT_NORMAL_LORA); /* setup() restores it */
    x = init(0, 0, 7);
    int64_t n = 4096 * 8;
    stats s = stats_of(x, n);
    ck_assert_msg(fabs(s.mean) < 4 * 0.125 / sqrt((double)n), "mean %g", s.mean);
    ck_assert_msg(fabs(s.std - 0.125) < 0.01 * 0.125, "std %g want 0.125", s.std);
    ck_assert_msg(fabs(s.kurtosis - 3.0) < 0.15, "normal kurtosis %g", s.kurtosis);
    free(x);
}
END_TEST

START_TEST(glorot_uniform)
{
    float *x = init(0, 0, 7), *q = init(1, 2, 7);
    int64_t n = 256 * 512;
    double a = sqrt(6.0 / (256 + 512)), aq = sqrt(6.0 / (128 + 384)); /* wqkv: fan_in D, fan_out 3D */
    stats s = stats_of(x, n), sq = stats_of(q, 128 * 384);
    ck_assert_msg(fabs(s.mean) < 4 * a / sqrt(3.0 * n), "mean %g", s.mean);
    ck_assert_msg(fabs(s.std - a / sqrt(3.0)) < 0.01 * a / sqrt(3.0), "std %g want %g", s.std, a / sqrt(3.0));
    ck_assert(s.min >= -a && s.max <= a);
    ck_assert(s.min < -0.999 * a && s.max > 0.999 * a);
    ck_assert_msg(fabs(s.kurtosis - 1.8) < 0.03, "uniform kurtosis %g", s.kurtosis);
    ck_assert(sq.min >= -aq && sq.max <= aq && sq.max > 0.999 * aq);
    ck_assert_msg(fabs(sq.std - aq / sqrt(3.0)) < 0.01 * aq / sqrt(3.0), "wqkv std %g", sq.std);
    free(x);
    free(q);
}
END_TEST

START_TEST(he_normal)
{
    float *x = init(1, 0, 7);
    int64_t n = 512 * 256;
    double sd = sqrt(2.0 / 512);
    stats s = stats_of(x, n);
    ck_assert_msg(fabs(s.mean) < 4 * sd / sqrt((double)n), "mean %g", s.mean);
    ck_assert_msg(fabs(s.std - sd) < 0.01 * sd, "std %g want %g", s.std, sd);
    ck_assert_msg(fabs(s.kurtosis - 3.0) < 0.1, "normal kurtosis %g", s.kurtosis);
    ck_assert(s.max > 3.5 * sd && s.min < -3.5 * sd); /* tails exist */
    free(x);
}
END_TEST

START_TEST(normal_002)
{
    float *x = init(1, 1, 99);
    int64_t n = 1000 * 128;
    stats s = stats_of(x, n);
    ck_assert_msg(fabs(s.mean) < 4 * 0.02 / sqrt((double)n), "mean %g", s.mean);
    ck_assert_msg(fabs(s.std - 0.02) < 0.0002, "std %g", s.std);
    ck_assert_msg(fabs(s.kurtosis - 3.0) < 0.1, "normal kurtosis %g", s.kurtosis);
    free(x);
}
END_TEST

START_TEST(zeros_ones)
{
    float *z = init(0, 1, 1), *o = init(0, 2, 1);
    for (int i = 0; i < 512; i++)
        ck_assert(z[i] == 0.0f);
    for (int i = 0; i < 300; i++)
        ck_assert(o[i] == 1.0f);
    free(z);
    free(o);
}
END_TEST

START_TEST(reproducible)
{
    float *a = init(1, 0, 5), *b, *c, *d, *e;
    int64_t n = 512 * 256;
    /* the order of calls must not matter: init another in between */
    free(init(0, 0, 5));
    b = init(1, 0, 5);
    c = init(1, 0, 6);  /* other seed */
    d = init(1, 3, 5);  /* same shape and scheme, other parameter index */
    ck_assert_int_eq(memcmp(a, b, (size_t)n * sizeof *a), 0);
    ck_assert_int_ne(memcmp(a, c, (size_t)n * sizeof *a), 0);
    ck_assert_int_ne(memcmp(a, d, (size_t)n * sizeof *a), 0);
    /* other layer, same shape and scheme: move layer 1's kernel to layer 0 */
    layers[0].params[0] = layers[1].params[0];
    e = init(0, 0, 5);
    ck_assert_int_ne(memcmp(a, e, (size_t)n * sizeof *a), 0);
    /* and different streams are uncorrelated */
    {
        double sab = 0, saa = 0, sdd = 0;
        for (int64_t i = 0; i < n; i++) {
            sab += (double)a[i] * d[i];
            saa += (double)a[i] * a[i];
            sdd += (double)d[i] * d[i];
        }
        ck_assert_msg(fabs(sab / sqrt(saa * sdd)) < 0.02, "correlation %g", sab / sqrt(saa * sdd));
    }
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
}
END_TEST

START_TEST(bad_indices_write_nothing)
{
    float x[4] = {5, 5, 5, 5};
    clremat_init_param(&graph, 2, 0, 1, x);
    clremat_init_param(&graph, 0, 3, 1, x);
    clremat_init_param(&graph, -1, 0, 1, x);
    clremat_init_param(NULL, 0, 0, 1, x);
    for (int i = 0; i < 4; i++)
        ck_assert(x[i] == 5.0f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("init");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, glorot_uniform);
    tcase_add_test(tc, he_normal);
    tcase_add_test(tc, normal_002);
    tcase_add_test(tc, normal_lora);
    tcase_add_test(tc, zeros_ones);
    tcase_add_test(tc, reproducible);
    tcase_add_test(tc, bad_indices_write_nothing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return test_run_suite(suite()); }
