/* test_svg.c: the SVG pictures read at a glance (no device, no renderer).
 * Axis ticks are round (1-2-5 steps) in a unit chosen for the range; values
 * print with their unit; text stays well-formed XML whatever bytes a name
 * holds; labels never overlap each other or obstacles; and the pictures
 * themselves, from made-up runs: one step-time panel per device (a device
 * 135 times slower does not flatten the other's bars), every bar's value
 * printed, a series equal to another named in the legend, marks at the same
 * Pareto point sharing one label, the fit picture's sizes as lines and a
 * configuration that changes with the size labelled once per size.
 * tests/test_svg_render.c renders what the command writes. */
#include "testutil.h"
#include "compare.h"
#include "report_svg.h"
#include "svg_plot.h"
#include <math.h>
#include <string.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    long n;
    char *buf;
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static int count(const char *hay, const char *needle)
{
    int k = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        k++;
    return k;
}

/* 1 when step is 1, 2 or 5 times a power of ten. */
static int is_125(double step)
{
    double mag = pow(10, floor(log10(step) + 1e-12)), norm = step / mag;
    return fabs(norm - 1) < 1e-9 || fabs(norm - 2) < 1e-9 || fabs(norm - 5) < 1e-9 || fabs(norm - 10) < 1e-9;
}

