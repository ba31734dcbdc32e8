/* test_fit.c: the fit advisor (host/fit.c, clremat fit). The largest batch
 * the search finds equals a brute force over every batch (planning only) on
 * bundled models for several modes and sizes; a configuration marked as
 * fitting has its peak within the size and the next batch after the largest
 * does not fit; the command's JSON parses and holds its fields; step times
 * are predicted with a device (the calibration's own plan and batch give the
 * measured time back) and null without; bad sizes, unknown modes and a
 * missing device give exit 2 naming the value and write nothing. No timing
 * assertions. */
#include "testutil.h"
#include "testmodel.h"
#include "fit.h"
#include "executor.h"
#include "graph.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

static void request_for(clremat_fit_request *rq, const clremat_graph *g, const clremat_fit_config *c, int nc,
                        const uint64_t *sizes, int ns)
{
    memset(rq, 0, sizeof *rq);
    rq->g = g;
    rq->batch = 8;
    rq->opt_states = 2; /* adam */
    rq->sizes = sizes;
    rq->n_sizes = ns;
    rq->configs = c;
    rq->n_configs = nc;
}

static int fits_at(const clremat_fit_request *rq, const clremat_fit_config *c, uint64_t size, int64_t b)
{
    int planned, fits;
    ck_assert_int_eq(clremat_fit_plan_one(rq, c, size, b, &planned, &fits, NULL, NULL), CLREMAT_OK);
    return fits;
}

/* The search against every batch from 1 to the cap, on two models, five
 * modes, three sizes (one where nothing fits at batch 1); for auto, whose
 * every plan is a budget search, every 7th batch and both sides of the
 * boundary the search found. */
START_TEST(test_max_batch_equals_brute_force)
{
    static const char *models[] = {"resnet_mlp.json", "transformer.json"};
    static const char *modes[] = {"none", "full", "activations", "larger_than", "auto"};
    const int64_t cap = 400;
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        clremat_graph *g = test_load_model(models[m]);
        clremat_fit_config c[6];
        clremat_fit_request rq;
        int nc = 0;
        uint64_t sizes[3];
        memset(c, 0, sizeof c); /* fields not set below (accumulation, offload) are off */
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++, nc++) {
            ck_assert_int_eq(clremat_policy_parse(modes[i], &c[nc].policy), CLREMAT_OK);
            snprintf(c[nc].label, sizeof c[nc].label, "%s", modes[i]);
        }
        for (int b = 0; b < g->n_blocks; b++)
            if (g->blocks[b].parent < 0) {
                char mode[96];
                snprintf(mode, sizeof mode, "list_of_layers:%s", g->blocks[b].name);
                ck_assert_int_eq(clremat_policy_parse(mode, &c[nc].policy), CLREMAT_OK);
                snprintf(c[nc].label, sizeof c[nc].label, "%s", mode);
                nc++;
                break;
            }
        request_for(&rq, g, c, nc, sizes, 3);
        {   /* sizes from the none plan's peaks: between batch 8 and 16, near 100, and below batch 1's */
            int planned, fits;
            clremat_plan p;
            ck_assert_int_eq(clremat_fit_plan_one(&rq, &c[0], UINT64_MAX, 12, &planned, &fits, &p, NULL),
                             CLREMAT_OK);
            sizes[0] = p.peak_bytes;
            clremat_plan_free(&p);
            ck_assert_int_eq(clremat_fit_plan_one(&rq, &c[0], UINT64_MAX, 100, &planned, &fits, &p, NULL),
                             CLREMAT_OK);
            sizes[1] = p.peak_bytes + 1000;
            sizes[2] = p.fixed_bytes / 2; /* not even the parameters */
            clremat_plan_free(&p);
        }
        for (int s = 0; s < 3; s++)
            for (int k = 0; k < nc; k++) {
                int64_t found, brute = 0;
                int capped;
                /* auto runs the budget planner's search at every batch: every
                 * 7th batch and both sides of the boundary stand for the rest */
                int64_t stride = c[k].policy.kind == CLREMAT_POLICY_AUTO ? 7 : 1;
                ck_assert_int_eq(clremat_fit_max_batch(&rq, &c[k], sizes[s], cap, &found, &capped), CLREMAT_OK);
                for (int64_t b = 1; b <= cap; b++)
                    if ((stride == 1 || b % stride == 1 || b == found || b == found + 1) &&
                        fits_at(&rq, &c[k], sizes[s], b)) {
                        ck_assert_msg(b >= brute, "fits at %lld", (long long)b);
                        ck_assert_msg(stride == 1 || b <= found, "%s %s: batch %lld fits above the search's %lld",
                                      models[m], c[k].label, (long long)b, (long long)found);
                        brute = b;
                    }
                ck_assert_msg(found == brute, "%s %s at %llu bytes: search %lld, brute force %lld", models[m],
                              c[k].label, (unsigned long long)sizes[s], (long long)found, (long long)brute);
                ck_assert_int_eq(capped, brute == cap);
                if (s == 2)
                    ck_assert_int_eq(found, 0);
                else
                    ck_assert_int_gt(found, 1);
            }
        clremat_graph_free(g);
    }
}
END_TEST

