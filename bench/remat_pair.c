/* remat_pair.c: measures the step-time overhead of remat modes by paired
 * steps in one process. Usage:
 *   remat_pair [--device SEL] [--gemm PATH] [--batch N] [--optimizer O]
 *              [--rounds R] [--warmup W] [--create forward|reverse]
 *              MODEL MODE[@PRECISION]...
 * One context, one model, one trainer per mode ("none" is added first as the
 * baseline when not given). A mode may name a precision after '@'
 * ("none@mixed_float16": float32 against mixed precision, paired the same
 * way); the model is loaded once per mode, at that precision or its own.
 * After W warm-up steps each, every round runs one step of every trainer, in an order that rotates from round to round, on
 * the same batch; a step is timed by the host clock around the step and
 * clFinish, and by the CPU time of the whole process (PoCL's worker threads
 * run in it). Because the steps being compared run seconds apart rather
 * than minutes, load from other processes and clock drift hit both sides of
 * a pair alike: the per-round ratio step(mode) / step(none) is what is
 * reported, as its median over rounds. The trainers are created in the
 * order given ("none" first), or in the reverse order with --create
 * reverse: on the 2-core PoCL machine the trainer created first ran its
 * steps 0.5-1.5% faster than a later one with the same plan (measured
 * 2026-12-05 with two copies of none's plan; the cause, presumably where
 * its buffers landed, was not pinned down), so bench/bench.py pairs each
 * mode with none in both orders and takes the geometric mean of the two
 * ratios. Also printed per mode: the planner's
 * recompute FLOPs and predicted share (recompute FLOPs / FLOPs of the step
 * without remat) and the measured live peak against the prediction.
 * Output: one JSON object on stdout (bench/bench.py reads it). */
#include "executor.h"
#include "clock.h"
#include "data.h"
#include "gemm.h"
#include "model_load.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MAX_MODES 16
#define MAX_NAME 96

static double wall_ms(void)
{
    return 1e3 * clremat_now_s();
}

/* CPU milliseconds (user + system) of this process, all threads. */
static double cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return 1e3 * ((double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec) +
           1e-3 * ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec);
}

static void usage(void)
{
    fprintf(stderr, "usage: remat_pair [--device SEL] [--gemm native|clblast|auto] [--batch N] [--optimizer O]\n"
                    "                  [--rounds R] [--warmup W] [--create forward|reverse] MODEL MODE[@PRECISION]...\n");
}

