/* svg_plot.c: axis ticks, units, XML text and label placement for the SVG
 * reports (svg_plot.h). */
#include "svg_plot.h"
#include "utf8.h"
#include <math.h>
#include <string.h>

#define LINE_GAP 1.25 /* line height as a multiple of the font size */

void svg_unit_for(svg_unit_kind kind, double max_abs, double *scale, char *unit, size_t len)
{
    static const char *const bytes[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    static const char *const flops[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
    int u = 0;
    double s = 1;
    max_abs = fabs(max_abs);
    if (!isfinite(max_abs))
        max_abs = 0;
    switch (kind) {
    case SVG_UNIT_BYTES:
        while (u < 4 && max_abs >= s * 1024) {
            s *= 1024;
            u++;
        }
        snprintf(unit, len, "%s", bytes[u]);
        break;
    case SVG_UNIT_FLOP:
        while (u < 5 && max_abs >= s * 1000) {
            s *= 1000;
            u++;
        }
        snprintf(unit, len, "%s", flops[u]);
        break;
    case SVG_UNIT_MS:
        if (max_abs > 0 && max_abs < 1) {
            s = 0.001;
            snprintf(unit, len, "us");
        } else if (max_abs >= 1000) {
            s = 1000;
            snprintf(unit, len, "s");
        } else
            snprintf(unit, len, "ms");
        break;
    default:
        snprintf(unit, len, "%s", "");
    }
    *scale = s;
}

void svg_axis_nice(svg_axis *a, double lo, double hi, int max_ticks, svg_unit_kind kind)
{
    double raw, mag, norm, step;
    long long k0, k1;
    if (!isfinite(lo))
        lo = 0;
    if (!isfinite(hi))
        hi = lo;
    if (hi < lo) {
        double t = lo;
        lo = hi;
        hi = t;
    }
    if (max_ticks < 2)
        max_ticks = 2;
    svg_unit_for(kind, fmax(fabs(lo), fabs(hi)), &a->scale, a->unit, sizeof a->unit);
    lo /= a->scale;
    hi /= a->scale;
    if (hi - lo <= fabs(hi) * 1e-12) {
        double w = hi != 0 ? fabs(hi) * 0.1 : 1;
        int nonneg = lo >= 0;
        lo -= w;
        hi += w;
        if (nonneg && lo < 0)
            lo = 0;
    }
    raw = (hi - lo) / max_ticks;
    mag = pow(10, floor(log10(raw)));
    norm = raw / mag;
    step = (norm <= 1 + 1e-9 ? 1 : norm <= 2 + 1e-9 ? 2 : norm <= 5 + 1e-9 ? 5 : 10) * mag;
    k0 = (long long)floor(lo / step + 1e-9);
    k1 = (long long)ceil(hi / step - 1e-9);
    if (k1 <= k0)
        k1 = k0 + 1;
    a->step = step;
    a->first = (double)k0 * step;
    a->n = (int)(k1 - k0);
}

double svg_axis_lo(const svg_axis *a) { return a->first * a->scale; }

double svg_axis_hi(const svg_axis *a) { return (a->first + a->n * a->step) * a->scale; }

double svg_axis_map(const svg_axis *a, double v, double from, double to)
{
    double lo = svg_axis_lo(a), hi = svg_axis_hi(a);
    return from + (v - lo) / (hi - lo) * (to - from);
}

void svg_axis_tick_label(const svg_axis *a, int i, char *buf, size_t len)
{
    int decimals = a->step >= 1 ? 0 : (int)ceil(-log10(a->step) - 1e-9);
    double v = (round(a->first / a->step) + i) * a->step;
    if (fabs(v) < a->step * 1e-6)
        v = 0; /* never "-0" */
    snprintf(buf, len, "%.*f", decimals, v);
}

void svg_format_value(double v, svg_unit_kind kind, char *buf, size_t len)
{
    double scale, s;
    char unit[16];
    if (!isfinite(v)) {
        snprintf(buf, len, "n/a");
        return;
    }
    svg_unit_for(kind, v, &scale, unit, sizeof unit);
    s = v / scale;
    if (kind == SVG_UNIT_BYTES && scale == 1)
        snprintf(buf, len, "%.0f %s", s, unit);
    else if (fabs(s) >= 99.95 || s == 0)
        snprintf(buf, len, "%.0f%s%s", s, *unit ? " " : "", unit);
    else if (fabs(s) >= 9.995)
        snprintf(buf, len, "%.1f%s%s", s, *unit ? " " : "", unit);
    else
        snprintf(buf, len, "%.2f%s%s", s, *unit ? " " : "", unit);
}

/* Length of the valid UTF-8 sequence at p that encodes an XML character
 * (no C0 controls but tab, no U+FFFE/U+FFFF); 0 if none. */
static int utf8_char(const unsigned char *p)
{
    size_t n = clremat_utf8_seq(p);
    if (n == 1 && p[0] < 0x20 && p[0] != '\t')
        return 0;
    if (n == 3 && p[0] == 0xEF && p[1] == 0xBF && (p[2] == 0xBE || p[2] == 0xBF))
        return 0;
    return (int)n;
}

void svg_write_escaped(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        int n = utf8_char(p);
        if (n == 0) {
            fputs("\xEF\xBF\xBD", f); /* U+FFFD */
            p++;
            continue;
        }
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fwrite(p, 1, (size_t)n, f);
        }
        p += n;
    }
}

