/* report_svg.c: the SVG picture of a comparison. Per device: live device
 * bytes over one training step for every remat mode (each mode its own
 * colour and dash pattern, so a series equal to another stays visible and
 * the legend says which are equal; each mode's peak marked with its value),
 * then the median step time of each mode on its own axis (devices differ
 * by orders of magnitude), each bar labelled with its value; last, the peak
 * live bytes of every run, grouped by device, each bar labelled. Axes tick
 * at round values in units chosen for their range (svg_plot.h). */
#include "atomic_file.h"
#include "compare.h"
#include "svg_plot.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W 980
#define PANEL_H 280
#define TIME_H 210
#define PEAK_H 250
#define LEFT 90
#define RIGHT 250
#define MAX_KEYS 64

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                     "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
/* dash patterns by mode, so equal series drawn over each other stay visible */
static const char *const dashes[] = {"", "7,4", "2,3", "10,3,2,3", "4,4", "1,5", "12,6", "6,2,2,2,2,2"};

/* Distinct devices and modes, in run order. */
static int count_distinct(const clremat_compare_run *runs, int n, int by_mode, const char **out)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        const char *key = by_mode ? runs[i].mode : runs[i].device_id;
        int seen = 0;
        for (int j = 0; j < k; j++)
            if (!strcmp(out[j], key))
                seen = 1;
        if (!seen && k < MAX_KEYS)
            out[k++] = key;
    }
    return k;
}

static int mode_index(const char **modes, int nm, const char *m)
{
    for (int i = 0; i < nm; i++)
        if (!strcmp(modes[i], m))
            return i;
    return 0;
}

static const char *dash_attr(int mi, char *buf, size_t len)
{
    const char *d = dashes[mi % (int)(sizeof dashes / sizeof dashes[0])];
    if (!*d)
        buf[0] = 0;
    else
        snprintf(buf, len, " stroke-dasharray=\"%s\"", d);
    return buf;
}

static int same_timeline(const clremat_compare_run *a, const clremat_compare_run *b)
{
    if (a->n_timeline != b->n_timeline || a->n_timeline == 0)
        return 0;
    for (size_t k = 0; k < a->n_timeline; k++)
        if (a->timeline[k].live_bytes != b->timeline[k].live_bytes)
            return 0;
    return 1;
}

static double run_peak_bytes(const clremat_compare_run *r)
{
    return (double)(r->status == 0 ? r->measured_peak : r->predicted_peak);
}

/* Horizontal grid lines and tick labels of a y axis from y_bottom up h px. */
static void y_ticks(FILE *f, const svg_axis *a, double y_bottom, double h, double x1)
{
    char buf[64];
    for (int t = 0; t <= a->n; t++) {
        double y = y_bottom - h * t / a->n;
        svg_axis_tick_label(a, t, buf, sizeof buf);
        svg_text(f, LEFT - 6, y + 4, "end", 11, NULL, buf);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", LEFT, y, x1, y);
    }
    fprintf(f, "<text transform=\"translate(%d %.1f) rotate(-90)\" text-anchor=\"middle\" font-size=\"11\">",
            LEFT - 58, y_bottom - h / 2);
    svg_write_escaped(f, a->unit);
    fputs("</text>\n", f);
}

/* The legend of the modes at (x, y): a line sample (colour, dash) or a
 * swatch per mode, with a note of the modes whose series equals an earlier
 * one's ("auto (= none)"). */
static void legend(FILE *f, double x, double y, const char **modes, int nm, const char *const *equal_to, int lines)
{
    char dash[64], text[400];
    for (int m = 0; m < nm; m++) {
        double yy = y + 18 * m;
        if (lines)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                    x, yy - 4, x + 26, yy - 4, colors[m % 10], dash_attr(m, dash, sizeof dash));
        else
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>\n", x + 6, yy - 9,
                    colors[m % 10]);
        if (equal_to && equal_to[m])
            snprintf(text, sizeof text, "%.180s (= %.180s)", modes[m], equal_to[m]);
        else
            snprintf(text, sizeof text, "%s", modes[m]);
        svg_text(f, x + 32, yy, "start", 11, NULL, text);
    }
}

