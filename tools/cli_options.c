/* cli_options.c: the command-line option parsing of the clremat command,
 * separate from running anything, so that the parsers can be fuzzed and
 * tested on their own (fuzz/fuzz_cli.c): the global options, and one
 * parse-only entry per subcommand (train, plan, devices, compare), with the
 * value checks they share. Also the error helper. */
#include "cli.h"
#include "config.h"
#include <getopt.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("clremat: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

void cli_usage(FILE *f)
{
    fprintf(f,
        "usage: clremat [--device SEL] COMMAND [options]\n"
        "\n"
        "commands:\n"
        "  devices    list OpenCL devices (--json)\n"
        "  train      train a model file on a device, with a remat mode (--remat)\n"
        "  compare    run the same training on several devices and remat modes, side by side\n"
        "  plan       print the remat plan of a model: per layer kept/recomputed, predicted peak\n"
        "\n"
        "Device selection (--device or CLREMAT_DEVICE): P:D index, cpu | gpu | accelerator,\n"
        "or a substring of the device or platform name. Default: the first GPU, else the\n"
        "first device. `clremat COMMAND --help` describes each command.\n");
}

int cli_parse_global(int argc, char **argv, cli_global *g, int *next)
{
    int i = 1;
    memset(g, 0, sizeof *g);
    while (i < argc && argv[i][0] == '-') {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            g->device = argv[i + 1];
            i += 2;
        } else if (!strncmp(argv[i], "--device=", 9)) {
            g->device = argv[i] + 9;
            i++;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            cli_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("clremat %s\n", PACKAGE_VERSION);
            return 0;
        } else {
            cli_usage(stderr);
            return cli_error("unknown option '%s'", argv[i]);
        }
    }
    if (i >= argc) {
        cli_usage(stderr);
        return 2;
    }
    *next = i;
    return CLI_CONTINUE;
}

/* getopt keeps state between calls (the position inside a cluster of short
 * options); optind = 0 makes glibc start over, as a fresh process would. */
static void getopt_reset(void)
{
    optind = 0;
}

/* ---------------------------------------------------------------- train */

static int train_usage(FILE *f)
{
    fprintf(f,
        "usage: clremat train MODEL [options]\n"
        "  --device SEL         OpenCL device (P:D, cpu, gpu, or a name substring)\n"
        "  --batch N            batch size (32)\n"
        "  --steps N            training steps (200)\n"
        "  --warmup N           steps excluded from step-time statistics (5)\n"
        "  --lr X               learning rate (optimizer default)\n"
        "  --optimizer NAME     sgd | adam | adamw (adam)\n"
        "  --seed N             seed of data, initialization and dropout (1)\n"
        "  --data TASK|FILE     synthetic task (clusters, sequence, copy, sort, regression) or a\n"
        "                       safetensors file with train_x, train_y, val_x, val_y\n"
        "  --load FILE          initial weights (safetensors)\n"
        "  --save FILE          final weights (safetensors, written atomically)\n"
        "  --remat MODE         none | full | activations | larger_than[:N] |\n"
        "                       list_of_layers:NAME[,NAME...] | save_dots | budget:BYTES | auto\n"
        "                       (default none)\n"
        "  --costs flops|measured  what budget/auto minimize: FLOPs (default) or per-layer\n"
        "                       device times measured in a profiled warm-up step\n"
        "  --memory-limit B     device memory limit, e.g. 64MiB (default: device memory)\n"
        "  --gemm PATH          native | clblast | auto: GEMM kernels (default auto: cached\n"
        "                       per-device calibration; also $CLREMAT_GEMM)\n"
        "  --overlap            recompute on a second queue, overlapping the previous segment's\n"
        "                       backward, at no extra memory (same peak as without)\n"
        "  --profile            per-layer device time of the last step\n"
        "  --json               machine-readable report on stdout (docs/json-output.md)\n"
        "  --quiet              no progress on stderr\n");
    return f == stdout ? 0 : 2;
}

