/* test_accumulate.c: gradient accumulation end to end on a device, on every
 * bundled model. A step of BATCH samples with --accumulate K runs K
 * micro-batches through one plan made per micro-batch:
 * - the measured high-water of live bytes equals the prediction to the
 *   byte, the accumulation buffer (one float per parameter) counted in the
 *   plan's fixed bytes, and the peak is that of a plan at the micro-batch
 *   plus that buffer;
 * - losses and parameters are bitwise identical across remat modes at the
 *   same K (none, full, activations, a block, budget);
 * - losses and parameters match the unsplit batch (K = 1) within the
 *   float32 tolerance documented in docs/user-guide.md (relative 1e-5 on
 *   losses with Adam and SGD, absolute 1e-5 on parameters with SGD, after
 *   STEPS steps); the first step's
 *   loss, which depends only on the initial parameters and the dropout
 *   masks, within 1e-6, so a micro-batch drawing its own masks would fail;
 * - a batch not divisible by K is refused with the numbers, by the library
 *   and by the command (train and plan), and --json reports K;
 * - the planner alone: fixed bytes grow by the buffer, budget plans per
 *   micro-batch fit their budget; clremat fit's configurations with K: the
 *   largest batch is a multiple of K that fits while the next multiple does
 *   not, a batch not divisible by K is not planned and says why;
 * - batchnorm's moving statistics take one update a step from the whole
 *   batch's statistics combined over the micro-batches (tolerances at
 *   test_bn_moving_once_per_step). */
#include "testutil.h"
#include "testmodel.h"
#include "data.h"
#include "executor.h"
#include "fit.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct model_case {
    const char *file;
    const char *block;      /* a block for list_of_layers (NULL: a layer) */
} model_case;

static const model_case models[] = {
    {"mlp_deep.json", "dense_5"},
    {"transformer.json", "encoder_block_0"},
    {"resnet_mlp.json", "res_block_1"},
    {"regression.json", "h2"},
};
#define N_MODELS (sizeof models / sizeof models[0])
#define STEPS 3
#define BATCH 8
/* the documented tolerances against the unsplit batch */
#define LOSS_RTOL 1e-5
#define FIRST_LOSS_RTOL 1e-6
#define PARAM_TOL 1e-5

typedef struct run_out {
    float loss[STEPS];
    float *params;
    uint64_t predicted, measured, fixed, accum;
    int n_recompute_actions;    /* recompute actions plus recomputations fused into a backward's GEMM */
    int n_offloads;             /* outputs moved to host memory between forward and backward */
} run_out;

