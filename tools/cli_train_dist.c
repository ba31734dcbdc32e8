/* cli_train_dist.c: `mpirun -np N clremat train MODEL`: each rank opens its
 * local rank's device, the ranks agree that every device opened (or all stop
 * with the failing ranks' messages), train with averaged gradients
 * (host/dp.c over host/dist.c), and rank 0 alone prints the report with
 * every rank's device, plan, peak, step and communication times. A failure
 * during training ends the job on every rank (MPI_Abort). Built only with
 * MPI (configure --with-mpi). */
#include "cli.h"
#include "dist.h"
#include "dp.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const clremat_dist *d;
    const clremat_dist_rank *all;
    uint64_t bucket_bytes;
    int64_t global_batch;
} dist_report;

static void print_extra(FILE *f, int json, void *user)
{
    const dist_report *x = user;
    int same = 1; /* every rank ended with the same parameter bits */
    for (int r = 1; r < x->d->nranks; r++)
        same &= x->all[r].params_hash == x->all[0].params_hash;
    if (json) {
        fprintf(f, ",\n \"data_parallel\": {\"ranks\": %d, \"global_batch\": %lld, \"bucket_bytes\": %llu, "
                   "\"buckets\": %d, \"summation\": \"rank-ordered\", \"params_identical\": %s, \"per_rank\": [",
                x->d->nranks, (long long)x->global_batch, (unsigned long long)x->bucket_bytes, x->all[0].buckets,
                same ? "true" : "false");
        for (int r = 0; r < x->d->nranks; r++) {
            const clremat_dist_rank *a = &x->all[r];
            fprintf(f, "%s\n  {\"rank\": %d, \"local_rank\": %d, \"host\": ", r ? "," : "", a->rank, a->local_rank);
            cli_json_string(f, a->host);
            fprintf(f, ", \"device\": ");
            cli_json_string(f, a->device);
            fprintf(f, ", \"platform\": ");
            cli_json_string(f, a->platform);
            fprintf(f, ", \"remat\": ");
            cli_json_string(f, a->remat);
            fprintf(f, ", \"local_batch\": %lld, \"steps\": %lld, \"predicted_peak_bytes\": %llu, "
                       "\"measured_peak_bytes\": %llu, \"staging_bytes\": %llu",
                    (long long)a->local_batch, (long long)a->steps_run, (unsigned long long)a->predicted_peak,
                    (unsigned long long)a->measured_peak, (unsigned long long)a->staging_bytes);
            cli_json_member(f, ", \"step_time_median_ms\": ", a->median_ms);
            cli_json_member(f, ", \"comm_median_ms\": ", a->comm_median_ms);
            cli_json_member(f, ", \"comm_share\": ", a->comm_share);
            cli_json_member(f, ", \"device_wait_median_ms\": ", a->wait_median_ms);
            cli_json_member(f, ", \"final_loss\": ", a->final_loss);
            fprintf(f, ", \"losses_fnv1a\": \"%016llx\", \"params_fnv1a\": \"%016llx\"}",
                    (unsigned long long)a->losses_hash, (unsigned long long)a->params_hash);
        }
        fprintf(f, "]}");
        return;
    }
    fprintf(f, "data parallel %d ranks, global batch %lld, %d gradient buckets of >= %llu bytes, rank-ordered sum\n",
            x->d->nranks, (long long)x->global_batch, x->all[0].buckets, (unsigned long long)x->bucket_bytes);
    for (int r = 0; r < x->d->nranks; r++) {
        const clremat_dist_rank *a = &x->all[r];
        fprintf(f, "  rank %d  %s local %d: %s, %s, peak %llu bytes (predicted %llu%s, staging %llu), step %.3f ms, "
                   "exchange %.3f ms (%.1f%%), params %016llx\n",
                a->rank, a->host, a->local_rank, a->device, a->remat, (unsigned long long)a->measured_peak,
                (unsigned long long)a->predicted_peak, a->measured_peak == a->predicted_peak ? ", exact" : ", DIFFERS",
                (unsigned long long)a->staging_bytes, a->median_ms, a->comm_median_ms, 100.0 * a->comm_share,
                (unsigned long long)a->params_hash);
    }
    if (!same)
        fprintf(f, "  the ranks' parameters differ in their last bits: their devices round the optimizer update "
                   "differently (rank 0's are reported and saved; docs/data-parallel.md)\n");
}

/* Bytes per gradient bucket from $CLREMAT_MPI_BUCKET_BYTES (0: default). */
static int bucket_bytes(uint64_t *out)
{
    const char *v = getenv("CLREMAT_MPI_BUCKET_BYTES");
    char *end;
    unsigned long long x;
    *out = 0;
    if (!v || !*v)
        return 0;
    errno = 0;
    x = strtoull(v, &end, 10);
    if (*end || errno || x == 0 || v[0] == '-')
        return cli_error("CLREMAT_MPI_BUCKET_BYTES must be a positive number of bytes, got \"%s\"", v);
    *out = x;
    return 0;
}

