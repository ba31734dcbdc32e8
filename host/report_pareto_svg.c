/* report_pareto_svg.c: writes a Pareto sweep as an SVG plot: peak bytes on
 * x, recompute cost on y, both on round ticks in a unit chosen for the
 * range; the front as a step line through its points; the Keras-style modes
 * as squares, modes at the same point sharing one label, labels placed so
 * that none overlaps another, a marker or the legend. Written atomically
 * (base/atomic_file.c), so PATH is never left half-written. */
#include "report_svg.h"
#include "atomic_file.h"
#include "error.h"
#include "svg_plot.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W 900.0
#define H 540.0
#define ML 80.0   /* left margin: y tick labels and title */
#define MR 230.0  /* right margin: legend, then labels that found no room */
#define MT 50.0
#define MB 60.0
#define LABEL_SIZE 11
#define WRAP 34   /* characters per line of a shared label */

typedef struct plot {
    svg_axis x, y;
} plot;

static double px(const plot *p, double v) { return svg_axis_map(&p->x, v, ML, W - MR); }

static double py(const plot *p, double v) { return svg_axis_map(&p->y, v, H - MB, MT); }

static svg_unit_kind cost_kind(const char *cost_unit)
{
    if (!cost_unit || strcmp(cost_unit, "FLOP") == 0)
        return SVG_UNIT_FLOP;
    if (strcmp(cost_unit, "ms") == 0)
        return SVG_UNIT_MS;
    return SVG_UNIT_PLAIN;
}