/* Rows of the advisor: fitting means peak <= size, the largest batch fits
 * and the next does not, exactly one fastest per size (among the fitting),
 * and no step time without a calibration. */
START_TEST(test_rows_consistent)
{
    clremat_graph *g = test_load_model("transformer.json");
    clremat_fit_config *c = NULL;
    clremat_fit_row *rows = NULL;
    clremat_fit_request rq;
    int nc = 0;
    uint64_t sizes[3] = {3u << 20, 5u << 20, 64u << 20};
    ck_assert_int_eq(clremat_fit_default_configs(g, &c, &nc), CLREMAT_OK);
    ck_assert_int_ge(nc, 6);
    ck_assert_str_eq(c[0].label, "none");
    ck_assert_str_eq(c[nc - 1].label, "auto");
    request_for(&rq, g, c, nc, sizes, 3);
    rq.batch = 32;
    rq.max_batch_cap = 1 << 16;
    ck_assert_int_eq(clremat_fit_run(&rq, &rows), CLREMAT_OK);
    for (int s = 0; s < 3; s++) {
        int fastest = 0, any = 0;
        for (int k = 0; k < nc; k++) {
            const clremat_fit_row *r = &rows[s * nc + k];
            ck_assert_int_eq(r->config, k);
            ck_assert_int_eq(r->size, s);
            ck_assert(isnan(r->step_ms));
            ck_assert(isnan(r->max_batch_step_ms));
            if (r->planned)
                ck_assert_int_eq(r->fits, r->peak_bytes <= sizes[s]);
            else
                ck_assert(!r->fits && r->note[0]);
            any |= r->fits;
            fastest += r->fastest;
            if (r->fastest)
                ck_assert(r->fits);
            ck_assert_int_eq(r->fits, r->max_batch >= rq.batch); /* peaks grow with the batch */
            if (r->max_batch > 0) {
                ck_assert(!r->max_batch_capped);
                ck_assert_uint_le(r->max_batch_peak, sizes[s]);
                ck_assert(fits_at(&rq, &c[k], sizes[s], r->max_batch));
                ck_assert(!fits_at(&rq, &c[k], sizes[s], r->max_batch + 1));
            }
        }
        ck_assert_int_eq(fastest, any ? 1 : 0);
    }
    /* 3 MiB: the none plan (4.84 MiB at batch 32) does not fit, a remat mode does */
    ck_assert(!rows[0].fits && rows[0].planned);
    ck_assert(rows[nc - 1].fits);
    free(rows);
    free(c);
    clremat_graph_free(g);
}
END_TEST

/* Mode lists: list_of_layers names stay together; unknown modes and names fail naming them. */
START_TEST(test_parse_configs)
{
    clremat_graph *g = test_load_model("transformer.json");
    clremat_fit_config *c = NULL;
    int n = 0;
    ck_assert_int_eq(clremat_fit_parse_configs(g, "none,list_of_layers:encoder_block_0,encoder_block_1,budget:4MiB",
                                               &c, &n), CLREMAT_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(c[1].label, "list_of_layers:encoder_block_0,encoder_block_1");
    ck_assert_int_eq(c[1].policy.n_names, 2);
    ck_assert_int_eq(c[2].policy.kind, CLREMAT_POLICY_BUDGET);
    free(c);
    ck_assert_int_ne(clremat_fit_parse_configs(g, "none,bogus", &c, &n), CLREMAT_OK);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "bogus"));
    ck_assert_int_ne(clremat_fit_parse_configs(g, "list_of_layers:nosuch", &c, &n), CLREMAT_OK);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "nosuch"));
    clremat_graph_free(g);
}
END_TEST