START_TEST(test_nice_axes)
{
    static const struct {
        double lo, hi;
        svg_unit_kind kind;
        const char *unit;
    } cases[] = {
        {0, 5075216, SVG_UNIT_BYTES, "MiB"},      {1126664, 5075216, SVG_UNIT_BYTES, "MiB"},
        {1318000, 1353000, SVG_UNIT_BYTES, "MiB"}, {0, 9793000, SVG_UNIT_FLOP, "MFLOP"},
        {0, 2.17e9, SVG_UNIT_FLOP, "GFLOP"},       {0, 7.884, SVG_UNIT_MS, "ms"},
        {0, 2235, SVG_UNIT_MS, "s"},               {0, 0.4, SVG_UNIT_MS, "us"},
        {0, 900, SVG_UNIT_BYTES, "B"},             {3.7e9, 3.7e9, SVG_UNIT_BYTES, "GiB"},
        {0, 0, SVG_UNIT_FLOP, "FLOP"},             {12345, 98765, SVG_UNIT_PLAIN, ""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        svg_axis a;
        char prev[64] = "", lab[64];
        svg_axis_nice(&a, cases[c].lo, cases[c].hi, 5, cases[c].kind);
        ck_assert_msg(strcmp(a.unit, cases[c].unit) == 0, "case %zu: unit %s, want %s", c, a.unit, cases[c].unit);
        ck_assert_msg(is_125(a.step), "case %zu: step %g is not 1, 2 or 5 times a power of ten", c, a.step);
        ck_assert_msg(a.n >= 1 && a.n <= 8, "case %zu: %d ticks", c, a.n);
        ck_assert_msg(svg_axis_lo(&a) <= cases[c].lo * (1 + 1e-12) && svg_axis_hi(&a) >= cases[c].hi * (1 - 1e-12),
                      "case %zu: [%g, %g] does not cover [%g, %g]", c, svg_axis_lo(&a), svg_axis_hi(&a),
                      cases[c].lo, cases[c].hi);
        ck_assert_msg(fabs(a.first / a.step - round(a.first / a.step)) < 1e-9, "case %zu: first tick %g off the step",
                      c, a.first);
        for (int t = 0; t <= a.n; t++) {
            double v;
            char *end;
            svg_axis_tick_label(&a, t, lab, sizeof lab);
            v = strtod(lab, &end);
            ck_assert_msg(*end == 0 && strcmp(lab, prev) != 0, "case %zu tick %d: '%s'", c, t, lab);
            ck_assert_msg(fabs(v - (a.first + t * a.step)) <= a.step * 1e-6, "case %zu tick %d: '%s' is not %g", c,
                          t, lab, a.first + t * a.step);
            ck_assert_msg(strlen(lab) <= 7, "case %zu tick %d: '%s' is too long to read", c, t, lab);
            snprintf(prev, sizeof prev, "%s", lab);
        }
    }
    /* the old faults: a byte axis from 1126664 to 5075216 ticked at raw
     * fractions (1.074, 2.016, 2.957 MiB); now whole MiB */
    {
        svg_axis a;
        char lab[64];
        svg_axis_nice(&a, 1126664, 5075216, 5, SVG_UNIT_BYTES);
        svg_axis_tick_label(&a, 0, lab, sizeof lab);
        ck_assert_str_eq(lab, "1");
        ck_assert_double_eq(a.step, 1);
    }
}
END_TEST

START_TEST(test_values_with_units)
{
    static const struct {
        double v;
        svg_unit_kind kind;
        const char *want;
    } cases[] = {
        {5075216, SVG_UNIT_BYTES, "4.84 MiB"}, {512, SVG_UNIT_BYTES, "512 B"},
        {3494160, SVG_UNIT_BYTES, "3.33 MiB"}, {7.884, SVG_UNIT_MS, "7.88 ms"},
        {2236, SVG_UNIT_MS, "2.24 s"},         {0.25, SVG_UNIT_MS, "250 us"},
        {9.793e6, SVG_UNIT_FLOP, "9.79 MFLOP"}, {123.4, SVG_UNIT_MS, "123 ms"},
        {0, SVG_UNIT_MS, "0 ms"},              {NAN, SVG_UNIT_MS, "n/a"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char buf[64];
        svg_format_value(cases[c].v, cases[c].kind, buf, sizeof buf);
        ck_assert_msg(strcmp(buf, cases[c].want) == 0, "%g: '%s', want '%s'", cases[c].v, buf, cases[c].want);
    }
}
END_TEST

START_TEST(test_text_is_wellformed)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    svg_write_escaped(f, "a<b>&\"c\" \xff\xfe caf\xc3\xa9 \xc0\xaf \xed\xa0\x80 \x01 \xe2\x82");
    fclose(f);
    ck_assert_str_eq(buf, "a&lt;b&gt;&amp;&quot;c&quot; \xEF\xBF\xBD\xEF\xBF\xBD caf\xc3\xa9 \xEF\xBF\xBD\xEF\xBF\xBD "
                          "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD");
    free(buf);
}
END_TEST

START_TEST(test_labels_never_overlap)
{
    enum { N = 14 };
    svg_label l[N];
    const char *names[N] = {"none", "full", "activations", "larger_than", "list_of_layers:res_block_0",
                            "list_of_layers:res_block_1", "list_of_layers:res_block_2",
                            "list_of_layers:res_block_3", "a", "bb", "ccc", "dddd", "eeeee", "ffffff"};
    svg_box area = {0, 0, 700, 400}, obst[2] = {{340, 190, 20, 20}, {600, 0, 100, 50}};
    for (int i = 0; i < N; i++) /* most of them on one point, a few close by */
        l[i] = (svg_label){i < 8 ? 350 : 350 + 4 * i, i < 8 ? 200 : 205, names[i], 11, {0, 0, 0, 0}, 0};
    ck_assert_int_eq(svg_place_labels(l, N, area, obst, 2), 0);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(l[i].box.x >= 0 && l[i].box.y >= 0 && l[i].box.x + l[i].box.w <= 700 &&
                          l[i].box.y + l[i].box.h <= 400,
                      "label %s outside the area", names[i]);
        ck_assert_msg(l[i].box.w >= svg_text_width(names[i], 11), "label %s narrower than its text", names[i]);
        for (int k = 0; k < 2; k++)
            ck_assert_msg(!svg_boxes_overlap(&l[i].box, &obst[k]), "label %s over obstacle %d", names[i], k);
        for (int j = 0; j < i; j++)
            ck_assert_msg(!svg_boxes_overlap(&l[i].box, &l[j].box), "labels %s and %s overlap", names[i], names[j]);
    }
    /* the overlap test itself */
    {
        svg_box a = {0, 0, 10, 10}, b = {9, 9, 5, 5}, c = {10, 0, 5, 5};
        ck_assert(svg_boxes_overlap(&a, &b));
        ck_assert(!svg_boxes_overlap(&a, &c));
    }
}
END_TEST

