/* cli_train.c: `clremat train MODEL`: option parsing, the human summary and
 * the --json report (docs/json-output.md documents every field). */
#include "cli.h"
#include "train.h"
#include "report_json.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void print_summary(const clremat_train_config *cfg, const clremat_train_result *r)
{
    printf("model        %s (%s)\n", r->g ? r->g->name : "?", cfg->model_path);
    printf("device       %s [%s]\n", r->device, r->platform);
    printf("remat        %s\n", r->remat);
    printf("gemm         %s\n", r->gemm);
    if (r->precision == CLREMAT_PREC_MIXED_FLOAT16)
        printf("precision    mixed_float16 (loss scale %g, %lld steps skipped)\n", (double)r->loss_scale,
               (long long)r->skipped_steps);
    else if (r->precision != CLREMAT_PREC_FLOAT32)
        printf("precision    %s\n", clremat_precision_name(r->precision));
    if (r->warmup_excluded > 0 || cfg->warmup <= 0)
        printf("steps        %lld at batch %lld (%lld warm-up steps excluded from timing)\n", (long long)r->steps_run,
               (long long)cfg->batch, (long long)r->warmup_excluded);
    else /* no more steps than the warm-up: every one is timed */
        printf("steps        %lld at batch %lld (all timed: no more than the %lld warm-up steps)\n",
               (long long)r->steps_run, (long long)cfg->batch, (long long)cfg->warmup);
    if (r->accumulate > 1)
        printf("accumulate   %d micro-batches of %lld a step (gradients summed, one update; the plan and the\n"
               "             peak are one micro-batch's, with the %llu-byte accumulation buffer in the fixed bytes)\n",
               r->accumulate, (long long)r->micro_batch, (unsigned long long)r->accum_bytes);
    if (r->start_step > 0)
        printf("resumed      after step %lld (%s): these are steps %lld to %lld\n", (long long)r->start_step,
               cfg->load, (long long)r->start_step + 1, (long long)(r->start_step + r->steps_run));
    if (r->opt.kind == CLREMAT_OPT_SGD)
        printf("optimizer    sgd: lr %g, momentum %g, weight decay %g\n", (double)r->opt.lr, (double)r->opt.momentum,
               (double)r->opt.weight_decay);
    else
        printf("optimizer    %s: lr %g, beta1 %g, beta2 %g, epsilon %g, weight decay %g\n", clremat_opt_name(r->opt.kind),
               (double)r->opt.lr, (double)r->opt.beta1, (double)r->opt.beta2, (double)r->opt.eps,
               (double)r->opt.weight_decay);
    printf("train loss   %.6f (first step %.6f)\n", (double)r->final_loss,
           r->steps_run ? (double)r->losses[0] : NAN);
    if (isnan(r->val_accuracy))
        printf("validation   loss %.6f\n", (double)r->val_loss);
    else
        printf("validation   loss %.6f, accuracy %.4f\n", (double)r->val_loss, (double)r->val_accuracy);
    printf("step time    median %.3f ms (p10 %.3f, p90 %.3f, min %.3f, max %.3f)\n", r->median_ms, r->p10_ms,
           r->p90_ms, r->min_ms, r->max_ms);
    printf("memory       peak live %llu bytes (predicted %llu%s), peak reserved %llu bytes\n",
           (unsigned long long)r->measured_peak, (unsigned long long)r->predicted_peak,
           r->measured_peak == r->predicted_peak ? ", exact" : ", DIFFERS", (unsigned long long)r->reserved_peak);
    printf("             fixed %llu bytes (parameters %llu), activations kept after forward %llu bytes\n",
           (unsigned long long)r->fixed_bytes, (unsigned long long)r->param_bytes,
           (unsigned long long)r->kept_act_bytes);
    if (r->n_offloads > 0)
        printf("offload      %d tensors, %llu bytes to the host and back per step; host peak %llu bytes (predicted "
               "%llu%s)%s\n",
               r->n_offloads, (unsigned long long)r->offload_bytes, (unsigned long long)r->measured_host_peak,
               (unsigned long long)r->predicted_host_peak,
               r->measured_host_peak == r->predicted_host_peak ? ", exact" : ", DIFFERS",
               r->host_unified ? "; this device's memory is the host's, so offload frees nothing real here" : "");
    if (r->replans)
        printf("replanned    at step %lld, predicted peak %llu -> %llu bytes (peaks above are since then): %s\n",
               (long long)r->replan_step + 1, (unsigned long long)r->replan_from_peak,
               (unsigned long long)r->replan_to_peak, r->replan_reason);
    printf("recompute    %.4g FLOPs, %.1f%% of the step's %.4g FLOPs (%d recompute actions)\n",
           r->recompute_flops, r->step_flops > 0 ? 100.0 * r->recompute_flops / r->step_flops : 0.0,
           r->step_flops, r->n_recompute_actions);
}

