/* cli.h: shared pieces of the clremat command: the subcommand entry points
 * and small output helpers. */
#ifndef CLREMAT_CLI_H
#define CLREMAT_CLI_H

#include <stdint.h>
#include <stdio.h>
#include "train.h"
#include "compare.h"
#include "json_out.h"

/** Options given before the subcommand ("clremat --device X devices"). */
typedef struct cli_global {
    const char *device;     /**< --device, else NULL ($CLREMAT_DEVICE applies) */
} cli_global;

/** Returned by the parse-only entries when the command should go on and run;
 * anything else is the exit status to end with (0 after --help). */
#define CLI_CONTINUE (-1)

/** Options of `clremat plan`. */
typedef struct cli_plan_opts {
    const char *model_path;     /**< the MODEL argument */
    const char *remat;          /**< --remat (default "none") */
    const char *optimizer;      /**< --optimizer (default "adam") */
    int64_t batch;              /**< --batch (default 32) */
    int json, actions;          /**< --json, --actions */
    const char *device;         /**< --device: its memory is auto's limit */
    uint64_t memory_limit;      /**< --memory-limit (0: none given) */
    int pareto, points;         /**< --pareto, --points (default 40) */
    int remat_given, points_given; /**< 1: --remat, --points were given (not their defaults) */
    int overlap;                /**< --overlap */
    int no_fused_update;        /**< --no-fused-update: gradients in fixed memory, update after the backward */
    const char *gemm;           /**< --gemm: plan on the device for that GEMM path */
    const char *svg;            /**< --svg FILE with --pareto */
    const char *memory_trace;   /**< --memory-trace FILE: the plan's live tensors as Chrome trace JSON */
    int64_t accumulate;         /**< --accumulate K (default 1): plan a micro-batch of batch / K */
    const char *offload;        /**< --offload all|NAMES: outputs moved to host memory (NULL: none) */
    const char *precision;      /**< --precision: overrides the model file's (NULL: keep) */
} cli_plan_opts;

/** Options of `clremat devices`. */
typedef struct cli_devices_opts {
    const char *device;         /**< --device, else the global one (may be NULL) */
    int json;                   /**< --json */
} cli_devices_opts;

/** Options of `clremat compare`. */
typedef struct cli_compare_opts {
    clremat_compare_config cfg; /**< what to run (strings point into argv) */
    int json;                   /**< --json */
    const char *csv, *svg;      /**< --csv FILE, --svg FILE (NULL: none) */
} cli_compare_opts;

#define CLI_FIT_MAX_SIZES 16

/** Options of `clremat fit`. */
typedef struct cli_fit_opts {
    const char *model_path;     /**< the MODEL argument */
    const char *device;         /**< --device (or the global one): step times, and sizes without --memory */
    uint64_t sizes[CLI_FIT_MAX_SIZES]; /**< --memory SIZE,SIZE... in bytes */
    int n_sizes;                /**< 0: none given (the device's memory) */
    const char *remat;          /**< --remat MODE,MODE... (NULL: the default list) */
    const char *optimizer;      /**< --optimizer (default "adam") */
    int64_t batch;              /**< --batch (default 32) */
    int64_t max_batch;          /**< --max-batch: cap of the largest-batch search (default 1048576) */
    int64_t steps;              /**< --steps: timed steps of the calibration (default 5) */
    int64_t calibration_batch;  /**< --calibration-batch: batch of the calibration (0: --batch) */
    int json;                   /**< --json */
    const char *svg;            /**< --svg FILE */
    int64_t accumulate[CLI_FIT_MAX_SIZES]; /**< --accumulate K,K...: each configuration once per K (default 1) */
    int n_accumulate;           /**< 0: none given (1 alone) */
    int offload;                /**< --offload: every configuration again with its kept outputs offloaded */
    int recalibrate;            /**< --recalibrate: measure step times even when cached */
    const char *precision;      /**< --precision: overrides the model file's (NULL: keep) */
} cli_fit_opts;

/** Prints the command's usage to f. */
void cli_usage(FILE *f);

