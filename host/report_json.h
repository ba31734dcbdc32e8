/* report_json.h: the --json reports (docs/json-output.md) of the command's
 * subcommands, built by the library so the command and the embedding API
 * (include/clremat_api.h) print the same bytes; and the plan's per-layer
 * words the table and the JSON share. */
#ifndef CLREMAT_REPORT_JSON_H
#define CLREMAT_REPORT_JSON_H

#include <stdio.h>
#include "compare.h"
#include "executor.h"
#include "fit.h"
#include "train.h"

/** fit's note when no device gave step times. */
#define CLREMAT_FIT_NO_TIME_NOTE "no device: step time not predicted"

/** Bytes layer l's backward reads (its saved tensors) under costs c. */
uint64_t clremat_plan_saved_bytes(const clremat_graph *g, const clremat_layer_cost *c, int l);

/** "kept" or "discarded": what plan p does with layer l's output. */
const char *clremat_plan_out_state(const clremat_plan *p, int l);

/** "kept", "discarded" or "-" (none): layer l's internal tensors under p. */
const char *clremat_plan_internal_state(const clremat_plan *p, const clremat_layer_cost *c, int l);

/** "memory_efficient" or "plain": the mode attention layer l runs in under plan. */
const char *clremat_plan_attn_mode_name(const clremat_layer *L, const clremat_plan *plan, int l);

/** `devices --json`: the devices d[0..n). */
void clremat_report_devices_json(FILE *f, const clremat_device_info *d, size_t n);

/** `plan --json`: plan (with its costs) of gr under remat at batch; ctx, when
 * not NULL, names the GEMM path planned for; fused: the update is fused into
 * the backward; actions: list the plan's actions too. */
void clremat_report_plan_json(FILE *f, const clremat_graph *gr, const char *remat, long long batch,
                              const clremat_plan *plan, const clremat_layer_cost *costs, clremat_ctx *ctx, int fused,
                              int actions);

/** `plan --pareto --json`: the front pts[0..n) and the Keras-style modes marks[0..nm). */
void clremat_report_pareto_json(FILE *f, const char *name, long long batch, int accumulate,
                                const clremat_pareto_point *pts, int n, const clremat_pareto_mark *marks, int nm);

/** `train --json`: the finished (or stopped) run r of cfg. extra, when not
 * NULL, prints more members (each starting with ", ") before the closing
 * brace; its json argument is 1. */
void clremat_report_train_json(FILE *f, const clremat_train_config *cfg, const clremat_train_result *r,
                               void (*extra)(FILE *f, int json, void *user), void *user);

/** "ok", "does_not_fit" or "error": a compare run's status word. */
const char *clremat_compare_status_word(const clremat_compare_run *r);

/** `compare --json`: runs[0..n) of cfg. */
void clremat_report_compare_json(FILE *f, const clremat_compare_config *cfg, const clremat_compare_run *runs, int n);

/** `fit --json`: rows of request rq (gr, the optimizer opt); from_cache: the
 * calibration came from the cache. */
void clremat_report_fit_json(FILE *f, const clremat_graph *gr, const clremat_opt_config *opt,
                             const clremat_fit_request *rq, const clremat_fit_row *rows, int from_cache);

#endif
