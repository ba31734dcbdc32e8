/* report_fit_svg.c: the fit advisor's picture (clremat fit --svg): predicted
 * peak (x) against predicted step time (y) per configuration, the memory
 * sizes as vertical lines. Drawn with svg_plot.h (round ticks in a unit for
 * the range, labels placed without overlap) and written atomically. */
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
#define ML 80.0
#define MR 230.0 /* legend, then labels that found no room */
#define MT 50.0
#define MB 60.0
#define LABEL_SIZE 11
#define WRAP 34

/* One distinct point of the picture. */
typedef struct fpoint {
    double x, y;
    int fastest;     /* the fastest that fits at some size */
    char text[1024]; /* the labels of every configuration there */
} fpoint;

typedef struct frame {
    svg_axis x, y;
} frame;

static double px(const frame *p, double v) { return svg_axis_map(&p->x, v, ML, W - MR); }

static double py(const frame *p, double v) { return svg_axis_map(&p->y, v, H - MB, MT); }

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

static double row_y(const clremat_fit_request *rq, const clremat_fit_row *r)
{
    return rq->cal ? r->step_ms : r->recompute_flops;
}

/* Collects the distinct points: a configuration whose point is the same at
 * every size appears once under its label; one that changes with the size
 * (auto) once per size, "auto (1 GiB)". */
static int collect(const clremat_fit_request *rq, const clremat_fit_row *rows, fpoint *pts)
{
    int n = 0;
    for (int c = 0; c < rq->n_configs; c++) {
        int varies = 0, first = -1;
        for (int s = 0; s < rq->n_sizes; s++) {
            const clremat_fit_row *r = &rows[s * rq->n_configs + c];
            if (!r->planned || !isfinite(row_y(rq, r)))
                continue;
            if (first < 0)
                first = s;
            else if (rows[first * rq->n_configs + c].peak_bytes != r->peak_bytes ||
                     row_y(rq, &rows[first * rq->n_configs + c]) != row_y(rq, r))
                varies = 1;
        }
        for (int s = 0; s < rq->n_sizes; s++) {
            const clremat_fit_row *r = &rows[s * rq->n_configs + c];
            char name[160], sz[32];
            int k;
            if (!r->planned || !isfinite(row_y(rq, r)))
                continue;
            if (varies) {
                svg_format_value((double)rq->sizes[s], SVG_UNIT_BYTES, sz, sizeof sz);
                snprintf(name, sizeof name, "%s (%s)", rq->configs[c].label, sz);
            } else {
                snprintf(name, sizeof name, "%s", rq->configs[c].label);
            }
            for (k = 0; k < n; k++)
                if (pts[k].x == (double)r->peak_bytes && pts[k].y == row_y(rq, r))
                    break;
            if (k == n) {
                pts[n].x = (double)r->peak_bytes;
                pts[n].y = row_y(rq, r);
                pts[n].fastest = 0;
                pts[n].text[0] = 0;
                n++;
            }
            if (r->fastest)
                pts[k].fastest = 1;
            if (varies || s == first)
                label_append(pts[k].text, sizeof pts[k].text, name);
        }
    }
    return n;
}