static void memory_panel(FILE *f, double y0, const clremat_compare_run *runs, int n, const char *dev,
                         const char **modes, int nm)
{
    double maxb = 0, minb = -1, x1 = W - RIGHT, h = PANEL_H - 70, top = y0 + 30, bottom = top + h;
    char buf[512], dash[64];
    const char *devname = dev, *equal_to[MAX_KEYS] = {0};
    const clremat_compare_run *by_mode[MAX_KEYS] = {0};
    svg_label labels[MAX_KEYS];
    char label_text[MAX_KEYS][64];
    svg_box obstacles[MAX_KEYS];
    int n_labels = 0, label_mode[MAX_KEYS];
    svg_axis ax;
    for (int i = 0; i < n; i++)
        if (!strcmp(runs[i].device_id, dev)) {
            devname = runs[i].device;
            by_mode[mode_index(modes, nm, runs[i].mode)] = &runs[i];
            for (size_t k = 0; k < runs[i].n_timeline; k++) {
                double b = (double)runs[i].timeline[k].live_bytes;
                maxb = fmax(maxb, b);
                if (minb < 0 || b < minb)
                    minb = b;
            }
        }
    for (int m = 0; m < nm; m++)
        for (int j = 0; j < m && by_mode[m] && !equal_to[m]; j++)
            if (by_mode[j] && same_timeline(by_mode[m], by_mode[j]))
                equal_to[m] = equal_to[j] ? equal_to[j] : modes[j];
    /* the axis starts at a round value at or below the step's lowest live
     * bytes (the fixed memory), so the activation part fills the panel */
    svg_axis_nice(&ax, minb < 0 ? 0 : minb, maxb, 5, SVG_UNIT_BYTES);
    snprintf(buf, sizeof buf, "Live device bytes over one training step: %.200s [%.40s]", devname, dev);
    svg_text(f, LEFT, y0 + 20, "start", 14, NULL, buf);
    y_ticks(f, &ax, bottom, h, x1);
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#666\"/>\n", LEFT,
            top, x1 - LEFT, h);
    svg_text(f, (LEFT + x1) / 2, bottom + 18, "middle", 11, NULL,
             "allocation and free events of the step, start to end");
    for (int m = 0; m < nm; m++) {
        const clremat_compare_run *r = by_mode[m];
        double lo = svg_axis_lo(&ax), span = svg_axis_hi(&ax) - lo, px = 0, py = 0, peak = -1;
        if (!r || r->n_timeline == 0)
            continue;
        fprintf(f, "<polyline fill=\"none\" stroke-width=\"%s\" stroke=\"%s\"%s points=\"",
                equal_to[m] ? "2.5" : "1.6", colors[m % 10], dash_attr(m, dash, sizeof dash));
        for (size_t k = 0; k < r->n_timeline; k++) {
            double b = (double)r->timeline[k].live_bytes;
            double x = LEFT + (x1 - LEFT) * (r->n_timeline > 1 ? (double)k / (double)(r->n_timeline - 1) : 0);
            double y = bottom - h * (b - lo) / span;
            fprintf(f, "%.1f,%.1f ", x, y);
            if (b > peak)
                peak = b, px = x, py = y;
        }
        fputs("\"/>\n", f);
        if (equal_to[m])
            continue; /* its peak is the equal series' peak, labelled once */
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\" stroke=\"white\"/>\n", px, py,
                colors[m % 10]);
        obstacles[n_labels] = (svg_box){px - 3.5, py - 3.5, 7, 7};
        svg_format_value(peak, SVG_UNIT_BYTES, label_text[n_labels], sizeof label_text[0]);
        labels[n_labels] = (svg_label){px, py, label_text[n_labels], 10, {0, 0, 0, 0}, 0};
        label_mode[n_labels++] = m;
    }
    svg_place_labels(labels, n_labels, (svg_box){LEFT + 2, top + 2, x1 - LEFT - 4, h - 4}, obstacles, n_labels);
    for (int i = 0; i < n_labels; i++)
        svg_draw_labels(f, &labels[i], 1, colors[label_mode[i] % 10]);
    legend(f, x1 + 14, top + 14, modes, nm, equal_to, 1);
    svg_text(f, x1 + 14, top + 14 + 18 * nm + 6, "start", 10, "#555", "dot: the mode's peak");
}

