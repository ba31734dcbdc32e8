/* fit_run.c: `clremat fit`'s run (fit_run.h), moved here from tools/cli_fit.c
 * so the embedding API runs the same code. */
#include "fit_run.h"
#include "atomic_file.h"
#include "error.h"
#include "executor.h"
#include "gemm.h"
#include "model_load.h"
#include "transfer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The calibration cache's key takes the model file's hash; a precision
 * given apart from the file changes the step without changing the file, so
 * it salts the hash. */
static uint64_t precision_salt(const clremat_graph *g)
{
    return (uint64_t)g->precision * 0x9e3779b97f4a7c15ull;
}

/* FNV-1a of the model file's bytes: part of the calibration cache's key (0 when unreadable). */
static uint64_t model_hash(const char *path)
{
    FILE *f;
    char buf[65536];
    size_t n;
    uint64_t h = 0;
    if (clremat_open_regular(path, "model file", &f, NULL) != CLREMAT_OK)
        return 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        h = clremat_hash64(h, buf, n);
    fclose(f);
    return h;
}

int clremat_fit_execute(const clremat_fit_options *o, clremat_fit_outcome *out, int *usage)
{
    int n_configs = 0, have_cal = 0, st;
    memset(out, 0, sizeof *out);
    *usage = 0;
    if ((st = clremat_model_load(o->model_path, &out->gr, NULL)) ||
        (st = clremat_model_set_precision(out->gr, o->precision)))
        return st;
    st = o->remat ? clremat_fit_parse_configs(out->gr, o->remat, &out->configs, &n_configs)
                  : clremat_fit_default_configs(out->gr, &out->configs, &n_configs);
    if (st) {
        *usage = 1; /* a bad remat value */
        return st;
    }
    if (o->offload) { /* every mode again with offload */
        clremat_fit_config *all = NULL;
        if ((st = clremat_fit_with_offload(out->configs, n_configs, &all, &n_configs)))
            return st;
        free(out->configs);
        out->configs = all;
    }
    if (o->n_accumulate > 0) { /* every mode once per accumulation K */
        clremat_fit_config *all = NULL;
        if ((st = clremat_fit_with_accumulate(out->configs, n_configs, o->accumulate, o->n_accumulate, &all,
                                              &n_configs))) {
            *usage = 1;
            return st;
        }
        free(out->configs);
        out->configs = all;
        /* the rows plan batch / K: a K that does not divide the batch is
         * refused as train and plan refuse it, before any calibration */
        for (int a = 0; a < o->n_accumulate; a++) {
            int64_t micro;
            if (o->accumulate[a] > 1 && (st = clremat_accumulate_split(o->batch, o->accumulate[a], &micro))) {
                *usage = 1;
                return st;
            }
        }
    }
    if (o->device || o->n_sizes == 0) { /* step times (and, without sizes, the sizes) from a device */
        int64_t cb = o->calibration_batch ? o->calibration_batch : o->batch;
        clremat_transfer_calibration tc;
        if ((st = clremat_ctx_create(o->device, 0, &out->ctx))) {
            *usage = 1;
            if (o->n_sizes == 0)
                return clremat_set_error(st, "no --memory sizes given and no device to take them from (%s); give "
                                         "--memory SIZE,SIZE... such as 8GiB,16GiB",
                                         clremat_last_error());
            return st; /* the message names --device and lists the devices */
        }
        if (o->notes)
            fprintf(stderr, "fit: step-time calibration on %s at batch %lld (measured unless cached)...\n",
                    clremat_ctx_device(out->ctx)->name, (long long)cb);
        if ((st = clremat_fit_calibrate_cached(out->ctx, out->gr, model_hash(o->model_path) ^ precision_salt(out->gr), cb, o->opt, 1,
                                               (int)o->steps, o->recalibrate, &out->cal, &out->from_cache)))
            return st;
        if (o->offload && clremat_transfer_calibrate(out->ctx, &tc) == CLREMAT_OK) /* copies take time even where they free nothing */
            out->cal.offload_ms_per_byte = 1e3 / (tc.to_host_gbs * 1e9) + 1e3 / (tc.to_device_gbs * 1e9);
        have_cal = 1;
        out->dev_size[0] = clremat_ctx_device(out->ctx)->global_mem_bytes;
    }
    out->rq.g = out->gr;
    out->rq.batch = o->batch;
    /* as the trainer runs it: with the fused update where it applies (host/fit.c
     * drops it for configurations with accumulation) */
    out->rq.opt_states = clremat_opt_state_count(o->opt->kind) |
                         (clremat_trainer_fused(o->opt, 1, out->gr) ? CLREMAT_PLAN_FUSED_UPDATE : 0);
    out->rq.sizes = o->n_sizes ? o->sizes : out->dev_size;
    out->rq.n_sizes = o->n_sizes ? o->n_sizes : 1;
    out->rq.configs = out->configs;
    out->rq.n_configs = n_configs;
    out->rq.ctx = out->ctx;
    out->rq.cal = have_cal ? &out->cal : NULL;
    out->rq.max_batch_cap = o->max_batch;
    return clremat_fit_run(&out->rq, &out->rows);
}

void clremat_fit_outcome_free(clremat_fit_outcome *out)
{
    free(out->rows);
    clremat_fit_calibration_free(&out->cal);
    free(out->configs);
    clremat_ctx_destroy(out->ctx);
    clremat_graph_free(out->gr);
    memset(out, 0, sizeof *out);
}
