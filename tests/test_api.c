/* test_api.c: the embedding API (include/clremat_api.h) from C: its reports
 * are byte for byte the command's --json for the same options, options and
 * arguments are refused with a message naming them, the error details
 * (file:line:col, bytes needed and available) are recorded, training takes
 * in-memory tensors and a progress callback that can stop it, and the run
 * hands out the report of the steps run and the weights. Under the
 * sanitizers it also holds every call leak-free. */
#include "testutil.h"
#include "clremat_api.h"
#include "backend.h"
#include <string.h>

static const char *models(void)
{
    const char *m = getenv("CLREMAT_MODELS");
    return m ? m : "models";
}

/* Error messages (base/error.c, backend/status.c): one may quote the
 * message it replaces (the Keras import prefixes the optimizer's; that
 * came out garbled when the buffer was both vsnprintf's source and
 * destination), and one longer than the buffer keeps its end, where the
 * reason is ("'VALUE': why"), with what was left out said. */
START_TEST(error_messages)
{
    static char value[20000];
    const char *e;
    ck_assert_int_eq(clremat_set_error(CLREMAT_ERR_PARSE, "epsilon must be a positive finite number, got -1"),
                     CLREMAT_ERR_PARSE);
    ck_assert_int_eq(clremat_set_error(CLREMAT_ERR_PARSE, "f.keras: optimizer Adam: %s", clremat_last_error()),
                     CLREMAT_ERR_PARSE);
    ck_assert_str_eq(clremat_last_error(), "f.keras: optimizer Adam: epsilon must be a positive finite number, got -1");
    ck_assert_int_eq(clremat_fail(NULL, CLREMAT_ERR_IO, "%s (again)", clremat_last_error()), CLREMAT_ERR_IO);
    ck_assert_str_eq(clremat_last_error(),
                     "f.keras: optimizer Adam: epsilon must be a positive finite number, got -1 (again)");
    memset(value, 'v', sizeof value - 1);
    ck_assert_int_eq(clremat_set_error(CLREMAT_ERR_PARSE, "--remat '%s': more than 64 names", value), CLREMAT_ERR_PARSE);
    e = clremat_last_error();
    ck_assert_uint_lt(strlen(e), 8192);
    ck_assert_uint_gt(strlen(e), 8000);
    ck_assert_msg(!strncmp(e, "--remat 'vvv", 12), "%.40s", e);
    {
        const char *end = "vvv': more than 64 names";
        ck_assert_msg(!strcmp(e + strlen(e) - strlen(end), end), "%s", e + strlen(e) - 40);
    }
    ck_assert_msg(strstr(e, " bytes left out ...] "), "%.200s", e + 4000);
    { /* the bytes kept before and after the mark, and those it says were left out, make the whole message */
        const char *mark = strstr(e, " [... "), *after = strstr(e, " bytes left out ...] ");
        const size_t whole = strlen("--remat '") + sizeof value - 1 + strlen("': more than 64 names");
        ck_assert_ptr_nonnull(mark);
        ck_assert_uint_eq((size_t)(mark - e) + strtoul(mark + 6, NULL, 10) +
                              strlen(after + strlen(" bytes left out ...] ")),
                          whole);
    }
}
END_TEST

/* The command's stdout for args (cut to len - 1 bytes); its exit status. */
static int tool_stdout(const char *args, char *out, size_t len)
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

static char cli[1 << 20];

START_TEST(plan_pareto_fit_as_the_command)
{
    char path[1024], args[2048], *json = NULL;
    snprintf(path, sizeof path, "%s/regression.json", models());
    ck_assert_int_eq(clremat_api_plan(path, "{\"remat\": \"full\", \"batch\": 64, \"actions\": true}", &json),
                     CLREMAT_OK);
    snprintf(args, sizeof args, "plan %s --remat full --batch 64 --actions --json", path);
    ck_assert_int_eq(tool_stdout(args, cli, sizeof cli), 0);
    ck_assert_str_eq(json, cli);
    clremat_api_free(json);
    ck_assert_int_eq(clremat_api_pareto(path, "{\"batch\": 16, \"points\": 6}", &json), CLREMAT_OK);
    snprintf(args, sizeof args, "plan %s --pareto --batch 16 --points 6 --json", path);
    ck_assert_int_eq(tool_stdout(args, cli, sizeof cli), 0);
    ck_assert_str_eq(json, cli);
    clremat_api_free(json);
    ck_assert_int_eq(clremat_api_fit(path, "{\"memory\": [\"1MiB\", 67108864], \"remat\": \"none,full\"}", &json),
                     CLREMAT_OK);
    snprintf(args, sizeof args, "fit %s --memory 1MiB,64MiB --remat none,full --json", path);
    ck_assert_int_eq(tool_stdout(args, cli, sizeof cli), 0);
    ck_assert_str_eq(json, cli);
    clremat_api_free(json);
}
END_TEST

START_TEST(bad_options_and_arguments)
{
    char path[1024], *json = (char *)"untouched";
    snprintf(path, sizeof path, "%s/regression.json", models());
    ck_assert_int_eq(clremat_api_plan(path, "{\"bogus\": 1}", &json), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(json);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "unknown option 'bogus'"));
    ck_assert_int_eq(clremat_api_plan(path, "{\"batch\": \"8\"}", &json), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "'batch' must be an integer"));
    ck_assert_int_eq(clremat_api_plan(path, "[1]", &json), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_api_plan(path, "{\"batch\": ", &json), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "JSON syntax error"));
    ck_assert_int_eq(clremat_api_plan(NULL, NULL, &json), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_api_plan(path, NULL, NULL), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_api_pareto(path, "{\"optimizer\": \"nadam\"}", &json), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_api_fit(path, "{\"memory\": []}", &json), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_api_compare(path, "{\"steps\": 2, \"warmup\": 2}", &json), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "warmup"));
}
END_TEST

