/* cli_fit.c: `clremat fit MODEL`: will a training step fit each memory size,
 * with which remat mode, how fast, and the largest batch that fits; as a
 * table, JSON (docs/json-output.md) and an SVG. The advisor is host/fit.c. */
#include "atomic_file.h"
#include "model_load.h"
#include "cli.h"
#include "fit.h"
#include "fit_run.h"
#include "report_json.h"
#include "report_svg.h"
#include "svg_plot.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NO_TIME_NOTE CLREMAT_FIT_NO_TIME_NOTE

static void print_table(const clremat_graph *gr, const cli_fit_opts *o, const clremat_fit_request *rq,
                        const clremat_fit_row *rows, int from_cache)
{
    const clremat_fit_calibration *cal = rq->cal;
    char a[32], b[32], c2[32];
    printf("model %s, batch %lld, optimizer %s\n", gr->name, (long long)rq->batch, o->optimizer);
    if (cal) {
        svg_format_value(cal->step_ms, SVG_UNIT_MS, a, sizeof a);
        printf("step times predicted from a calibration on %s: batch %lld, remat %s, %s per step measured%s\n",
               cal->device, (long long)cal->batch, cal->remat, a, from_cache ? " (cached; --recalibrate measures again)" : "");
        if (cal->times_from_flops)
            printf("(the device's profiling events carry no kernel times: each layer's share of the step is its "
                   "share of the FLOPs)\n");
    } else {
        printf(NO_TIME_NOTE " (give --device)\n");
    }
    for (int s = 0; s < rq->n_sizes; s++) {
        int any = 0;
        svg_format_value((double)rq->sizes[s], SVG_UNIT_BYTES, a, sizeof a);
        printf("\nmemory %s (%llu bytes)\n", a, (unsigned long long)rq->sizes[s]);
        printf("  %-36s %12s %5s %10s %11s   %s\n", "remat", "peak", "fits", "recompute", "step time",
               "largest batch (peak, step time)");
        for (int c = 0; c < rq->n_configs; c++) {
            const clremat_fit_row *r = &rows[s * rq->n_configs + c];
            any |= r->fits;
            if (!r->planned) {
                printf("%c %-36s %12s %5s %10s %11s   %s\n", ' ', rq->configs[c].label, "-", "no", "-", "-",
                       r->note);
                continue;
            }
            svg_format_value((double)r->peak_bytes, SVG_UNIT_BYTES, a, sizeof a);
            if (isfinite(r->step_ms))
                svg_format_value(r->step_ms, SVG_UNIT_MS, b, sizeof b);
            else
                snprintf(b, sizeof b, "-");
            printf("%c %-36s %12s %5s %9.1f%% %11s   ", r->fastest ? '*' : ' ', rq->configs[c].label, a,
                   r->fits ? "yes" : "no", 100.0 * r->recompute_share, b);
            if (r->max_batch == 0) {
                printf("none (batch 1 does not fit)\n");
                continue;
            }
            svg_format_value((double)r->max_batch_peak, SVG_UNIT_BYTES, a, sizeof a);
            if (isfinite(r->max_batch_step_ms))
                svg_format_value(r->max_batch_step_ms, SVG_UNIT_MS, c2, sizeof c2);
            printf("%s%lld (%s%s%s)\n", r->max_batch_capped ? ">= " : "", (long long)r->max_batch, a,
                   isfinite(r->max_batch_step_ms) ? ", " : "", isfinite(r->max_batch_step_ms) ? c2 : "");
        }
        if (!any)
            printf("  nothing fits at batch %lld\n", (long long)rq->batch);
    }
    printf("\n* the fastest configuration that fits (%s)\n",
           cal ? "least predicted step time" : "no step times: least recompute");
}

int cli_fit(const cli_global *g, int argc, char **argv)
{
    cli_fit_opts o;
    clremat_opt_config opt;
    clremat_fit_options fo;
    clremat_fit_outcome out;
    int rc = 0, usage = 0, st = cli_fit_parse(g, argc, argv, &o);

    if (st != CLI_CONTINUE)
        return st;
    if (clremat_opt_defaults(o.optimizer, &opt) != 0)
        return cli_error("unknown optimizer '%s'; valid: sgd, adam, adamw", o.optimizer), 2;
    if (o.svg) { /* before any work: a bad path is told at once, and the model is never overwritten */
        const clremat_path_role paths[] = {{"model file", o.model_path, 0}, {"--svg", o.svg, 1}};
        if (clremat_output_check(o.svg, "--svg") != CLREMAT_OK || clremat_paths_distinct(paths, 2) != CLREMAT_OK)
            return cli_error("fit: %s", clremat_last_error());
    }
    memset(&fo, 0, sizeof fo);
    fo.model_path = o.model_path;
    fo.device = o.device;
    fo.sizes = o.sizes;
    fo.n_sizes = o.n_sizes;
    fo.remat = o.remat;
    fo.opt = &opt;
    fo.batch = o.batch;
    fo.max_batch = o.max_batch;
    fo.steps = o.steps;
    fo.calibration_batch = o.calibration_batch;
    fo.accumulate = o.accumulate;
    fo.n_accumulate = o.n_accumulate;
    fo.offload = o.offload;
    fo.recalibrate = o.recalibrate;
    fo.notes = 1;
    fo.precision = o.precision;
    if ((st = clremat_fit_execute(&fo, &out, &usage))) {
        rc = out.gr ? cli_error("fit: %s", clremat_last_error()) + usage : cli_error("%s", clremat_last_error());
        goto done;
    }
    if (o.svg) { /* written first: on failure nothing else is printed */
        char title[256];
        snprintf(title, sizeof title, "Will it fit? %.100s, batch %lld", out.gr->name, (long long)o.batch);
        if (clremat_fit_svg(o.svg, title, &out.rq, out.rows) != CLREMAT_OK) {
            rc = cli_error("fit: %s", clremat_last_error());
            goto done;
        }
    }
    if (o.json)
        clremat_report_fit_json(stdout, out.gr, &opt, &out.rq, out.rows, out.from_cache);
    else
        print_table(out.gr, &o, &out.rq, out.rows, out.from_cache);
done:
    clremat_fit_outcome_free(&out);
    return rc;
}
