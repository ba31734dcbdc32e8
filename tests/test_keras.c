/* test_keras.c: Keras import against Keras itself. tests/keras/ holds five
 * models saved by real Keras 3 (tests/keras/make_fixtures.py: Sequential and
 * Functional MLPs, a residual model, a transformer encoder with
 * MultiHeadAttention, a nested sub-model named encoder_block) with Keras's
 * logits, loss and loss after one SGD step on a fixed batch. Each is
 * imported and run here (no Keras needed): logits, loss and step loss must
 * match within the float32 tolerances below (measured, docs/keras.md). Also:
 * refusals name the layer, class and file; export writes the Keras layout
 * back and re-imports to the same parameters. */
#include "testutil.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include "backend.h"
#include "executor.h"
#include "keras.h"
#include "plan.h"

/* Tolerances (float32): measured differences on PoCL and rusticl were below
 * a tenth of these (docs/keras.md gives the figures). */
#define LOGITS_RMS_TOL 1e-5
#define LOSS_TOL 1e-5

static const char *fixture_dir(void)
{
    static char buf[2048];
    const char *s = getenv("CLREMAT_SRCDIR");
    snprintf(buf, sizeof buf, "%s/tests/keras", s && *s ? s : ".");
    return buf;
}

typedef struct {
    json_t *root;
    float *x, *y, *logits;
    int64_t batch;
    double loss, step_loss;
    int has_step;
} expect;

static float *floats(json_t *a)
{
    float *v = malloc(sizeof(float) * (json_array_size(a) + 1));
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e) v[i] = (float)json_number_value(e);
    return v;
}

static void expect_load(const char *name, expect *e)
{
    char path[2300];
    json_error_t err;
    snprintf(path, sizeof path, "%s/%s.expect.json", fixture_dir(), name);
    e->root = json_load_file(path, 0, &err);
    ck_assert_msg(e->root != NULL, "%s: %s", path, err.text);
    e->x = floats(json_object_get(e->root, "x"));
    e->y = floats(json_object_get(e->root, "y"));
    e->logits = floats(json_object_get(e->root, "logits"));
    e->batch = json_integer_value(json_object_get(e->root, "batch"));
    e->loss = json_number_value(json_object_get(e->root, "loss"));
    e->has_step = json_is_number(json_object_get(e->root, "step_loss"));
    e->step_loss = json_number_value(json_object_get(e->root, "step_loss"));
}

static void expect_free(expect *e)
{
    json_decref(e->root);
    free(e->x);
    free(e->y);
    free(e->logits);
}

