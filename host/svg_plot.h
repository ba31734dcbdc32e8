/* svg_plot.h: drawing helpers shared by the SVG reports (compare, Pareto):
 * round axis ticks in 1-2-5 steps with a unit chosen for the range, values
 * printed with their unit, XML-safe text, and labels placed so that none
 * overlaps another or a marker. Pure C and stdio. */
#ifndef CLREMAT_SVG_PLOT_H
#define CLREMAT_SVG_PLOT_H

#include <stddef.h>
#include <stdio.h>

/** What the numbers of an axis are. */
typedef enum svg_unit_kind {
    SVG_UNIT_PLAIN = 0, /**< no unit prefix */
    SVG_UNIT_BYTES,     /**< B, KiB, MiB, GiB, TiB (powers of 1024) */
    SVG_UNIT_FLOP,      /**< FLOP, kFLOP, MFLOP, GFLOP, TFLOP, PFLOP (powers of 1000) */
    SVG_UNIT_MS         /**< values in milliseconds: shown as us, ms or s */
} svg_unit_kind;

/** An axis with round ticks: tick i is (first + i * step) in the scaled
 * unit, i = 0 .. n; data value v is at (v / scale) in that unit. */
typedef struct svg_axis {
    double first;     /**< first tick, scaled unit (a multiple of step) */
    double step;      /**< 1, 2 or 5 times a power of ten, scaled unit */
    int n;            /**< ticks are 0 .. n (n >= 1) */
    double scale;     /**< data units per scaled unit (e.g. 1048576 for MiB) */
    char unit[16];    /**< "MiB", "MFLOP", "ms", "" */
} svg_axis;

/** Chooses the unit for values up to max_abs of kind (the largest unit in
 * which max_abs is at least 1) and its scale. */
void svg_unit_for(svg_unit_kind kind, double max_abs, double *scale, char *unit, size_t len);

/** Fills a with round ticks covering [lo, hi] (data units; lo <= hi) in at
 * most max_ticks steps (>= 2): the first tick at or below lo, the last at
 * or above hi. A zero-width range is widened around its value. */
void svg_axis_nice(svg_axis *a, double lo, double hi, int max_ticks, svg_unit_kind kind);

/** Lowest and highest data value the axis spans (its first and last tick). */
double svg_axis_lo(const svg_axis *a);
double svg_axis_hi(const svg_axis *a);

/** Pixel position of data value v on axis a drawn from pixel `from` (its
 * first tick) to pixel `to` (its last): linear, `to` may be below `from`
 * (a y axis grows upward). */
double svg_axis_map(const svg_axis *a, double v, double from, double to);

/** Tick i's label: the number with just the decimals the step needs
 * ("0", "2.5", "0.02"), without the unit. */
void svg_axis_tick_label(const svg_axis *a, int i, char *buf, size_t len);

/** A data value with its own unit and three significant digits:
 * "4.84 MiB", "7.88 ms", "1.48 MFLOP", "512 B". */
void svg_format_value(double v, svg_unit_kind kind, char *buf, size_t len);

/** Writes s as XML character data: & < > " escaped, control characters and
 * bytes that are not valid UTF-8 written as U+FFFD, so the file stays
 * well-formed whatever a device or file name holds. */
void svg_write_escaped(FILE *f, const char *s);

/** A <text> element at (x, y) (baseline), anchor "start", "middle" or "end",
 * font size size, fill colour (NULL: black). */
void svg_text(FILE *f, double x, double y, const char *anchor, int size, const char *fill, const char *s);

/** Estimated width in pixels of s in the sans-serif font at size (a
 * conservative average advance per character; UTF-8 sequences count once). */
double svg_text_width(const char *s, int size);

/** An axis-aligned box: x, y top-left, w, h. */
typedef struct svg_box {
    double x, y, w, h;
} svg_box;

/** 1 when the boxes share any area (touching edges do not count). */
int svg_boxes_overlap(const svg_box *a, const svg_box *b);

/** A label to place near its anchor point (ax, ay). Lines are separated by
 * '\n'. On return, box is where it went (text drawn from box.x, first
 * baseline at box.y + size) and leader is 1 when it sits away from its
 * anchor and needs a line to it. */
typedef struct svg_label {
    double ax, ay;
    const char *text;
    int size;
    svg_box box;
    int leader;
} svg_label;

/** Places every label inside area so that no two labels overlap and none
 * overlaps an obstacle (markers, legends): first at one of eight positions
 * around its anchor at growing distances, else in a free slot of a column
 * at the area's right edge (with a leader line). Labels are placed in the
 * order given. Returns the number that could not be placed without overlap
 * (0 unless the area is too small to hold them all). */
int svg_place_labels(svg_label *labels, int n, svg_box area, const svg_box *obstacles, int n_obstacles);

/** Draws placed labels: their text (lines as <tspan>s) and, for those with
 * a leader, a thin line from the anchor to the label. */
void svg_draw_labels(FILE *f, const svg_label *labels, int n, const char *fill);

#endif /* CLREMAT_SVG_PLOT_H */