/* Parses an integer option value; returns 0 or prints an error. */
static int parse_i64(const char *opt, const char *v, int64_t min, int64_t *out)
{
    char *end;
    long long x;
    errno = 0;
    x = strtoll(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < min) {
        cli_error("%s takes an integer >= %lld, got '%s'", opt, (long long)min, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* Parses --lr's value (a finite positive number); returns 0 or prints an error. */
static int parse_lr(const char *v, double *out)
{
    char *end;
    *out = strtod(v, &end);
    if (end == v || *end || !(*out > 0) || !isfinite(*out))
        return cli_error("--lr takes a positive number, got '%s'", v), 1;
    return 0;
}

/* Parses --memory-limit's value (a non-zero byte count); returns 0 or prints an error. */
static int parse_memory_limit(const char *v, uint64_t *out)
{
    if (clremat_parse_bytes(v, out) || *out == 0) {
        cli_error("--memory-limit takes a byte count such as 512MiB, got '%s'", v);
        return -1;
    }
    return 0;
}

/* Checks --gemm's value (native, clblast or auto); returns 0 or prints an error. */
static int check_gemm(const char *v)
{
    if (strcmp(v, "native") && strcmp(v, "clblast") && strcmp(v, "auto")) {
        cli_error("--gemm takes native, clblast or auto, got '%s'", v);
        return -1;
    }
    return 0;
}

/* Parses --costs' value into *measured (flops 0, measured 1); returns 0 or prints an error. */
static int parse_costs(const char *v, int *measured)
{
    if (strcmp(v, "flops") && strcmp(v, "measured")) {
        cli_error("--costs takes flops or measured, got '%s'", v);
        return -1;
    }
    *measured = !strcmp(v, "measured");
    return 0;
}

int cli_train_parse(const cli_global *g, int argc, char **argv, clremat_train_config *cfg, int *json)
{
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'}, {"batch", required_argument, NULL, 'b'},
        {"steps", required_argument, NULL, 's'}, {"warmup", required_argument, NULL, 'w'},
        {"lr", required_argument, NULL, 'l'}, {"optimizer", required_argument, NULL, 'o'},
        {"seed", required_argument, NULL, 'S'}, {"data", required_argument, NULL, 'D'},
        {"load", required_argument, NULL, 'L'}, {"save", required_argument, NULL, 'V'},
        {"remat", required_argument, NULL, 'r'}, {"memory-limit", required_argument, NULL, 'm'},
        {"profile", no_argument, NULL, 'p'}, {"json", no_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'}, {"costs", required_argument, NULL, 'C'},
        {"overlap", no_argument, NULL, 'O'}, {"gemm", required_argument, NULL, 'G'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    int64_t v;

    memset(cfg, 0, sizeof *cfg);
    *json = 0;
    cfg->device = g->device;
    cfg->batch = 32;
    cfg->steps = 200;
    cfg->warmup = 5;
    cfg->seed = 1;
    cfg->optimizer = "adam";
    cfg->progress = 1;
    getopt_reset();
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd': cfg->device = optarg; break;
        case 'b': if (parse_i64("--batch", optarg, 1, &cfg->batch)) return 2; break;
        case 's': if (parse_i64("--steps", optarg, 1, &cfg->steps)) return 2; break;
        case 'w': if (parse_i64("--warmup", optarg, 0, &cfg->warmup)) return 2; break;
        case 'S': if (parse_i64("--seed", optarg, 0, &v)) return 2; cfg->seed = (uint64_t)v; break;
        case 'l':
            if (parse_lr(optarg, &cfg->lr))
                return 2;
            break;
        case 'o': cfg->optimizer = optarg; break;
        case 'D': cfg->data = optarg; break;
        case 'L': cfg->load = optarg; break;
        case 'V': cfg->save = optarg; break;
        case 'r': cfg->remat = optarg; break;
        case 'm': if (parse_memory_limit(optarg, &cfg->memory_limit)) return 2; break;
        case 'p': cfg->profile = 1; break;
        case 'C': if (parse_costs(optarg, &cfg->costs_measured)) return 2; break;
        case 'O': cfg->overlap = 1; break;
        case 'G': if (check_gemm(optarg)) return 2; cfg->gemm = optarg; break;
        case 'j': *json = 1; break;
        case 'q': cfg->progress = 0; break;
        case 'h': return train_usage(stdout);
        default: return train_usage(stderr);
        }
    }
    if (optind + 1 != argc) {
        train_usage(stderr);
        return cli_error(optind >= argc ? "train: missing MODEL" : "train: unexpected argument '%s'",
                         argv[argc - 1]), 2;
    }
    cfg->model_path = argv[optind];
    return CLI_CONTINUE;
}

/* ----------------------------------------------------------------- plan */

int cli_plan_parse(int argc, char **argv, cli_plan_opts *o)
{
    static const struct option opts[] = {
        {"remat", required_argument, NULL, 'r'}, {"batch", required_argument, NULL, 'b'},
        {"optimizer", required_argument, NULL, 'o'}, {"json", no_argument, NULL, 'j'},
        {"actions", no_argument, NULL, 'a'}, {"device", required_argument, NULL, 'd'},
        {"memory-limit", required_argument, NULL, 'm'}, {"pareto", no_argument, NULL, 'p'},
        {"svg", required_argument, NULL, 'v'}, {"points", required_argument, NULL, 'n'},
        {"overlap", no_argument, NULL, 'O'}, {"gemm", required_argument, NULL, 'G'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    int64_t v;

    memset(o, 0, sizeof *o);
    o->points = 40;
    o->remat = "none";
    o->optimizer = "adam";
    o->batch = 32;
    getopt_reset();
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'r': o->remat = optarg; break;
        case 'b': if (parse_i64("--batch", optarg, 1, &o->batch)) return 2; break;
        case 'o': o->optimizer = optarg; break;
        case 'j': o->json = 1; break;
        case 'a': o->actions = 1; break;
        case 'd': o->device = optarg; break; /* only its memory size is used (auto) */
        case 'm': if (parse_memory_limit(optarg, &o->memory_limit)) return 2; break;
        case 'p': o->pareto = 1; break;
        case 'O': o->overlap = 1; break;
        case 'G': if (check_gemm(optarg)) return 2; o->gemm = optarg; break;
        case 'v': o->svg = optarg; break;
        case 'n':
            if (parse_i64("--points", optarg, 2, &v) || v > 10000)
                return v > 10000 ? cli_error("--points takes at most 10000, got '%s'", optarg), 2 : 2;
            o->points = (int)v;
            break;
        case 'h':
            printf("usage: clremat plan MODEL [--remat MODE] [--batch N] [--optimizer NAME] [--json] [--actions]\n"
                   "       [--memory-limit BYTES | --device SEL] [--overlap] [--gemm PATH]\n"
                   "       [--pareto [--points N] [--svg FILE]]\n"
                   "Prints, per layer, output and saved bytes, whether tensors are kept or discarded after\n"
                   "the forward pass, recomputations and forward FLOPs; then the predicted peak of live\n"
                   "device bytes, activation bytes kept, and recompute FLOPs as a share of the step.\n"
                   "--actions also lists the step's actions with predicted live bytes. --remat auto plans\n"
                   "for --memory-limit, else for the memory of --device (or the default device).\n"
                   "--gemm plans for that GEMM path on the device (its workspace is in the peak);\n"
                   "without it no device is opened and the native path (no workspace) is assumed.\n"
                   "--pareto sweeps budgets from the smallest feasible peak to the none peak and lists\n"
                   "peak against recompute cost; --svg FILE plots it with the Keras-style modes marked.\n");
            return 0;
        default: return 2;
        }
    }
    if (optind + 1 != argc)
        return cli_error("plan: expected one MODEL argument"), 2;
    o->model_path = argv[optind];
    return CLI_CONTINUE;
}

/* -------------------------------------------------------------- devices */

int cli_devices_parse(const cli_global *g, int argc, char **argv, cli_devices_opts *o)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'}, {"device", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;

    memset(o, 0, sizeof *o);
    o->device = g->device;
    getopt_reset();
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'j': o->json = 1; break;
        case 'd': o->device = optarg; break;
        case 'h':
            printf("usage: clremat devices [--json] [--device SEL]\n"
                   "Lists every OpenCL device; with --device (or CLREMAT_DEVICE), checks that the\n"
                   "selection resolves and lists only that device.\n");
            return 0;
        default: return 2;
        }
    }
    if (optind < argc)
        return cli_error("devices: unexpected argument '%s'", argv[optind]);
    return CLI_CONTINUE;
}

