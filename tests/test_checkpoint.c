/* test_checkpoint.c: optimizer state saved with the weights and resumed
 * training, and validation over every sample, on a device.
 *  - N steps, save, load, M steps equals N + M uninterrupted steps bitwise
 *    (every loss and every parameter) for sgd, adam and adamw, with
 *    non-default hyperparameters that the resumed run does not repeat (they
 *    come from the file), on a model with dropout and on the transformer,
 *    across passes over a small training split; loading the weights alone
 *    does not continue the run (the state matters);
 *  - the same through the clremat command (--save, then --load);
 *  - a file without state loads as weights; state of another optimizer, or
 *    from another seed, is refused with a message;
 *  - the validation loss and accuracy cover every sample, a last partial
 *    batch included, checked against batch-1 evaluations of each sample,
 *    and a partial batch needs no more device memory than a full one. */
#include "testutil.h"
#include "safetensors.h"
#include "train.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
    c->batch = 16;
    c->steps = steps;
    c->warmup = 0;
    c->seed = 9;
    c->train_samples = 40;  /* 2.5 batches a pass: batches span passes */
    c->val_samples = 20;
}

static void temp_path(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "/tmp/clremat-ckpt-%s-%ld.safetensors", tag, (long)getpid());
}

typedef struct resume_case {
    const char *model, *optimizer;
    unsigned set;                   /* hyperparameters given to the first runs only */
    double momentum, beta1, beta2, epsilon, weight_decay;
} resume_case;

static const resume_case resume_cases[] = {
    {"mlp_deep.json", "sgd", CLREMAT_OPT_SET_MOMENTUM | CLREMAT_OPT_SET_WEIGHT_DECAY, 0.7, 0, 0, 0, 1e-3},
    {"mlp_deep.json", "adam", CLREMAT_OPT_SET_BETA1 | CLREMAT_OPT_SET_BETA2 | CLREMAT_OPT_SET_EPS, 0, 0.8, 0.95,
     1e-6, 0},
    {"mlp_deep.json", "adamw", CLREMAT_OPT_SET_WEIGHT_DECAY, 0, 0, 0, 0, 0.05},
    {"transformer.json", "adam", CLREMAT_OPT_SET_BETA2, 0, 0, 0.99, 0, 0},
    {"transformer.json", "sgd", 0, 0, 0, 0, 0, 0},
};

static void give_hparams(clremat_train_config *c, const resume_case *rc)
{
    c->opt_set = rc->set;
    c->momentum = rc->momentum;
    c->beta1 = rc->beta1;
    c->beta2 = rc->beta2;
    c->epsilon = rc->epsilon;
    c->weight_decay = rc->weight_decay;
}

START_TEST(test_resume_bitwise)
{
    const resume_case *rc = &resume_cases[_i];
    int64_t n = test_reduced() ? 2 : 4, m = test_reduced() ? 2 : 4;
    clremat_ctx *ctx;
    clremat_train_config cfg;
    clremat_train_result whole, first, rest, fresh;
    char path[256];
    temp_path(path, sizeof path, "resume");
    TEST_OPEN_CTX(ctx, 0);

    base_config(&cfg, rc->model, n + m);
    cfg.optimizer = rc->optimizer;
    cfg.lr = 0.01;
    give_hparams(&cfg, rc);
    ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &whole) == CLREMAT_OK, "%s", clremat_last_error());

    cfg.steps = n;
    cfg.save = path;
    ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &first) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(memcmp(first.losses, whole.losses, sizeof(float) * (size_t)n), 0);

    /* the continuation names neither the optimizer nor its hyperparameters:
     * they come from the file, as do the moments, step count and data position */
    base_config(&cfg, rc->model, m);
    cfg.load = path;
    ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &rest) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(rest.start_step, n);
    ck_assert_int_eq(rest.steps_run, m);
    ck_assert_int_eq(rest.opt.kind, whole.opt.kind);
    ck_assert_int_eq(memcmp(&rest.opt, &whole.opt, sizeof rest.opt), 0);
    for (int64_t s = 0; s < m; s++)
        ck_assert_msg(memcmp(&rest.losses[s], &whole.losses[n + s], sizeof(float)) == 0,
                      "%s %s: step %lld after resume: loss %.9g, uninterrupted %.9g", rc->model, rc->optimizer,
                      (long long)(n + s + 1), (double)rest.losses[s], (double)whole.losses[n + s]);
    ck_assert_uint_eq(rest.param_bytes, whole.param_bytes);
    ck_assert_msg(memcmp(rest.final_params, whole.final_params, whole.param_bytes) == 0,
                  "%s %s: parameters after resume differ from the uninterrupted run", rc->model, rc->optimizer);
    ck_assert_int_eq(memcmp(&rest.val_loss, &whole.val_loss, sizeof(float)), 0);

    /* the weights alone do not continue the run: the state is what makes it exact */
    cfg.weights_only = 1;
    cfg.optimizer = rc->optimizer;
    give_hparams(&cfg, rc);
    cfg.lr = 0.01;
    ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &fresh) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(fresh.start_step, 0);
    ck_assert_int_ne(memcmp(fresh.final_params, whole.final_params, whole.param_bytes), 0);

    clremat_train_result_free(&whole);
    clremat_train_result_free(&first);
    clremat_train_result_free(&rest);
    clremat_train_result_free(&fresh);
    clremat_ctx_destroy(ctx);
    unlink(path);
}
END_TEST