/* A bar's value above it: horizontal when it fits the bar's width, else
 * turned upright. */
static void bar_value(FILE *f, double cx, double top, double bw, const char *text)
{
    if (svg_text_width(text, 10) <= bw * 1.3) {
        svg_text(f, cx, top - 4, "middle", 10, NULL, text);
        return;
    }
    fprintf(f, "<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"start\" font-size=\"10\">",
            cx + 3.5, top - 4);
    svg_write_escaped(f, text);
    fputs("</text>\n", f);
}

/* Median step time of every mode on one device, on the device's own axis. */
static void time_panel(FILE *f, double y0, const clremat_compare_run *runs, int n, const char *dev,
                       const char **modes, int nm)
{
    double maxv = 0, x1 = W - RIGHT, h = TIME_H - 80, bottom = y0 + 50 + h, bw;
    char buf[512];
    const char *devname = dev;
    int nb = 0, k = 0;
    svg_axis ax;
    for (int i = 0; i < n; i++)
        if (!strcmp(runs[i].device_id, dev)) {
            double v = runs[i].status == 0 && isfinite(runs[i].p90_ms) ? fmax(runs[i].median_ms, runs[i].p90_ms)
                                                                       : runs[i].median_ms;
            devname = runs[i].device;
            nb++;
            if (runs[i].status == 0 && isfinite(v))
                maxv = fmax(maxv, v);
        }
    svg_axis_nice(&ax, 0, maxv > 0 ? maxv : 1, 4, SVG_UNIT_MS);
    snprintf(buf, sizeof buf, "Median step time: %.200s [%.40s] (whiskers: p10 to p90)", devname, dev);
    svg_text(f, LEFT, y0 + 20, "start", 14, NULL, buf);
    y_ticks(f, &ax, bottom, h, x1);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#666\"/>\n", LEFT, bottom, x1, bottom);
    bw = (x1 - LEFT) / (nb ? nb : 1);
    for (int i = 0; i < n; i++) {
        const clremat_compare_run *r = &runs[i];
        int mi;
        double x, v, bh, top;
        if (strcmp(r->device_id, dev))
            continue;
        mi = mode_index(modes, nm, r->mode);
        x = LEFT + bw * k++ + bw * 0.15;
        v = r->status == 0 && isfinite(r->median_ms) ? r->median_ms : 0;
        bh = h * v / svg_axis_hi(&ax);
        top = bottom - bh;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x, top, bw * 0.7,
                bh, colors[mi % 10]);
        if (r->status == 0 && isfinite(r->p10_ms) && isfinite(r->p90_ms)) {
            double xm = x + bw * 0.35, y10 = bottom - h * r->p10_ms / svg_axis_hi(&ax),
                   y90 = bottom - h * r->p90_ms / svg_axis_hi(&ax);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", xm, y10, xm, y90);
            top = fmin(top, y90);
        }
        if (r->status == 0)
            svg_format_value(r->median_ms, SVG_UNIT_MS, buf, sizeof buf);
        else
            snprintf(buf, sizeof buf, "%s", r->status == CLREMAT_ERR_OUT_OF_MEMORY ? "does not fit" : "failed");
        bar_value(f, x + bw * 0.35, top, bw * 0.7, buf);
    }
    legend(f, x1 + 14, y0 + 64, modes, nm, NULL, 0);
}

