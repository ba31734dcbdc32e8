/* cli_fit.c: `clremat fit MODEL`: will a training step fit each memory size,
 * with which remat mode, how fast, and the largest batch that fits; as a
 * table, JSON (docs/json-output.md) and an SVG. The advisor is host/fit.c. */
#include "model_load.h"
#include "cli.h"
#include "fit.h"
#include "gemm.h"
#include "report_svg.h"
#include "transfer.h"
#include "svg_plot.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NO_TIME_NOTE "no device: step time not predicted"

/* FNV-1a of the model file's bytes: part of the calibration cache's key (0 when unreadable). */
/* The calibration cache's key takes the model file's hash; --precision
 * changes the step without changing the file, so it salts the hash. */
static uint64_t precision_salt(const clremat_graph *g)
{
    return (uint64_t)g->precision * 0x9e3779b97f4a7c15ull;
}

static uint64_t model_hash(const char *path)
{
    FILE *f = fopen(path, "rb");
    char buf[65536];
    size_t n;
    uint64_t h = 0;
    if (!f)
        return 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        h = clremat_hash64(h, buf, n);
    fclose(f);
    return h;
}

static void print_json(const clremat_graph *gr, const cli_fit_opts *o, const clremat_opt_config *opt,
                       const clremat_fit_request *rq, const clremat_fit_row *rows, int from_cache)
{
    const clremat_fit_calibration *cal = rq->cal;
    printf("{\"model\": ");
    cli_json_string(stdout, gr->name);
    printf(", \"batch\": %lld, ", (long long)rq->batch);
    cli_json_optimizer(stdout, opt);
    printf(", \"device\": ");
    if (cal)
        cli_json_string(stdout, cal->device);
    else
        printf("null");
    printf(", \"calibration\": ");
    if (cal) {
        printf("{\"batch\": %lld, \"remat\": ", (long long)cal->batch);
        cli_json_string(stdout, cal->remat);
        cli_json_member(stdout, ", \"measured_step_ms\": ", cal->step_ms);
        cli_json_member(stdout, ", \"device_scale\": ", cal->device_scale);
        cli_json_member(stdout, ", \"update_ms\": ", cal->update_ms);
        cli_json_member(stdout, ", \"overhead_ms\": ", cal->overhead_ms);
        cli_json_member(stdout, ", \"offload_ms_per_byte\": ", cal->offload_ms_per_byte);
        printf(", \"from_cache\": %s", from_cache ? "true" : "false");
        printf("}, \"step_time_note\": null");
    } else {
        printf("null, \"step_time_note\": \"" NO_TIME_NOTE "\"");
    }
    printf(", \"max_batch_cap\": %lld, \"sizes\": [", (long long)o->max_batch);
    for (int s = 0; s < rq->n_sizes; s++) {
        int fastest = -1;
        printf("%s\n  {\"memory_bytes\": %llu, \"configs\": [", s ? "," : "", (unsigned long long)rq->sizes[s]);
        for (int c = 0; c < rq->n_configs; c++) {
            const clremat_fit_row *r = &rows[s * rq->n_configs + c];
            if (r->fastest)
                fastest = c;
            printf("%s\n   {\"label\": ", c ? "," : "");
            cli_json_string(stdout, rq->configs[c].label);
            printf(", \"remat\": ");
            cli_json_string(stdout, rq->configs[c].policy.text);
            printf(", \"accumulate\": %d, \"offload\": %s", rq->configs[c].accumulate > 1 ? rq->configs[c].accumulate : 1,
                   rq->configs[c].offload ? "true" : "false");
            printf(", \"planned\": %s, \"peak_bytes\": ", r->planned ? "true" : "false");
            if (r->planned)
                printf("%llu", (unsigned long long)r->peak_bytes);
            else
                printf("null");
            printf(", \"fits\": %s", r->fits ? "true" : "false");
            cli_json_member(stdout, ", \"recompute_flops\": ", r->planned ? r->recompute_flops : NAN);
            cli_json_member(stdout, ", \"recompute_share\": ", r->planned ? r->recompute_share : NAN);
            cli_json_member(stdout, ", \"predicted_step_ms\": ", r->step_ms);
            printf(", \"fastest\": %s, \"largest_batch\": %lld, \"largest_batch_capped\": %s, "
                   "\"largest_batch_peak_bytes\": ",
                   r->fastest ? "true" : "false", (long long)r->max_batch, r->max_batch_capped ? "true" : "false");
            if (r->max_batch > 0)
                printf("%llu", (unsigned long long)r->max_batch_peak);
            else
                printf("null");
            cli_json_member(stdout, ", \"largest_batch_step_ms\": ", r->max_batch_step_ms);
            printf(", \"note\": ");
            if (r->note[0])
                cli_json_string(stdout, r->note);
            else
                printf("null");
            printf("}");
        }
        printf("\n  ], \"fastest\": ");
        if (fastest >= 0)
            cli_json_string(stdout, rq->configs[fastest].label);
        else
            printf("null");
        printf("}");
    }
    printf("\n ]}\n");
}

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
    clremat_graph *gr = NULL;
    clremat_fit_config *configs = NULL;
    clremat_fit_calibration cal;
    clremat_fit_request rq;
    clremat_fit_row *rows = NULL;
    clremat_ctx *ctx = NULL;
    uint64_t dev_size[1];
    int n_configs = 0, have_cal = 0, rc = 0, from_cache = 0, st = cli_fit_parse(g, argc, argv, &o);

    if (st != CLI_CONTINUE)
        return st;
    memset(&cal, 0, sizeof cal);
    if (clremat_opt_defaults(o.optimizer, &opt) != 0)
        return cli_error("unknown optimizer '%s'; valid: sgd, adam, adamw", o.optimizer), 2;
    if (clremat_model_load(o.model_path, &gr, NULL))
        return cli_error("%s", clremat_last_error());
    if (clremat_model_set_precision(gr, o.precision)) {
        clremat_graph_free(gr);
        return cli_error("%s", clremat_last_error());
    }
    st = o.remat ? clremat_fit_parse_configs(gr, o.remat, &configs, &n_configs)
                 : clremat_fit_default_configs(gr, &configs, &n_configs);
    if (st) {
        rc = cli_error("fit: %s", clremat_last_error()) + 1; /* a bad --remat value: usage error */
        goto done;
    }
    if (o.offload) { /* every mode again with offload */
        clremat_fit_config *all = NULL;
        if ((st = clremat_fit_with_offload(configs, n_configs, &all, &n_configs))) {
            rc = cli_error("fit: %s", clremat_last_error());
            goto done;
        }
        free(configs);
        configs = all;
    }
    if (o.n_accumulate > 0) { /* every mode once per accumulation K */
        clremat_fit_config *all = NULL;
        if ((st = clremat_fit_with_accumulate(configs, n_configs, o.accumulate, o.n_accumulate, &all, &n_configs))) {
            rc = cli_error("fit: %s", clremat_last_error()) + 1;
            goto done;
        }
        free(configs);
        configs = all;
    }
    if (o.device || o.n_sizes == 0) { /* step times (and, without --memory, the sizes) from a device */
        if ((st = clremat_ctx_create(o.device, 0, &ctx))) {
            if (o.n_sizes == 0)
                rc = cli_error("fit: no --memory sizes given and no device to take them from (%s); give --memory "
                               "SIZE,SIZE... such as 8GiB,16GiB",
                               clremat_last_error()) + 1;
            else
                rc = cli_error("fit: --device '%s': %s", o.device, clremat_last_error()) + 1;
            goto done;
        }
        int64_t cb = o.calibration_batch ? o.calibration_batch : o.batch;
        clremat_transfer_calibration tc;
        fprintf(stderr, "fit: step-time calibration on %s at batch %lld (measured unless cached)...\n",
                clremat_ctx_device(ctx)->name, (long long)cb);
        if ((st = clremat_fit_calibrate_cached(ctx, gr, model_hash(o.model_path) ^ precision_salt(gr), cb, &opt, 1, (int)o.steps,
                                               o.recalibrate, &cal, &from_cache))) {
            rc = cli_error("fit: %s", clremat_last_error());
            goto done;
        }
        if (o.offload && clremat_transfer_calibrate(ctx, &tc) == CLREMAT_OK) /* copies take time even where they free nothing */
            cal.offload_ms_per_byte = 1e3 / (tc.to_host_gbs * 1e9) + 1e3 / (tc.to_device_gbs * 1e9);
        have_cal = 1;
        dev_size[0] = clremat_ctx_device(ctx)->global_mem_bytes;
    }
    memset(&rq, 0, sizeof rq);
    rq.g = gr;
    rq.batch = o.batch;
    /* as the trainer runs it: with the fused update where it applies (host/fit.c
     * drops it for configurations with accumulation) */
    rq.opt_states = clremat_opt_state_count(opt.kind) | (clremat_trainer_fused(&opt, 1, gr) ? CLREMAT_PLAN_FUSED_UPDATE : 0);
    rq.sizes = o.n_sizes ? o.sizes : dev_size;
    rq.n_sizes = o.n_sizes ? o.n_sizes : 1;
    rq.configs = configs;
    rq.n_configs = n_configs;
    rq.ctx = ctx;
    rq.cal = have_cal ? &cal : NULL;
    rq.max_batch_cap = o.max_batch;
    if ((st = clremat_fit_run(&rq, &rows))) {
        rc = cli_error("fit: %s", clremat_last_error());
        goto done;
    }
    if (o.svg) { /* written first: on failure nothing else is printed */
        char title[256];
        snprintf(title, sizeof title, "Will it fit? %.100s, batch %lld", gr->name, (long long)o.batch);
        if (clremat_fit_svg(o.svg, title, &rq, rows) != CLREMAT_OK) {
            rc = cli_error("fit: %s", clremat_last_error());
            goto done;
        }
    }
    if (o.json)
        print_json(gr, &o, &opt, &rq, rows, from_cache);
    else
        print_table(gr, &o, &rq, rows, from_cache);
done:
    free(rows);
    clremat_fit_calibration_free(&cal);
    free(configs);
    clremat_ctx_destroy(ctx);
    clremat_graph_free(gr);
    return rc;
}