/* Runs the command; stdout into out (NUL-terminated), stderr into err. */
static int run_fit(const char *env, const char *args, char *out, size_t out_len, char *err, size_t err_len)
{
    char cmd[4096], errpath[] = "/tmp/clremat-fit-err-XXXXXX";
    const char *tool = getenv("CLREMAT_TOOL");
    FILE *p, *e;
    size_t n;
    int st, fd = mkstemp(errpath);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "%s %s fit %s 2>'%s'", env ? env : "", tool ? tool : "tools/clremat", args, errpath);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    n = fread(out, 1, out_len - 1, p);
    out[n] = 0;
    st = pclose(p);
    e = fopen(errpath, "r");
    ck_assert_ptr_nonnull(e);
    n = fread(err, 1, err_len - 1, e);
    err[n] = 0;
    fclose(e);
    remove(errpath);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char out[1 << 20], err[1 << 14];

static void model_arg(char *buf, size_t len, const char *name)
{
    const char *dir = getenv("CLREMAT_MODELS");
    snprintf(buf, len, "'%s/%s'", dir ? dir : "models", name);
}

/* The JSON document (docs/json-output.md) without a device: step times null. */
START_TEST(test_json_without_device)
{
    char args[2048], m[1024];
    json_error_t je;
    json_t *doc, *sizes, *cfgs, *row;
    size_t i;
    int fastest = 0;
    model_arg(m, sizeof m, "resnet_mlp.json");
    snprintf(args, sizeof args, "%s --memory 512KiB,16MiB --batch 16 --json", m);
    ck_assert_int_eq(run_fit(NULL, args, out, sizeof out, err, sizeof err), 0);
    doc = json_loads(out, 0, &je);
    ck_assert_msg(doc != NULL, "JSON: %s at line %d: %s", je.text, je.line, out);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "model")), "resnet_mlp");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "batch")), 16);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "optimizer")), "adam");
    ck_assert(json_is_null(json_object_get(doc, "device")));
    ck_assert(json_is_null(json_object_get(doc, "calibration")));
    ck_assert_str_eq(json_string_value(json_object_get(doc, "step_time_note")), "no device: step time not predicted");
    ck_assert(json_is_integer(json_object_get(doc, "max_batch_cap")));
    sizes = json_object_get(doc, "sizes");
    ck_assert_int_eq(json_array_size(sizes), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(sizes, 0), "memory_bytes")), 512 << 10);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(sizes, 1), "memory_bytes")), 16 << 20);
    cfgs = json_object_get(json_array_get(sizes, 1), "configs");
    ck_assert_int_ge(json_array_size(cfgs), 6);
    json_array_foreach(cfgs, i, row) {
        static const char *fields[] = {"remat", "planned", "peak_bytes", "fits", "recompute_flops",
                                       "recompute_share", "predicted_step_ms", "fastest", "largest_batch",
                                       "largest_batch_capped", "largest_batch_peak_bytes", "largest_batch_step_ms",
                                       "note"};
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
            ck_assert_msg(json_object_get(row, fields[f]) != NULL, "row %zu lacks %s", i, fields[f]);
        ck_assert(json_is_null(json_object_get(row, "predicted_step_ms")));
        ck_assert(json_is_null(json_object_get(row, "largest_batch_step_ms")));
        ck_assert(json_is_true(json_object_get(row, "fits"))); /* 16 MiB holds every mode at batch 16 */
        ck_assert_uint_le((uint64_t)json_integer_value(json_object_get(row, "peak_bytes")), 16u << 20);
        ck_assert_int_gt(json_integer_value(json_object_get(row, "largest_batch")), 16);
        fastest += json_is_true(json_object_get(row, "fastest"));
    }
    ck_assert_int_eq(fastest, 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(sizes, 1), "fastest")), "none");
    /* 512 KiB: nothing fits (the fixed bytes alone, without gradients with the fused update, are about 0.9 MB), the fastest is null */
    ck_assert(json_is_null(json_object_get(json_array_get(sizes, 0), "fastest")));
    json_decref(doc);
}
END_TEST

