/* test_data.c: datasets without a device: the synthetic tasks (shapes,
 * contents, learnability, reproducibility, disjoint splits), mismatches
 * between task and model with their messages, loading safetensors data
 * files with every check, and the seeded shuffled batches. Graphs are
 * built by hand (only g->io and the layers array are read). */
#include "testutil.h"
#include "data.h"
#include "safetensors.h"
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static clremat_layer layer;
static clremat_graph graph;

/* A model with float input [d] and class-id labels (classes k). */
static clremat_graph *clusters_model(int64_t d, int64_t k)
{
    memset(&graph, 0, sizeof graph);
    graph.io.input = (clremat_shape){1, {d}};
    graph.io.labels = (clremat_shape){0, {0}};
    graph.io.labels_ids = 1;
    graph.io.classes = k;
    return &graph;
}

/* A model with token ids [t] (embedding vocab v) and per-token labels (classes c). */
static clremat_graph *sequence_model(int64_t t, int64_t v, int64_t c)
{
    memset(&graph, 0, sizeof graph);
    memset(&layer, 0, sizeof layer);
    snprintf(layer.name, sizeof layer.name, "embed");
    layer.type = CLREMAT_EMBEDDING;
    layer.vocab = v;
    layer.dim = 8;
    graph.layers = &layer;
    graph.n_layers = graph.cap_layers = 1;
    graph.io.input = (clremat_shape){1, {t}};
    graph.io.input_ids = 1;
    graph.io.labels = (clremat_shape){1, {t}};
    graph.io.labels_ids = 1;
    graph.io.classes = c;
    return &graph;
}

/* A model with float input [d] and float targets [m]. */
static clremat_graph *regression_model(int64_t d, int64_t m)
{
    memset(&graph, 0, sizeof graph);
    graph.io.input = (clremat_shape){1, {d}};
    graph.io.labels = (clremat_shape){1, {m}};
    return &graph;
}

/* The last error contains every NULL-terminated string. */
static void expect_msg(int st, int want, ...)
{
    va_list ap;
    const char *s;
    ck_assert_msg(st == want, "status %s (want %s): %s", clremat_status_str(st), clremat_status_str(want),
                  clremat_last_error());
    va_start(ap, want);
    while ((s = va_arg(ap, const char *)))
        ck_assert_msg(strstr(clremat_last_error(), s), "'%s' not in message: %s", s, clremat_last_error());
    va_end(ap);
}

/* ------------------------------------------------------------ synthetic */

/* Accuracy on the validation split of nearest-centroid classification with
 * centroids estimated from the training split. */
static double nearest_centroid_accuracy(const clremat_dataset *d)
{
    int64_t D = d->train.x_elems, K = d->classes, correct = 0;
    double *cent = calloc((size_t)(K * D), sizeof *cent);
    int64_t *count = calloc((size_t)K, sizeof *count);
    for (int64_t i = 0; i < d->train.n; i++) {
        int c = (int)d->train.y[i];
        count[c]++;
        for (int64_t j = 0; j < D; j++)
            cent[c * D + j] += d->train.x[i * D + j];
    }
    for (int64_t c = 0; c < K; c++)
        for (int64_t j = 0; j < D; j++)
            cent[c * D + j] /= (double)(count[c] ? count[c] : 1);
    for (int64_t i = 0; i < d->val.n; i++) {
        double best = INFINITY;
        int64_t arg = -1;
        for (int64_t c = 0; c < K; c++) {
            double dist = 0;
            for (int64_t j = 0; j < D; j++)
                dist += pow(d->val.x[i * D + j] - cent[c * D + j], 2);
            if (dist < best) {
                best = dist;
                arg = c;
            }
        }
        correct += arg == (int64_t)d->val.y[i];
    }
    free(cent);
    free(count);
    return (double)correct / (double)d->val.n;
}

