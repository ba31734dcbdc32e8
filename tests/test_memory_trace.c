/* test_memory_trace.c: the Chrome trace / Perfetto JSON of a step's live
 * tensors. From plans (no device) of every bundled model under several
 * modes: the file parses, its live-bytes counter peaks at the plan's
 * predicted peak, the tensor slices alive at the peak plus the fixed bytes
 * add up to it, slices of one track never overlap, and names carry the
 * layer. From a measured step on the test device: the counter peaks at the
 * measured peak. Names with quotes and bytes that are not UTF-8 still give
 * valid JSON; a free of nothing live and an unwritable path fail cleanly. */
#include "testutil.h"
#include "executor.h"
#include "memory_trace.h"
#include "train.h"
#include <jansson.h>
#include <string.h>

static char dir[] = "/tmp/clremat-trace-XXXXXX";

/* Checks a trace file; returns its counter's maximum. */
static uint64_t check_trace(const char *path, uint64_t want_peak, const char *some_name)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err), *ev, *e;
    uint64_t fixed, max_live = 0, at_peak = 0;
    long long peak_ts = -1;
    size_t i;
    int tensors = 0, named = 0;
    ck_assert_msg(root != NULL, "%s: %s at line %d", path, err.text, err.line);
    fixed = (uint64_t)json_integer_value(json_object_get(json_object_get(root, "otherData"), "fixed_bytes"));
    ev = json_object_get(root, "traceEvents");
    ck_assert(json_is_array(ev) && json_array_size(ev) > 3);
    json_array_foreach(ev, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        ck_assert_ptr_nonnull(ph);
        ck_assert_ptr_nonnull(name);
        if (!strcmp(ph, "C")) {
            uint64_t live = (uint64_t)json_integer_value(json_object_get(json_object_get(e, "args"), "live"));
            if (live > max_live)
                max_live = live;
        } else if (!strcmp(ph, "i") && !strcmp(name, "peak"))
            peak_ts = json_integer_value(json_object_get(e, "ts"));
    }
    ck_assert_msg(max_live == want_peak, "%s: counter peaks at %llu, want %llu", path,
                  (unsigned long long)max_live, (unsigned long long)want_peak);
    ck_assert(peak_ts >= 0);
    /* slices alive at the peak add up to it; one track's slices never overlap */
    json_array_foreach(ev, i, e) {
        const char *cat = json_string_value(json_object_get(e, "cat"));
        long long ts = json_integer_value(json_object_get(e, "ts")), dur = json_integer_value(json_object_get(e, "dur"));
        long long tid = json_integer_value(json_object_get(e, "tid"));
        size_t j;
        json_t *f;
        if (!cat || strcmp(cat, "tensor"))
            continue;
        tensors++;
        ck_assert_msg(dur >= 1, "a tensor slice of %lld", dur);
        if (some_name && strstr(json_string_value(json_object_get(e, "name")), some_name))
            named++;
        if (ts <= peak_ts && peak_ts < ts + dur)
            at_peak += (uint64_t)json_integer_value(json_object_get(json_object_get(e, "args"), "bytes"));
        json_array_foreach(ev, j, f) {
            const char *c2 = json_string_value(json_object_get(f, "cat"));
            long long ts2 = json_integer_value(json_object_get(f, "ts")), d2 = json_integer_value(json_object_get(f, "dur"));
            if (j <= i || !c2 || strcmp(c2, "tensor") || json_integer_value(json_object_get(f, "tid")) != tid)
                continue;
            ck_assert_msg(ts + dur <= ts2 || ts2 + d2 <= ts, "%s: slices %zu and %zu overlap on track %lld", path, i,
                          j, tid);
        }
    }
    ck_assert_msg(fixed + at_peak == want_peak, "%s: fixed %llu + tensors live at the peak %llu != %llu", path,
                  (unsigned long long)fixed, (unsigned long long)at_peak, (unsigned long long)want_peak);
    ck_assert_int_gt(tensors, 0);
    if (some_name)
        ck_assert_msg(named > 0, "%s: no tensor named after '%s'", path, some_name);
    json_decref(root);
    return max_live;
}

