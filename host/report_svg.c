/* report_svg.c: the SVG picture of a comparison: live device bytes over one
 * training step for each remat mode (one panel per device), then the median
 * step time and the peak live bytes of every (device, mode) run as bars. */
#include "utf8.h"
#include "atomic_file.h"
#include "compare.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define W 980
#define PANEL_H 260
#define BAR_H 240
#define LEFT 90
#define RIGHT 230

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                     "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

static void text_escaped(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = clremat_utf8_seq(p);
        if (n == 0 || (*p < 0x20 && *p != '\t' && *p != '\n') || *p == 0x7f) {
            fputs("&#xFFFD;", f); /* XML allows neither control characters nor non-UTF-8 bytes */
            p += n ? n : 1;
            continue;
        }
        if (*p == '<')
            fputs("&lt;", f);
        else if (*p == '>')
            fputs("&gt;", f);
        else if (*p == '&')
            fputs("&amp;", f);
        else if (*p == '"')
            fputs("&quot;", f);
        else
            fwrite(p, 1, n, f);
        p += n;
    }
}

static void label(FILE *f, double x, double y, const char *anchor, int size, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">", x, y, anchor, size);
    text_escaped(f, s);
    fputs("</text>\n", f);
}

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
        if (!seen && k < 64)
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

static void memory_panel(FILE *f, double y0, const clremat_compare_run *runs, int n, const char *dev,
                         const char **modes, int nm)
{
    double maxb = 1, minb = -1, x1 = W - RIGHT, h = PANEL_H - 60;
    char buf[256];
    const char *devname = dev;
    for (int i = 0; i < n; i++)
        if (!strcmp(runs[i].device_id, dev)) {
            devname = runs[i].device;
            for (size_t k = 0; k < runs[i].n_timeline; k++) {
                double b = (double)runs[i].timeline[k].live_bytes;
                if (b > maxb)
                    maxb = b;
                if (minb < 0 || b < minb)
                    minb = b;
            }
        }
    /* the axis starts at the step's lowest live bytes (the fixed memory) so
     * the activation part, where the modes differ, fills the panel */
    if (minb < 0 || minb >= maxb)
        minb = 0;
    snprintf(buf, sizeof buf, "Live device bytes over one training step (axis from the step's minimum): %s [%s]",
             devname, dev);
    label(f, LEFT, y0 + 20, "start", 14, buf);
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n", LEFT,
            y0 + 30, x1 - LEFT, h);
    for (int t = 0; t <= 4; t++) {
        double y = y0 + 30 + h - h * t / 4.0;
        snprintf(buf, sizeof buf, "%.3f MiB", (minb + (maxb - minb) * t / 4.0) / 1048576.0);
        label(f, LEFT - 6, y + 4, "end", 11, buf);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, y, x1, y);
    }
    label(f, (LEFT + x1) / 2, y0 + 30 + h + 22, "middle", 11, "allocation and free events of the step (start to end)");
    for (int i = 0; i < n; i++) {
        const clremat_compare_run *r = &runs[i];
        int mi = mode_index(modes, nm, r->mode);
        if (strcmp(r->device_id, dev) || r->n_timeline == 0)
            continue;
        fprintf(f, "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"%s\" points=\"", colors[mi % 10]);
        for (size_t k = 0; k < r->n_timeline; k++) {
            double x = LEFT + (x1 - LEFT) * (r->n_timeline > 1 ? (double)k / (double)(r->n_timeline - 1) : 0);
            double y = y0 + 30 + h - h * ((double)r->timeline[k].live_bytes - minb) / (maxb - minb);
            fprintf(f, "%.1f,%.1f ", x, y);
        }
        fputs("\"/>\n", f);
    }
    for (int m = 0; m < nm; m++) {
        double y = y0 + 44 + 18 * m;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"4\" fill=\"%s\"/>\n", x1 + 12, y - 4,
                colors[m % 10]);
        label(f, x1 + 32, y, "start", 11, modes[m]);
    }
}