/* Peak live bytes of every run, grouped by device. */
static void peak_panel(FILE *f, double y0, const clremat_compare_run *runs, int n, const char **devs, int nd,
                       const char **modes, int nm)
{
    double maxv = 0, x1 = W - RIGHT, h = PEAK_H - 90, bottom = y0 + 50 + h, bw, gap = 14;
    char buf[128];
    svg_axis ax;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(run_peak_bytes(&runs[i])))
            maxv = fmax(maxv, run_peak_bytes(&runs[i]));
    svg_axis_nice(&ax, 0, maxv > 0 ? maxv : 1, 4, SVG_UNIT_BYTES);
    svg_text(f, LEFT, y0 + 20, "start", 14, NULL,
             "Peak live device bytes per run (faded, dashed: predicted; the run did not fit or failed)");
    y_ticks(f, &ax, bottom, h, x1);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#666\"/>\n", LEFT, bottom, x1, bottom);
    bw = (x1 - LEFT - gap * (nd > 1 ? nd - 1 : 0)) / (n ? n : 1);
    for (int d = 0; d < nd; d++) {
        double gx0 = LEFT + bw * k + gap * d, gx1;
        for (int i = 0; i < n; i++) {
            const clremat_compare_run *r = &runs[i];
            int mi;
            double x, v, bh;
            if (strcmp(r->device_id, devs[d]))
                continue;
            mi = mode_index(modes, nm, r->mode);
            x = LEFT + bw * k++ + gap * d + bw * 0.12;
            v = run_peak_bytes(r);
            bh = h * v / svg_axis_hi(&ax);
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"%s/>\n", x, bottom - bh,
                    bw * 0.76, bh, colors[mi % 10],
                    r->status != 0 ? " fill-opacity=\"0.35\" stroke=\"#000\" stroke-dasharray=\"3,2\"" : "");
            svg_format_value(v, SVG_UNIT_BYTES, buf, sizeof buf);
            bar_value(f, x + bw * 0.38, bottom - bh, bw * 0.76, buf);
        }
        gx1 = LEFT + bw * k + gap * d;
        svg_text(f, (gx0 + gx1) / 2, bottom + 16, "middle", 11, NULL, devs[d]);
    }
    /* the memory limit the runs had to fit, where it is on the axis */
    if (n > 0 && runs[0].limit > 0 && (double)runs[0].limit <= svg_axis_hi(&ax)) {
        int same = 1;
        for (int i = 1; i < n; i++)
            same &= runs[i].limit == runs[0].limit;
        if (same) {
            double y = bottom - h * (double)runs[0].limit / svg_axis_hi(&ax);
            char lim[64];
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"1.2\" "
                       "stroke-dasharray=\"6,3\"/>\n",
                    LEFT, y, x1, y);
            svg_format_value((double)runs[0].limit, SVG_UNIT_BYTES, lim, sizeof lim);
            snprintf(buf, sizeof buf, "memory limit %s", lim);
            /* a legend entry of its own, below the modes' */
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"1.2\" "
                       "stroke-dasharray=\"6,3\"/>\n",
                    x1 + 14, y0 + 64 + 18 * nm - 4, x1 + 40, y0 + 64 + 18 * nm - 4);
            svg_text(f, x1 + 46, y0 + 64 + 18 * nm, "start", 11, NULL, buf);
        }
    }
    legend(f, x1 + 14, y0 + 64, modes, nm, NULL, 0);
}

int clremat_compare_svg(const char *path, const char *model, const clremat_compare_run *runs, int n)
{
    const char *devs[MAX_KEYS], *modes[MAX_KEYS];
    int nd = count_distinct(runs, n, 0, devs), nm = count_distinct(runs, n, 1, modes);
    double height = 50 + nd * (PANEL_H + TIME_H) + PEAK_H + 10;
    clremat_afile a;
    char title[512];
    int st = clremat_afile_open(&a, path);
    if (st)
        return st;
    fprintf(a.f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" "
                 "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, height, W, height);
    snprintf(title, sizeof title, "clremat compare: %.480s", model ? model : "");
    svg_text(a.f, W / 2.0, 28, "middle", 18, NULL, title);
    for (int d = 0; d < nd; d++)
        memory_panel(a.f, 40 + d * PANEL_H, runs, n, devs[d], modes, nm);
    for (int d = 0; d < nd; d++)
        time_panel(a.f, 40 + nd * PANEL_H + d * TIME_H, runs, n, devs[d], modes, nm);
    peak_panel(a.f, 40 + nd * (PANEL_H + TIME_H), runs, n, devs, nd, modes, nm);
    fputs("</svg>\n", a.f);
    return clremat_afile_commit(&a);
}