START_TEST(test_plan_traces)
{
    static const char *const models[] = {"regression.json", "mlp_deep.json", "transformer.json", "resnet_mlp.json"};
    static const char *const modes[] = {"none", "full", "activations", "larger_than:1024", "budget:3MiB"};
    const char *mdir = getenv("CLREMAT_MODELS");
    int traced = 0;
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
        for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
            char path[512], out[512];
            clremat_graph *g = NULL;
            clremat_policy pol;
            clremat_plan plan;
            clremat_layer_cost *costs = NULL;
            clremat_trace_event *ev = NULL;
            char *names = NULL;
            int n = 0;
            uint64_t peak = 0;
            snprintf(path, sizeof path, "%s/%s", mdir ? mdir : "models", models[m]);
            ck_assert_msg(clremat_graph_load(path, &g) == CLREMAT_OK, "%s", clremat_last_error());
            ck_assert_int_eq(clremat_policy_parse(modes[k], &pol), CLREMAT_OK);
            if (clremat_plan_for(g, 16, &pol, 2, 0, NULL, &plan, &costs) != CLREMAT_OK) {
                /* a budget below the model's minimum is refused: nothing to trace */
                ck_assert_int_eq(pol.kind, CLREMAT_POLICY_BUDGET);
                clremat_graph_free(g);
                continue;
            }
            snprintf(out, sizeof out, "%s/plan-%zu-%zu.json", dir, m, k);
            ck_assert_int_eq(clremat_trace_from_plan(g, costs, &plan, &ev, &n, &names), CLREMAT_OK);
            ck_assert_int_eq(clremat_trace_write(out, "plan", plan.fixed_bytes, ev, n, g, &plan, &peak), CLREMAT_OK);
            ck_assert_uint_eq(peak, plan.peak_bytes);
            check_trace(out, plan.peak_bytes, g->layers[0].name);
            traced++;
            remove(out);
            free(ev);
            free(names);
            free(costs);
            clremat_plan_free(&plan);
            clremat_graph_free(g);
        }
    ck_assert_int_ge(traced, 16);
}
END_TEST

START_TEST(test_names_and_errors)
{
    clremat_trace_event ev[4] = {
        {"a \"quoted\" \xff name\n", 100, -1}, {"b", 50, -1}, {"a \"quoted\" \xff name\n", -100, -1}, {"b", -50, -1}};
    clremat_trace_event bad[2] = {{"x", 10, -1}, {"y", -10, -1}};
    char out[512];
    uint64_t peak = 0;
    snprintf(out, sizeof out, "%s/names.json", dir);
    ck_assert_int_eq(clremat_trace_write(out, "t\xc3\x28", 1000, ev, 4, NULL, NULL, &peak), CLREMAT_OK);
    ck_assert_uint_eq(peak, 1150);
    check_trace(out, 1150, "quoted");
    remove(out);
    /* a free of a tensor that is not live: refused, no file left */
    snprintf(out, sizeof out, "%s/bad.json", dir);
    ck_assert_int_eq(clremat_trace_write(out, "t", 0, bad, 2, NULL, NULL, NULL), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "'y'"));
    ck_assert_int_ne(access(out, F_OK), 0);
    /* a directory that does not exist */
    snprintf(out, sizeof out, "%s/missing/t.json", dir);
    ck_assert_int_eq(clremat_trace_write(out, "t", 0, ev, 4, NULL, NULL, NULL), CLREMAT_ERR_IO);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "missing/t.json"));
}
END_TEST

/* A measured step: the trace's counter peaks where the pool did, and the
 * tensors are named after their layers. */
START_TEST(test_train_trace_is_measured)
{
    static const char *const modes[] = {"none", "full", "activations"};
    const char *mdir = getenv("CLREMAT_MODELS");
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        clremat_train_config cfg;
        clremat_train_result res;
        char model[512], out[512];
        memset(&cfg, 0, sizeof cfg);
        memset(&res, 0, sizeof res);
        snprintf(model, sizeof model, "%s/transformer.json", mdir ? mdir : "models");
        snprintf(out, sizeof out, "%s/train-%zu.json", dir, k);
        cfg.model_path = model;
        cfg.device = getenv("CLREMAT_TEST_DEVICE");
        cfg.batch = 8;
        cfg.steps = 2;
        cfg.warmup = 0;
        cfg.seed = 3;
        cfg.optimizer = "adam";
        cfg.remat = modes[k];
        cfg.train_samples = 64;
        cfg.val_samples = 16;
        cfg.memory_trace = out;
        ck_assert_msg(clremat_train_run(&cfg, &res) == CLREMAT_OK, "%s", clremat_last_error());
        ck_assert_uint_eq(res.measured_peak, res.predicted_peak);
        check_trace(out, res.measured_peak, "encoder_block_0/attn");
        remove(out);
        clremat_train_result_free(&res);
    }
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s;
    int st;
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    s = test_suite("memory_trace", 240, &tc);
    tcase_add_test(tc, test_plan_traces);
    tcase_add_test(tc, test_names_and_errors);
    if (test_have_device())
        tcase_add_test(tc, test_train_trace_is_measured);
    else
        fprintf(stderr, "no OpenCL device: the measured trace is not checked\n");
    st = test_run_suite(s);
    rmdir(dir);
    return st;
}