START_TEST(model_error_position)
{
    char path[] = "/tmp/clremat-test-api-XXXXXX";
    const char *file = NULL;
    char *json = NULL;
    int line = 0, col = 0, fd = mkstemp(path);
    const char *text = "{\"name\": \"x\",\n \"input\": {\"shape\": [4]},\n \"layers\": [{\"type\": \"dense\", \"units\": }]}\n";
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    ck_assert_int_eq(clremat_api_plan(path, NULL, &json), CLREMAT_ERR_PARSE);
    ck_assert_int_eq(clremat_api_error_position(&file, &line, &col), 1);
    ck_assert_str_eq(file, path);
    ck_assert_int_eq(line, 3);
    ck_assert_int_gt(col, 1);
    ck_assert_int_eq(clremat_api_error_bytes(NULL, NULL), 0);
    unlink(path);
    /* a later call that fails elsewhere does not report the old position */
    ck_assert_int_eq(clremat_api_plan("/nonexistent/model.json", NULL, &json), CLREMAT_ERR_IO);
    ck_assert_int_eq(clremat_api_error_position(&file, &line, &col), 0);
}
END_TEST

static int stop_after_two(void *user, int64_t step, int64_t steps, double loss)
{
    int *calls = user;
    ck_assert_int_eq(step, *calls + 1);
    ck_assert_int_eq(steps, 10);
    ck_assert(loss > 0);
    return ++*calls >= 2;
}

START_TEST(train_tensors_progress_weights)
{
    enum { N = 32 };
    static float x[N * 16], y[N * 4];
    int64_t dx[2] = {N, 16}, dy[2] = {N, 4}, dvx[2] = {0, 16}, dvy[2] = {0, 4};
    clremat_api_tensor t[4] = {{"train_x", CLREMAT_API_F32, 2, dx, x}, {"train_y", CLREMAT_API_F32, 2, dy, y},
                               {"val_x", CLREMAT_API_F32, 2, dvx, NULL}, {"val_y", CLREMAT_API_F32, 2, dvy, NULL}};
    char path[1024], opts[512];
    const char *name;
    const int64_t *dims;
    const float *w;
    uint64_t need = 0, avail = 0;
    int calls = 0, rank;
    clremat_api_run *run = NULL;
    for (int i = 0; i < N * 16; i++)
        x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < N * 4; i++)
        y[i] = (float)((i * 13) % 7) / 7.0f;
    snprintf(path, sizeof path, "%s/regression.json", models());
    snprintf(opts, sizeof opts, "{\"device\": \"%s\", \"steps\": 10, \"warmup\": 1, \"batch\": 8}",
             getenv("CLREMAT_TEST_DEVICE") ? getenv("CLREMAT_TEST_DEVICE") : "");
    ck_assert_int_eq(clremat_api_train(path, opts, t, 4, stop_after_two, &calls, &run),
                     CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "stopped by the progress callback after step 2"));
    ck_assert_int_eq(calls, 2);
    ck_assert_ptr_nonnull(run); /* the steps run are reported */
    ck_assert_ptr_nonnull(strstr(clremat_api_run_json(run), "\"steps\": 2,"));
    ck_assert_int_eq(clremat_api_run_weight_count(run), 10);
    ck_assert_int_eq(clremat_api_run_weight(run, 0, &name, &rank, &dims, &w), CLREMAT_OK);
    ck_assert_str_eq(name, "h1/kernel");
    ck_assert_int_eq(rank, 2);
    ck_assert_int_eq(dims[0], 16);
    ck_assert_int_eq(dims[1], 128);
    ck_assert(w[0] == w[0]);
    ck_assert_int_eq(clremat_api_run_weight(run, 10, &name, &rank, &dims, &w), CLREMAT_ERR_INVALID_ARGUMENT);
    clremat_api_run_free(run);
    run = NULL;
    /* the tensors are checked as a data file's */
    dx[1] = 15;
    ck_assert_int_eq(clremat_api_train(path, opts, t, 4, NULL, NULL, &run), CLREMAT_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "per-sample shape [15]"));
    ck_assert_ptr_null(run);
    dx[1] = 16;
    ck_assert_int_eq(clremat_api_train(path, opts, t, 3, NULL, NULL, &run), CLREMAT_ERR_INVALID_ARGUMENT);
    /* out of memory: the bytes needed and available */
    snprintf(opts, sizeof opts, "{\"device\": \"%s\", \"steps\": 2, \"batch\": 8, \"memory_limit\": 65536}",
             getenv("CLREMAT_TEST_DEVICE") ? getenv("CLREMAT_TEST_DEVICE") : "");
    ck_assert_int_eq(clremat_api_train(path, opts, t, 4, NULL, NULL, &run), CLREMAT_ERR_OUT_OF_MEMORY);
    ck_assert_int_eq(clremat_api_error_bytes(&need, &avail), 1);
    ck_assert_uint_gt(need, avail);
    ck_assert_ptr_null(run);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("api", 300, &tc);
    tcase_add_test(tc, error_messages);
    tcase_add_test(tc, plan_pareto_fit_as_the_command);
    tcase_add_test(tc, bad_options_and_arguments);
    tcase_add_test(tc, model_error_position);
    tcase_add_test(tc, train_tensors_progress_weights);
    return test_run_device_suite(s);
}
