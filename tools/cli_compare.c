/* cli_compare.c: `clremat compare MODEL`: runs the acceptance protocol over
 * devices and remat modes and prints a table, --json, --csv FILE, --svg FILE.
 * Its options are parsed in cli_options.c (cli_compare_parse). */
#include "atomic_file.h"
#include "cli.h"
#include "compare.h"
#include "report_json.h"
#include "utf8.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A CSV field in double quotes (RFC 4180: a quote is doubled); a byte that
 * is not UTF-8 or a control character becomes U+FFFD, so the file stays
 * valid UTF-8 text. */
static void csv_field(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        size_t n = clremat_utf8_seq(p);
        if (n == 0 || *p < 0x20 || *p == 0x7f)
            fputs("\xef\xbf\xbd", f);
        else if (*p == '"')
            fputs("\"\"", f);
        else
            fwrite(p, 1, n, f);
        p += n ? n : 1;
    }
    fputc('"', f);
}

static int write_csv(const char *path, const clremat_compare_run *runs, int n)
{
    clremat_afile a;
    int st = clremat_afile_open(&a, path);
    if (st)
        return st;
    fputs("device,device_id,platform,remat,status,limit_bytes,predicted_peak_bytes,measured_peak_bytes,fits,"
          "median_step_ms,p10_step_ms,p90_step_ms,overhead_vs_none,recompute_flops,recompute_share,final_loss,"
          "val_loss,val_accuracy,finite,bitwise_equal_to_none,max_loss_diff_across_devices\n", a.f);
    for (int i = 0; i < n; i++) {
        const clremat_compare_run *r = &runs[i];
        int ok = r->status == CLREMAT_OK;
        csv_field(a.f, r->device);
        fprintf(a.f, ",%s,", r->device_id);
        csv_field(a.f, r->platform);
        fputc(',', a.f);
        csv_field(a.f, r->mode);
        fprintf(a.f, ",%s,%llu,%llu,", clremat_compare_status_word(r), (unsigned long long)r->limit,
                (unsigned long long)r->predicted_peak);
        if (ok)
            fprintf(a.f, "%llu", (unsigned long long)r->measured_peak);
        fprintf(a.f, ",%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,", r->fits, r->median_ms, r->p10_ms, r->p90_ms, r->overhead,
                r->recompute_flops, r->step_flops > 0 ? r->recompute_flops / r->step_flops : NAN);
        if (ok)
            fprintf(a.f, "%.9g,%.9g,%.9g", (double)r->final_loss, (double)r->val_loss, (double)r->val_accuracy);
        else
            fputs(",,", a.f);
        fprintf(a.f, ",%d,%s,%.6g\n", r->finite, r->bitwise_none < 0 ? "" : r->bitwise_none ? "1" : "0",
                r->max_device_diff);
    }
    return clremat_afile_commit(&a);
}

static void print_table(const clremat_compare_run *runs, int n)
{
    printf("%-7s %-30s %11s %11s %-4s %-22s %8s %7s %9s %9s %7s  %s\n", "device", "remat", "pred peak",
           "meas peak", "fits", "step ms (p10-p90)", "overhead", "recomp", "loss", "val loss", "val acc",
           "numerics");
    for (int i = 0; i < n; i++) {
        const clremat_compare_run *r = &runs[i];
        char step[64], num[96], meas[32], over[16];
        if (i == 0 || strcmp(runs[i - 1].device_id, r->device_id))
            printf("-- %s: %s [%s]\n", r->device_id, r->device, r->platform);
        if (r->status != CLREMAT_OK) {
            printf("%-7s %-30s %11llu %11s %-4s %s\n", r->device_id, r->mode, (unsigned long long)r->predicted_peak,
                   "-", r->fits ? "yes" : "no",
                   r->status == CLREMAT_ERR_OUT_OF_MEMORY ? "does not fit the device: not run" : r->error);
            continue;
        }
        snprintf(step, sizeof step, "%.2f (%.2f-%.2f)", r->median_ms, r->p10_ms, r->p90_ms);
        snprintf(meas, sizeof meas, "%llu", (unsigned long long)r->measured_peak);
        if (isfinite(r->overhead))
            snprintf(over, sizeof over, "%.3fx", r->overhead);
        else
            snprintf(over, sizeof over, "-");
        snprintf(num, sizeof num, "%s%s", r->finite ? "finite" : "NON-FINITE",
                 r->bitwise_none < 0 ? "" : r->bitwise_none ? ", =none" : ", DIFFERS from none");
        if (isfinite(r->max_device_diff)) {
            size_t l = strlen(num);
            snprintf(num + l, sizeof num - l, ", xdev %.3g", r->max_device_diff);
        }
        printf("%-7s %-30s %11llu %11s %-4s %-22s %8s %6.1f%% %9.5f %9.5f %7.4f  %s\n", r->device_id, r->mode,
               (unsigned long long)r->predicted_peak, meas, r->fits ? "yes" : "no", step, over,
               r->step_flops > 0 ? 100.0 * r->recompute_flops / r->step_flops : 0.0, (double)r->final_loss,
               (double)r->val_loss, (double)r->val_accuracy, num);
    }
}

int cli_compare(const cli_global *g, int argc, char **argv)
{
    cli_compare_opts o;
    clremat_compare_run *runs = NULL;
    int n = 0, st, rc = 0;

    st = cli_compare_parse(g, argc, argv, &o);
    if (st != CLI_CONTINUE)
        return st;
    /* output paths are checked before anything runs */
    if ((o.csv && clremat_output_check(o.csv, "--csv")) || (o.svg && clremat_output_check(o.svg, "--svg")))
        return cli_error("%s", clremat_last_error());
    {
        const clremat_path_role paths[] = {{"model file", o.cfg.model_path, 0},
                                           {"--data file", o.cfg.data, 0},
                                           {"--csv", o.csv, 1},
                                           {"--svg", o.svg, 1}};
        if (clremat_paths_distinct(paths, sizeof paths / sizeof paths[0]) != CLREMAT_OK)
            return cli_error("%s", clremat_last_error());
    }
    st = clremat_compare(&o.cfg, &runs, &n);
    if (st != CLREMAT_OK)
        return cli_error("%s", clremat_last_error());
    if (o.json)
        clremat_report_compare_json(stdout, &o.cfg, runs, n);
    else
        print_table(runs, n);
    if (o.csv && write_csv(o.csv, runs, n) != CLREMAT_OK)
        rc = cli_error("%s", clremat_last_error());
    if (o.svg && clremat_compare_svg(o.svg, o.cfg.model_path, runs, n) != CLREMAT_OK)
        rc = cli_error("%s", clremat_last_error());
    for (int i = 0; i < n; i++)
        if (runs[i].status != CLREMAT_OK && runs[i].status != CLREMAT_ERR_OUT_OF_MEMORY) {
            rc = 1; /* a run failed for a reason other than not fitting: say why on stderr, --quiet or not */
            cli_error("%s --remat %s: %s", runs[i].device_id, runs[i].mode, runs[i].error);
        }
    clremat_compare_free(runs, n);
    return rc;
}