int main(int argc, char **argv)
{
    const char *device = NULL, *gemm = "auto", *optimizer = "adam", *modes[MAX_MODES];
    long batch = 32, rounds = 20, warmup = 3;
    int first = 1, n_modes = 0, st = CLREMAT_OK, rc = 1, reverse = 0;
    clremat_ctx *ctx = NULL;
    clremat_graph *g[MAX_MODES] = {0};
    char policy[MAX_MODES][MAX_NAME], precision[MAX_MODES][MAX_NAME];
    clremat_dataset data;
    clremat_opt_config opt;
    clremat_gemm_path path;
    clremat_trainer *t[MAX_MODES] = {0};
    double *wall[MAX_MODES] = {0}, *cpu[MAX_MODES] = {0}, *ratio[MAX_MODES] = {0}, *cratio[MAX_MODES] = {0};
    float *x = NULL, *y = NULL;

    memset(&data, 0, sizeof data);
    for (; first + 1 < argc && strncmp(argv[first], "--", 2) == 0; first += 2) {
        const char *k = argv[first], *v = argv[first + 1];
        if (strcmp(k, "--device") == 0)
            device = v;
        else if (strcmp(k, "--gemm") == 0)
            gemm = v;
        else if (strcmp(k, "--batch") == 0)
            batch = atol(v);
        else if (strcmp(k, "--optimizer") == 0)
            optimizer = v;
        else if (strcmp(k, "--rounds") == 0)
            rounds = atol(v);
        else if (strcmp(k, "--warmup") == 0)
            warmup = atol(v);
        else if (strcmp(k, "--create") == 0) {
            if (strcmp(v, "forward") != 0 && strcmp(v, "reverse") != 0) {
                fprintf(stderr, "remat_pair: --create takes forward or reverse, not '%s'\n", v);
                return 2;
            }
            reverse = strcmp(v, "reverse") == 0;
        } else {
            fprintf(stderr, "remat_pair: unknown option %s\n", k);
            usage();
            return 2;
        }
    }
    if (argc - first < 2 || batch < 1 || rounds < 1 || rounds > 100000 || warmup < 0) {
        usage();
        return 2;
    }
    modes[n_modes++] = "none";
    for (int a = first + 1; a < argc; a++) {
        if (strcmp(argv[a], "none") == 0)
            continue;
        if (n_modes == MAX_MODES) {
            fprintf(stderr, "remat_pair: at most %d modes\n", MAX_MODES - 1);
            return 2;
        }
        modes[n_modes++] = argv[a];
    }
    if (clremat_gemm_path_parse(gemm, &path) != CLREMAT_OK) {
        fprintf(stderr, "remat_pair: %s\n", clremat_last_error());
        return 2;
    }
    if (clremat_opt_defaults(optimizer, &opt) != 0) {
        fprintf(stderr, "remat_pair: unknown optimizer '%s'; valid: sgd, adam, adamw\n", optimizer);
        return 2;
    }
    if ((st = clremat_ctx_create(device, 0, &ctx)) != CLREMAT_OK) {
        fprintf(stderr, "remat_pair: %s\n", clremat_last_error());
        return 1;
    }
    for (int m = 0; m < n_modes; m++) { /* MODE[@PRECISION] */
        const char *at = strchr(modes[m], '@');
        size_t len = at ? (size_t)(at - modes[m]) : strlen(modes[m]);
        if (len >= MAX_NAME || (at && strlen(at + 1) >= MAX_NAME)) {
            fprintf(stderr, "remat_pair: mode '%s' too long\n", modes[m]);
            return 2;
        }
        memcpy(policy[m], modes[m], len);
        policy[m][len] = '\0';
        snprintf(precision[m], MAX_NAME, "%s", at ? at + 1 : "");
    }
    if ((st = clremat_ctx_set_gemm(ctx, path)) != CLREMAT_OK)
        goto fail;
    for (int m = 0; m < n_modes; m++) /* a graph per mode: its precision is the graph's */
        if ((st = clremat_graph_load(argv[first], &g[m])) ||
            (precision[m][0] && (st = clremat_model_set_precision(g[m], precision[m]))))
            goto fail;
    if ((st = clremat_data_synthetic(g[0], NULL, 1, 4 * batch, batch, &data)))
        goto fail;
    x = malloc(sizeof(float) * (size_t)(batch * data.train.x_elems));
    y = malloc(sizeof(float) * (size_t)(batch * data.train.y_elems));
    if (!x || !y) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
        goto fail;
    }
    for (int i = 0; i < n_modes; i++) {
        const int m = reverse ? n_modes - 1 - i : i; /* creation order (see the top of the file) */
        clremat_policy pol;
        if ((st = clremat_policy_parse(policy[m], &pol)))
            goto fail;
        if ((st = clremat_trainer_new(ctx, g[m], batch, &pol, &opt, 1, &t[m]))) {
            clremat_set_error(st, "%s: %s", modes[m], clremat_ctx_last_error(ctx));
            goto fail;
        }
        wall[m] = calloc((size_t)rounds, sizeof(double));
        cpu[m] = calloc((size_t)rounds, sizeof(double));
        ratio[m] = calloc((size_t)rounds, sizeof(double));
        cratio[m] = calloc((size_t)rounds, sizeof(double));
        if (!wall[m] || !cpu[m] || !ratio[m] || !cratio[m]) {
            st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory");
            goto fail;
        }
    }
    clremat_data_batch(&data.train, 1, 0, batch, x, y);
    for (long s = 0; s < warmup; s++)
        for (int m = 0; m < n_modes; m++) {
            float loss, correct;
            if ((st = clremat_trainer_step(t[m], x, y, &loss, &correct)) || (st = clremat_finish(ctx))) {
                clremat_set_error(st, "%s: %s", modes[m], clremat_ctx_last_error(ctx));
                goto fail;
            }
        }
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < n_modes; i++) {
            const int m = (int)((i + r) % n_modes);
            float loss, correct;
            double w0, c0;
            w0 = wall_ms();
            c0 = cpu_ms();
            if ((st = clremat_trainer_step(t[m], x, y, &loss, &correct)) || (st = clremat_finish(ctx))) {
                clremat_set_error(st, "%s: %s", modes[m], clremat_ctx_last_error(ctx));
                goto fail;
            }
            wall[m][r] = wall_ms() - w0;
            cpu[m][r] = cpu_ms() - c0;
        }
        for (int m = 0; m < n_modes; m++) {
            ratio[m][r] = wall[m][r] / wall[0][r];
            cratio[m][r] = cpu[m][r] / cpu[0][r];
        }
    }
    printf("{\"model\": \"%s\", \"device\": \"%s\", \"gemm\": \"%s\", \"batch\": %ld, \"rounds\": %ld, "
           "\"create\": \"%s\", \"modes\": [",
           argv[first], ctx->info.name, clremat_gemm_path_name(clremat_ctx_gemm(ctx)), batch, rounds,
           reverse ? "reverse" : "forward");
    for (int m = 0; m < n_modes; m++) {
        const clremat_plan *p = &t[m]->plan;
        const double base = p->step_flops - p->recompute_flops;
        printf("%s\n  {\"mode\": \"%s\", \"precision\": \"%s\", \"wall_ms\": %.4f, \"cpu_ms\": %.4f, \"wall_ratio\": %.5f, "
               "\"cpu_ratio\": %.5f, \"step_flops\": %.6g, \"recompute_flops\": %.6g, \"predicted_share\": %.6f, "
               "\"predicted_peak_bytes\": %llu}",
               m ? "," : "", policy[m], clremat_precision_name(g[m]->precision), clremat_gemm_median(wall[m], (int)rounds),
               clremat_gemm_median(cpu[m], (int)rounds), clremat_gemm_median(ratio[m], (int)rounds),
               clremat_gemm_median(cratio[m], (int)rounds), p->step_flops, p->recompute_flops,
               base > 0 ? p->recompute_flops / base : 0.0, (unsigned long long)p->peak_bytes);
    }
    printf("\n]}\n");
    rc = 0;
fail:
    if (st != CLREMAT_OK)
        fprintf(stderr, "remat_pair: %s\n", clremat_last_error());
    for (int m = 0; m < n_modes; m++) {
        clremat_trainer_free(t[m]);
        free(wall[m]);
        free(cpu[m]);
        free(ratio[m]);
        free(cratio[m]);
    }
    free(x);
    free(y);
    clremat_data_free(&data);
    for (int m = 0; m < n_modes; m++)
        clremat_graph_free(g[m]);
    clremat_ctx_destroy(ctx);
    return rc;
}
