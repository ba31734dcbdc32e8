/* test_offload.c: offload to host memory (--offload), forced per layer, on
 * a device. PoCL and rusticl have host-unified memory, where offload frees
 * nothing real, so these tests check the mechanism's correctness:
 * - on every bundled model, under none, full and a block, offloading every
 *   layer's kept output gives losses and parameters bitwise identical to
 *   the same mode without offload; the device peak measured equals the
 *   prediction, and so does the host peak (the pool's host bytes), and
 *   under none the device peak drops by what was offloaded;
 * - with gradient accumulation too;
 * - a failed step (an allocation of a FETCH failing) gives every host copy
 *   back and the next step is bitwise the reference;
 * - the planner: unknown names listed, a fetch without an offload refused,
 *   offload with overlap refused;
 * - the command: plan and train --json report host bytes, equal;
 * - budget: with offload as a third choice (a synthetic transfer cost, as a
 *   discrete GPU would measure), a cheap transfer is chosen over
 *   recomputation and a dear one is not, the peak within the budget either
 *   way; on the test device the transfer calibration is measured once and
 *   then read from its cache, and where the device's memory is the host's
 *   it prices offload at 0 (not a choice) and budget plans offload nothing;
 * - clremat fit: offload rows plan like train --offload all, and the
 *   step-time calibration is cached (read back bitwise, a corrupt file
 *   measured again). */
#include "testutil.h"
#include "testmodel.h"
#include "data.h"
#include "executor.h"
#include "transfer.h"
#include "fit.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct model_case {
    const char *file;
    const char *block;      /* a block or layer for list_of_layers */
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

typedef struct run_out {
    float loss[STEPS];
    float *params;
    uint64_t predicted, measured, host_predicted, host_measured, offload_bytes;
    int n_offloads;
} run_out;