/* Copies the weight tensors of src (names without '@') to dst: a weights
 * file as earlier versions wrote it, with no state and no metadata. */
static void strip_state(const char *src, const char *dst)
{
    clremat_st_file f;
    clremat_st_tensor *ts;
    size_t k = 0;
    ck_assert_int_eq(clremat_st_read(src, &f), CLREMAT_OK);
    ck_assert_ptr_nonnull(clremat_st_meta_get(&f, "clremat.optimizer"));
    ts = calloc(f.n + 1, sizeof *ts);
    for (size_t i = 0; i < f.n; i++)
        if (f.tensors[i].name[0] != '@')
            ts[k++] = f.tensors[i];
    ck_assert_uint_lt(k, f.n);
    ck_assert_int_eq(clremat_st_write(dst, ts, k), CLREMAT_OK);
    free(ts);
    clremat_st_free(&f);
}

/* Rewrites src into dst with metadata entry key set to value (NULL: left out). */
static void rewrite_meta(const char *src, const char *dst, const char *key, const char *value)
{
    clremat_st_file f;
    clremat_st_meta m[32];
    size_t k = 0;
    ck_assert_int_eq(clremat_st_read(src, &f), CLREMAT_OK);
    ck_assert_uint_le(f.n_meta, 31);
    for (size_t i = 0; i < f.n_meta; i++)
        if (strcmp(f.meta[i].key, key) != 0)
            m[k++] = f.meta[i];
    if (value) {
        m[k].key = key;
        m[k++].value = value;
    }
    ck_assert_int_eq(clremat_st_write_meta(dst, f.tensors, f.n, m, k), CLREMAT_OK);
    clremat_st_free(&f);
}