/** Parses the options before the subcommand (argv[0] is the program). Returns
 * CLI_CONTINUE with *next the subcommand's index, or an exit status. */
int cli_parse_global(int argc, char **argv, cli_global *g, int *next);

/** Parses `train` options (argv[0] is "train") into cfg and *json; nothing is
 * run or opened. Returns CLI_CONTINUE or an exit status. Strings in cfg point
 * into argv. */
int cli_train_parse(const cli_global *g, int argc, char **argv, clremat_train_config *cfg, int *json);

/** Parses `plan` options (argv[0] is "plan"). Returns CLI_CONTINUE or an exit status. */
int cli_plan_parse(int argc, char **argv, cli_plan_opts *o);

/** Parses `devices` options (argv[0] is "devices"). Returns CLI_CONTINUE or an exit status. */
int cli_devices_parse(const cli_global *g, int argc, char **argv, cli_devices_opts *o);

/** Parses `compare` options (argv[0] is "compare"); nothing is run or opened.
 * Returns CLI_CONTINUE or an exit status. */
int cli_compare_parse(const cli_global *g, int argc, char **argv, cli_compare_opts *o);

/** Parses `fit` options (argv[0] is "fit"); nothing is opened. Returns
 * CLI_CONTINUE or an exit status (2 for a bad value, naming it). */
int cli_fit_parse(const cli_global *g, int argc, char **argv, cli_fit_opts *o);

/** `clremat fit MODEL [options]`: will the step fit each memory size, how fast. */
int cli_fit(const cli_global *g, int argc, char **argv);

/** `clremat import-keras MODEL [-o OUT.json] [--weights-out W.safetensors]`:
 * converts a Keras model (host/keras.h). */
int cli_import_keras(int argc, char **argv);

/** `clremat devices [--json]`: lists every OpenCL device. */
int cli_devices(const cli_global *g, int argc, char **argv);

/** `clremat train MODEL [options]`: trains and reports. */
int cli_train(const cli_global *g, int argc, char **argv);

/** Prints a finished training run: the --json object (json) or the human
 * summary and profile. extra, when not NULL, adds to it: in JSON the members
 * it prints (each starting with ", ") go before the closing brace; in the
 * summary its lines follow. */
void cli_train_report(const clremat_train_config *cfg, const clremat_train_result *r, int json,
                      void (*extra)(FILE *f, int json, void *user), void *user);

/** `mpirun -np N clremat train [options]`: data-parallel training over
 * MPI, one rank per process (tools/cli_train_dist.c, built only with MPI;
 * the same options as cli_train). Returns the exit status; a failure during
 * training ends the whole job (MPI_Abort). */
int cli_train_dist(const cli_global *g, int argc, char **argv);

/** `clremat plan MODEL [options]`: prints the remat plan. */
int cli_plan(const cli_global *g, int argc, char **argv);

/** `clremat import-hf CONFIG.json [--seq-len T] [--output FILE]`: the
 * clremat model file of a Hugging Face Llama config.json (hf_llama.h), on
 * stdout or written atomically to FILE. */
int cli_import_hf(int argc, char **argv);

/** Parses import-hf's arguments: the config path, --seq-len (128),
 * --output (NULL: stdout). Returns CLI_CONTINUE, or the exit status. */
int cli_import_hf_parse(int argc, char **argv, const char **config, int64_t *seq_len, const char **output);

/** `clremat compare MODEL [options]`: the acceptance protocol across devices and modes. */
int cli_compare(const cli_global *g, int argc, char **argv);

/* The JSON writing helpers moved to the library (host/json_out.h); the
 * command keeps calling them by their old names. */
#define cli_json_string clremat_json_string
#define cli_json_num clremat_json_num

/** Prints {"error": {"status": N, "status_name": "...", "message": "..."}}
 * and a newline on stdout, for a --json run that fails: a script reading
 * stdout always gets one JSON object. The message also goes to stderr
 * (cli_error). Returns 1, the exit status. */
int cli_json_error(int status, const char *message);

#define cli_json_member clremat_json_member
#define cli_json_optimizer clremat_json_optimizer

/** Prints "error: <message>" to stderr and returns exit status 1. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