static void axes(FILE *f, const plot *p, const char *cost_unit)
{
    char buf[64], title[96];
    for (int t = 0; t <= p->x.n; t++) {
        double v = (p->x.first + t * p->x.step) * p->x.scale, x = px(p, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", x, MT, x, H - MB);
        svg_axis_tick_label(&p->x, t, buf, sizeof buf);
        svg_text(f, x, H - MB + 16, "middle", 11, NULL, buf);
    }
    for (int t = 0; t <= p->y.n; t++) {
        double v = (p->y.first + t * p->y.step) * p->y.scale, y = py(p, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", ML, y, W - MR, y);
        svg_axis_tick_label(&p->y, t, buf, sizeof buf);
        svg_text(f, ML - 6, y + 4, "end", 11, NULL, buf);
    }
    fprintf(f, "<g stroke=\"#666\" stroke-width=\"1\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/></g>\n",
            ML, H - MB, W - MR, H - MB, ML, MT, ML, H - MB);
    snprintf(title, sizeof title, "predicted peak (%s)", p->x.unit);
    svg_text(f, (W - MR + ML) / 2, H - 18, "middle", 12, NULL, title);
    if (cost_kind(cost_unit) == SVG_UNIT_PLAIN)
        snprintf(title, sizeof title, "recompute cost (%.40s)", cost_unit);
    else
        snprintf(title, sizeof title, "recompute cost (%s)", p->y.unit);
    fprintf(f, "<text transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">",
            (H - MB + MT) / 2);
    svg_write_escaped(f, title);
    fputs("</text>\n", f);
}

/* Appends name to a shared label, breaking lines at about WRAP characters. */
static void label_append(char *text, size_t len, const char *name)
{
    size_t used = strlen(text);
    const char *last_nl = strrchr(text, '\n');
    size_t line = last_nl ? used - (size_t)(last_nl + 1 - text) : used;
    if (used == 0)
        snprintf(text, len, "%s", name);
    else if (line + 2 + strlen(name) > WRAP)
        snprintf(text + used, len - used, ",\n%s", name);
    else
        snprintf(text + used, len - used, ", %s", name);
}

static void body(FILE *f, const char *title, const char *cost_unit, const clremat_pareto_point *pts, int n,
                 const clremat_pareto_mark *marks, int n_marks, char (*texts)[1024], svg_label *labels,
                 svg_box *obstacles)
{
    plot p;
    double xlo = HUGE_VAL, xhi = 0, yhi = 0;
    int n_labels = 0, n_obst = 0;
    svg_box legend = {W - MR + 8, MT, MR - 12, 44};
    for (int i = 0; i < n; i++) {
        xlo = fmin(xlo, (double)pts[i].peak_bytes);
        xhi = fmax(xhi, (double)pts[i].peak_bytes);
        yhi = fmax(yhi, pts[i].recompute_cost);
    }
    for (int i = 0; i < n_marks; i++) {
        xlo = fmin(xlo, (double)marks[i].peak_bytes);
        xhi = fmax(xhi, (double)marks[i].peak_bytes);
        yhi = fmax(yhi, marks[i].recompute_cost);
    }
    if (n + n_marks == 0)
        xlo = xhi = 0;
    svg_axis_nice(&p.x, xlo, xhi, 6, SVG_UNIT_BYTES);
    svg_axis_nice(&p.y, 0, yhi, 6, cost_kind(cost_unit));

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    svg_text(f, (W - MR + ML) / 2, 26, "middle", 15, NULL, title ? title : "Peak memory against recompute cost");
    axes(f, &p, cost_unit);

    /* the front: a step line (each plan holds until a cheaper one fits) */
    if (n > 0) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
        for (int i = 0; i < n; i++) {
            if (i > 0)
                fprintf(f, "%.1f,%.1f ", px(&p, (double)pts[i].peak_bytes), py(&p, pts[i - 1].recompute_cost));
            fprintf(f, "%.1f,%.1f ", px(&p, (double)pts[i].peak_bytes), py(&p, pts[i].recompute_cost));
        }
        fprintf(f, "\"/>\n");
    }
    /* the front's segments are obstacles too: a label never sits on the line */
    for (int i = 1; i < n; i++) {
        double x0 = px(&p, (double)pts[i - 1].peak_bytes), x1 = px(&p, (double)pts[i].peak_bytes);
        double y0 = py(&p, pts[i - 1].recompute_cost), y1 = py(&p, pts[i].recompute_cost);
        obstacles[n_obst++] = (svg_box){fmin(x0, x1), y0 - 1.5, fabs(x1 - x0), 3};
        obstacles[n_obst++] = (svg_box){x1 - 1.5, fmin(y0, y1), 3, fabs(y1 - y0)};
    }
    for (int i = 0; i < n; i++) {
        double cx = px(&p, (double)pts[i].peak_bytes), cy = py(&p, pts[i].recompute_cost);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#1f77b4\"><title>budget %llu: peak %llu, "
                   "cost %.9g</title></circle>\n",
                cx, cy, (unsigned long long)pts[i].budget, (unsigned long long)pts[i].peak_bytes,
                pts[i].recompute_cost);
        obstacles[n_obst++] = (svg_box){cx - 3.5, cy - 3.5, 7, 7};
    }
    /* marks: one square and one label per distinct point */
    for (int i = 0; i < n_marks; i++) {
        int first = -1;
        for (int j = 0; j < i && first < 0; j++)
            if (marks[j].peak_bytes == marks[i].peak_bytes && marks[j].recompute_cost == marks[i].recompute_cost)
                first = j;
        if (first >= 0)
            continue;
        double cx = px(&p, (double)marks[i].peak_bytes), cy = py(&p, marks[i].recompute_cost);
        texts[n_labels][0] = 0;
        for (int j = i; j < n_marks; j++)
            if (marks[j].peak_bytes == marks[i].peak_bytes && marks[j].recompute_cost == marks[i].recompute_cost)
                label_append(texts[n_labels], sizeof texts[0], marks[j].label);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#d62728\"/>\n", cx - 4, cy - 4);
        obstacles[n_obst++] = (svg_box){cx - 4, cy - 4, 8, 8};
        labels[n_labels] = (svg_label){cx, cy, texts[n_labels], LABEL_SIZE, {0, 0, 0, 0}, 0};
        n_labels++;
    }
    obstacles[n_obst++] = legend;
    svg_place_labels(labels, n_labels, (svg_box){ML + 2, MT, W - ML - 6, H - MT - MB - 2}, obstacles, n_obst);
    svg_draw_labels(f, labels, n_labels, "#b01c1c");
    /* legend */
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#1f77b4\"/>\n", legend.x + 12, legend.y + 12);
    svg_text(f, legend.x + 22, legend.y + 16, "start", 12, NULL, "budget plans (front)");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#d62728\"/>\n", legend.x + 8,
            legend.y + 28);
    svg_text(f, legend.x + 22, legend.y + 36, "start", 12, NULL, "Keras-style modes");
    fprintf(f, "</svg>\n");
}

int clremat_pareto_svg(const char *path, const char *title, const char *cost_unit,
                       const clremat_pareto_point *pts, int n, const clremat_pareto_mark *marks, int n_marks)
{
    clremat_afile a;
    char(*texts)[1024] = malloc(sizeof *texts * (size_t)(n_marks + 1));
    svg_label *labels = malloc(sizeof *labels * (size_t)(n_marks + 1));
    svg_box *obstacles = malloc(sizeof *obstacles * (size_t)(3 * n + n_marks + 2));
    int rc;
    if (!texts || !labels || !obstacles) {
        rc = clremat_set_error(CLREMAT_ERR_INTERNAL, "pareto SVG: out of host memory");
        goto done;
    }
    if ((rc = clremat_afile_open(&a, path)) != CLREMAT_OK)
        goto done;
    fprintf(a.f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    body(a.f, title, cost_unit, pts, n, marks, n_marks, texts, labels, obstacles);
    rc = clremat_afile_commit(&a);
done:
    free(texts);
    free(labels);
    free(obstacles);
    return rc;
}