int cli_train_dist(const cli_global *g, int argc, char **argv)
{
    clremat_train_config cfg;
    clremat_train_result res;
    clremat_dist d;
    clremat_dist_rank mine, *all = NULL;
    clremat_ctx *ctx = NULL;
    clremat_gemm_path path = CLREMAT_GEMM_AUTO;
    char sel[256], why[4096], msg[4200];
    uint64_t bb;
    int64_t global;
    int json = 0, st = cli_train_parse(g, argc, argv, &cfg, &json);

    if (st != CLI_CONTINUE)
        return st;
    global = cfg.batch > 0 ? cfg.batch : 32;
    if (bucket_bytes(&bb))
        return 1;
    if ((st = clremat_dist_init(NULL, NULL, bb, &d)) != CLREMAT_OK)
        return cli_error("%s", clremat_last_error());
    if (d.nranks < 2) { /* one rank: an ordinary run */
        memset(&res, 0, sizeof res);
        st = clremat_train_run(&cfg, &res);
        if (st == CLREMAT_OK)
            cli_train_report(&cfg, &res, json, NULL, NULL);
        else
            json ? cli_json_error(st, clremat_last_error()) : cli_error("%s", clremat_last_error());
        clremat_train_result_free(&res);
        clremat_dist_finalize(&d);
        return st == CLREMAT_OK ? 0 : 1;
    }
    if (global % d.nranks != 0) { /* the same on every rank: rank 0 says it, all stop */
        if (d.rank == 0)
            cli_error("global batch %lld does not split evenly over %d ranks (%lld = %d x %lld + %lld): give a "
                      "multiple of %d",
                      (long long)global, d.nranks, (long long)global, d.nranks, (long long)(global / d.nranks),
                      (long long)(global % d.nranks), d.nranks);
        clremat_dist_finalize(&d);
        return 1;
    }
    /* each rank opens its own device; all agree before anything trains */
    st = clremat_dist_pick_device(&d, cfg.device, sel, sizeof sel);
    if (st == CLREMAT_OK && cfg.gemm)
        st = clremat_gemm_path_parse(cfg.gemm, &path);
    if (st == CLREMAT_OK) {
        cfg.device = sel;
        st = clremat_ctx_create(sel, cfg.memory_limit, &ctx);
        if (st != CLREMAT_OK)
            snprintf(msg, sizeof msg, "cannot open device '%s': %s", sel, clremat_last_error());
    } else
        snprintf(msg, sizeof msg, "%s", clremat_last_error());
    if ((st = clremat_dist_agree(&d, st, msg, why, sizeof why)) != CLREMAT_OK) {
        fprintf(stderr, "clremat: rank %d of %d (host %s): stopping, not every rank opened its device: %s\n", d.rank,
                d.nranks, d.host, why);
        if (json && d.rank == 0) { /* one JSON error object on stdout, as a one-process run gives */
            snprintf(msg, sizeof msg, "not every rank opened its device: %s", why);
            cli_json_error(st, msg);
        }
        clremat_ctx_destroy(ctx);
        clremat_dist_finalize(&d);
        return 1;
    }
    clremat_ctx_set_gemm(ctx, path);
    /* a non-finite loss stops every rank at the same step (the loss is
     * reduced before the check): the report is still gathered and printed,
     * and every rank exits 1, as one process does; any other failure is this
     * rank's alone and ends the job */
    if ((st = clremat_train_run_ctx(ctx, &cfg, &res)) != CLREMAT_OK && st != CLREMAT_ERR_NONFINITE) {
        snprintf(msg, sizeof msg, "training failed on %s: %s; ending the job", sel, clremat_last_error());
        clremat_dist_abort(&d, msg);
    }
    if (st != CLREMAT_OK)
        snprintf(msg, sizeof msg, "%s", clremat_last_error());
    clremat_dist_rank_fill(&d, &res, &mine);
    clremat_dist_gather(&d, &mine, &all);
    if (d.rank == 0) {
        dist_report x = {&d, all, bb ? bb : (uint64_t)1 << 20, global};
        if (st != CLREMAT_OK)
            cli_error("%s", msg);
        if (st == CLREMAT_OK || (json && res.steps_run > 0))
            cli_train_report(&cfg, &res, json, print_extra, &x);
        fflush(stdout);
    }
    free(all);
    clremat_train_result_free(&res);
    clremat_ctx_destroy(ctx);
    clremat_dist_finalize(&d);
    return st == CLREMAT_OK ? 0 : 1;
}