START_TEST(test_load_without_state_and_refusals)
{
    clremat_ctx *ctx;
    clremat_train_config cfg;
    clremat_train_result a, b, c;
    clremat_checkpoint_info info;
    char path[256], bare[256];
    temp_path(path, sizeof path, "state");
    temp_path(bare, sizeof bare, "bare");
    TEST_OPEN_CTX(ctx, 0);
    base_config(&cfg, "mlp_deep.json", 2);
    cfg.optimizer = "adam";
    cfg.save = path;
    ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &a) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(clremat_checkpoint_info_read(path, &info), CLREMAT_OK);
    ck_assert_int_eq(info.has_state, 1);
    ck_assert_int_eq(info.opt.kind, CLREMAT_OPT_ADAM);
    ck_assert_int_eq(info.step, 2);
    ck_assert_int_eq(info.data_position, 32);
    ck_assert_uint_eq(info.seed, 9);

    /* a file without state: the weights load, training starts at step 0 with
     * these weights (the first loss is theirs, not a fresh initialization's) */
    strip_state(path, bare);
    ck_assert_int_eq(clremat_checkpoint_info_read(bare, &info), CLREMAT_OK);
    ck_assert_int_eq(info.has_state, 0);
    base_config(&cfg, "mlp_deep.json", 1);
    cfg.load = bare;
    ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &b) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(b.start_step, 0);
    base_config(&cfg, "mlp_deep.json", 1);
    ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &c) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_ne(memcmp(&b.losses[0], &c.losses[0], sizeof(float)), 0);
    clremat_train_result_free(&b);
    clremat_train_result_free(&c);

    /* state of another optimizer, or of another seed, is refused */
    base_config(&cfg, "mlp_deep.json", 1);
    cfg.load = path;
    cfg.optimizer = "sgd";
    ck_assert_int_eq(clremat_train_run_ctx(ctx, &cfg, &b), CLREMAT_ERR_MISMATCH);
    ck_assert_msg(strstr(clremat_last_error(), "adam optimizer state") && strstr(clremat_last_error(), "sgd"), "%s",
                  clremat_last_error());
    clremat_train_result_free(&b);
    cfg.optimizer = NULL;
    cfg.seed = 10;
    ck_assert_int_eq(clremat_train_run_ctx(ctx, &cfg, &b), CLREMAT_ERR_MISMATCH);
    ck_assert_msg(strstr(clremat_last_error(), "seed 9"), "%s", clremat_last_error());
    clremat_train_result_free(&b);
    /* a hyperparameter the saved optimizer does not use is refused too */
    cfg.seed = 9;
    cfg.opt_set = CLREMAT_OPT_SET_MOMENTUM;
    cfg.momentum = 0.5;
    ck_assert_int_eq(clremat_train_run_ctx(ctx, &cfg, &b), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(clremat_last_error(), "momentum"), "%s", clremat_last_error());
    clremat_train_result_free(&b);
    /* malformed state metadata is refused, naming the entry */
    cfg.opt_set = 0;
    {
        static const struct {
            const char *key, *value, *want;
        } bad[] = {
            {"clremat.step", "-1", "'clremat.step' must be an integer"},
            {"clremat.step", "12x", "got \"12x\""},
            {"clremat.data_position", NULL, "without metadata 'clremat.data_position'"},
            {"clremat.seed", "", "'clremat.seed' must be"},
            {"clremat.beta1", "1.5", "beta1 must be in [0, 1)"},
            {"clremat.beta2", NULL, "without metadata 'clremat.beta2'"},
            {"clremat.epsilon", "tiny", "'clremat.epsilon' must be a number"},
            {"clremat.epsilon", "0x1p-20", "'clremat.epsilon' must be a number, in decimal, got \"0x1p-20\""},
            {"clremat.beta1", " 0.9", "got \" 0.9\""},
            {"clremat.optimizer", "lion", "known: sgd, adam, adamw"},
            /* state tensors without the entry that says whose: once loaded as
             * weights alone from step 0, the state silently dropped */
            {"clremat.optimizer", NULL, "holds optimizer state (tensor '@optimizer/"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            rewrite_meta(path, bare, bad[i].key, bad[i].value);
            ck_assert_int_eq(clremat_checkpoint_info_read(bare, &info), CLREMAT_ERR_PARSE);
            ck_assert_msg(strstr(clremat_last_error(), bad[i].want), "%s=%s: '%s' lacks '%s'", bad[i].key,
                          bad[i].value ? bad[i].value : "(none)", clremat_last_error(), bad[i].want);
            cfg.load = bare;
            ck_assert_int_eq(clremat_train_run_ctx(ctx, &cfg, &b), CLREMAT_ERR_PARSE);
            clremat_train_result_free(&b);
        }
        cfg.load = path;
        /* a state tensor missing: refused, naming it */
        {
            clremat_st_file f;
            ck_assert_int_eq(clremat_st_read(path, &f), CLREMAT_OK);
            ck_assert_int_eq(strncmp(f.tensors[f.n - 1].name, "@optimizer/v/", 13), 0);
            ck_assert_int_eq(clremat_st_write_meta(bare, f.tensors, f.n - 1, f.meta, f.n_meta), CLREMAT_OK);
            clremat_st_free(&f);
            cfg.load = bare;
            ck_assert_int_eq(clremat_train_run_ctx(ctx, &cfg, &b), CLREMAT_ERR_MISMATCH);
            ck_assert_msg(strstr(clremat_last_error(), "no tensor '@optimizer/v/"), "%s", clremat_last_error());
            clremat_train_result_free(&b);
            cfg.load = path;
        }
    }
    /* the command: exit 1, the file and the way out named */
    {
        char args[2048], err[4096];
        rewrite_meta(path, bare, "clremat.optimizer", NULL);
        snprintf(args, sizeof args, "train %s --steps 1 --quiet --load %s", model_path("mlp_deep.json"), bare);
        ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
        ck_assert_msg(strstr(err, bare) && strstr(err, "no metadata 'clremat.optimizer'") &&
                          strstr(err, "--weights-only"),
                      "%s", err);
        snprintf(args, sizeof args, "train %s --steps 1 --quiet --load %s --weights-only", model_path("mlp_deep.json"),
                 bare);
        ck_assert_msg(test_run_tool(args, err, sizeof err) == 0, "%s", err);
    }
    /* with weights_only another optimizer takes the weights */
    cfg.opt_set = 0;
    cfg.optimizer = "sgd";
    cfg.weights_only = 1;
    ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &b) == CLREMAT_OK, "%s", clremat_last_error());
    clremat_train_result_free(&b);

    clremat_train_result_free(&a);
    clremat_ctx_destroy(ctx);
    unlink(path);
    unlink(bare);
}
END_TEST