/* Two devices, one 135 times slower; auto's timeline equals none's. */
static void make_runs(clremat_compare_run *r, clremat_pool_event *tl)
{
    static const char *const modes[3] = {"none", "full", "auto"};
    static const double ms[2][3] = {{7.9, 13.2, 7.95}, {1066, 1790, 1071}};
    memset(r, 0, sizeof *r * 6);
    for (int d = 0; d < 2; d++)
        for (int m = 0; m < 3; m++) {
            clremat_compare_run *x = &r[d * 3 + m];
            snprintf(x->device, sizeof x->device, "%s", d ? "llvmpipe (slow)" : "pthread-cpu");
            snprintf(x->device_id, sizeof x->device_id, "%d:0", d);
            snprintf(x->mode, sizeof x->mode, "%s", modes[m]);
            x->median_ms = ms[d][m];
            x->p10_ms = ms[d][m] * 0.95;
            x->p90_ms = ms[d][m] * 1.1;
            x->measured_peak = x->predicted_peak = m == 1 ? 3223824 : 5075216;
            x->limit = 4718592; /* --memory-limit 4.5MiB */
            x->timeline = tl + (d * 3 + m) * 8;
            x->n_timeline = 8;
            for (int k = 0; k < 8; k++)
                x->timeline[k].live_bytes = 1126664 + (uint64_t)(m == 1 ? 300000 : 560000) * (uint64_t)(k < 4 ? k : 7 - k);
        }
}