/* Errors: exit 2, the value named, no SVG written. */
START_TEST(test_cli_errors)
{
    char m[1024], args[4096], dir[] = "/tmp/clremat-fit-XXXXXX", svg[256];
    struct stat sb;
    static const struct {
        const char *args, *named;
    } bad[] = {
        {"--memory 6GiB,lots", "lots"},  {"--memory 0", "'0'"},       {"--memory 1GiB,,2GiB", "1GiB,,2GiB"},
        {"--memory 1GiB --remat none,bogus", "bogus"},
        {"--memory 1GiB --remat list_of_layers:nosuch", "nosuch"},
        {"--memory 1GiB --batch 0", "'0'"}, {"--memory 1GiB --optimizer lion", "lion"},
        {"--memory 1GiB --batch 64 --max-batch 32", "--max-batch"},
        /* an accumulation K that does not divide the batch: refused as plan
         * and train refuse it (once every row said "no", exit 0), also
         * before a calibration would start (no --memory) */
        {"--memory 1GiB --accumulate 3", "batch 32 is not divisible by --accumulate 3 (32 = 3 x 10 + 2)"},
        {"--memory 1GiB --batch 8 --accumulate 2,3", "batch 8 is not divisible by --accumulate 3"},
        {"--accumulate 3", "batch 32 is not divisible by --accumulate 3"},
    };
    model_arg(m, sizeof m, "transformer.json");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(svg, sizeof svg, "%s/fit.svg", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "%s %s --svg '%s'", m, bad[i].args, svg);
        ck_assert_msg(run_fit(NULL, args, out, sizeof out, err, sizeof err) == 2, "%s: not exit 2: %s", args, err);
        ck_assert_msg(strstr(err, bad[i].named) != NULL, "%s: message does not name %s: %s", args, bad[i].named,
                      err);
        ck_assert_msg(out[0] == 0, "%s printed %s", args, out);
        ck_assert_msg(stat(svg, &sb) != 0, "%s left %s", args, svg);
    }
    /* no device and no --memory: OpenCL finds no platform */
    snprintf(args, sizeof args, "%s --svg '%s'", m, svg);
    ck_assert_int_eq(run_fit("OCL_ICD_VENDORS=/nonexistent OCL_ICD_FILENAMES= CLREMAT_DEVICE=", args, out,
                             sizeof out, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "--memory") != NULL, "no hint at --memory: %s", err);
    ck_assert(out[0] == 0 && stat(svg, &sb) != 0);
    /* a device selection that matches nothing */
    snprintf(args, sizeof args, "%s --memory 1GiB --device no-such-device-xyz --svg '%s'", m, svg);
    ck_assert_int_eq(run_fit(NULL, args, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "no-such-device-xyz") != NULL, "device not named: %s", err);
    ck_assert(out[0] == 0 && stat(svg, &sb) != 0);
    /* an SVG that cannot be written: exit 1, no table */
    snprintf(args, sizeof args, "%s --memory 1GiB --svg '%s/no/such/dir/fit.svg'", m, dir);
    ck_assert_int_eq(run_fit(NULL, args, out, sizeof out, err, sizeof err), 1);
    ck_assert(out[0] == 0);
    /* and one that can */
    snprintf(args, sizeof args, "%s --memory 4MiB,8MiB --svg '%s'", m, svg);
    ck_assert_msg(run_fit(NULL, args, out, sizeof out, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(out, "no device: step time not predicted"));
    ck_assert_int_eq(stat(svg, &sb), 0);
    remove(svg);
    rmdir(dir);
}
END_TEST

/* With a device: a calibration predicts a finite time for every planned row
 * (the calibration's own plan and batch give the measured time back); the
 * same request without it predicts none. */
