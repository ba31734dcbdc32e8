/* pareto_svg.c: writes a Pareto sweep as an SVG plot (pure C, stdio): peak
 * bytes on x, recompute cost on y, the front as a step line through its
 * points and the Keras-style modes as labelled squares. The file is written
 * atomically (backend/atomic_file.c), so PATH is never left half-written. */
#include "utf8.h"
#include "plan.h"
#include "atomic_file.h"
#include "backend.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W 860.0
#define H 520.0
#define ML 90.0
#define MR 200.0
#define MT 50.0
#define MB 60.0

typedef struct axis {
    double lo, hi, scale;
    const char *unit;
} axis;

/* Text as XML character data: markup escaped; control characters (not
 * allowed in XML 1.0) and bytes that are not UTF-8 become U+FFFD. */
static void xml_text(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = clremat_utf8_seq(p);
        if (n == 0 || (*p < 0x20 && *p != '\t' && *p != '\n') || *p == 0x7f) {
            fputs("&#xFFFD;", f);
            p += n ? n : 1;
            continue;
        }
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fwrite(p, 1, n, f);
        }
        p += n;
    }
}

static void byte_axis(axis *a, double lo, double hi)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    a->scale = 1;
    while (u < 4 && hi / a->scale >= 4096) {
        a->scale *= 1024;
        u++;
    }
    a->unit = units[u];
    a->lo = lo;
    a->hi = hi;
}

static void cost_axis(axis *a, double lo, double hi)
{
    static const char *const prefix[] = {"", "k", "M", "G", "T", "P"};
    int u = 0;
    a->scale = 1;
    while (u < 5 && hi / a->scale >= 10000) {
        a->scale *= 1000;
        u++;
    }
    a->unit = prefix[u];
    a->lo = lo;
    a->hi = hi;
}

static void pad(axis *a)
{
    double span = a->hi - a->lo;
    if (span <= 0)
        span = a->hi > 0 ? a->hi * 0.1 : 1;
    a->lo -= span * 0.05;
    a->hi += span * 0.05;
    if (a->lo < 0)
        a->lo = 0;
}

static double px(const axis *a, double v)
{
    return ML + (v - a->lo) / (a->hi - a->lo) * (W - ML - MR);
}

static double py(const axis *a, double v)
{
    return H - MB - (v - a->lo) / (a->hi - a->lo) * (H - MT - MB);
}

static void body(FILE *f, const char *title, const char *cost_unit, const clremat_pareto_point *pts, int n,
                 const clremat_pareto_mark *marks, int n_marks)
{
    axis x, y;
    double xlo = HUGE_VAL, xhi = 0, ylo = HUGE_VAL, yhi = 0;
    for (int i = 0; i < n; i++) {
        xlo = fmin(xlo, (double)pts[i].peak_bytes);
        xhi = fmax(xhi, (double)pts[i].peak_bytes);
        ylo = fmin(ylo, pts[i].recompute_cost);
        yhi = fmax(yhi, pts[i].recompute_cost);
    }
    for (int i = 0; i < n_marks; i++) {
        xlo = fmin(xlo, (double)marks[i].peak_bytes);
        xhi = fmax(xhi, (double)marks[i].peak_bytes);
        ylo = fmin(ylo, marks[i].recompute_cost);
        yhi = fmax(yhi, marks[i].recompute_cost);
    }
    if (n + n_marks == 0)
        xlo = ylo = 0;
    byte_axis(&x, xlo, xhi);
    cost_axis(&y, 0, yhi);
    pad(&x);
    pad(&y);
    y.lo = 0;

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.1f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">", (W - MR + ML) / 2);
    xml_text(f, title ? title : "Peak memory against recompute cost");
    fprintf(f, "</text>\n");
    /* axes, ticks, grid */
    fprintf(f, "<g stroke=\"#999\" stroke-width=\"1\">\n");
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ML, H - MB, W - MR, H - MB);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ML, MT, ML, H - MB);
    fprintf(f, "</g>\n");
    for (int t = 0; t <= 5; t++) {
        double vx = x.lo + (x.hi - x.lo) * t / 5, vy = y.lo + (y.hi - y.lo) * t / 5;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", px(&x, vx), MT,
                px(&x, vx), H - MB);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", ML, py(&y, vy),
                W - MR, py(&y, vy));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.4g</text>\n", px(&x, vx), H - MB + 16,
                vx / x.scale);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n", ML - 6, py(&y, vy) + 4,
                vy / y.scale);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">predicted peak (%s)</text>\n",
            (W - MR + ML) / 2, H - 16, x.unit);
    fprintf(f, "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">recompute cost (%s",
            (H - MB + MT) / 2, y.unit);
    xml_text(f, cost_unit ? cost_unit : "FLOP");
    fprintf(f, ")</text>\n");
    /* the front: a step line (each plan holds until a cheaper one fits) */
    if (n > 0) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
        for (int i = 0; i < n; i++) {
            if (i > 0)
                fprintf(f, "%.1f,%.1f ", px(&x, (double)pts[i].peak_bytes), py(&y, pts[i - 1].recompute_cost));
            fprintf(f, "%.1f,%.1f ", px(&x, (double)pts[i].peak_bytes), py(&y, pts[i].recompute_cost));
        }
        fprintf(f, "\"/>\n");
        for (int i = 0; i < n; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#1f77b4\"><title>budget %llu: peak %llu, "
                       "cost %.6g</title></circle>\n",
                    px(&x, (double)pts[i].peak_bytes), py(&y, pts[i].recompute_cost),
                    (unsigned long long)pts[i].budget, (unsigned long long)pts[i].peak_bytes, pts[i].recompute_cost);
    }
    for (int i = 0; i < n_marks; i++) {
        double cx = px(&x, (double)marks[i].peak_bytes), cy = py(&y, marks[i].recompute_cost);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#d62728\"/>\n", cx - 4, cy - 4);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#d62728\">", cx + 7, cy - 6 - 11.0 * (i % 3));
        xml_text(f, marks[i].label);
        fprintf(f, "</text>\n");
    }
    /* legend */
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#1f77b4\"/>\n", W - MR + 20, MT + 10);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">budget plans (front)</text>\n", W - MR + 30, MT + 14);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#d62728\"/>\n", W - MR + 16, MT + 26);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">Keras-style modes</text>\n", W - MR + 30, MT + 34);
    fprintf(f, "</svg>\n");
}

int clremat_pareto_svg(const char *path, const char *title, const char *cost_unit,
                       const clremat_pareto_point *pts, int n, const clremat_pareto_mark *marks, int n_marks)
{
    clremat_afile a;
    int rc = clremat_afile_open(&a, path);
    if (rc != CLREMAT_OK)
        return rc;
    fprintf(a.f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    body(a.f, title, cost_unit, pts, n, marks, n_marks);
    return clremat_afile_commit(&a);
}