static void print_profile(const clremat_train_result *r)
{
    const char *phase[] = {"forward", "backward", "recompute", "update"};
    double total = 0;
    int n = r->g->n_layers;
    if (r->profile_problem[0]) { /* a table of zeros would read as a measurement */
        printf("\nprofile of the last step: none shown; %s\n", r->profile_problem);
        return;
    }
    for (int l = 0; l <= n; l++)
        for (int p = 0; p < CLREMAT_PHASE_COUNT; p++)
            total += r->profile[l].ns[p];
    printf("\nprofile of the last step (device time, ms; share of the step)\n");
    printf("%-32s %10s %10s %10s %10s %7s\n", "layer", phase[0], phase[1], phase[2], phase[3], "share");
    for (int l = 0; l <= n; l++) {
        double sum = 0;
        for (int p = 0; p < CLREMAT_PHASE_COUNT; p++)
            sum += r->profile[l].ns[p];
        if (l == n && sum == 0)
            continue;
        printf("%-32s %10.3f %10.3f %10.3f %10.3f %6.1f%%\n", l < n ? r->g->layers[l].name : "(other)",
               r->profile[l].ns[0] / 1e6, r->profile[l].ns[1] / 1e6, r->profile[l].ns[2] / 1e6,
               r->profile[l].ns[3] / 1e6, total > 0 ? 100.0 * sum / total : 0.0);
    }
    printf("%-32s %10.3f ms total device time\n", "total", total / 1e6);
    if (r->n_kernels > 0) {
        printf("\nkernels of the last step by device time\n%-32s %10s %8s %7s\n", "kernel", "ms", "launches",
               "share");
        for (int i = 0; i < r->n_kernels && i < 12; i++)
            printf("%-32s %10.3f %8d %6.1f%%\n", r->kernels[i].name, r->kernels[i].ns / 1e6, r->kernels[i].launches,
                   total > 0 ? 100.0 * r->kernels[i].ns / total : 0.0);
    }
}

void cli_train_report(const clremat_train_config *cfg, const clremat_train_result *r, int json,
                      void (*extra)(FILE *f, int json, void *user), void *user)
{
    if (json) {
        clremat_report_train_json(stdout, cfg, r, extra, user);
        return;
    }
    print_summary(cfg, r);
    if (extra)
        extra(stdout, 0, user);
    if (r->profile)
        print_profile(r);
}

int cli_train(const cli_global *g, int argc, char **argv)
{
    clremat_train_config cfg;
    clremat_train_result res;
    int json = 0, st = cli_train_parse(g, argc, argv, &cfg, &json);

    if (st != CLI_CONTINUE)
        return st;
    st = clremat_train_run(&cfg, &res);
    if (st != CLREMAT_OK) {
        if (json && res.steps_run == 0) /* refused before a step: one JSON error object */
            cli_json_error(st, clremat_last_error());
        else
            cli_error("%s", clremat_last_error());
        if (json && res.steps_run > 0) { /* the partial report says why it stopped */
            if (!res.stopped_nonfinite)
                snprintf(res.message, sizeof res.message, "%s", clremat_last_error());
            clremat_report_train_json(stdout, &cfg, &res, NULL, NULL);
        }
        clremat_train_result_free(&res);
        return 1;
    }
    cli_train_report(&cfg, &res, json, NULL, NULL);
    clremat_train_result_free(&res);
    return 0;
}