START_TEST(test_step_time_with_device)
{
    clremat_graph *g = test_load_model("regression.json");
    clremat_ctx *ctx = NULL;
    clremat_opt_config opt;
    clremat_fit_calibration cal;
    clremat_fit_config *c = NULL;
    clremat_fit_row *rows = NULL;
    clremat_fit_request rq;
    uint64_t sizes[1] = {64u << 20};
    int nc = 0;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_opt_defaults("adam", &opt), 0);
    ck_assert_msg(clremat_fit_calibrate(ctx, g, 8, &opt, 1, 1, &cal) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_str_eq(cal.remat, "none");
    ck_assert_int_eq(cal.n_layers, g->n_layers);
    ck_assert(cal.step_ms > 0 && cal.device_scale > 0 && cal.device_scale <= 1 && cal.overhead_ms >= 0);
    if (cal.times_from_flops) { /* no kernel times: the step split by FLOPs, nothing else */
        double ms = 0, flops = 0;
        for (int l = 0; l < cal.n_layers; l++) {
            ms += cal.fwd_ms[l] + cal.bwd_ms[l];
            flops += cal.fwd_flops[l] + cal.bwd_flops[l];
        }
        ck_assert(flops > 0);
        for (int l = 0; l < cal.n_layers; l++)
            ck_assert_msg(fabs(cal.fwd_ms[l] - cal.step_ms * cal.fwd_flops[l] / flops) <= 1e-12 * cal.step_ms &&
                              fabs(cal.bwd_ms[l] - cal.step_ms * cal.bwd_flops[l] / flops) <= 1e-12 * cal.step_ms,
                          "layer %d: %g + %g ms of a %g ms step", l, cal.fwd_ms[l], cal.bwd_ms[l], cal.step_ms);
        ck_assert_msg(fabs(ms - cal.step_ms) <= 1e-9 * cal.step_ms, "layers add up to %g ms of %g", ms, cal.step_ms);
        ck_assert(cal.update_ms == 0 && cal.overhead_ms == 0 && cal.device_scale == 1);
    } else { /* kernel times: most layers took measurable time */
        int timed = 0;
        for (int l = 0; l < cal.n_layers; l++)
            timed += cal.fwd_ms[l] > 0;
        ck_assert_msg(2 * timed >= cal.n_layers, "%d of %d layers with a forward time", timed, cal.n_layers);
    }
    ck_assert_int_eq(clremat_fit_default_configs(g, &c, &nc), CLREMAT_OK);
    request_for(&rq, g, c, nc, sizes, 1);
    rq.ctx = ctx;
    rq.cal = &cal;
    rq.max_batch_cap = 4096;
    ck_assert_int_eq(clremat_fit_run(&rq, &rows), CLREMAT_OK);
    for (int k = 0; k < nc; k++) {
        ck_assert_msg(rows[k].planned && isfinite(rows[k].step_ms) && rows[k].step_ms > 0, "%s: no step time",
                      c[k].label);
        ck_assert(isfinite(rows[k].max_batch_step_ms));
        if (rows[k].recompute_flops > 0) /* recomputation adds time */
            ck_assert(rows[k].step_ms > rows[0].step_ms);
    }
    ck_assert_msg(fabs(rows[0].step_ms - cal.step_ms) <= 1e-9 * cal.step_ms + 1e-12,
                  "none at the calibration batch: predicted %.9g ms, measured %.9g ms", rows[0].step_ms, cal.step_ms);
    free(rows);
    rq.cal = NULL;
    ck_assert_int_eq(clremat_fit_run(&rq, &rows), CLREMAT_OK);
    for (int k = 0; k < nc; k++)
        ck_assert(isnan(rows[k].step_ms));
    free(rows);
    free(c);
    clremat_fit_calibration_free(&cal);
    clremat_ctx_destroy(ctx);
    clremat_graph_free(g);
}
END_TEST

/* Kernel times are taken as real only when they add up to at least
 * CLREMAT_PROFILE_MIN_SHARE of the profiled step's wall time. */
START_TEST(test_profile_usable_threshold)
{
    clremat_trainer *t = calloc(1, sizeof *t);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(clremat_trainer_profile_usable(t), 0); /* never profiled */
    t->profile_wall_ns = 1e9;
    t->profile_device_ns = 4; /* rusticl 22.3: 1 ns a command */
    ck_assert_int_eq(clremat_trainer_profile_usable(t), 0);
    t->profile_device_ns = 0.999 * CLREMAT_PROFILE_MIN_SHARE * 1e9;
    ck_assert_int_eq(clremat_trainer_profile_usable(t), 0);
    t->profile_device_ns = CLREMAT_PROFILE_MIN_SHARE * 1e9;
    ck_assert_int_eq(clremat_trainer_profile_usable(t), 1);
    t->profile_device_ns = 2.5e9; /* PoCL: profiled kernels overlap and run slower */
    ck_assert_int_eq(clremat_trainer_profile_usable(t), 1);
    free(t);
}
END_TEST