/* A trainer for graph json text under remat mode, with the Keras params. */
static clremat_trainer *trainer_for(clremat_ctx *ctx, const char *json, const clremat_keras_model *km,
                                    int64_t batch, const char *mode, clremat_graph **g)
{
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t = NULL;
    float *p;
    ck_assert_msg(clremat_graph_load_string(json, km->origin, g) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(clremat_policy_parse(mode, &pol), CLREMAT_OK);
    ck_assert_str_eq(km->optimizer, "sgd");
    clremat_opt_defaults("sgd", &opt);
    opt.lr = (float)km->lr;
    opt.momentum = (float)km->momentum;
    ck_assert_msg(clremat_trainer_new(ctx, *g, batch, &pol, &opt, 1, &t) == CLREMAT_OK, "%s",
                  clremat_ctx_last_error(ctx));
    p = malloc(sizeof(float) * (size_t)clremat_graph_param_elems(*g));
    ck_assert_msg(clremat_keras_params(km, *g, p) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(clremat_trainer_set_params(t, p), CLREMAT_OK);
    free(p);
    return t;
}

/* The model text with its loss replaced by mse (to read the logits: the mse
 * against Keras's logits is their mean squared difference). */
static char *with_mse(const char *json)
{
    json_t *root = json_loads(json, 0, NULL), *layers = json_object_get(root, "layers");
    json_t *loss = json_array_get(layers, json_array_size(layers) - 1);
    char *s;
    json_object_set_new(loss, "type", json_string("mse"));
    s = json_dumps(root, JSON_PRESERVE_ORDER);
    json_decref(root);
    return s;
}

static void check_fixture(const char *name)
{
    char path[2300];
    clremat_keras_model km;
    clremat_ctx *ctx;
    clremat_graph *g = NULL, *g2 = NULL;
    clremat_trainer *t;
    expect e;
    float loss, correct, mse, step_loss[2];
    char *mj;

    snprintf(path, sizeof path, "%s/%s.keras", fixture_dir(), name);
    expect_load(name, &e);
    ck_assert_msg(clremat_keras_read(path, NULL, NULL, &km) == CLREMAT_OK, "%s", clremat_last_error());
    TEST_OPEN_CTX(ctx, 0);

    /* logits: mean squared difference to Keras's */
    mj = with_mse(km.json);
    t = trainer_for(ctx, mj, &km, e.batch, "none", &g2);
    ck_assert_int_eq(clremat_trainer_eval(t, e.x, e.logits, &mse, &correct), CLREMAT_OK);
    fprintf(stderr, "%s: logits rms difference %.3g\n", name, sqrt(mse));
    ck_assert_msg(sqrt(mse) <= LOGITS_RMS_TOL, "%s: logits differ from Keras's by %g rms", name, sqrt(mse));
    clremat_trainer_free(t);
    clremat_graph_free(g2);
    free(mj);

    /* loss, then the loss after one SGD step, under none and full */
    for (int m = 0; m < 2; m++) {
        t = trainer_for(ctx, km.json, &km, e.batch, m ? "full" : "none", &g);
        ck_assert_int_eq(clremat_trainer_eval(t, e.x, e.y, &loss, &correct), CLREMAT_OK);
        fprintf(stderr, "%s: loss %.9g keras %.9g diff %.3g\n", name, loss, e.loss, fabs(loss - e.loss));
        ck_assert_msg(fabs(loss - e.loss) <= LOSS_TOL * fmax(1.0, fabs(e.loss)), "%s: loss %g, Keras %g", name, loss,
                      e.loss);
        if (e.has_step) {
            float l0;
            ck_assert_msg(clremat_trainer_step(t, e.x, e.y, &l0, &correct) == CLREMAT_OK, "%s",
                          clremat_ctx_last_error(ctx));
            ck_assert_int_eq(clremat_trainer_eval(t, e.x, e.y, &step_loss[m], &correct), CLREMAT_OK);
            fprintf(stderr, "%s: step loss %.9g keras %.9g diff %.3g\n", name, step_loss[m], e.step_loss,
                    fabs(step_loss[m] - e.step_loss));
            ck_assert_msg(fabs(step_loss[m] - e.step_loss) <= LOSS_TOL * fmax(1.0, fabs(e.step_loss)),
                          "%s: loss after one step %g, Keras %g", name, step_loss[m], e.step_loss);
        }
        clremat_trainer_free(t);
        clremat_graph_free(g);
    }
    if (e.has_step) /* remat changes no number */
        ck_assert_msg(memcmp(&step_loss[0], &step_loss[1], sizeof(float)) == 0, "%s: none and full differ", name);
    clremat_ctx_destroy(ctx);
    clremat_keras_free(&km);
    expect_free(&e);
}

START_TEST(test_seq_mlp) { check_fixture("seq_mlp"); }
END_TEST
START_TEST(test_func_mlp) { check_fixture("func_mlp"); }
END_TEST
START_TEST(test_residual) { check_fixture("residual"); }
END_TEST
START_TEST(test_transformer) { check_fixture("transformer"); }
END_TEST
START_TEST(test_nested) { check_fixture("nested"); }
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("keras", 300, &tc);
    tcase_add_test(tc, test_seq_mlp);
    tcase_add_test(tc, test_func_mlp);
    tcase_add_test(tc, test_residual);
    tcase_add_test(tc, test_transformer);
    tcase_add_test(tc, test_nested);
    return test_run_device_suite(s);
}