/* steps (<= STEPS) steps of BATCH samples in k micro-batches under mode. */
static void run_mode_steps(clremat_ctx *ctx, clremat_graph *g, const clremat_dataset *d, const char *mode,
                           const char *optimizer, int k, int steps, run_out *out)
{
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t;
    float *x = malloc(sizeof(float) * (size_t)(BATCH * d->train.x_elems));
    float *y = malloc(sizeof(float) * (size_t)(BATCH * d->train.y_elems));
    ck_assert_int_eq(clremat_policy_parse(mode, &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults(optimizer, &opt), 0);
    ck_assert_msg(clremat_trainer_new_accum(ctx, g, BATCH, k, &pol, &opt, 7, NULL, 0, NULL, &t) == CLREMAT_OK, "%s K=%d: %s",
                  mode, k, clremat_ctx_last_error(ctx));
    ck_assert_int_eq(t->batch, BATCH / k);
    ck_assert_int_eq(t->plan.accumulate, k);
    clremat_pool_reset_peaks(ctx->pool);
    for (int s = 0; s < steps; s++) {
        float correct;
        clremat_data_batch(&d->train, 7, s, BATCH, x, y);
        ck_assert_msg(clremat_trainer_step(t, x, y, &out->loss[s], &correct) == CLREMAT_OK, "%s K=%d step %d: %s",
                      mode, k, s, clremat_ctx_last_error(ctx));
        ck_assert(isfinite(out->loss[s]));
    }
    ck_assert_int_eq(t->data_position, (int64_t)steps * BATCH);
    out->predicted = t->plan.peak_bytes;
    out->measured = clremat_pool_get_stats(ctx->pool).live_peak;
    out->fixed = t->plan.fixed_bytes;
    out->accum = t->plan.accum_bytes;
    out->n_recompute_actions = t->plan.n_recompute_actions + t->plan.n_fused_act_reads;
    out->n_offloads = t->plan.n_offloads;
    out->params = malloc(t->plan.param_bytes);
    ck_assert_int_eq(clremat_trainer_get_params(t, out->params), CLREMAT_OK);
    clremat_trainer_free(t);
    free(x);
    free(y);
}

/* STEPS steps of BATCH samples in k micro-batches under mode. */
static void run_mode(clremat_ctx *ctx, clremat_graph *g, const clremat_dataset *d, const char *mode,
                     const char *optimizer, int k, run_out *out)
{
    run_mode_steps(ctx, g, d, mode, optimizer, k, STEPS, out);
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

START_TEST(test_accumulate_model)
{
    const model_case *m = &models[_i];
    clremat_ctx *ctx;
    clremat_graph *g = test_load_model(m->file);
    size_t np = (size_t)clremat_graph_param_elems(g), pbytes = np * sizeof(float);
    clremat_dataset d;
    run_out unsplit, unsplit_sgd;
    char modes[5][128];
    int n_modes = 0;

    TEST_OPEN_CTX(ctx, 0);
    ck_assert_msg(clremat_data_synthetic(g, NULL, 7, 256, 32, &d) == CLREMAT_OK, "%s", clremat_last_error());
    run_mode(ctx, g, &d, "none", "adam", 1, &unsplit);
    run_mode(ctx, g, &d, "none", "sgd", 1, &unsplit_sgd);
    ck_assert_uint_eq(unsplit.accum, 0);
    ck_assert_uint_eq(unsplit.measured, unsplit.predicted);
    for (int k = 2; k <= (test_reduced() ? 2 : 4); k *= 2) { /* slow devices: K = 2 alone */
        run_out base, sgd;
        clremat_plan pn, pf;
        clremat_policy none, full;
        double worst_loss = 0, worst_param = 0;
        /* the plan at the micro-batch, without accumulation: the same but for the buffer */
        clremat_policy_parse("none", &none);
        clremat_policy_parse("full", &full);
        ck_assert_int_eq(clremat_plan_for_ctx(ctx, g, BATCH / k, &none, 2, 0, NULL, 0, &pn, NULL, NULL, NULL),
                         CLREMAT_OK);
        ck_assert_int_eq(clremat_plan_for_accum(ctx, g, BATCH / k, k, &full, 2, 0, NULL, 0, &pf, NULL, NULL, NULL),
                         CLREMAT_OK);
        n_modes = 0;
        snprintf(modes[n_modes++], 128, "full");
        if (!test_reduced()) {
            snprintf(modes[n_modes++], 128, "activations");
            snprintf(modes[n_modes++], 128, "list_of_layers:%s", m->block);
        }
        /* a budget between full's peak and none's: the budget planner at the micro-batch, accumulation included */
        snprintf(modes[n_modes++], 128, "budget:%llu",
                 (unsigned long long)((pf.peak_bytes + pn.peak_bytes + pbytes) / 2));
        run_mode(ctx, g, &d, "none", "adam", k, &base);
        run_mode(ctx, g, &d, "none", "sgd", k, &sgd);
        ck_assert_msg(base.measured == base.predicted, "%s K=%d none: measured %llu, predicted %llu", m->file, k,
                      (unsigned long long)base.measured, (unsigned long long)base.predicted);
        ck_assert_uint_eq(base.accum, pbytes);
        ck_assert_uint_eq(base.fixed, pn.fixed_bytes + pbytes);
        ck_assert_uint_eq(base.predicted, pn.peak_bytes + pbytes);
        for (int s = 0; s < STEPS; s++) {
            double r = fmax(rel(base.loss[s], unsplit.loss[s]), rel(sgd.loss[s], unsplit_sgd.loss[s]));
            worst_loss = fmax(worst_loss, r);
            ck_assert_msg(r <= (s == 0 ? FIRST_LOSS_RTOL : LOSS_RTOL),
                          "%s K=%d step %d: loss %.9g (sgd %.9g), unsplit %.9g (sgd %.9g), relative %.3g", m->file,
                          k, s, (double)base.loss[s], (double)sgd.loss[s], (double)unsplit.loss[s],
                          (double)unsplit_sgd.loss[s], r);
        }
        /* parameters with SGD: Adam divides each gradient by its own running
         * magnitude, so a gradient that is rounding noise (about 0) moves its
         * parameter by up to lr a step whatever its size: compared by loss */
        for (size_t i = 0; i < np; i++)
            worst_param = fmax(worst_param, fabs((double)sgd.params[i] - (double)unsplit_sgd.params[i]));
        ck_assert_msg(worst_param <= PARAM_TOL, "%s K=%d: a parameter differs by %.3g from the unsplit run's (sgd)",
                      m->file, k, worst_param);
        free(sgd.params);
        fprintf(stderr, "%s K=%d: peak %llu (unsplit %llu, accumulation buffer %llu), loss rel diff <= %.3g, "
                "param abs diff <= %.3g\n", m->file, k, (unsigned long long)base.measured,
                (unsigned long long)unsplit.measured, (unsigned long long)base.accum, worst_loss, worst_param);
        for (int i = 0; i < n_modes; i++) {
            run_out r;
            const int budget = strncmp(modes[i], "budget:", 7) == 0;
            run_mode(ctx, g, &d, modes[i], "adam", k, &r);
            ck_assert_msg(r.measured == r.predicted, "%s K=%d %s: measured %llu, predicted %llu", m->file, k,
                          modes[i], (unsigned long long)r.measured, (unsigned long long)r.predicted);
            /* a budget may be met by offload instead where device memory is
             * not the host's (a discrete GPU): bitwise none's all the same */
            ck_assert_msg(r.n_recompute_actions > 0 || (budget && r.n_offloads > 0), "%s K=%d %s: nothing recomputed%s",
                          m->file, k, modes[i], budget ? " or offloaded" : "");
            for (int s = 0; s < STEPS; s++)
                ck_assert_msg(memcmp(&r.loss[s], &base.loss[s], sizeof(float)) == 0,
                              "%s K=%d %s step %d: loss %.9g, none's %.9g", m->file, k, modes[i], s,
                              (double)r.loss[s], (double)base.loss[s]);
            ck_assert_msg(memcmp(r.params, base.params, pbytes) == 0, "%s K=%d %s: parameters differ from none's",
                          m->file, k, modes[i]);
            free(r.params);
        }
        free(base.params);
        clremat_plan_free(&pn);
        clremat_plan_free(&pf);
    }
    free(unsplit.params);
    free(unsplit_sgd.params);
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* A batch not divisible by K: refused before anything is allocated, with
 * both numbers, the remainder and the nearest multiples. */
START_TEST(test_indivisible_refused)
{
    clremat_graph *g = test_load_model("regression.json");
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_ctx *ctx;
    clremat_trainer *t = NULL;
    int64_t micro = -1;
    const char *msg;

    clremat_policy_parse("none", &pol);
    clremat_opt_defaults("adam", &opt);
    ck_assert_int_eq(clremat_accumulate_split(10, 4, &micro), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(micro, -1);
    msg = clremat_last_error();
    ck_assert_msg(strstr(msg, "batch 10 is not divisible by --accumulate 4") && strstr(msg, "10 = 4 x 2 + 2") &&
                      strstr(msg, "(8 or 12)"),
                  "%s", msg);
    ck_assert_int_eq(clremat_accumulate_split(3, 4, &micro), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(clremat_last_error(), "multiple of 4 (4)"), "%s", clremat_last_error());
    ck_assert_int_eq(clremat_accumulate_split(12, 0, &micro), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_accumulate_split(12, 4, &micro), CLREMAT_OK);
    ck_assert_int_eq(micro, 3);
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_trainer_new_accum(ctx, g, 10, 4, &pol, &opt, 1, NULL, 0, NULL, &t),
                     CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(clremat_ctx_last_error(ctx), "10 = 4 x 2 + 2"), "%s", clremat_ctx_last_error(ctx));
    ck_assert_uint_eq(clremat_pool_get_stats(ctx->pool).live_bytes, 0);
    clremat_ctx_destroy(ctx);
    clremat_graph_free(g);
}
END_TEST

/* The command: refusals with the numbers (exit 2, before any device work),
 * and --json reporting accumulate, micro_batch and the buffer on train and
 * plan, the train run's measured peak equal to its prediction. */
START_TEST(test_cli)
{
    char err[4096], args[2048], *out = malloc(1 << 20);
    const char *dir = getenv("CLREMAT_MODELS"), *dev = getenv("CLREMAT_TEST_DEVICE");
    char model[1024], devopt[256] = "";
    snprintf(model, sizeof model, "%s/regression.json", dir ? dir : "models");
    if (dev)
        snprintf(devopt, sizeof devopt, "--device %s", dev);
    snprintf(args, sizeof args, "train %s --batch 10 --accumulate 4 --steps 1", model);
    ck_assert_int_eq(test_run_tool(args, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "batch 10 is not divisible by --accumulate 4 (10 = 4 x 2 + 2)"), "%s", err);
    snprintf(args, sizeof args, "plan %s --batch 30 --accumulate 4", model);
    ck_assert_int_eq(test_run_tool(args, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "(28 or 32)"), "%s", err);
    snprintf(args, sizeof args, "plan %s --accumulate 0", model);
    ck_assert_int_eq(test_run_tool(args, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "--accumulate"), "%s", err);

    snprintf(args, sizeof args, "plan %s --batch 16 --accumulate 4 --json", model);
    test_tool_stdout(args, out, 1 << 20);
    ck_assert_int_eq(test_json_int(out, "accumulate"), 4);
    ck_assert_int_eq(test_json_int(out, "micro_batch"), 4);
    ck_assert_int_gt(test_json_int(out, "accumulation_bytes"), 0);
    snprintf(args, sizeof args, "train %s %s --batch 16 --accumulate 4 --steps 2 --remat full --json --quiet", model,
             devopt);
    test_tool_stdout(args, out, 1 << 20);
    ck_assert_int_eq(test_json_int(out, "batch"), 16);
    ck_assert_int_eq(test_json_int(out, "accumulate"), 4);
    ck_assert_int_eq(test_json_int(out, "micro_batch"), 4);
    ck_assert_int_gt(test_json_int(out, "accumulation_bytes"), 0);
    ck_assert_int_eq(test_json_int(out, "measured_peak_bytes"), test_json_int(out, "predicted_peak_bytes"));
    snprintf(args, sizeof args, "train %s %s --batch 16 --steps 2 --json --quiet", model, devopt);
    test_tool_stdout(args, out, 1 << 20);
    ck_assert_int_eq(test_json_int(out, "accumulate"), 1);
    ck_assert_int_eq(test_json_int(out, "accumulation_bytes"), 0);
    free(out);
}
END_TEST

/* The planner: accumulation adds one float per parameter to the fixed
 * bytes and nothing else; a budget plan per micro-batch stays within it. */
START_TEST(test_planner_fixed_bytes)
{
    for (size_t m = 0; m < N_MODELS; m++) {
        clremat_graph *g = test_load_model(models[m].file);
        clremat_policy p;
        clremat_plan a, b;
        uint64_t pbytes = (uint64_t)clremat_graph_param_elems(g) * sizeof(float);
        clremat_policy_parse("full", &p);
        ck_assert_int_eq(clremat_plan_for_accum(NULL, g, 4, 1, &p, 2, 0, NULL, 0, &a, NULL, NULL, NULL), CLREMAT_OK);
        ck_assert_int_eq(clremat_plan_for_accum(NULL, g, 4, 3, &p, 2, 0, NULL, 0, &b, NULL, NULL, NULL), CLREMAT_OK);
        ck_assert_int_eq(a.accumulate, 1);
        ck_assert_int_eq(b.accumulate, 3);
        ck_assert_uint_eq(a.accum_bytes, 0);
        ck_assert_uint_eq(b.accum_bytes, pbytes);
        ck_assert_uint_eq(b.fixed_bytes, a.fixed_bytes + pbytes);
        ck_assert_uint_eq(b.peak_bytes, a.peak_bytes + pbytes);
        ck_assert_int_eq(b.n_actions, a.n_actions);
        clremat_plan_free(&b);
        clremat_policy_parse("budget:1", &p);
        p.budget = a.peak_bytes + pbytes; /* full's peak with the buffer: a budget plan fits it */
        ck_assert_msg(clremat_plan_for_accum(NULL, g, 4, 3, &p, 2, 0, NULL, 0, &b, NULL, NULL, NULL) == CLREMAT_OK,
                      "%s: %s", models[m].file, clremat_last_error());
        ck_assert_uint_le(b.peak_bytes, p.budget);
        ck_assert_uint_eq(b.accum_bytes, pbytes);
        clremat_plan_free(&a);
        clremat_plan_free(&b);
        clremat_graph_free(g);
    }
}
END_TEST

/* clremat fit with accumulation, no device. */
START_TEST(test_fit_accumulate)
{
    clremat_graph *g = test_load_model("transformer.json");
    clremat_fit_config *base = NULL, *c = NULL;
    clremat_fit_row *rows = NULL;
    clremat_fit_request rq;
    const int64_t ks[3] = {1, 4, 3};
    uint64_t sizes[2] = {2u << 20, 4u << 20};
    int nb = 0, nc = 0;
    ck_assert_int_eq(clremat_fit_parse_configs(g, "none,full,auto", &base, &nb), CLREMAT_OK);
    ck_assert_int_eq(clremat_fit_with_accumulate(base, nb, ks, 3, &c, &nc), CLREMAT_OK);
    ck_assert_int_eq(nc, 9);
    ck_assert_str_eq(c[0].label, "none");
    ck_assert_str_eq(c[4].label, "full, accumulate 4");
    ck_assert_int_eq(c[4].accumulate, 4);
    memset(&rq, 0, sizeof rq);
    rq.g = g;
    rq.batch = 32;
    rq.opt_states = 2;
    rq.sizes = sizes;
    rq.n_sizes = 2;
    rq.configs = c;
    rq.n_configs = nc;
    rq.max_batch_cap = 1 << 12;
    ck_assert_int_eq(clremat_fit_run(&rq, &rows), CLREMAT_OK);
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < nc; k++) {
            const clremat_fit_row *r = &rows[s * nc + k];
            const int64_t K = c[k].accumulate;
            int planned, fits;
            if (K == 3) { /* 32 is not a multiple of 3: not planned, and the row says why */
                ck_assert(!r->planned && !r->fits);
                ck_assert_msg(strstr(r->note, "batch 32 is not divisible by --accumulate 3"), "%s", r->note);
            } else if (!r->planned) { /* only auto may find no plan within a size */
                ck_assert_int_eq(c[k].policy.kind, CLREMAT_POLICY_AUTO);
                ck_assert(!r->fits && strstr(r->note, "no plan within"));
            } else {
                ck_assert_int_eq(r->fits, r->peak_bytes <= sizes[s]);
            }
            if (r->max_batch == 0)
                continue;
            /* the largest batch: a multiple of K that fits, the next multiple does not */
            ck_assert_int_eq(r->max_batch % K, 0);
            ck_assert_uint_le(r->max_batch_peak, sizes[s]);
            ck_assert_int_eq(clremat_fit_plan_one(&rq, &c[k], sizes[s], r->max_batch, &planned, &fits, NULL, NULL),
                             CLREMAT_OK);
            ck_assert(planned && fits);
            ck_assert_int_eq(clremat_fit_plan_one(&rq, &c[k], sizes[s], r->max_batch + K, &planned, &fits, NULL,
                                                  NULL), CLREMAT_OK);
            ck_assert_msg(!fits, "%s: batch %lld fits after the largest %lld", c[k].label,
                          (long long)(r->max_batch + K), (long long)r->max_batch);
        }
    /* 2 MiB at batch 32: neither none nor full fits unsplit; full with 4 micro-batches does */
    ck_assert(!rows[0].fits && !rows[1].fits);
    ck_assert(rows[4].fits);
    ck_assert_int_gt(rows[4].max_batch, rows[1].max_batch);
    free(rows);
    free(c);
    free(base);
    clremat_graph_free(g);
}
END_TEST


/* Batchnorm's moving statistics take one update a step, from the whole
 * batch's mean and biased variance combined over the micro-batches (their
 * summed statistics, planner/accumulate.c): after one step from the same
 * initial parameters they equal the unsplit batch's within BN_FIRST_TOL
 * (float rounding of the combination: 2.8e-8 measured on PoCL, 6.5e-9 before the
 * blocked reductions of kernels.cl changed the rounding; K updates
 * of micro-batch statistics, the old behaviour, would weight the batch
 * 1 - 0.9^4 = 0.34 instead of 0.1), after STEPS steps of SGD within BN_TOL
 * (the micro-batches normalize with their own statistics, so the weights
 * drift apart: 2e-4 measured on PoCL); the sums are in the plan (measured
 * == predicted, accum_bytes = gradients + 3 floats per channel) and the
 * moving statistics are bitwise the same under full remat as under none. */
#define BN_FIRST_TOL 2e-6
#define BN_TOL 1e-3
static const char bn_model[] =
    "{\"name\": \"bn_acc\", \"input\": {\"shape\": [6, 5, 3]}, \"layers\": ["
    "{\"name\": \"conv\", \"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 3, \"padding\": \"same\", "
    "\"use_bias\": false},"
    "{\"name\": \"bn\", \"type\": \"batchnorm\", \"momentum\": 0.9},"
    "{\"name\": \"relu\", \"type\": \"activation\", \"activation\": \"relu\"},"
    "{\"name\": \"gap\", \"type\": \"global_avg_pool2d\"},"
    "{\"name\": \"logits\", \"type\": \"dense\", \"units\": 3},"
    "{\"name\": \"loss\", \"type\": \"softmax_cross_entropy\"}]}";

START_TEST(test_bn_moving_once_per_step)
{
    char path[] = "/tmp/clremat-bnaccXXXXXX";
    int fd = mkstemp(path);
    FILE *f;
    clremat_ctx *ctx;
    clremat_graph *g;
    clremat_dataset d;
    run_out one[2], four[2], full4;
    int64_t off = 0, C = 4;
    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    ck_assert_ptr_nonnull(f);
    fputs(bn_model, f);
    fclose(f);
    ck_assert_msg(clremat_graph_load(path, &g) == CLREMAT_OK, "%s", clremat_last_error());
    unlink(path);
    for (int l = 0; l < g->n_layers && strcmp(g->layers[l].name, "bn") != 0; l++)
        for (int p = 0; p < g->layers[l].n_params; p++)
            off += g->layers[l].params[p].elems;
    off += 2 * C; /* past gamma and beta: moving_mean at off, moving_variance at off + C */
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_msg(clremat_data_synthetic(g, "images", 7, 256, 32, &d) == CLREMAT_OK, "%s", clremat_last_error());
    for (int k = 0; k < 2; k++) { /* k 0: one step; 1: STEPS steps (SGD) */
        int steps = k == 0 ? 1 : STEPS;
        double worst = 0;
        run_mode_steps(ctx, g, &d, "none", "sgd", 1, steps, &one[k]);
        run_mode_steps(ctx, g, &d, "none", "sgd", 4, steps, &four[k]);
        ck_assert_uint_eq(four[k].measured, four[k].predicted);
        ck_assert_uint_eq(four[k].accum, (uint64_t)(clremat_graph_trainable_elems(g) + 3 * C) * sizeof(float));
        for (int64_t i = off; i < off + 2 * C; i++)
            worst = fmax(worst, fabs((double)four[k].params[i] - (double)one[k].params[i]) /
                                    fmax(1.0, fabs((double)one[k].params[i])));
        fprintf(stderr, "bn_acc K=4 after %d step(s): moving statistics within %.3g of the unsplit batch's "
                "(moving mean[0] %.9g, unsplit %.9g)\n", steps, worst, (double)four[k].params[off],
                (double)one[k].params[off]);
        ck_assert_msg(worst <= (k == 0 ? BN_FIRST_TOL : BN_TOL), "K=4 after %d step(s): moving statistics differ "
                      "by %.3g from the unsplit batch's", steps, worst);
        /* and they moved: the update ran */
        ck_assert(fabs((double)four[k].params[off]) > 1e-4 || fabs((double)four[k].params[off + C] - 1.0) > 1e-4);
    }
    run_mode_steps(ctx, g, &d, "full", "sgd", 4, STEPS, &full4);
    ck_assert_uint_eq(full4.measured, full4.predicted);
    ck_assert_msg(memcmp(full4.params, four[1].params, (size_t)clremat_graph_param_elems(g) * sizeof(float)) == 0,
                  "K=4: parameters (moving statistics included) differ between full and none");
    for (int k = 0; k < 2; k++) {
        free(one[k].params);
        free(four[k].params);
    }
    free(full4.params);
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("accumulate", 1200, &tc);
    tcase_add_loop_test(tc, test_accumulate_model, 0, N_MODELS);
    tcase_add_test(tc, test_indivisible_refused);
    tcase_add_test(tc, test_cli);
    tcase_add_test(tc, test_planner_fixed_bytes);
    tcase_add_test(tc, test_fit_accumulate);
    tcase_add_test(tc, test_bn_moving_once_per_step);
    return test_run_device_suite(s);
}