/* The device's profiling decides, the same way, what --profile shows and
 * whether --costs measured can plan: on a device whose events carry no
 * timing, the table is withheld and the measured costs refused, each
 * saying why; elsewhere both work. */
START_TEST(test_profile_and_measured_costs_agree)
{
    char args[2048], m[1024];
    const char *dev = getenv("CLREMAT_TEST_DEVICE");
    int usable, rc;
    model_arg(m, sizeof m, "regression.json");
    snprintf(args, sizeof args, "train %s --device '%s' --batch 8 --steps 2 --warmup 1 --profile --quiet", m,
             dev && *dev ? dev : "0:0");
    test_tool_stdout(args, out, sizeof out);
    usable = strstr(out, "no usable kernel times") == NULL;
    ck_assert_msg(usable == (strstr(out, "kernels of the last step by device time") != NULL), "%s", out);
    snprintf(args, sizeof args, "train %s --device '%s' --batch 8 --steps 1 --remat auto --costs measured --quiet", m,
             dev && *dev ? dev : "0:0");
    rc = test_run_tool(args, err, sizeof err);
    if (usable)
        ck_assert_msg(rc == 0, "--costs measured failed on a device with kernel times: %s", err);
    else
        ck_assert_msg(rc != 0 && strstr(err, "no usable kernel times") && strstr(err, "FLOP costs"),
                      "rc %d: %s", rc, err);
}
END_TEST

/* The command with a device: JSON with the calibration and step times. */
START_TEST(test_json_with_device)
{
    char args[2048], m[1024];
    const char *dev = getenv("CLREMAT_TEST_DEVICE");
    json_error_t je;
    json_t *doc, *cfgs, *row;
    size_t i;
    model_arg(m, sizeof m, "regression.json");
    snprintf(args, sizeof args, "%s --device '%s' --memory 1MiB,64MiB --batch 8 --steps 1 --remat none,full,auto --json",
             m, dev && *dev ? dev : "0:0");
    ck_assert_msg(run_fit(NULL, args, out, sizeof out, err, sizeof err) == 0, "%s", err);
    doc = json_loads(out, 0, &je);
    ck_assert_msg(doc != NULL, "JSON: %s: %s", je.text, out);
    ck_assert(json_is_string(json_object_get(doc, "device")));
    ck_assert(json_is_object(json_object_get(doc, "calibration")));
    ck_assert(json_is_null(json_object_get(doc, "step_time_note")));
    ck_assert(json_number_value(json_object_get(json_object_get(doc, "calibration"), "measured_step_ms")) > 0);
    cfgs = json_object_get(json_array_get(json_object_get(doc, "sizes"), 1), "configs");
    ck_assert_int_eq(json_array_size(cfgs), 3);
    json_array_foreach(cfgs, i, row)
        ck_assert_msg(json_number_value(json_object_get(row, "predicted_step_ms")) > 0, "row %zu: %s", i, out);
    json_decref(doc);
}
END_TEST

int main(void)
{
    TCase *tc, *dev;
    Suite *s = test_suite("fit", 300, &tc);
    int have = test_have_device();
    tcase_add_test(tc, test_max_batch_equals_brute_force);
    tcase_add_test(tc, test_rows_consistent);
    tcase_add_test(tc, test_parse_configs);
    tcase_add_test(tc, test_json_without_device);
    tcase_add_test(tc, test_cli_errors);
    tcase_add_test(tc, test_profile_usable_threshold);
    if (have) { /* device tests on $CLREMAT_TEST_DEVICE (run-on-devices.sh runs each device) */
        dev = tcase_create("fit_device");
        tcase_set_timeout(dev, 600);
        tcase_add_test(dev, test_step_time_with_device);
        tcase_add_test(dev, test_json_with_device);
        tcase_add_test(dev, test_profile_and_measured_costs_agree);
        suite_add_tcase(s, dev);
    } else {
        fprintf(stderr, "no OpenCL device: the step-time tests are skipped\n");
    }
    return test_run_suite(s);
}