START_TEST(test_compare_picture)
{
    clremat_compare_run runs[6];
    clremat_pool_event tl[48];
    char dir[] = "/tmp/clremat-svg-XXXXXX", path[256];
    char *svg;
    memset(tl, 0, sizeof tl);
    make_runs(runs, tl);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/c.svg", dir);
    ck_assert_int_eq(clremat_compare_svg(path, "models/t\xffx.json", runs, 6), CLREMAT_OK);
    svg = slurp(path);
    /* one step-time panel per device, each bar's value printed in a unit
     * that suits its device */
    ck_assert_int_eq(count(svg, "Median step time:"), 2);
    ck_assert_ptr_nonnull(strstr(svg, ">7.90 ms<"));
    ck_assert_ptr_nonnull(strstr(svg, ">13.2 ms<"));
    ck_assert_ptr_nonnull(strstr(svg, ">1.07 s<"));
    ck_assert_ptr_nonnull(strstr(svg, ">1.79 s<"));
    /* peaks printed on the bars and marked on the timelines */
    ck_assert_int_ge(count(svg, ">4.84 MiB<"), 4);
    ck_assert_int_ge(count(svg, ">3.07 MiB<"), 2);
    /* the memory limit the runs had to fit is drawn on the peak panel */
    ck_assert_int_eq(count(svg, ">memory limit 4.50 MiB<"), 1);
    /* auto equals none: said in each device's legend, drawn dashed */
    ck_assert_int_eq(count(svg, "auto (= none)"), 2);
    ck_assert_ptr_nonnull(strstr(svg, "stroke-dasharray"));
    /* the invalid byte of the model name is replaced, not copied */
    ck_assert_ptr_null(strchr(svg, '\xff'));
    ck_assert_ptr_nonnull(strstr(svg, "t\xEF\xBF\xBDx.json"));
    /* no raw-fraction ticks of the old axes */
    ck_assert_ptr_null(strstr(svg, ".899"));
    ck_assert_ptr_null(strstr(svg, "1255.0 ms"));
    free(svg);
    remove(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_pareto_picture_groups_equal_points)
{
    clremat_pareto_point pts[3] = {{100, 1300000, 5e6}, {200, 1400000, 1e6}, {300, 1500000, 0}};
    clremat_pareto_mark marks[6];
    char dir[] = "/tmp/clremat-svg-XXXXXX", path[256];
    char *svg;
    const char *labels[6] = {"none", "full", "list_of_layers:res_block_0", "list_of_layers:res_block_1",
                             "list_of_layers:res_block_2", "activations"};
    for (int i = 0; i < 6; i++) {
        snprintf(marks[i].label, sizeof marks[i].label, "%s", labels[i]);
        marks[i].peak_bytes = i == 0 ? 1500000 : i == 1 ? 1320000 : i == 5 ? 1400000 : 1482256;
        marks[i].recompute_cost = i == 0 ? 0 : i == 1 ? 7.5e6 : i == 5 ? 1.5e4 : 6.205e5;
    }
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/p.svg", dir);
    ck_assert_int_eq(clremat_pareto_svg(path, "resnet", "FLOP", pts, 3, marks, 6), CLREMAT_OK);
    svg = slurp(path);
    /* four distinct points, four squares; the three blocks share a label */
    ck_assert_int_eq(count(svg, "fill=\"#d62728\"/>"), 4 + 1 /* legend */);
    ck_assert_ptr_nonnull(strstr(svg, "list_of_layers:res_block_0,</tspan>"));
    ck_assert_int_eq(count(svg, "res_block_1"), 1);
    ck_assert_ptr_nonnull(strstr(svg, "recompute cost (MFLOP)"));
    ck_assert_ptr_nonnull(strstr(svg, "predicted peak (MiB)"));
    free(svg);
    remove(path);
    rmdir(dir);
}
END_TEST

/* The fit picture: three configurations at two sizes; none and full are
 * the same at both sizes (one point each), auto differs (one point per
 * size); the fastest is green; each size a dashed line with its value. */
static void fit_rows(clremat_fit_row *r, int with_times)
{
    /* size-major: [size][none, full, auto] */
    const uint64_t peak[6] = {5000000, 3200000, 3900000, 5000000, 3200000, 5000000};
    const double ms[6] = {8.3, 12.6, 9.1, 8.3, 12.6, 8.3}, rf[6] = {0, 4e6, 1e6, 0, 4e6, 0};
    memset(r, 0, sizeof *r * 6);
    for (int i = 0; i < 6; i++) {
        r[i].config = i % 3;
        r[i].size = i / 3;
        r[i].planned = 1;
        r[i].peak_bytes = peak[i];
        r[i].fits = peak[i] <= (i < 3 ? 4194304u : 6291456u);
        r[i].step_ms = with_times ? ms[i] : NAN;
        r[i].recompute_flops = rf[i];
    }
    r[2].fastest = 1; /* auto at 4 MiB */
    r[3].fastest = 1; /* none at 6 MiB */
}

START_TEST(test_fit_picture)
{
    clremat_fit_config c[3];
    clremat_fit_row rows[6];
    clremat_fit_calibration cal;
    clremat_fit_request rq;
    uint64_t sizes[2] = {4194304, 6291456};
    const char *labels[3] = {"none", "full", "auto"};
    char dir[] = "/tmp/clremat-svg-XXXXXX", path[256];
    char *svg;
    memset(&cal, 0, sizeof cal);
    memset(&rq, 0, sizeof rq);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(clremat_policy_parse(labels[i], &c[i].policy), CLREMAT_OK);
        snprintf(c[i].label, sizeof c[i].label, "%s", labels[i]);
    }
    rq.batch = 32;
    rq.sizes = sizes;
    rq.n_sizes = 2;
    rq.configs = c;
    rq.n_configs = 3;
    rq.cal = &cal;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fit.svg", dir);
    fit_rows(rows, 1);
    ck_assert_int_eq(clremat_fit_svg(path, "transformer", &rq, rows), CLREMAT_OK);
    svg = slurp(path);
    ck_assert_ptr_nonnull(strstr(svg, "predicted step time (ms)"));
    ck_assert_ptr_nonnull(strstr(svg, "predicted peak (MiB)"));
    /* points: full, auto at 4 MiB, and none shared with auto at 6 MiB */
    ck_assert_int_eq(count(svg, "<circle"), 3 + 1 /* legend */);
    ck_assert_int_eq(count(svg, "fill=\"#2ca02c\""), 2 + 1 /* legend */);
    ck_assert_ptr_nonnull(strstr(svg, "auto (4.00 MiB)"));
    ck_assert_ptr_nonnull(strstr(svg, "none, auto (6.00 MiB)"));
    ck_assert_int_eq(count(svg, ">full<"), 1);
    /* the sizes: a dashed line each (and the legend's), labelled with their values */
    ck_assert_int_eq(count(svg, "stroke-dasharray"), 2 + 1);
    ck_assert_ptr_nonnull(strstr(svg, ">4.00 MiB<"));
    ck_assert_ptr_nonnull(strstr(svg, ">6.00 MiB<"));
    ck_assert_ptr_null(strstr(svg, "nan"));
    free(svg);
    /* without a calibration: recompute on y, and the picture says why */
    rq.cal = NULL;
    fit_rows(rows, 0);
    ck_assert_int_eq(clremat_fit_svg(path, NULL, &rq, rows), CLREMAT_OK);
    svg = slurp(path);
    ck_assert_ptr_nonnull(strstr(svg, "recompute (MFLOP; no device: step time not predicted)"));
    ck_assert_ptr_null(strstr(svg, "nan"));
    free(svg);
    remove(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("svg", 30, &tc);
    tcase_add_test(tc, test_nice_axes);
    tcase_add_test(tc, test_values_with_units);
    tcase_add_test(tc, test_text_is_wellformed);
    tcase_add_test(tc, test_labels_never_overlap);
    tcase_add_test(tc, test_compare_picture);
    tcase_add_test(tc, test_pareto_picture_groups_equal_points);
    tcase_add_test(tc, test_fit_picture);
    return test_run_suite(s);
}
