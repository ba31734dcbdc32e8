/* test_svg_render.c: every SVG the clremat command writes, rendered by a
 * real renderer (rsvg-convert, from librsvg2-bin): `plan --pareto --svg` on
 * the bundled models, `compare --svg` on the test device, and `fit --svg`
 * without a device and with it. The renderer must accept the file (well-formed XML, valid SVG) and the PNG it makes
 * must have the size the SVG declares. A device test (CLREMAT_TEST_DEVICE);
 * skips (77) when rsvg-convert is not installed. */
#include "testutil.h"
#include <stdint.h>
#include <string.h>

static char dir[] = "/tmp/clremat-render-XXXXXX";

static int have_renderer(void)
{
    return system("command -v rsvg-convert >/dev/null 2>&1") == 0;
}

/* The width and height an SVG file declares in its <svg> element. */
static void declared_size(const char *path, int *w, int *h)
{
    char buf[4096], *p;
    FILE *f = fopen(path, "r");
    size_t n;
    ck_assert_msg(f != NULL, "%s was not written", path);
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    p = strstr(buf, "<svg");
    ck_assert_msg(p != NULL, "%s has no <svg> element", path);
    ck_assert_msg(sscanf(strstr(p, "width=\"") + 7, "%d", w) == 1, "%s: no width", path);
    ck_assert_msg(sscanf(strstr(p, "height=\"") + 8, "%d", h) == 1, "%s: no height", path);
}

/* Renders svg to PNG with rsvg-convert and checks the PNG's size. */
static void render(const char *svg)
{
    char png[512], cmd[1200];
    unsigned char head[24];
    int w, h, st;
    FILE *f;
    declared_size(svg, &w, &h);
    ck_assert_msg(w >= 300 && h >= 200, "%s declares %dx%d", svg, w, h);
    snprintf(png, sizeof png, "%s.png", svg);
    snprintf(cmd, sizeof cmd, "rsvg-convert -o '%s' '%s' 2>'%s.err'", png, svg, png);
    st = system(cmd);
    if (st != 0) {
        char err[1024] = "";
        snprintf(cmd, sizeof cmd, "%s.err", png);
        f = fopen(cmd, "r");
        if (f) {
            err[fread(err, 1, sizeof err - 1, f)] = 0;
            fclose(f);
        }
        ck_abort_msg("rsvg-convert refused %s: %s", svg, err);
    }
    f = fopen(png, "rb");
    ck_assert_msg(f != NULL, "no PNG from %s", svg);
    ck_assert_int_eq(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    ck_assert_msg(memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0 && memcmp(head + 12, "IHDR", 4) == 0, "%s: not a PNG",
                  png);
    ck_assert_int_eq((int)((uint32_t)head[16] << 24 | head[17] << 16 | head[18] << 8 | head[19]), w);
    ck_assert_int_eq((int)((uint32_t)head[20] << 24 | head[21] << 16 | head[22] << 8 | head[23]), h);
    remove(png);
    snprintf(cmd, sizeof cmd, "%s.err", png);
    remove(cmd);
}

static void run_tool(const char *args)
{
    char err[4096];
    int st = test_run_tool(args, err, sizeof err);
    ck_assert_msg(st == 0, "clremat %s: exit %d: %s", args, st, err);
}

START_TEST(test_pareto_svgs_render)
{
    static const char *const models[] = {"resnet_mlp.json", "transformer.json", "mlp_deep.json", "regression.json"};
    const char *mdir = getenv("CLREMAT_MODELS");
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char args[1024], svg[256];
        snprintf(svg, sizeof svg, "%s/pareto-%zu.svg", dir, i);
        snprintf(args, sizeof args, "plan '%s/%s' --pareto --points 12 --svg '%s'", mdir ? mdir : "models",
                 models[i], svg);
        run_tool(args);
        render(svg);
        remove(svg);
    }
}
END_TEST

START_TEST(test_compare_svg_renders)
{
    char args[1024], svg[256];
    const char *dev = getenv("CLREMAT_TEST_DEVICE"), *mdir = getenv("CLREMAT_MODELS");
    snprintf(svg, sizeof svg, "%s/compare.svg", dir);
    snprintf(args, sizeof args,
             "compare '%s/regression.json' --devices '%s' --remat none,full,auto --steps 3 --warmup 1 --quiet "
             "--svg '%s'",
             mdir ? mdir : "models", dev && *dev ? dev : "all", svg);
    run_tool(args);
    render(svg);
    remove(svg);
}
END_TEST

START_TEST(test_fit_svgs_render)
{
    char args[1024], svg[256];
    const char *dev = getenv("CLREMAT_TEST_DEVICE"), *mdir = getenv("CLREMAT_MODELS");
    /* planning only (recompute on y), then with step times from the test device */
    snprintf(svg, sizeof svg, "%s/fit.svg", dir);
    snprintf(args, sizeof args, "fit '%s/transformer.json' --memory 4MiB,6MiB --svg '%s'", mdir ? mdir : "models",
             svg);
    run_tool(args);
    render(svg);
    remove(svg);
    snprintf(args, sizeof args, "fit '%s/regression.json' --device '%s' --memory 1MiB,2MiB --batch 8 --steps 1 --svg '%s'",
             mdir ? mdir : "models", dev && *dev ? dev : "0:0", svg);
    run_tool(args);
    render(svg);
    remove(svg);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s;
    int st;
    if (!have_renderer()) {
        fprintf(stderr, "rsvg-convert not found (apt-get install librsvg2-bin): skipping\n");
        return TEST_SKIP;
    }
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    s = test_suite("svg_render", 300, &tc);
    tcase_add_test(tc, test_pareto_svgs_render);
    tcase_add_test(tc, test_compare_svg_renders);
    tcase_add_test(tc, test_fit_svgs_render);
    st = test_run_device_suite(s);
    rmdir(dir);
    return st;
}