/* Runs the clremat command with args; returns its exit status and its stdout in out. */
static int run_tool_stdout(const char *args, char *out, size_t len)
{
    char cmd[4096];
    const char *tool = getenv("CLREMAT_TOOL");
    FILE *p;
    size_t n;
    int st;
    snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", tool ? tool : "tools/clremat", args);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    n = fread(out, 1, len - 1, p);
    out[n] = 0;
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The text of the "losses" array of a --json report. */
static void losses_of(const char *json, char *out, size_t len)
{
    const char *a = strstr(json, "\"losses\": ["), *b;
    ck_assert_ptr_nonnull(a);
    a += strlen("\"losses\": [");
    b = strchr(a, ']');
    ck_assert_ptr_nonnull(b);
    snprintf(out, len, "%.*s", (int)(b - a), a);
}

START_TEST(test_cli_resume)
{
    static char out[1 << 16], whole[4096], first[4096], rest[4096];
    char path[256], args[9000], common[1400], device[64] = "";
    const char *dev = getenv("CLREMAT_TEST_DEVICE");
    temp_path(path, sizeof path, "cli");
    if (dev && *dev)
        snprintf(device, sizeof device, "--device %s", dev);
    snprintf(common, sizeof common, "train %s %s --batch 16 --optimizer sgd --momentum 0.6 --seed 4 --quiet --json",
             model_path("mlp_deep.json"), device);
    snprintf(args, sizeof args, "%s --steps 5", common);
    ck_assert_int_eq(run_tool_stdout(args, out, sizeof out), 0);
    losses_of(out, whole, sizeof whole);
    snprintf(args, sizeof args, "%s --steps 3 --save %s", common, path);
    ck_assert_int_eq(run_tool_stdout(args, out, sizeof out), 0);
    losses_of(out, first, sizeof first);
    snprintf(args, sizeof args, "train %s %s --batch 16 --seed 4 --quiet --json --steps 2 --load %s",
             model_path("mlp_deep.json"), device, path);
    ck_assert_int_eq(run_tool_stdout(args, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"start_step\": 3"), "%s", out);
    ck_assert_msg(strstr(out, "\"optimizer\": \"sgd\"") && strstr(out, "\"momentum\": 0.600000024"), "%s", out);
    losses_of(out, rest, sizeof rest);
    /* whole = first, rest */
    snprintf(args, sizeof args, "%s, %s", first, rest);
    ck_assert_msg(strcmp(args, whole) == 0, "resumed: [%s] / uninterrupted: [%s]", args, whole);
    unlink(path);
}
END_TEST

/* The hyperparameter options: strict values, range checks naming the value,
 * refused where the optimizer does not use them, defaults in --help. */
START_TEST(test_cli_hparams)
{
    static const struct {
        const char *args, *want;
    } bad[] = {
        {"--optimizer sgd --beta1 0.9", "--beta1 applies to adam and adamw only, not to --optimizer sgd"},
        {"--optimizer sgd --epsilon 1e-6", "--epsilon applies"},
        {"--momentum 0.5", "--momentum applies to sgd only, not to --optimizer adam"},
        {"--optimizer adamw --momentum 0.5", "not to --optimizer adamw"},
        {"--optimizer sgd --momentum 1", "--momentum takes a number in [0, 1), got '1'"},
        {"--optimizer sgd --momentum 0.5x", "got '0.5x'"},
        {"--beta1 -0.1", "--beta1 takes a number in [0, 1), got '-0.1'"},
        {"--beta2 0.99999999", "--beta2 takes a number in [0, 1), got '0.99999999'"}, /* 1 as a float */
        {"--epsilon 0", "--epsilon takes a positive number, got '0'"},
        {"--epsilon 1e-50", "got '1e-50'"}, /* 0 as a float */
        {"--weight-decay -1", "--weight-decay takes a number >= 0, got '-1'"},
        {"--weight-decay inf", "got 'inf'"},
        {"--optimizer rmsprop", "--optimizer takes sgd, adam or adamw, got 'rmsprop'"},
        {"--weights-only", "--weights-only applies to --load"},
    };
    char err[4096], args[2048];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "train %s --steps 1 --quiet %s", model_path("mlp_deep.json"), bad[i].args);
        ck_assert_int_eq(test_run_tool(args, err, sizeof err), 2);
        ck_assert_msg(strstr(err, bad[i].want), "'%s': '%s' lacks '%s'", bad[i].args, err, bad[i].want);
    }
    snprintf(args, sizeof args, "compare %s --optimizer sgd --beta2 0.9", model_path("mlp_deep.json"));
    ck_assert_int_eq(test_run_tool(args, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "--beta2 applies"), "%s", err);
    /* --help shows every default */
    {
        static char out[1 << 14];
        ck_assert_int_eq(run_tool_stdout("train --help", out, sizeof out), 0);
        ck_assert_msg(strstr(out, "--momentum X") && strstr(out, "(0.9)") && strstr(out, "(0.999)") &&
                          strstr(out, "(1e-8)") && strstr(out, "adamw 0.01") && strstr(out, "sgd 0.01, adam and adamw 0.001"),
                      "%s", out);
    }
}
END_TEST