START_TEST(clusters_task)
{
    clremat_dataset d, e;
    const int64_t D = 16, K = 5;
    int64_t count[5] = {0};
    ck_assert_int_eq(clremat_data_synthetic(clusters_model(D, K), NULL, 3, 2000, 500, &d), CLREMAT_OK);
    ck_assert_str_eq(d.name, "clusters");
    ck_assert_int_eq(d.train.n, 2000);
    ck_assert_int_eq(d.val.n, 500);
    ck_assert_int_eq(d.train.x_elems, D);
    ck_assert_int_eq(d.train.y_elems, 1);
    ck_assert_int_eq(d.y_ids, 1);
    ck_assert_int_eq(d.classes, K);
    ck_assert_int_eq(d.x_shape.rank, 1);
    ck_assert_int_eq(d.x_shape.dims[0], D);
    ck_assert_int_eq(d.y_shape.rank, 0);
    for (int64_t i = 0; i < d.train.n; i++) {
        float y = d.train.y[i];
        ck_assert(y == floorf(y) && y >= 0 && y < K);
        count[(int)y]++;
    }
    for (int c = 0; c < K; c++)
        ck_assert_msg(count[c] > 2000 / K / 2, "class %d has %lld samples", c, (long long)count[c]);
    /* learnable: far better than chance (1/K) */
    ck_assert_msg(nearest_centroid_accuracy(&d) > 0.95, "nearest centroid: %g", nearest_centroid_accuracy(&d));
    /* reproducible from the seed, different for another */
    ck_assert_int_eq(clremat_data_synthetic(clusters_model(D, K), "clusters", 3, 2000, 500, &e), CLREMAT_OK);
    ck_assert_int_eq(memcmp(d.train.x, e.train.x, 2000 * D * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(d.val.y, e.val.y, 500 * sizeof(float)), 0);
    clremat_data_free(&e);
    ck_assert_int_eq(clremat_data_synthetic(clusters_model(D, K), "clusters", 4, 2000, 500, &e), CLREMAT_OK);
    ck_assert_int_ne(memcmp(d.train.x, e.train.x, 2000 * D * sizeof(float)), 0);
    clremat_data_free(&e);
    clremat_data_free(&d);
    ck_assert_ptr_null(d.train.x);
}
END_TEST

START_TEST(clusters_separable_in_few_dimensions)
{
    /* centres are kept apart even in 2-D with several classes */
    for (uint64_t seed = 1; seed <= 8; seed++) {
        clremat_dataset d;
        ck_assert_int_eq(clremat_data_synthetic(clusters_model(2, 4), NULL, seed, 1000, 400, &d), CLREMAT_OK);
        ck_assert_msg(nearest_centroid_accuracy(&d) > 0.9, "seed %llu: nearest centroid %g",
                      (unsigned long long)seed, nearest_centroid_accuracy(&d));
        clremat_data_free(&d);
    }
}
END_TEST

START_TEST(splits_disjoint_and_prefix_stable)
{
    clremat_dataset a, b;
    const int64_t D = 8;
    ck_assert_int_eq(clremat_data_synthetic(clusters_model(D, 3), NULL, 11, 100, 100, &a), CLREMAT_OK);
    ck_assert_int_eq(clremat_data_synthetic(clusters_model(D, 3), NULL, 11, 50, 0, &b), CLREMAT_OK);
    ck_assert_int_eq(b.val.n, 0);
    /* no validation sample is a training sample */
    for (int64_t i = 0; i < 100; i++)
        for (int64_t j = 0; j < 100; j++)
            ck_assert_int_ne(memcmp(a.val.x + i * D, a.train.x + j * D, D * sizeof(float)), 0);
    /* sample i does not depend on how many were asked for */
    ck_assert_int_eq(memcmp(a.train.x, b.train.x, 50 * D * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a.train.y, b.train.y, 50 * sizeof(float)), 0);
    clremat_data_free(&a);
    clremat_data_free(&b);
}
END_TEST

START_TEST(sequence_tasks)
{
    clremat_dataset d;
    const int64_t T = 12, V = 7;
    int64_t seen[7] = {0};
    ck_assert_int_eq(clremat_data_synthetic(sequence_model(T, V, V), NULL, 5, 300, 40, &d), CLREMAT_OK);
    ck_assert_str_eq(d.name, "sequence");
    ck_assert_int_eq(d.train.x_elems, T);
    ck_assert_int_eq(d.train.y_elems, T);
    ck_assert_int_eq(d.classes, V);
    for (int64_t i = 0; i < d.train.n; i++)
        for (int64_t t = 0; t < T; t++) {
            float x = d.train.x[i * T + t];
            ck_assert(x == floorf(x) && x >= 0 && x < V);
            seen[(int)x]++;
            ck_assert(d.train.y[i * T + t] == d.train.x[i * T + T - 1 - t]); /* reversed */
        }
    for (int v = 0; v < V; v++) /* uniform: 3600 / 7 = 514 each */
        ck_assert_msg(seen[v] > 400 && seen[v] < 630, "token %d seen %lld times", v, (long long)seen[v]);
    ck_assert_int_ne(memcmp(d.train.x, d.val.x, T * sizeof(float)), 0);
    clremat_data_free(&d);

    ck_assert_int_eq(clremat_data_synthetic(sequence_model(T, V, V), "copy", 5, 30, 4, &d), CLREMAT_OK);
    ck_assert_str_eq(d.name, "copy");
    ck_assert_int_eq(memcmp(d.train.x, d.train.y, 30 * T * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(d.val.x, d.val.y, 4 * T * sizeof(float)), 0);
    clremat_data_free(&d);

    ck_assert_int_eq(clremat_data_synthetic(sequence_model(T, V, V), "sort", 5, 30, 4, &d), CLREMAT_OK);
    for (int64_t i = 0; i < 30; i++) {
        int64_t hx[7] = {0}, hy[7] = {0};
        for (int64_t t = 0; t < T; t++) {
            hx[(int)d.train.x[i * T + t]]++;
            hy[(int)d.train.y[i * T + t]]++;
            if (t > 0)
                ck_assert(d.train.y[i * T + t - 1] <= d.train.y[i * T + t]);
        }
        ck_assert_int_eq(memcmp(hx, hy, sizeof hx), 0);
    }
    clremat_data_free(&d);
}
END_TEST

/* Solves the n x n system a x = b in place (Gaussian elimination, pivoting). */
static void solve(int n, double *a, double *b)
{
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
                p = r;
        for (int k = 0; k < n; k++) {
            double t = a[c * n + k];
            a[c * n + k] = a[p * n + k];
            a[p * n + k] = t;
        }
        double t = b[c];
        b[c] = b[p];
        b[p] = t;
        for (int r = c + 1; r < n; r++) {
            double f = a[r * n + c] / a[c * n + c];
            for (int k = c; k < n; k++)
                a[r * n + k] -= f * a[c * n + k];
            b[r] -= f * b[c];
        }
    }
    for (int c = n - 1; c >= 0; c--) {
        for (int k = c + 1; k < n; k++)
            b[c] -= a[c * n + k] * b[k];
        b[c] /= a[c * n + c];
    }
}

START_TEST(regression_task)
{
    clremat_dataset d;
    enum { D = 8, M = 3 };
    double sx = 0, sxx = 0, worst = 0;
    ck_assert_int_eq(clremat_data_synthetic(regression_model(D, M), NULL, 9, 1000, 200, &d), CLREMAT_OK);
    ck_assert_str_eq(d.name, "regression");
    ck_assert_int_eq(d.y_ids, 0);
    ck_assert_int_eq(d.classes, 0);
    ck_assert_int_eq(d.train.y_elems, M);
    for (int64_t i = 0; i < 1000 * D; i++) {
        sx += d.train.x[i];
        sxx += (double)d.train.x[i] * d.train.x[i];
    }
    ck_assert_msg(fabs(sx / 8000) < 0.05 && fabs(sxx / 8000 - 1) < 0.06, "x mean %g var %g", sx / 8000, sxx / 8000);
    /* y = tanh(x A) for one fixed A: recover A by least squares on the
     * training split and predict the validation split */
    for (int m = 0; m < M; m++) {
        double ata[D * D] = {0}, atb[D] = {0};
        for (int64_t i = 0; i < 1000; i++) {
            const float *x = d.train.x + i * D;
            double y = d.train.y[i * M + m];
            ck_assert(fabs(y) < 1);
            if (fabs(y) > 0.99)
                continue;
            for (int j = 0; j < D; j++) {
                atb[j] += x[j] * atanh(y);
                for (int k = 0; k < D; k++)
                    ata[j * D + k] += (double)x[j] * x[k];
            }
        }
        solve(D, ata, atb);
        for (int64_t i = 0; i < 200; i++) {
            double p = 0;
            for (int j = 0; j < D; j++)
                p += d.val.x[i * D + j] * atb[j];
            worst = fmax(worst, fabs(tanh(p) - d.val.y[i * M + m]));
        }
    }
    ck_assert_msg(worst < 1e-4, "validation targets are not tanh(x A) of the training A: error %g", worst);
    clremat_data_free(&d);
}
END_TEST

START_TEST(task_model_mismatch)
{
    clremat_dataset d;
    clremat_graph *g = clusters_model(32, 4);
    expect_msg(clremat_data_synthetic(g, "sequence", 1, 10, 2, &d), CLREMAT_ERR_MISMATCH, "task 'sequence'",
               "token-id input", "the model's input is [32] floats", NULL);
    ck_assert_ptr_null(d.train.x);
    expect_msg(clremat_data_synthetic(g, "regression", 1, 10, 2, &d), CLREMAT_ERR_MISMATCH, "task 'regression'",
               "float targets", "the model's labels are [] class ids", NULL);
    g = regression_model(32, 2);
    expect_msg(clremat_data_synthetic(g, "clusters", 1, 10, 2, &d), CLREMAT_ERR_MISMATCH, "task 'clusters'",
               "one class id per sample", "[2] float targets", NULL);
    g = sequence_model(10, 6, 6);
    expect_msg(clremat_data_synthetic(g, "clusters", 1, 10, 2, &d), CLREMAT_ERR_MISMATCH, "task 'clusters'",
               "float vector input", "[10] token ids", NULL);
    g = sequence_model(10, 6, 9);
    expect_msg(clremat_data_synthetic(g, NULL, 1, 10, 2, &d), CLREMAT_ERR_MISMATCH, "task 'sequence'",
               "vocabulary (6)", "classes (9)", NULL);
    g = sequence_model(10, 6, 6);
    g->io.labels.dims[0] = 9;
    expect_msg(clremat_data_synthetic(g, "sort", 1, 10, 2, &d), CLREMAT_ERR_MISMATCH, "task 'sort'", "labels [10]",
               "model's labels are [9] class ids", NULL);
    expect_msg(clremat_data_synthetic(g, "shuffle", 1, 10, 2, &d), CLREMAT_ERR_INVALID_ARGUMENT,
               "unknown task 'shuffle'", "clusters", NULL);
    g = clusters_model(4, 1);
    expect_msg(clremat_data_synthetic(g, NULL, 1, 10, 2, &d), CLREMAT_ERR_MISMATCH, "at least 2 classes", NULL);
    g = clusters_model(4, 3);
    expect_msg(clremat_data_synthetic(g, NULL, 1, 0, 2, &d), CLREMAT_ERR_INVALID_ARGUMENT, "n_train > 0", NULL);
}
END_TEST

/* --------------------------------------------------------------- loading */

static char dir[64], file[128];

static void data_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/clremat-data-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/d.safetensors", dir);
}

