/* test_train.c: training end to end on a device: every bundled model learns
 * (loss falls, validation accuracy well above chance), two runs with one
 * seed give bitwise-identical losses, save then load gives the identical
 * loss on the next step, a steady-state step creates no new buffers, the
 * batchnorm convnets evaluate (moving statistics) well above chance, and
 * the clremat command refuses bad input with a message and a non-zero exit. */
#include "testutil.h"
#include "train.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static char *model_path(const char *file)
{
    static char path[4][1024];
    static int k;
    const char *dir = getenv("CLREMAT_MODELS");
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dir ? dir : "models", file);
    return path[k];
}

static void base_config(clremat_train_config *c, const char *file, int64_t steps)
{
    memset(c, 0, sizeof *c);
    c->model_path = model_path(file);
    c->batch = 32;
    c->steps = steps;
    c->warmup = 2;
    c->seed = 3;
    c->optimizer = "adam";
    c->train_samples = 2048;
    c->val_samples = 256;
}

static double mean(const float *v, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += v[i];
    return s / (double)n;
}

typedef struct learn_case {
    const char *file;
    int64_t steps;
    double min_accuracy;    /* NaN: regression */
} learn_case;

static const learn_case learn[] = {
    {"mlp_deep.json", 120, 0.6},        /* 8 classes: chance 0.125 */
    {"transformer.json", 250, 0.4},     /* 16 tokens: chance 0.0625 */
    {"resnet_mlp.json", 100, 0.6},      /* 8 classes */
    {"regression.json", 150, NAN},
    {"cnn_small.json", 100, 0.6},       /* 10 grating textures (the images task): chance 0.1 */
};

START_TEST(test_model_learns)
{
    const learn_case *lc = &learn[_i];
    clremat_ctx *ctx;
    clremat_train_config cfg;
    clremat_train_result r;
    TEST_OPEN_CTX(ctx, 0);
    base_config(&cfg, lc->file, lc->steps);
    ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &r) == CLREMAT_OK, "%s: %s", lc->file, clremat_last_error());
    ck_assert_int_eq(r.steps_run, lc->steps);
    {
        double first = mean(r.losses, 10), last = mean(r.losses + lc->steps - 10, 10);
        ck_assert_msg(last < 0.7 * first, "%s: loss %.4f -> %.4f did not fall", lc->file, first, last);
    }
    if (isnan(lc->min_accuracy))
        ck_assert_msg(r.val_loss < 0.5 * mean(r.losses, 5), "%s: validation loss %.4f", lc->file, (double)r.val_loss);
    else
        ck_assert_msg(r.val_accuracy >= lc->min_accuracy, "%s: validation accuracy %.3f < %.3f", lc->file,
                      (double)r.val_accuracy, lc->min_accuracy);
    ck_assert_uint_eq(r.measured_peak, r.predicted_peak);
    ck_assert_uint_eq(r.buffers_created_after_first_step, 0);
    clremat_train_result_free(&r);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* The bundled batchnorm convnets on the images task (10 classes, chance
 * 0.1): validation, which normalizes with the moving statistics, beats
 * chance by a clear margin. The smallest honest configuration for CI:
 * batch 16, 128 validation samples, and few steps: measured here on PoCL,
 * resnet20 0.695 after 30 steps, densenet 1.000 after 30, mobilenet 0.867
 * after 60 (mobilenet was still at chance after 30), about 38, 57 and 32 s
 * of CPU. At Keras's momentum 0.99 MobileNet evaluated at chance even after
 * 300 steps (docs/model-format.md, batchnorm). Left out on slow devices. */
static const learn_case convnets[] = {
    {"resnet20.json", 30, 0.5},
    {"densenet.json", 30, 0.5},
    {"mobilenet.json", 60, 0.5},
};