/* Validation over 10 samples at batch 4 (two whole batches and one of 2),
 * and over 3 samples (less than one batch): the mean loss and the accuracy
 * over every sample, against each sample evaluated alone at batch 1 with
 * the same parameters. */
START_TEST(test_validation_every_sample)
{
    static const int64_t nval[] = {10, 3};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    for (int k = 0; k < 2; k++) {
        clremat_train_config cfg;
        clremat_train_result r;
        clremat_graph *g;
        clremat_dataset d;
        clremat_policy pol;
        clremat_trainer *one;
        double sum = 0, correct = 0;
        base_config(&cfg, "mlp_deep.json", 3);
        cfg.batch = 4;
        cfg.optimizer = "adam";
        cfg.train_samples = 64;
        cfg.val_samples = nval[k];
        ck_assert_msg(clremat_train_run_ctx(ctx, &cfg, &r) == CLREMAT_OK, "%s", clremat_last_error());
        ck_assert_msg(isfinite(r.val_loss) && isfinite(r.val_accuracy), "val_loss %g accuracy %g",
                      (double)r.val_loss, (double)r.val_accuracy);
        /* the same split, each sample alone */
        ck_assert_int_eq(clremat_graph_load(cfg.model_path, &g), CLREMAT_OK);
        ck_assert_int_eq(clremat_data_synthetic(g, NULL, cfg.seed, cfg.train_samples, nval[k], &d), CLREMAT_OK);
        clremat_policy_parse("none", &pol);
        ck_assert_int_eq(clremat_trainer_new(ctx, g, 1, &pol, &r.opt, cfg.seed, &one), CLREMAT_OK);
        ck_assert_int_eq(clremat_trainer_set_params(one, r.final_params), CLREMAT_OK);
        for (int64_t i = 0; i < nval[k]; i++) {
            float l, c;
            ck_assert_int_eq(clremat_trainer_eval(one, d.val.x + i * d.val.x_elems, d.val.y + i * d.val.y_elems, &l, &c),
                             CLREMAT_OK);
            sum += l;
            correct += c;
        }
        ck_assert_msg(fabs(r.val_loss - sum / (double)nval[k]) <= 1e-5 * fabs(sum / (double)nval[k]),
                      "%lld samples at batch 4: val_loss %.9g, mean of each sample's loss %.9g", (long long)nval[k],
                      (double)r.val_loss, sum / (double)nval[k]);
        ck_assert_msg(r.val_accuracy == (float)(correct / (double)nval[k]), "accuracy %.9g, per sample %.9g",
                      (double)r.val_accuracy, correct / (double)nval[k]);
        clremat_trainer_free(one);
        clremat_data_free(&d);
        clremat_graph_free(g);
        clremat_train_result_free(&r);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* A partial evaluation batch: the loss of its samples alone, on the
 * allocations of a full batch (the same live peak, within the plan). */
START_TEST(test_partial_batch_memory)
{
    clremat_ctx *ctx;
    clremat_graph *g;
    clremat_dataset d;
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t;
    float l4, c4, l2, c2, la, ca, lb, cb;
    uint64_t full_peak, part_peak;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_graph_load(model_path("transformer.json"), &g), CLREMAT_OK);
    ck_assert_int_eq(clremat_data_synthetic(g, NULL, 2, 16, 8, &d), CLREMAT_OK);
    clremat_policy_parse("none", &pol);
    clremat_opt_defaults("adam", &opt);
    ck_assert_int_eq(clremat_trainer_new(ctx, g, 4, &pol, &opt, 2, &t), CLREMAT_OK);
    clremat_pool_reset_peaks(ctx->pool);
    ck_assert_int_eq(clremat_trainer_eval(t, d.val.x, d.val.y, &l4, &c4), CLREMAT_OK);
    full_peak = clremat_pool_get_stats(ctx->pool).live_peak;
    clremat_pool_reset_peaks(ctx->pool);
    ck_assert_int_eq(clremat_trainer_eval_n(t, d.val.x, d.val.y, 2, &l2, &c2), CLREMAT_OK);
    part_peak = clremat_pool_get_stats(ctx->pool).live_peak;
    ck_assert_uint_eq(part_peak, full_peak);
    ck_assert_uint_le(part_peak, t->plan.peak_bytes);
    /* the two halves of the full batch, each as a partial batch, average to it */
    ck_assert_int_eq(clremat_trainer_eval_n(t, d.val.x, d.val.y, 2, &la, &ca), CLREMAT_OK);
    ck_assert_int_eq(clremat_trainer_eval_n(t, d.val.x + 2 * d.val.x_elems, d.val.y + 2 * d.val.y_elems, 2, &lb, &cb),
                     CLREMAT_OK);
    ck_assert_msg(fabs((la + lb) / 2.0 - l4) <= 1e-6 * fabs(l4), "halves %.9g %.9g, whole %.9g", (double)la,
                  (double)lb, (double)l4);
    ck_assert_float_eq(ca + cb, c4);
    ck_assert_int_eq(clremat_trainer_eval_n(t, d.val.x, d.val.y, 0, &la, &ca), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_trainer_eval_n(t, d.val.x, d.val.y, 5, &la, &ca), CLREMAT_ERR_INVALID_ARGUMENT);
    clremat_trainer_free(t);
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("checkpoint", 600, &tc);
    int ncases = (int)(sizeof resume_cases / sizeof resume_cases[0]);
    tcase_add_loop_test(tc, test_resume_bitwise, 0, test_reduced() ? 2 : ncases);
    tcase_add_test(tc, test_load_without_state_and_refusals);
    tcase_add_test(tc, test_cli_resume);
    tcase_add_test(tc, test_cli_hparams);
    tcase_add_test(tc, test_validation_every_sample);
    tcase_add_test(tc, test_partial_batch_memory);
    return test_run_device_suite(s);
}