static void run_mode(clremat_ctx *ctx, clremat_graph *g, const clremat_dataset *d, const char *mode, int k,
                     const char *offload, run_out *out)
{
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t;
    clremat_pool_stats ps;
    float *x = malloc(sizeof(float) * (size_t)(BATCH * d->train.x_elems));
    float *y = malloc(sizeof(float) * (size_t)(BATCH * d->train.y_elems));
    ck_assert_int_eq(clremat_policy_parse(mode, &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults("adam", &opt), 0);
    ck_assert_msg(clremat_trainer_new_accum(ctx, g, BATCH, k, &pol, &opt, 7, NULL, 0, offload, &t) == CLREMAT_OK,
                  "%s %s: %s", mode, offload ? offload : "-", clremat_ctx_last_error(ctx));
    clremat_pool_reset_peaks(ctx->pool);
    for (int s = 0; s < STEPS; s++) {
        float correct;
        clremat_data_batch(&d->train, 7, s, BATCH, x, y);
        ck_assert_msg(clremat_trainer_step(t, x, y, &out->loss[s], &correct) == CLREMAT_OK, "%s step %d: %s", mode,
                      s, clremat_ctx_last_error(ctx));
        ps = clremat_pool_get_stats(ctx->pool);
        ck_assert_uint_eq(ps.host_bytes, 0); /* every host copy fetched back and freed */
        ck_assert_uint_eq(clremat_pool_fence_count(ctx->pool), 0);
    }
    ps = clremat_pool_get_stats(ctx->pool);
    out->predicted = t->plan.peak_bytes;
    out->measured = ps.live_peak;
    out->host_predicted = t->plan.host_peak_bytes;
    out->host_measured = ps.host_peak;
    out->n_offloads = t->plan.n_offloads;
    out->offload_bytes = t->plan.offload_bytes;
    out->params = malloc(t->plan.param_bytes);
    ck_assert_int_eq(clremat_trainer_get_params(t, out->params), CLREMAT_OK);
    clremat_trainer_free(t);
    free(x);
    free(y);
}

START_TEST(test_offload_model)
{
    const model_case *m = &models[_i];
    const char *modes[3] = {"none", "full", NULL};
    char block_mode[128];
    clremat_ctx *ctx;
    clremat_graph *g = test_load_model(m->file);
    size_t pbytes = (size_t)clremat_graph_param_elems(g) * sizeof(float);
    clremat_dataset d;
    int n_modes = test_reduced() ? 2 : 3;

    snprintf(block_mode, sizeof block_mode, "list_of_layers:%s", m->block);
    modes[2] = block_mode;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert(ctx->info.host_unified == 0 || ctx->info.host_unified == 1);
    ck_assert_msg(clremat_data_synthetic(g, NULL, 7, 256, 32, &d) == CLREMAT_OK, "%s", clremat_last_error());
    for (int i = 0; i < n_modes; i++)
        for (int k = 1; k <= 2; k++) {
            run_out a, b;
            if (k == 2 && i > 0)
                continue; /* accumulation with offload: under none */
            run_mode(ctx, g, &d, modes[i], k, NULL, &a);
            run_mode(ctx, g, &d, modes[i], k, "all", &b);
            fprintf(stderr, "%s %s K=%d: %d tensors offloaded (%llu bytes), device peak %llu (without %llu), host "
                    "peak %llu\n", m->file, modes[i], k, b.n_offloads, (unsigned long long)b.offload_bytes,
                    (unsigned long long)b.measured, (unsigned long long)a.measured,
                    (unsigned long long)b.host_measured);
            ck_assert_msg(b.n_offloads > 0, "%s %s: nothing offloaded", m->file, modes[i]);
            ck_assert_msg(b.measured == b.predicted, "%s %s: device peak %llu, predicted %llu", m->file, modes[i],
                          (unsigned long long)b.measured, (unsigned long long)b.predicted);
            ck_assert_msg(b.host_measured == b.host_predicted && b.host_predicted > 0,
                          "%s %s: host peak %llu, predicted %llu", m->file, modes[i],
                          (unsigned long long)b.host_measured, (unsigned long long)b.host_predicted);
            ck_assert_uint_eq(a.host_measured, 0);
            ck_assert_uint_eq(a.host_predicted, 0);
            if (i == 0) /* under none, what the backward reads is kept: offload lowers the device peak */
                ck_assert_msg(b.predicted < a.predicted, "%s none: peak %llu with offload, %llu without", m->file,
                              (unsigned long long)b.predicted, (unsigned long long)a.predicted);
            for (int s = 0; s < STEPS; s++)
                ck_assert_msg(memcmp(&a.loss[s], &b.loss[s], sizeof(float)) == 0,
                              "%s %s K=%d step %d: loss %.9g with offload, %.9g without", m->file, modes[i], k, s,
                              (double)b.loss[s], (double)a.loss[s]);
            ck_assert_msg(memcmp(a.params, b.params, pbytes) == 0, "%s %s K=%d: parameters differ with offload",
                          m->file, modes[i], k);
            free(a.params);
            free(b.params);
        }
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Every allocation of a step fails in turn: the step returns the failure
 * with every device tensor and host copy given back, and the next step
 * (no fault) has the reference's loss. */
START_TEST(test_offload_faults)
{
    clremat_graph *g = test_load_model("regression.json");
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_ctx *ctx;
    clremat_dataset d;
    clremat_trainer *t = NULL;
    float x[BATCH * 64], y[BATCH * 64], ref, loss, correct;
    uint64_t allocs, fixed_live;
    clremat_policy_parse("none", &pol);
    clremat_opt_defaults("sgd", &opt);
    /* the whole-step retry contract is the unfused update's (the fused one
     * has changed parameters once a backward ran: test_faults covers it) */
    opt.no_fused_update = 1;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_data_synthetic(g, NULL, 1, 64, 8, &d), CLREMAT_OK);
    ck_assert_uint_le((uint64_t)d.train.x_elems, 64);
    clremat_data_batch(&d.train, 1, 0, BATCH, x, y);
    ck_assert_int_eq(clremat_trainer_new_accum(ctx, g, BATCH, 1, &pol, &opt, 1, NULL, 0, "all", &t), CLREMAT_OK);
    fixed_live = clremat_pool_get_stats(ctx->pool).live_bytes;
    allocs = clremat_pool_get_stats(ctx->pool).allocs;
    ck_assert_int_eq(clremat_trainer_step(t, x, y, &ref, &correct), CLREMAT_OK);
    allocs = clremat_pool_get_stats(ctx->pool).allocs - allocs;
    clremat_trainer_free(t);
    /* slow devices: the first, a middle and the last allocation */
    for (uint64_t k = 1; k <= allocs; k = test_reduced() && k < allocs ? (k == 1 ? allocs / 2 + 1 : allocs) : k + 1) {
        ck_assert_int_eq(clremat_trainer_new_accum(ctx, g, BATCH, 1, &pol, &opt, 1, NULL, 0, "all", &t), CLREMAT_OK);
        clremat_pool_fail_at(ctx->pool, k);
        ck_assert_int_ne(clremat_trainer_step(t, x, y, &loss, &correct), CLREMAT_OK);
        clremat_pool_fail_at(ctx->pool, 0);
        ck_assert_uint_eq(clremat_pool_get_stats(ctx->pool).host_bytes, 0);
        ck_assert_uint_eq(clremat_pool_get_stats(ctx->pool).live_bytes, fixed_live);
        ck_assert_uint_eq(clremat_pool_fence_count(ctx->pool), 0);
        ck_assert_int_eq(clremat_trainer_step(t, x, y, &loss, &correct), CLREMAT_OK);
        ck_assert_msg(memcmp(&loss, &ref, sizeof loss) == 0, "fault at allocation %llu: loss %.9g, reference %.9g",
                      (unsigned long long)k, (double)loss, (double)ref);
        clremat_trainer_free(t);
    }
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* The planner alone. */
START_TEST(test_offload_planner)
{
    clremat_graph *g = test_load_model("mlp_deep.json");
    clremat_policy p;
    clremat_plan plan;
    clremat_plan_input in;
    unsigned char *want = calloc((size_t)g->n_layers, 1);
    clremat_action acts[3];
    clremat_policy_parse("none", &p);
    ck_assert_int_eq(clremat_offload_parse(g, "dense_1,nosuch", want), CLREMAT_ERR_PLAN);
    ck_assert_msg(strstr(clremat_last_error(), "no layer 'nosuch'") && strstr(clremat_last_error(), "dense_1"), "%s",
                  clremat_last_error());
    ck_assert_int_eq(clremat_plan_for_offload(NULL, g, 4, 1, &p, 2, 0, NULL, 1, "all", &plan, NULL, NULL, NULL),
                     CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_plan_for_offload(NULL, g, 4, 1, &p, 2, 0, NULL, 0, "dense_1", &plan, NULL, NULL, NULL),
                     CLREMAT_OK);
    ck_assert_int_eq(plan.n_offloads, 1);
    ck_assert_uint_gt(plan.host_peak_bytes, 0);
    ck_assert_uint_eq(plan.host_peak_bytes, plan.offload_bytes);
    {
        int off = -1, fetch = -1;
        for (int i = 0; i < plan.n_actions; i++) {
            if (plan.actions[i].kind == CLREMAT_ACT_OFFLOAD)
                off = i;
            if (plan.actions[i].kind == CLREMAT_ACT_FETCH)
                fetch = i;
        }
        ck_assert(off >= 0 && fetch > off);
        ck_assert_uint_eq(plan.actions[off].host_after, plan.host_peak_bytes);
        ck_assert_uint_eq(plan.actions[fetch].host_after, 0);
        ck_assert_uint_eq(plan.actions[fetch - 1].live_after + plan.host_peak_bytes, plan.actions[fetch].live_after);
    }
    clremat_plan_free(&plan);
    /* a fetch of what was never offloaded is refused by the simulator */
    ck_assert_int_eq(clremat_plan_input_for(NULL, g, 4, 2, NULL, &in, NULL, NULL), CLREMAT_OK);
    memset(acts, 0, sizeof acts);
    acts[0].kind = CLREMAT_ACT_FORWARD;
    acts[0].layer = 0;
    acts[1].kind = CLREMAT_ACT_FETCH;
    acts[1].layer = 0;
    ck_assert_int_eq(clremat_plan_from_actions(&in, acts, 2, NULL, &plan), CLREMAT_ERR_PLAN);
    ck_assert_msg(strstr(clremat_last_error(), "not offloaded"), "%s", clremat_last_error());
    free((void *)in.costs);
    free(want);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_offload_cli)
{
    char err[4096], args[2048], *out = malloc(1 << 20);
    const char *dir = getenv("CLREMAT_MODELS"), *dev = getenv("CLREMAT_TEST_DEVICE");
    char model[1024], devopt[256] = "";
    long long planned_host;
    snprintf(model, sizeof model, "%s/transformer.json", dir ? dir : "models");
    if (dev)
        snprintf(devopt, sizeof devopt, "--device %s", dev);
    snprintf(args, sizeof args, "plan %s --batch 8 --offload nosuch", model);
    ck_assert_int_eq(test_run_tool(args, err, sizeof err), 1);
    ck_assert_msg(strstr(err, "no layer 'nosuch'"), "%s", err);
    snprintf(args, sizeof args, "train %s --offload all --overlap --steps 1", model);
    ck_assert_int_eq(test_run_tool(args, err, sizeof err), 2);
    snprintf(args, sizeof args, "plan %s --batch 8 --offload all --json", model);
    test_tool_stdout(args, out, 1 << 20);
    planned_host = test_json_int(out, "predicted_host_peak_bytes");
    ck_assert_int_gt(planned_host, 0);
    ck_assert_int_gt(test_json_int(out, "offloads"), 0);
    snprintf(args, sizeof args, "train %s %s --batch 8 --steps 2 --offload all --json --quiet", model, devopt);
    test_tool_stdout(args, out, 1 << 20);
    ck_assert_int_eq(test_json_int(out, "predicted_host_peak_bytes"), planned_host);
    ck_assert_int_eq(test_json_int(out, "measured_host_peak_bytes"), planned_host);
    ck_assert_int_eq(test_json_int(out, "measured_peak_bytes"), test_json_int(out, "predicted_peak_bytes"));
    free(out);
}
END_TEST

START_TEST(test_budget_offload)
{
    clremat_graph *g = test_load_model("transformer.json");
    clremat_plan_input in;
    clremat_plan none, rec, cheap, dear;
    clremat_policy np;
    uint64_t budget;
    clremat_policy_parse("none", &np);
    ck_assert_int_eq(clremat_plan_input_for(NULL, g, 8, 2, NULL, &in, NULL, NULL), CLREMAT_OK);
    ck_assert_int_eq(clremat_plan_fixed(&in, &np, &none), CLREMAT_OK);
    budget = none.peak_bytes - (none.peak_bytes - none.fixed_bytes) / 8; /* none does not fit */
    ck_assert_int_eq(clremat_plan_budget(&in, budget, &rec), CLREMAT_OK);
    ck_assert(clremat_plan_recompute_cost(&in, &rec) > 0);
    ck_assert_int_eq(clremat_plan_budget_offload(&in, budget, &cheap), CLREMAT_OK); /* cost 0: no offload */
    ck_assert_int_eq(cheap.n_offloads, 0);
    ck_assert_uint_eq(cheap.peak_bytes, rec.peak_bytes);
    clremat_plan_free(&cheap);
    in.offload_cost_per_byte = 1e-6; /* a byte moved costs far less than recomputing it */
    ck_assert_int_eq(clremat_plan_budget_offload(&in, budget, &cheap), CLREMAT_OK);
    ck_assert_int_gt(cheap.n_offloads, 0);
    ck_assert_uint_le(cheap.peak_bytes, budget);
    ck_assert_uint_gt(cheap.host_peak_bytes, 0);
    ck_assert(clremat_plan_recompute_cost(&in, &cheap) + (double)cheap.offload_bytes * in.offload_cost_per_byte <
              clremat_plan_recompute_cost(&in, &rec));
    in.offload_cost_per_byte = 1e6; /* far more */
    ck_assert_int_eq(clremat_plan_budget_offload(&in, budget, &dear), CLREMAT_OK);
    ck_assert_int_eq(dear.n_offloads, 0);
    ck_assert_uint_le(dear.peak_bytes, budget);
    fprintf(stderr, "transformer batch 8, budget %llu: recompute %.4g FLOPs; cheap transfer: %d offloads (%llu "
            "bytes), recompute %.4g FLOPs\n", (unsigned long long)budget, clremat_plan_recompute_cost(&in, &rec),
            cheap.n_offloads, (unsigned long long)cheap.offload_bytes, clremat_plan_recompute_cost(&in, &cheap));
    clremat_plan_free(&none);
    clremat_plan_free(&rec);
    clremat_plan_free(&cheap);
    clremat_plan_free(&dear);
    free((void *)in.costs);
    clremat_graph_free(g);
}
END_TEST

START_TEST(test_transfer_calibration)
{
    clremat_ctx *ctx;
    clremat_transfer_calibration a, b;
    char path[4200], err[4096], args[2048];
    const char *dir = getenv("CLREMAT_MODELS"), *dev = getenv("CLREMAT_TEST_DEVICE");
    TEST_OPEN_CTX(ctx, 0);
    ck_assert(clremat_transfer_cache_file(ctx, path, sizeof path));
    unlink(path);
    ck_assert_int_eq(clremat_transfer_calibrate(ctx, &a), CLREMAT_OK);
    ck_assert_int_eq(a.from_cache, 0);
    ck_assert(a.to_host_gbs > 0 && a.to_device_gbs > 0 && a.gemm_gflops > 0);
    ck_assert_int_eq(access(path, F_OK), 0);
    ck_assert_int_eq(clremat_transfer_calibrate(ctx, &b), CLREMAT_OK);
    ck_assert_int_eq(b.from_cache, 1);
    ck_assert(fabs(b.to_host_gbs - a.to_host_gbs) <= 1e-3 * a.to_host_gbs + 1e-4);
    /* a FIFO in the cache file's place: passed over without blocking, measured again */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    ck_assert_int_eq(clremat_transfer_calibrate(ctx, &b), CLREMAT_OK);
    ck_assert_int_eq(b.from_cache, 0);
    unlink(path);
    fprintf(stderr, "%s: to host %.2f GB/s, to device %.2f GB/s, GEMM %.1f GFLOP/s, host-unified %d\n",
            ctx->info.name, a.to_host_gbs, a.to_device_gbs, a.gemm_gflops, a.host_unified);
    if (ctx->info.host_unified) { /* offload frees nothing here: never a choice */
        ck_assert(clremat_transfer_cost_per_byte(&a, 0) == 0);
        snprintf(args, sizeof args, "train %s/transformer.json %s%s --batch 8 --steps 1 --remat budget:1700000 --quiet",
                 dir ? dir : "models", dev ? "--device " : "", dev ? dev : "");
        ck_assert_int_eq(test_run_tool(args, err, sizeof err), 0);
    } else {
        ck_assert(clremat_transfer_cost_per_byte(&a, 0) > 0 && clremat_transfer_cost_per_byte(&a, 1) > 0);
    }
    a.host_unified = 0; /* the same numbers on a device with memory of its own */
    ck_assert(clremat_transfer_cost_per_byte(&a, 0) > 0);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_fit_offload_and_cache)
{
    clremat_graph *g = test_load_model("transformer.json");
    clremat_fit_config *base = NULL, *c = NULL;
    clremat_fit_request rq;
    clremat_fit_row *rows = NULL;
    clremat_fit_calibration a, b;
    clremat_opt_config opt;
    clremat_ctx *ctx;
    uint64_t sizes[1] = {4u << 20};
    char path[4200];
    int nb = 0, nc = 0, cached = -1;
    FILE *f;
    ck_assert_int_eq(clremat_fit_parse_configs(g, "none,full", &base, &nb), CLREMAT_OK);
    ck_assert_int_eq(clremat_fit_with_offload(base, nb, &c, &nc), CLREMAT_OK);
    ck_assert_int_eq(nc, 4);
    ck_assert_str_eq(c[2].label, "none, offload");
    memset(&rq, 0, sizeof rq);
    rq.g = g;
    rq.batch = 8;
    rq.opt_states = 2;
    rq.sizes = sizes;
    rq.n_sizes = 1;
    rq.configs = c;
    rq.n_configs = nc;
    rq.max_batch_cap = 1 << 10;
    ck_assert_int_eq(clremat_fit_run(&rq, &rows), CLREMAT_OK);
    {   /* none with offload: train --offload all's plan (no device: native path) */
        clremat_policy np;
        clremat_plan p;
        clremat_policy_parse("none", &np);
        ck_assert_int_eq(clremat_plan_for_offload(NULL, g, 8, 1, &np, 2, 0, NULL, 0, "all", &p, NULL, NULL, NULL),
                         CLREMAT_OK);
        ck_assert_uint_eq(rows[2].peak_bytes, p.peak_bytes);
        ck_assert_uint_lt(rows[2].peak_bytes, rows[0].peak_bytes);
        ck_assert_int_ge(rows[2].max_batch, rows[0].max_batch);
        clremat_plan_free(&p);
    }
    free(rows);
    /* the calibration's cache */
    TEST_OPEN_CTX(ctx, 0);
    clremat_opt_defaults("adam", &opt);
    ck_assert_int_eq(clremat_fit_calibrate_cached(ctx, g, 12345, 8, &opt, 1, 1, 1, &a, &cached), CLREMAT_OK);
    ck_assert_int_eq(cached, 0);
    ck_assert_int_eq(clremat_fit_calibrate_cached(ctx, g, 12345, 8, &opt, 1, 1, 0, &b, &cached), CLREMAT_OK);
    ck_assert_int_eq(cached, 1);
    ck_assert(a.step_ms == b.step_ms && a.update_ms == b.update_ms && a.overhead_ms == b.overhead_ms);
    ck_assert_int_eq(b.n_layers, g->n_layers);
    for (int l = 0; l < g->n_layers; l++)
        ck_assert(a.fwd_ms[l] == b.fwd_ms[l] && a.bwd_flops[l] == b.bwd_flops[l]);
    clremat_fit_calibration_free(&b);
    ck_assert(clremat_fit_cache_file(ctx, 12345, 8, &opt, 1, path, sizeof path));
    ck_assert_ptr_nonnull(f = fopen(path, "w")); /* corrupt: measured again */
    fputs("clremat-fit-calibration-1\ndevice nonsense\n", f);
    fclose(f);
    ck_assert_int_eq(clremat_fit_calibrate_cached(ctx, g, 12345, 8, &opt, 1, 1, 0, &b, &cached), CLREMAT_OK);
    ck_assert_int_eq(cached, 0);
    clremat_fit_calibration_free(&b);
    /* a FIFO in its place: passed over without blocking (no writer would ever come), measured again, and
     * left alone (never replaced by the cache's write) */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    ck_assert_int_eq(clremat_fit_calibrate_cached(ctx, g, 12345, 8, &opt, 1, 1, 0, &b, &cached), CLREMAT_OK);
    ck_assert_int_eq(cached, 0);
    clremat_fit_calibration_free(&b);
    {
        struct stat sb;
        ck_assert(stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode));
    }
    unlink(path);
    /* another model (hash): not this file (and none of its own from an earlier run) */
    ck_assert(clremat_fit_cache_file(ctx, 54321, 8, &opt, 1, path, sizeof path));
    unlink(path);
    ck_assert_int_eq(clremat_fit_calibrate_cached(ctx, g, 54321, 8, &opt, 1, 1, 0, &b, &cached), CLREMAT_OK);
    ck_assert_int_eq(cached, 0);
    clremat_fit_calibration_free(&b);
    clremat_fit_calibration_free(&a);
    clremat_ctx_destroy(ctx);
    free(c);
    free(base);
    clremat_graph_free(g);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("offload", 1200, &tc);
    tcase_add_loop_test(tc, test_offload_model, 0, N_MODELS);
    tcase_add_test(tc, test_offload_faults);
    tcase_add_test(tc, test_offload_planner);
    tcase_add_test(tc, test_offload_cli);
    tcase_add_test(tc, test_budget_offload);
    tcase_add_test(tc, test_transfer_calibration);
    tcase_add_test(tc, test_fit_offload_and_cache);
    return test_run_device_suite(s);
}