static void data_dir_remove(void)
{
    unlink(file);
    rmdir(dir);
}

static float tx[20 * 16], vx64buf[5 * 16];
static double vx[5 * 16];
static int64_t ty[20];
static int32_t vy[5];

/* A valid data file for clusters_model(16, 5); t[] may be edited before
 * writing. */
static void make_tensors(clremat_st_tensor *t)
{
    for (int i = 0; i < 20 * 16; i++)
        tx[i] = (float)i * 0.25f - 3;
    for (int i = 0; i < 5 * 16; i++)
        vx[i] = 1.0 / (i + 1);
    for (int i = 0; i < 20; i++)
        ty[i] = i % 5;
    for (int i = 0; i < 5; i++)
        vy[i] = 4 - i;
    memset(t, 0, 4 * sizeof *t);
    t[0] = (clremat_st_tensor){"train_x", CLREMAT_ST_F32, 2, {20, 16}, 320, tx};
    t[1] = (clremat_st_tensor){"train_y", CLREMAT_ST_I64, 1, {20}, 20, ty};
    t[2] = (clremat_st_tensor){"val_x", CLREMAT_ST_F64, 2, {5, 16}, 80, vx};
    t[3] = (clremat_st_tensor){"val_y", CLREMAT_ST_I32, 1, {5}, 5, vy};
}