static void body(FILE *f, const char *title, const clremat_fit_request *rq, fpoint *pts, int n, char (*size_text)[32],
                 svg_label *labels, svg_box *obstacles)
{
    frame p;
    double xlo = HUGE_VAL, xhi = 0, yhi = 0;
    int n_labels = 0, n_obst = 0;
    char buf[64], axis_title[96];
    svg_box legend = {W - MR + 8, MT, MR - 12, 44};
    svg_unit_kind ykind = rq->cal ? SVG_UNIT_MS : SVG_UNIT_FLOP;
    for (int i = 0; i < n; i++) {
        xlo = fmin(xlo, pts[i].x);
        xhi = fmax(xhi, pts[i].x);
        yhi = fmax(yhi, pts[i].y);
    }
    for (int s = 0; s < rq->n_sizes; s++) {
        xlo = fmin(xlo, (double)rq->sizes[s]);
        xhi = fmax(xhi, (double)rq->sizes[s]);
    }
    if (!(xlo <= xhi))
        xlo = xhi = 0;
    svg_axis_nice(&p.x, xlo, xhi, 6, SVG_UNIT_BYTES);
    svg_axis_nice(&p.y, 0, yhi, 6, ykind);

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    svg_text(f, (W - MR + ML) / 2, 26, "middle", 15, NULL, title ? title : "Will it fit?");
    for (int t = 0; t <= p.x.n; t++) {
        double x = px(&p, (p.x.first + t * p.x.step) * p.x.scale);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", x, MT, x, H - MB);
        svg_axis_tick_label(&p.x, t, buf, sizeof buf);
        svg_text(f, x, H - MB + 16, "middle", 11, NULL, buf);
    }
    for (int t = 0; t <= p.y.n; t++) {
        double y = py(&p, (p.y.first + t * p.y.step) * p.y.scale);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", ML, y, W - MR, y);
        svg_axis_tick_label(&p.y, t, buf, sizeof buf);
        svg_text(f, ML - 6, y + 4, "end", 11, NULL, buf);
    }
    fprintf(f, "<g stroke=\"#666\" stroke-width=\"1\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/></g>\n",
            ML, H - MB, W - MR, H - MB, ML, MT, ML, H - MB);
    snprintf(axis_title, sizeof axis_title, "predicted peak (%s)", p.x.unit);
    svg_text(f, (W - MR + ML) / 2, H - 18, "middle", 12, NULL, axis_title);
    if (rq->cal)
        snprintf(axis_title, sizeof axis_title, "predicted step time (%s)", p.y.unit);
    else
        snprintf(axis_title, sizeof axis_title, "recompute (%s; no device: step time not predicted)", p.y.unit);
    fprintf(f, "<text transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">",
            (H - MB + MT) / 2);
    svg_write_escaped(f, axis_title);
    fputs("</text>\n", f);

    /* memory sizes: dashed vertical lines, labelled near the top */
    for (int s = 0; s < rq->n_sizes; s++) {
        double x = px(&p, (double)rq->sizes[s]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"6 4\"/>\n", x, MT, x, H - MB);
        svg_format_value((double)rq->sizes[s], SVG_UNIT_BYTES, size_text[s], sizeof size_text[s]);
        labels[n_labels++] = (svg_label){x, MT + 2, size_text[s], LABEL_SIZE, {0, 0, 0, 0}, 0};
    }
    for (int i = 0; i < n; i++) {
        double cx = px(&p, pts[i].x), cy = py(&p, pts[i].y);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\"/>\n", cx, cy,
                pts[i].fastest ? "#2ca02c" : "#1f77b4");
        obstacles[n_obst++] = (svg_box){cx - 4.5, cy - 4.5, 9, 9};
        labels[n_labels++] = (svg_label){cx, cy, pts[i].text, LABEL_SIZE, {0, 0, 0, 0}, 0};
    }
    obstacles[n_obst++] = legend;
    svg_place_labels(labels, n_labels, (svg_box){ML + 2, MT, W - ML - 6, H - MT - MB - 2}, obstacles, n_obst);
    svg_draw_labels(f, labels, rq->n_sizes, "#b35900");
    svg_draw_labels(f, labels + rq->n_sizes, n_labels - rq->n_sizes, "#1a4e7a");
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"#2ca02c\"/>\n", legend.x + 12, legend.y + 12);
    svg_text(f, legend.x + 22, legend.y + 16, "start", 12, NULL, "fastest that fits a size");
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" "
               "stroke-dasharray=\"6 4\"/>\n", legend.x + 4, legend.y + 32, legend.x + 18, legend.y + 32);
    svg_text(f, legend.x + 22, legend.y + 36, "start", 12, NULL, "memory size");
    fprintf(f, "</svg>\n");
}

int clremat_fit_svg(const char *path, const char *title, const clremat_fit_request *rq, const clremat_fit_row *rows)
{
    clremat_afile a;
    int n_rows = rq->n_sizes * rq->n_configs, n, rc;
    fpoint *pts = calloc((size_t)n_rows + 1, sizeof *pts);
    char(*size_text)[32] = calloc((size_t)rq->n_sizes + 1, sizeof *size_text);
    svg_label *labels = calloc((size_t)(n_rows + rq->n_sizes + 1), sizeof *labels);
    svg_box *obstacles = calloc((size_t)n_rows + 2, sizeof *obstacles);
    if (!pts || !size_text || !labels || !obstacles) {
        rc = clremat_set_error(CLREMAT_ERR_INTERNAL, "fit SVG: out of host memory");
        goto done;
    }
    n = collect(rq, rows, pts);
    if ((rc = clremat_afile_open(&a, path)) != CLREMAT_OK)
        goto done;
    fprintf(a.f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    body(a.f, title, rq, pts, n, size_text, labels, obstacles);
    rc = clremat_afile_commit(&a);
done:
    free(pts);
    free(size_text);
    free(labels);
    free(obstacles);
    return rc;
}
