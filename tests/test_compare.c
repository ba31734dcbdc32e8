/* test_compare.c: `clremat compare`: mode-list splitting, and a real run of
 * the command producing the table, JSON (parsed and checked), CSV and SVG,
 * with runs that do not fit reported rather than dropped. Without a device
 * the parts that need none still run, and the program exits 77 (skipped). */
#include "testutil.h"
#include "compare.h"
#include <jansson.h>
#include <stdio.h>
#include <string.h>

START_TEST(test_split_modes)
{
    char **m;
    int n;
    ck_assert_int_eq(clremat_split_modes("none,full,list_of_layers:a,b,larger_than:7,budget:1MiB,auto", &m, &n),
                     CLREMAT_OK);
    ck_assert_int_eq(n, 6);
    ck_assert_str_eq(m[0], "none");
    ck_assert_str_eq(m[2], "list_of_layers:a,b");
    ck_assert_str_eq(m[3], "larger_than:7");
    ck_assert_str_eq(m[5], "auto");
    for (int i = 0; i < n; i++)
        free(m[i]);
    free(m);
    ck_assert_int_ne(clremat_split_modes("", &m, &n), CLREMAT_OK);
}
END_TEST

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), n);
    buf[n] = 0;
    fclose(f);
    return buf;
}

START_TEST(test_compare_outputs)
{
    char dir[] = "/tmp/clremat-compareXXXXXX", cmd[4096], json_path[256], csv_path[256], svg_path[256];
    const char *tool = getenv("CLREMAT_TOOL"), *models = getenv("CLREMAT_MODELS");
    const char *dev = getenv("CLREMAT_TEST_DEVICE");
    json_t *root, *runs;
    json_error_t err;
    char *csv, *svg;
    int rc, lines = 0;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(json_path, sizeof json_path, "%s/c.json", dir);
    snprintf(csv_path, sizeof csv_path, "%s/c.csv", dir);
    snprintf(svg_path, sizeof svg_path, "%s/c.svg", dir);
    /* 3100000 bytes fit full and auto, not none nor the list, on mlp_deep at
     * batch 32 with the fused update (the default) on both GEMM paths
     * (native: full 2978032, list 3200240, none 3224816; CLBlast, with the
     * gradient scratch: 3014896, 3236080, 3260656) */
    snprintf(cmd, sizeof cmd,
             "%s compare %s/mlp_deep.json --devices %s --remat none,full,list_of_layers:dense_3,dense_4,auto --steps 4 "
             "--warmup 1 --memory-limit 3100000 --quiet --json --csv %s --svg %s > %s",
             tool ? tool : "tools/clremat", models ? models : "models", dev && *dev ? dev : "0:0", csv_path,
             svg_path, json_path);
    rc = system(cmd);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s exited %d", cmd, rc);
    root = json_load_file(json_path, 0, &err);
    ck_assert_msg(root != NULL, "JSON: %s at %d:%d", err.text, err.line, err.column);
    runs = json_object_get(root, "runs");
    ck_assert_int_eq(json_array_size(runs), 4);
    {
        json_t *none = json_array_get(runs, 0), *full = json_array_get(runs, 1), *list = json_array_get(runs, 2);
        json_t *autop = json_array_get(runs, 3);
        ck_assert_str_eq(json_string_value(json_object_get(none, "remat")), "none");
        /* none runs on the device (overhead needs it) but does not fit the limit */
        ck_assert_str_eq(json_string_value(json_object_get(none, "status")), "ok");
        ck_assert(json_is_false(json_object_get(none, "fits")));
        ck_assert(json_integer_value(json_object_get(none, "measured_peak_bytes")) > 3100000);
        ck_assert_str_eq(json_string_value(json_object_get(full, "status")), "ok");
        ck_assert(json_is_true(json_object_get(full, "fits")));
        ck_assert_int_eq(json_integer_value(json_object_get(full, "measured_peak_bytes")),
                         json_integer_value(json_object_get(full, "predicted_peak_bytes")));
        ck_assert(json_integer_value(json_object_get(full, "measured_peak_bytes")) <= 3100000);
        ck_assert_int_eq(json_array_size(json_object_get(full, "losses")), 4);
        ck_assert(json_is_true(json_object_get(json_object_get(full, "numerics"), "finite")));
        ck_assert(json_is_true(json_object_get(json_object_get(full, "numerics"), "bitwise_equal_to_none")));
        ck_assert(json_is_true(json_object_get(json_object_get(list, "numerics"), "bitwise_equal_to_none")));
        ck_assert(json_real_value(json_object_get(full, "overhead_vs_none")) > 0);
        ck_assert(json_equal(json_object_get(full, "losses"), json_object_get(none, "losses")));
        /* auto plans for the limit */
        ck_assert_str_eq(json_string_value(json_object_get(autop, "remat")), "auto");
        ck_assert(json_is_true(json_object_get(autop, "fits")));
        ck_assert(json_integer_value(json_object_get(autop, "measured_peak_bytes")) <= 3100000);
    }
    json_decref(root);
    csv = slurp(csv_path);
    for (char *p = csv; *p; p++)
        lines += *p == '\n';
    ck_assert_int_eq(lines, 5);
    ck_assert_ptr_nonnull(strstr(csv, "\"auto\",ok"));
    free(csv);
    svg = slurp(svg_path);
    /* an XML declaration, then the SVG element */
    ck_assert(strncmp(svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg", 43) == 0);
    ck_assert_ptr_nonnull(strstr(svg, "</svg>\n"));
    ck_assert_ptr_nonnull(strstr(svg, "<polyline"));
    free(svg);
    /* a bad mode is an error before anything runs, and writes nothing */
    snprintf(cmd, sizeof cmd, "%s compare %s/mlp_deep.json --remat none,bogus --quiet --csv %s/x.csv 2>/dev/null",
             tool ? tool : "tools/clremat", models ? models : "models", dir);
    rc = system(cmd);
    ck_assert(WIFEXITED(rc) && WEXITSTATUS(rc) != 0);
    snprintf(cmd, sizeof cmd, "%s/x.csv", dir);
    ck_assert_int_ne(access(cmd, F_OK), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Bad numbers are refused before a device is opened, as train refuses them. */
START_TEST(test_compare_rejects_bad_numbers)
{
    static const char *args[] = {"--lr inf", "--lr 0", "--lr -1", "--lr nan", "--lr 1e999", "--lr x"};
    const char *models = getenv("CLREMAT_MODELS");
    char cmd[1024], err[2048];
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        snprintf(cmd, sizeof cmd, "compare %s/mlp_deep.json %s", models ? models : "models", args[i]);
        ck_assert_int_eq(test_run_tool(cmd, err, sizeof err), 2);
        ck_assert_msg(strstr(err, "--lr takes a positive number") != NULL, "%s: %s", cmd, err);
    }
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("compare", 300, &tc);
    tcase_add_test(tc, test_split_modes);
    tcase_add_test(tc, test_compare_rejects_bad_numbers);
    int have = test_have_device(), st;
    if (have)
        tcase_add_test(tc, test_compare_outputs);
    else
        fprintf(stderr, "no OpenCL device: the compare run is skipped\n");
    st = test_run_suite(s);
    /* the device part did not run: a skip, not a pass (a failure stays one) */
    return st == EXIT_SUCCESS && !have ? TEST_SKIP : st;
}