void svg_text(FILE *f, double x, double y, const char *anchor, int size, const char *fill, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"", x, y, anchor, size);
    if (fill)
        fprintf(f, " fill=\"%s\"", fill);
    fputc('>', f);
    svg_write_escaped(f, s);
    fputs("</text>\n", f);
}

double svg_text_width(const char *s, int size)
{
    double em = 0;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        unsigned c = *p;
        if ((c & 0xC0) == 0x80)
            continue; /* continuation byte: counted with its lead */
        if (strchr("il.,:;|!'`[]()jtf", (int)c) && c)
            em += 0.36;
        else if (c >= 'A' && c <= 'Z')
            em += c == 'I' || c == 'J' ? 0.4 : 0.76;
        else if (c == 'm' || c == 'w' || c == '@' || c == '%' || c >= 0x80)
            em += 0.92;
        else
            em += 0.64;
    }
    return em * size;
}

int svg_boxes_overlap(const svg_box *a, const svg_box *b)
{
    return a->x < b->x + b->w && b->x < a->x + a->w && a->y < b->y + b->h && b->y < a->y + a->h;
}

/* Width and height of a label's text (lines separated by '\n'). */
static void label_size(const svg_label *l, double *w, double *h)
{
    const char *p = l->text ? l->text : "";
    int lines = 1;
    *w = 0;
    for (;;) {
        const char *e = strchr(p, '\n');
        char line[512];
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n >= sizeof line)
            n = sizeof line - 1;
        memcpy(line, p, n);
        line[n] = 0;
        *w = fmax(*w, svg_text_width(line, l->size));
        if (!e)
            break;
        p = e + 1;
        lines++;
    }
    *h = lines * l->size * LINE_GAP;
}

static int inside(const svg_box *b, const svg_box *area)
{
    return b->x >= area->x && b->y >= area->y && b->x + b->w <= area->x + area->w &&
           b->y + b->h <= area->y + area->h;
}

static int is_free(const svg_box *b, const svg_box *area, const svg_label *placed, int n_placed,
                   const svg_box *obstacles, int n_obstacles)
{
    if (!inside(b, area))
        return 0;
    for (int i = 0; i < n_placed; i++)
        if (svg_boxes_overlap(b, &placed[i].box))
            return 0;
    for (int i = 0; i < n_obstacles; i++)
        if (svg_boxes_overlap(b, &obstacles[i]))
            return 0;
    return 1;
}

int svg_place_labels(svg_label *labels, int n, svg_box area, const svg_box *obstacles, int n_obstacles)
{
    static const double dist[] = {5, 10, 18, 28, 42, 60};
    int unplaced = 0;
    for (int i = 0; i < n; i++) {
        svg_label *l = &labels[i];
        double w, h;
        int done = 0;
        label_size(l, &w, &h);
        l->leader = 0;
        for (size_t k = 0; k < sizeof dist / sizeof dist[0] && !done; k++) {
            double d = dist[k];
            const double cand[8][2] = {
                {l->ax + d, l->ay - d - h},     {l->ax + d, l->ay + d},         {l->ax - d - w, l->ay - d - h},
                {l->ax - d - w, l->ay + d},     {l->ax + d, l->ay - h / 2},     {l->ax - d - w, l->ay - h / 2},
                {l->ax - w / 2, l->ay - d - h}, {l->ax - w / 2, l->ay + d},
            };
            for (int c = 0; c < 8 && !done; c++) {
                svg_box b = {cand[c][0], cand[c][1], w, h};
                if (is_free(&b, &area, labels, i, obstacles, n_obstacles)) {
                    l->box = b;
                    l->leader = k >= 3;
                    done = 1;
                }
            }
        }
        /* a free slot in a column at the area's right edge, nearest the
         * anchor's height first */
        for (double off = 0; !done && off <= area.h; off += 2)
            for (int sgn = 0; sgn < 2 && !done; sgn++) {
                svg_box b = {area.x + area.w - w, l->ay - h / 2 + (sgn ? -off : off), w, h};
                if (is_free(&b, &area, labels, i, obstacles, n_obstacles)) {
                    l->box = b;
                    l->leader = 1;
                    done = 1;
                }
            }
        if (!done) {
            l->box = (svg_box){l->ax + 5, l->ay - h / 2, w, h};
            unplaced++;
        }
    }
    return unplaced;
}

void svg_draw_labels(FILE *f, const svg_label *labels, int n, const char *fill)
{
    for (int i = 0; i < n; i++) {
        const svg_label *l = &labels[i];
        const char *p = l->text ? l->text : "";
        int first = 1;
        if (l->leader) {
            double tx = fmin(fmax(l->ax, l->box.x), l->box.x + l->box.w);
            double ty = fmin(fmax(l->ay, l->box.y), l->box.y + l->box.h);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"0.6\"/>\n",
                    l->ax, l->ay, tx, ty, fill ? fill : "#000");
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\"%s%s%s>", l->box.x, l->box.y + l->size * 0.95,
                l->size, fill ? " fill=\"" : "", fill ? fill : "", fill ? "\"" : "");
        for (;;) {
            const char *e = strchr(p, '\n');
            char line[512];
            size_t len = e ? (size_t)(e - p) : strlen(p);
            if (len >= sizeof line)
                len = sizeof line - 1;
            memcpy(line, p, len);
            line[len] = 0;
            fprintf(f, "<tspan x=\"%.1f\" dy=\"%.1f\">", l->box.x, first ? 0.0 : l->size * LINE_GAP);
            svg_write_escaped(f, line);
            fputs("</tspan>", f);
            first = 0;
            if (!e)
                break;
            p = e + 1;
        }
        fputs("</text>\n", f);
    }
}