static void bar_panel(FILE *f, double y0, const clremat_compare_run *runs, int n, int peak, const char **modes,
                      int nm)
{
    double maxv = 0, x1 = W - RIGHT, h = BAR_H - 70, bw = (x1 - LEFT) / (n ? n : 1);
    char buf[256];
    for (int i = 0; i < n; i++) {
        double v = peak ? (double)(runs[i].status == 0 ? runs[i].measured_peak : runs[i].predicted_peak)
                        : runs[i].median_ms;
        if (isfinite(v) && v > maxv)
            maxv = v;
    }
    if (maxv <= 0)
        maxv = 1;
    label(f, LEFT, y0 + 20, "start", 14,
          peak ? "Peak live device bytes per device and mode (hatched: predicted, run did not fit or failed)"
               : "Median step time per device and mode (whiskers: p10 to p90)");
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", LEFT, y0 + 30 + h, x1,
            y0 + 30 + h);
    for (int t = 0; t <= 4; t++) {
        double y = y0 + 30 + h - h * t / 4.0;
        if (peak)
            snprintf(buf, sizeof buf, "%.2f MiB", maxv * t / 4.0 / 1048576.0);
        else
            snprintf(buf, sizeof buf, "%.1f ms", maxv * t / 4.0);
        label(f, LEFT - 6, y + 4, "end", 11, buf);
    }
    for (int i = 0; i < n; i++) {
        const clremat_compare_run *r = &runs[i];
        int mi = mode_index(modes, nm, r->mode);
        double v = peak ? (double)(r->status == 0 ? r->measured_peak : r->predicted_peak) : r->median_ms;
        double x = LEFT + bw * i + bw * 0.15, bh;
        if (!isfinite(v))
            v = 0;
        bh = h * v / maxv;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"%s/>\n", x,
                y0 + 30 + h - bh, bw * 0.7, bh, colors[mi % 10],
                r->status != 0 ? " fill-opacity=\"0.35\" stroke=\"#000\" stroke-dasharray=\"3,2\"" : "");
        if (!peak && r->status == 0 && isfinite(r->p10_ms) && isfinite(r->p90_ms)) {
            double xm = x + bw * 0.35;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", xm,
                    y0 + 30 + h - h * r->p10_ms / maxv, xm, y0 + 30 + h - h * r->p90_ms / maxv);
        }
        snprintf(buf, sizeof buf, "%s", r->device_id);
        label(f, x + bw * 0.35, y0 + 30 + h + 14, "middle", 10, buf);
    }
    for (int m = 0; m < nm; m++) {
        double y = y0 + 44 + 18 * m;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>\n", x1 + 12, y - 9,
                colors[m % 10]);
        label(f, x1 + 32, y, "start", 11, modes[m]);
    }
}

int clremat_compare_svg(const char *path, const char *model, const clremat_compare_run *runs, int n)
{
    const char *devs[64], *modes[64];
    int nd = count_distinct(runs, n, 0, devs), nm = count_distinct(runs, n, 1, modes);
    double height = 50 + nd * PANEL_H + 2 * BAR_H + 20;
    clremat_afile a;
    char title[512];
    int st = clremat_afile_open(&a, path);
    if (st)
        return st;
    fprintf(a.f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" "
                 "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, height);
    snprintf(title, sizeof title, "clremat compare: %s", model);
    label(a.f, W / 2.0, 28, "middle", 18, title);
    for (int d = 0; d < nd; d++)
        memory_panel(a.f, 40 + d * PANEL_H, runs, n, devs[d], modes, nm);
    bar_panel(a.f, 40 + nd * PANEL_H, runs, n, 0, modes, nm);
    bar_panel(a.f, 40 + nd * PANEL_H + BAR_H, runs, n, 1, modes, nm);
    fputs("</svg>\n", a.f);
    return clremat_afile_commit(&a);
}
