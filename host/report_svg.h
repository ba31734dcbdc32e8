/* report_svg.h: the SVG pictures the command writes: a Pareto sweep of the
 * planner (clremat plan --pareto --svg) and the fit advisor's peak against
 * step time (clremat fit --svg). The comparison's picture is
 * declared with its data in compare.h. Both are drawn with svg_plot.h and
 * written atomically. */
#ifndef CLREMAT_REPORT_SVG_H
#define CLREMAT_REPORT_SVG_H

#include "fit.h"
#include "plan.h"

/** Writes an SVG plot of peak bytes (x) against recompute cost (y): the
 * front as a step line with points, the Keras-style marks as squares whose
 * labels never overlap (marks at the same point share one label). Axes tick
 * at round values in a unit chosen for the range (KiB/MiB/GiB; FLOP to
 * GFLOP, or ms). Written atomically, so path is never left half-written.
 * cost_unit names the y unit ("FLOP", "ms"); title may be NULL.
 * CLREMAT_ERR_IO names the path and the system error. */
int clremat_pareto_svg(const char *path, const char *title, const char *cost_unit,
                       const clremat_pareto_point *pts, int n, const clremat_pareto_mark *marks, int n_marks);

/** Writes the fit advisor's picture (clremat fit --svg): each planned
 * configuration as a point at its predicted peak (x) and predicted step
 * time (y; without a calibration, rq->cal NULL, its recompute FLOPs, and the
 * axis says so), configurations at the same point sharing one label, one
 * that differs between sizes (auto) once per size; the fastest that fits at
 * some size drawn in green; each memory size as a labelled vertical line.
 * rows as clremat_fit_run returns them. Round ticks and units, labels that
 * never overlap (svg_plot.h); written atomically. CLREMAT_ERR_IO names the
 * path and the system error. */
int clremat_fit_svg(const char *path, const char *title, const clremat_fit_request *rq,
                    const clremat_fit_row *rows);

#endif /* CLREMAT_REPORT_SVG_H */