static int write_and_load(clremat_graph *g, clremat_st_tensor *t, size_t n, clremat_dataset *d)
{
    ck_assert_msg(clremat_st_write(file, t, n) == CLREMAT_OK, "%s", clremat_last_error());
    return clremat_data_load(g, file, d);
}

START_TEST(load_valid)
{
    clremat_st_tensor t[4];
    clremat_dataset d;
    data_dir();
    make_tensors(t);
    ck_assert_msg(write_and_load(clusters_model(16, 5), t, 4, &d) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(d.train.n, 20);
    ck_assert_int_eq(d.val.n, 5);
    ck_assert_int_eq(d.train.x_elems, 16);
    ck_assert_int_eq(d.train.y_elems, 1);
    ck_assert_int_eq(d.classes, 5);
    ck_assert_int_eq(d.y_ids, 1);
    ck_assert_int_eq(memcmp(d.train.x, tx, sizeof tx), 0);
    for (int i = 0; i < 80; i++)
        ck_assert(d.val.x[i] == (float)vx[i]);
    for (int i = 0; i < 20; i++)
        ck_assert(d.train.y[i] == (float)(i % 5));
    for (int i = 0; i < 5; i++)
        ck_assert(d.val.y[i] == (float)(4 - i));
    ck_assert_ptr_nonnull(strstr(d.name, "d.safetensors"));
    clremat_data_free(&d);
    /* ids as F32 too */
    for (int i = 0; i < 5; i++)
        vx64buf[i] = (float)i;
    t[3] = (clremat_st_tensor){"val_y", CLREMAT_ST_F32, 1, {5}, 5, vx64buf};
    ck_assert_msg(write_and_load(clusters_model(16, 5), t, 4, &d) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert(d.val.y[3] == 3.0f);
    clremat_data_free(&d);
    data_dir_remove();
}
END_TEST

START_TEST(load_errors)
{
    clremat_st_tensor t[4];
    clremat_dataset d;
    static float f_ids[20];
    data_dir();
    make_tensors(t);
    t[0].dims[1] = 15;
    t[0].elems = 300;
    expect_msg(write_and_load(clusters_model(16, 5), t, 4, &d), CLREMAT_ERR_MISMATCH, "d.safetensors",
               "train_x has per-sample shape [15] but the model's input is [16]", NULL);
    ck_assert_ptr_null(d.train.x);
    make_tensors(t);
    t[3].dims[0] = 4;
    t[3].elems = 4;
    expect_msg(write_and_load(clusters_model(16, 5), t, 4, &d), CLREMAT_ERR_MISMATCH,
               "val_y has 4 samples but val_x has 5", NULL);
    make_tensors(t);
    ty[3] = 5;
    expect_msg(write_and_load(clusters_model(16, 5), t, 4, &d), CLREMAT_ERR_MISMATCH,
               "train_y element 3 (sample 3) = 5 is not a class id in [0, 5)", NULL);
    make_tensors(t);
    ty[7] = -1;
    expect_msg(write_and_load(clusters_model(16, 5), t, 4, &d), CLREMAT_ERR_MISMATCH, "train_y element 7", "= -1",
               NULL);
    make_tensors(t);
    for (int i = 0; i < 20; i++)
        f_ids[i] = 1;
    f_ids[2] = 2.5f;
    t[1] = (clremat_st_tensor){"train_y", CLREMAT_ST_F32, 1, {20}, 20, f_ids};
    expect_msg(write_and_load(clusters_model(16, 5), t, 4, &d), CLREMAT_ERR_MISMATCH, "train_y element 2", "2.5",
               "not a class id", NULL);
    make_tensors(t);
    t[2] = (clremat_st_tensor){"val_x", CLREMAT_ST_I64, 2, {5, 4}, 20, ty};
    expect_msg(write_and_load(regression_model(4, 1), t, 4, &d), CLREMAT_ERR_MISMATCH, "train_x has per-sample shape "
               "[16] but the model's input is [4]", NULL);
    make_tensors(t);
    t[2] = (clremat_st_tensor){"val_x", CLREMAT_ST_I64, 2, {5, 16}, 80, tx}; /* 80 I64 from a big enough buffer */
    expect_msg(write_and_load(clusters_model(16, 5), t, 4, &d), CLREMAT_ERR_MISMATCH,
               "val_x has dtype I64 but the model's input takes floats", NULL);
    make_tensors(t);
    tx[17] = NAN;
    expect_msg(write_and_load(clusters_model(16, 5), t, 4, &d), CLREMAT_ERR_PARSE,
               "train_x element 17 (sample 1)", "not a finite float", NULL);
    make_tensors(t);
    expect_msg(write_and_load(clusters_model(16, 5), t, 3, &d), CLREMAT_ERR_PARSE, "no tensor 'val_y'", NULL);
    make_tensors(t);
    t[1] = (clremat_st_tensor){"train_y", CLREMAT_ST_I64, 0, {0}, 1, ty};
    expect_msg(write_and_load(clusters_model(16, 5), t, 4, &d), CLREMAT_ERR_MISMATCH, "train_y is a scalar", NULL);
    data_dir_remove();
    expect_msg(clremat_data_load(clusters_model(16, 5), file, &d), CLREMAT_ERR_IO, "d.safetensors", NULL);
}
END_TEST

START_TEST(load_token_ids)
{
    static int32_t ids[6 * 4], lab[6 * 4];
    clremat_st_tensor t[4];
    clremat_dataset d;
    data_dir();
    for (int i = 0; i < 24; i++) {
        ids[i] = i % 7;
        lab[i] = (i * 3) % 7;
    }
    t[0] = (clremat_st_tensor){"train_x", CLREMAT_ST_I32, 2, {4, 4}, 16, ids};
    t[1] = (clremat_st_tensor){"train_y", CLREMAT_ST_I32, 2, {4, 4}, 16, lab};
    t[2] = (clremat_st_tensor){"val_x", CLREMAT_ST_I32, 2, {2, 4}, 8, ids + 16};
    t[3] = (clremat_st_tensor){"val_y", CLREMAT_ST_I32, 2, {2, 4}, 8, lab + 16};
    ck_assert_msg(write_and_load(sequence_model(4, 7, 7), t, 4, &d) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert(d.val.x[5] == (float)(21 % 7));
    ck_assert(d.train.y[9] == (float)(27 % 7));
    clremat_data_free(&d);
    ids[18] = 7;
    expect_msg(write_and_load(sequence_model(4, 7, 7), t, 4, &d), CLREMAT_ERR_MISMATCH,
               "val_x element 2 (sample 0) = 7 is not a token id in [0, 7)", NULL);
    data_dir_remove();
}
END_TEST

/* --------------------------------------------------------------- batches */

/* A split whose sample i is x = [i, -i], y = [10 i]. */
static clremat_split numbered(int64_t n)
{
    clremat_split s = {n, 2, 1, malloc((size_t)n * 2 * sizeof(float)), malloc((size_t)n * sizeof(float)), 0, 0};
    for (int64_t i = 0; i < n; i++) {
        s.x[2 * i] = (float)i;
        s.x[2 * i + 1] = (float)-i;
        s.y[i] = (float)(10 * i);
    }
    return s;
}

/* Sample ids of the first count samples of the stream of batches of size batch. */
static void stream(const clremat_split *s, uint64_t seed, int64_t batch, int64_t count, int64_t *ids)
{
    float *x = malloc((size_t)batch * 2 * sizeof(float)), *y = malloc((size_t)batch * sizeof(float));
    for (int64_t b = 0; b * batch < count; b++) {
        clremat_data_batch(s, seed, b, batch, x, y);
        for (int64_t j = 0; j < batch && b * batch + j < count; j++) {
            ck_assert(x[2 * j + 1] == -x[2 * j] && y[j] == 10 * x[2 * j]); /* x and y stay paired */
            ids[b * batch + j] = (int64_t)x[2 * j];
        }
    }
    free(x);
    free(y);
}

START_TEST(batches_are_epoch_permutations)
{
    static const int64_t sizes[] = {1, 2, 10, 17, 64, 65, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t n = sizes[k], epochs = 3, *ids = malloc((size_t)(n * epochs) * sizeof *ids);
        clremat_split s = numbered(n);
        stream(&s, 42, 3, n * epochs, ids);
        for (int64_t e = 0; e < epochs; e++) {
            char *seen = calloc((size_t)n, 1);
            int64_t moved = 0;
            for (int64_t i = 0; i < n; i++) {
                int64_t v = ids[e * n + i];
                ck_assert(v >= 0 && v < n);
                ck_assert_msg(!seen[v], "n=%lld epoch %lld: sample %lld twice", (long long)n, (long long)e,
                              (long long)v);
                seen[v] = 1;
                moved += v != i;
            }
            if (n >= 10) /* shuffled, not in order */
                ck_assert_int_gt(moved, n / 2);
            free(seen);
        }
        if (n >= 10) /* epochs differ */
            ck_assert_int_ne(memcmp(ids, ids + n, (size_t)n * sizeof *ids), 0);
        free(ids);
        free(s.x);
        free(s.y);
    }
}
END_TEST

START_TEST(batches_deterministic)
{
    clremat_split s = numbered(50);
    int64_t a[200], b[200], c[200];
    float x1[7 * 2], y1[7], x2[7 * 2], y2[7];
    stream(&s, 7, 7, 200, a);
    stream(&s, 7, 1, 200, b); /* the stream does not depend on the batch size */
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
    stream(&s, 8, 7, 200, c);
    ck_assert_int_ne(memcmp(a, c, sizeof a), 0);
    /* wraps around: batch 30 of 7 is samples 210..216, epoch 4 */
    clremat_data_batch(&s, 7, 30, 7, x1, y1);
    clremat_data_batch(&s, 7, 30, 7, x2, y2);
    ck_assert_int_eq(memcmp(x1, x2, sizeof x1), 0);
    ck_assert_int_eq(memcmp(y1, y2, sizeof y1), 0);
    for (int j = 0; j < 7; j++) {
        float xj[2], yj[1];
        clremat_data_batch(&s, 7, 210 + j, 1, xj, yj);
        ck_assert(xj[0] == x1[2 * j] && yj[0] == y1[j]);
    }
    free(s.x);
    free(s.y);
}
END_TEST

START_TEST(shuffle_is_uniform)
{
    /* which sample comes first, over 2000 epochs of n = 10: each about 200 */
    clremat_split s = numbered(10);
    int64_t first[10] = {0};
    float x[2], y[1];
    for (int64_t e = 0; e < 2000; e++) {
        clremat_data_batch(&s, 1, e * 10, 1, x, y);
        first[(int)x[0]]++;
    }
    for (int i = 0; i < 10; i++)
        ck_assert_msg(first[i] > 140 && first[i] < 260, "sample %d first in %lld of 2000 epochs", i,
                      (long long)first[i]);
    free(s.x);
    free(s.y);
}
END_TEST

/* In-memory tensors (the embedding API's data): with borrow an aligned F32
 * tensor is used in place, another dtype converted into a copy; the checks
 * of a data file apply either way; freeing leaves the caller's memory. */
START_TEST(tensors_in_place)
{
    static float x[6 * 3], y[6 * 2];
    static double vx[2 * 3], vy[2 * 2];
    clremat_st_tensor t[4] = {{"train_x", CLREMAT_ST_F32, 2, {6, 3}, 18, x}, {"train_y", CLREMAT_ST_F32, 2, {6, 2}, 12, y},
                              {"val_x", CLREMAT_ST_F64, 2, {2, 3}, 6, vx}, {"val_y", CLREMAT_ST_F64, 2, {2, 2}, 4, vy}};
    clremat_st_file f = {t, 4, NULL, 0, NULL, 0};
    clremat_dataset d;
    for (int i = 0; i < 18; i++)
        x[i] = (float)i;
    for (int i = 0; i < 6; i++)
        vx[i] = i * 0.5;
    ck_assert_int_eq(clremat_data_from_tensors(regression_model(3, 2), "arrays", &f, 1, &d), CLREMAT_OK);
    ck_assert_ptr_eq(d.train.x, x);
    ck_assert_ptr_eq(d.train.y, y);
    ck_assert_ptr_ne(d.val.x, NULL);
    ck_assert(d.val.x != (float *)vx && d.val.x[5] == 2.5f); /* F64: converted */
    ck_assert_int_eq(d.train.n, 6);
    clremat_data_free(&d); /* x and y stay the caller's */
    x[4] = NAN;
    expect_msg(clremat_data_from_tensors(regression_model(3, 2), "arrays", &f, 1, &d), CLREMAT_ERR_PARSE, "arrays",
               "train_x element 4", "not a finite float", NULL);
    ck_assert_int_eq(clremat_data_from_tensors(regression_model(3, 2), "arrays", &f, 0, &d), CLREMAT_ERR_PARSE);
    x[4] = 4;
    ck_assert_int_eq(clremat_data_from_tensors(regression_model(3, 2), "arrays", &f, 0, &d), CLREMAT_OK);
    ck_assert(d.train.x != x && d.train.x[17] == 17.0f); /* without borrow: a copy */
    clremat_data_free(&d);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("synthetic");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, clusters_task);
    tcase_add_test(tc, clusters_separable_in_few_dimensions);
    tcase_add_test(tc, splits_disjoint_and_prefix_stable);
    tcase_add_test(tc, sequence_tasks);
    tcase_add_test(tc, regression_task);
    tcase_add_test(tc, task_model_mismatch);
    suite_add_tcase(s, tc);
    tc = tcase_create("load");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, load_valid);
    tcase_add_test(tc, load_errors);
    tcase_add_test(tc, load_token_ids);
    suite_add_tcase(s, tc);
    tc = tcase_create("batches");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, batches_are_epoch_permutations);
    tcase_add_test(tc, batches_deterministic);
    tcase_add_test(tc, shuffle_is_uniform);
    tcase_add_test(tc, tensors_in_place);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return test_run_suite(suite()); }