/* -------------------------------------------------------------- compare */

int cli_compare_parse(const cli_global *g, int argc, char **argv, cli_compare_opts *o)
{
    static const struct option opts[] = {
        {"devices", required_argument, NULL, 'D'}, {"device", required_argument, NULL, 'D'},
        {"remat", required_argument, NULL, 'r'}, {"batch", required_argument, NULL, 'b'},
        {"steps", required_argument, NULL, 's'}, {"warmup", required_argument, NULL, 'w'},
        {"seed", required_argument, NULL, 'S'}, {"data", required_argument, NULL, 'd'},
        {"optimizer", required_argument, NULL, 'o'}, {"lr", required_argument, NULL, 'l'},
        {"memory-limit", required_argument, NULL, 'm'}, {"json", no_argument, NULL, 'j'},
        {"csv", required_argument, NULL, 'c'}, {"svg", required_argument, NULL, 'v'},
        {"quiet", no_argument, NULL, 'q'}, {"costs", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    clremat_compare_config *cfg = &o->cfg;
    int c;
    char *end;
    long long v;

    memset(o, 0, sizeof *o);
    cfg->devices = g->device ? g->device : "all";
    cfg->modes = "none,full";
    cfg->batch = 32;
    cfg->steps = 20;
    cfg->warmup = 3;
    cfg->seed = 1;
    cfg->optimizer = "adam";
    cfg->progress = 1;
    getopt_reset();
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'D': cfg->devices = optarg; break;
        case 'r': cfg->modes = optarg; break;
        case 'b': case 's': case 'w': case 'S':
            v = strtoll(optarg, &end, 10);
            if (end == optarg || *end || v < (c == 'w' || c == 'S' ? 0 : 1))
                return cli_error("option takes a %s integer, got '%s'", c == 'w' || c == 'S' ? "non-negative" : "positive",
                                 optarg), 2;
            if (c == 'b') cfg->batch = v;
            else if (c == 's') cfg->steps = v;
            else if (c == 'w') cfg->warmup = v;
            else cfg->seed = (uint64_t)v;
            break;
        case 'd': cfg->data = optarg; break;
        case 'o': cfg->optimizer = optarg; break;
        case 'l':
            if (parse_lr(optarg, &cfg->lr))
                return 2;
            break;
        case 'm': if (parse_memory_limit(optarg, &cfg->memory_limit)) return 2; break;
        case 'j': o->json = 1; break;
        case 'c': o->csv = optarg; break;
        case 'v': o->svg = optarg; break;
        case 'q': cfg->progress = 0; break;
        case 'C': if (parse_costs(optarg, &cfg->costs_measured)) return 2; break;
        case 'h':
            printf("usage: clremat compare MODEL [--devices all|SEL,SEL...] [--remat MODE,MODE...]\n"
                   "       [--batch N] [--steps N] [--warmup N] [--seed N] [--data TASK|FILE] [--optimizer NAME]\n"
                   "       [--lr X] [--memory-limit BYTES] [--costs flops|measured] [--json] [--csv FILE]\n"
                   "       [--svg FILE] [--quiet]\n"
                   "Runs the same model, data, batch and seed on each device and remat mode (default\n"
                   "none,full on all devices, 20 steps with 3 warm-up steps excluded from timing) and\n"
                   "reports peaks (predicted and measured), fit, step time, overhead against none,\n"
                   "recompute share, losses, validation, and numerics checks.\n");
            return 0;
        default: return 2;
        }
    }
    if (optind + 1 != argc)
        return cli_error("compare: expected one MODEL argument"), 2;
    if (cfg->warmup >= cfg->steps)
        return cli_error("compare: --warmup (%lld) must be below --steps (%lld)", (long long)cfg->warmup,
                         (long long)cfg->steps), 2;
    cfg->model_path = argv[optind];
    return CLI_CONTINUE;
}