START_TEST(test_convnet_learns)
{
    const learn_case *lc = &convnets[_i];
    clremat_ctx *ctx;
    clremat_train_config cfg;
    clremat_train_result r;
    TEST_OPEN_CTX(ctx, 0);
    base_config(&cfg, lc->file, lc->steps);
    cfg.batch = 16;
    cfg.val_samples = 128;
    ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &r) == CLREMAT_OK, "%s: %s", lc->file, clremat_last_error());
    {
        double first = mean(r.losses, 5), last = mean(r.losses + lc->steps - 5, 5);
        fprintf(stderr, "%s: %lld steps of 16, loss %.3f -> %.3f, validation accuracy %.3f (loss %.3f)\n", lc->file,
                (long long)lc->steps, first, last, (double)r.val_accuracy, (double)r.val_loss);
        ck_assert_msg(last < 0.7 * first, "%s: loss %.4f -> %.4f did not fall", lc->file, first, last);
    }
    ck_assert_msg(r.val_accuracy >= lc->min_accuracy, "%s: validation accuracy %.3f < %.3f (chance 0.1)", lc->file,
                  (double)r.val_accuracy, lc->min_accuracy);
    ck_assert_uint_eq(r.measured_peak, r.predicted_peak);
    clremat_train_result_free(&r);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_same_seed_bitwise)
{
    clremat_ctx *ctx;
    clremat_train_config cfg;
    clremat_train_result a, b, c;
    TEST_OPEN_CTX(ctx, 0);
    base_config(&cfg, "transformer.json", 6);
    ck_assert_int_eq(clremat_train_run_ctx(ctx, &cfg, &a), CLREMAT_OK);
    ck_assert_int_eq(clremat_train_run_ctx(ctx, &cfg, &b), CLREMAT_OK);
    ck_assert_int_eq(memcmp(a.losses, b.losses, sizeof(float) * 6), 0);
    ck_assert_int_eq(memcmp(a.final_params, b.final_params, a.param_bytes), 0);
    cfg.seed = 4; /* and a different seed gives a different run */
    ck_assert_int_eq(clremat_train_run_ctx(ctx, &cfg, &c), CLREMAT_OK);
    ck_assert_int_ne(memcmp(a.losses, c.losses, sizeof(float) * 6), 0);
    clremat_train_result_free(&a);
    clremat_train_result_free(&b);
    clremat_train_result_free(&c);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Trains 4 steps and saves; a fresh trainer loads the file; the next step
 * (same batch, same dropout key) gives the identical loss. */
START_TEST(test_save_load_next_step)
{
    clremat_ctx *ctx;
    clremat_graph *g;
    clremat_dataset d;
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *a, *b;
    char path[] = "/tmp/clremat-weightsXXXXXX";
    float x[32 * 16], y[32 * 16], la, lb, ca, cb;
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_graph_load(model_path("transformer.json"), &g), CLREMAT_OK);
    ck_assert_int_eq(clremat_data_synthetic(g, NULL, 5, 256, 32, &d), CLREMAT_OK);
    ck_assert_uint_le((uint64_t)d.train.x_elems, 16);
    clremat_policy_parse("none", &pol);
    clremat_opt_defaults("adam", &opt);
    ck_assert_int_eq(clremat_trainer_new(ctx, g, 32, &pol, &opt, 5, &a), CLREMAT_OK);
    for (int s = 0; s < 4; s++) {
        clremat_data_batch(&d.train, 5, s, 32, x, y);
        ck_assert_int_eq(clremat_trainer_step(a, x, y, &la, &ca), CLREMAT_OK);
    }
    ck_assert_msg(clremat_weights_save(a, path) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(clremat_trainer_new(ctx, g, 32, &pol, &opt, 99, &b), CLREMAT_OK); /* other init seed */
    ck_assert_msg(clremat_weights_load(b, path) == CLREMAT_OK, "%s", clremat_last_error());
    b->seed = a->seed;  /* the dropout key of the run being continued */
    b->step = a->step;
    clremat_data_batch(&d.train, 5, 4, 32, x, y);
    ck_assert_int_eq(clremat_trainer_step(a, x, y, &la, &ca), CLREMAT_OK);
    ck_assert_int_eq(clremat_trainer_step(b, x, y, &lb, &cb), CLREMAT_OK);
    ck_assert_msg(memcmp(&la, &lb, sizeof la) == 0, "loss after load %.9g != %.9g", (double)lb, (double)la);
    clremat_trainer_free(b);
    /* a file for another model is refused with the first mismatch named */
    {
        clremat_graph *g2;
        clremat_trainer *c;
        ck_assert_int_eq(clremat_graph_load(model_path("mlp_deep.json"), &g2), CLREMAT_OK);
        ck_assert_int_eq(clremat_trainer_new(ctx, g2, 4, &pol, &opt, 1, &c), CLREMAT_OK);
        ck_assert_int_eq(clremat_weights_load(c, path), CLREMAT_ERR_MISMATCH);
        ck_assert_ptr_nonnull(strstr(clremat_last_error(), "no tensor"));
        clremat_trainer_free(c);
        clremat_graph_free(g2);
    }
    clremat_trainer_free(a);
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
    unlink(path);
}
END_TEST

/* A diverging run stops with the step and the first non-finite layer. */
START_TEST(test_nonfinite_stops)
{
    clremat_ctx *ctx;
    clremat_train_config cfg;
    clremat_train_result r;
    TEST_OPEN_CTX(ctx, 0);
    base_config(&cfg, "mlp_deep.json", 30);
    cfg.optimizer = "sgd";
    cfg.lr = 1e30;
    ck_assert_int_eq(clremat_train_run_ctx(ctx, &cfg, &r), CLREMAT_ERR_NONFINITE);
    ck_assert_int_eq(r.stopped_nonfinite, 1);
    ck_assert_int_lt(r.steps_run, 30);
    ck_assert_msg(strstr(r.message, "not finite") && strstr(r.message, "first layer whose output is non-finite: 'dense_"),
                  "%s", r.message);
    ck_assert_uint_eq(clremat_pool_get_stats(ctx->pool).live_bytes, 0); /* everything released */
    clremat_train_result_free(&r);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_cli_errors)
{
    char err[4096], args[1200];
    ck_assert_int_ne(test_run_tool("train /nonexistent/model.json --steps 1", err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/model.json"));
    snprintf(args, sizeof args, "train %s --steps 1 --remat list_of_layers:nope --quiet", model_path("mlp_deep.json"));
    ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "'nope'"));
    snprintf(args, sizeof args, "train %s --steps 1 --memory-limit 1KiB --quiet", model_path("mlp_deep.json"));
    ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "needs"));
    snprintf(args, sizeof args, "train %s --steps 1 --data sequence --quiet", model_path("mlp_deep.json"));
    ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "sequence"));
    snprintf(args, sizeof args, "train %s --batch zero", model_path("mlp_deep.json"));
    ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "--batch"));
    ck_assert_int_ne(test_run_tool("--device no-such-device devices", err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "devices are"));
    /* a malformed model file: file:line:column and what was expected */
    {
        char path[] = "/tmp/clremat-badmodelXXXXXX";
        const char *bad = "{\"name\": \"m\", \"input\": {\"shape\": [4]},\n \"layers\": [\n"
                          "  {\"name\": \"d\", \"type\": \"dense\", \"units\": \"many\"},\n"
                          "  {\"name\": \"loss\", \"type\": \"mse\"}]}\n";
        int fd = mkstemp(path);
        char want[1100];
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, bad, strlen(bad)), (int)strlen(bad));
        close(fd);
        snprintf(args, sizeof args, "train %s --steps 1 --quiet", path);
        ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
        snprintf(want, sizeof want, "%s:3:", path);
        ck_assert_msg(strstr(err, want) != NULL, "%s", err);
        ck_assert_ptr_nonnull(strstr(err, "units"));
        snprintf(args, sizeof args, "plan %s", path);
        ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
        ck_assert_msg(strstr(err, want) != NULL, "%s", err);
        unlink(path);
    }
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("train", 900, &tc);
    /* slow devices (CLREMAT_TEST_REDUCED): only the two cheapest models
     * (resnet_mlp, regression) train to convergence; the others still run
     * there in test_remat, test_faults and test_soak */
    tcase_add_loop_test(tc, test_model_learns, test_reduced() ? 2 : 0, (int)(sizeof learn / sizeof learn[0]));
    if (!test_reduced())
        tcase_add_loop_test(tc, test_convnet_learns, 0, (int)(sizeof convnets / sizeof convnets[0]));
    tcase_add_test(tc, test_same_seed_bitwise);
    tcase_add_test(tc, test_save_load_next_step);
    tcase_add_test(tc, test_cli_errors);
    tcase_add_test(tc, test_nonfinite_stops);
    return test_run_device_suite(s);
}
