/* cli_options.c: the command-line option parsing of the clremat command,
 * separate from running anything, so that the parsers can be fuzzed and
 * tested on their own (fuzz/fuzz_cli.c): the global options, and one
 * parse-only entry per subcommand (train, plan, devices, compare, fit), with the
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
        "  fit        will a training step fit given memory sizes, with which remat mode, how fast,\n"
        "             and the largest batch that fits\n"
        "  import-keras  convert a Keras 3 model (.keras, or to_json + .weights.h5) into a clremat\n"
        "             model file; train, plan, compare and fit also take a .keras file directly\n"
        "  import-hf  write the clremat model file of a Hugging Face Llama config.json\n"
        "\n"
        "Device selection (--device or CLREMAT_DEVICE): P:D index, cpu | gpu | accelerator,\n"
        "or a substring of the device or platform name. Default: the first GPU, else the\n"
        "first device. `clremat COMMAND --help` describes each command.\n");
}

/* Checks a device selection given on the command line: never empty. */
static int check_device(const char *opt, const char *v)
{
    if (!*v) {
        cli_error("%s takes a device selection (P:D, cpu, gpu or a name substring), got ''", opt);
        return -1;
    }
    return 0;
}

int cli_parse_global(int argc, char **argv, cli_global *g, int *next)
{
    int i = 1;
    memset(g, 0, sizeof *g);
    while (i < argc && argv[i][0] == '-') {
        if (!strcmp(argv[i], "--device") && i + 1 >= argc)
            return cli_error("--device needs a value (P:D, cpu, gpu or a name substring)"), 2;
        if (!strcmp(argv[i], "--device")) {
            if (check_device("--device", argv[i + 1]))
                return 2;
            g->device = argv[i + 1];
            i += 2;
        } else if (!strncmp(argv[i], "--device=", 9)) {
            if (check_device("--device", argv[i] + 9))
                return 2;
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

/* 1, after an error, when the value getopt took for option c is another
 * option ("--save --quiet" would write a file named --quiet): no option's
 * value begins with "--"; a file of such a name is still reachable as
 * ./--name. */
static int value_is_option(const struct option *opts, int c)
{
    if (!optarg || strncmp(optarg, "--", 2) != 0 || !optarg[2])
        return 0;
    for (const struct option *o = opts; o->name; o++)
        if (o->val == c && o->has_arg == required_argument)
            return cli_error("--%s needs a value, got the option '%s' (a file of that name: ./%s)", o->name, optarg,
                             optarg);
    return 0;
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
        "  --accumulate K       gradient accumulation: K micro-batches of N / K samples a step,\n"
        "                       gradients summed, one update; the plan is per micro-batch (1)\n"
        "  --offload all|NAME[,NAME...]  copy these layers' outputs to host memory between their\n"
        "                       forward and backward uses, on a copy queue (docs/user-guide.md)\n"
        "  --steps N            training steps (200)\n"
        "  --warmup N           steps excluded from step-time statistics (5)\n"
        "  --optimizer NAME     sgd | adam | adamw (adam; with --load, the saved optimizer)\n"
        "  --lr X               learning rate, > 0 (sgd 0.01, adam and adamw 0.001)\n"
        "  --momentum X         sgd only: momentum, in [0, 1) (0.9)\n"
        "  --beta1 X            adam, adamw only: first-moment decay, in [0, 1) (0.9)\n"
        "  --beta2 X            adam, adamw only: second-moment decay, in [0, 1) (0.999)\n"
        "  --epsilon X          adam, adamw only: added to the second moment's root, > 0 (1e-8)\n"
        "  --weight-decay X     >= 0: L2 for sgd and adam, decoupled for adamw (sgd, adam 0; adamw 0.01)\n"
        "                       (with --load, hyperparameters not given keep their saved values)\n"
        "  --seed N             seed of data, initialization and dropout (1)\n"
        "  --data TASK|FILE     synthetic task (clusters, sequence, copy, sort, language, regression, images) or a\n"
        "                       safetensors file with train_x, train_y, val_x, val_y\n"
        "  --load FILE          initial weights (safetensors); when the file holds optimizer state,\n"
        "                       training continues from it: moments, step count and data position\n"
        "                       (give the same --seed and --data; --steps counts the steps added)\n"
        "  --weights-only       with --load: the weights alone, a fresh optimizer from step 0\n"
        "                       (a Hugging Face checkpoint, model.safetensors or its shards'\n"
        "                       model.safetensors.index.json, is read as one: weights alone)\n"
        "  --save FILE          final weights and optimizer state (safetensors, written atomically)\n"
        "  --save-format F      clremat (default) | hf: --save writes a Hugging Face checkpoint\n"
        "                       (weights alone, Hugging Face's tensor names and layouts)\n"
        "  --remat MODE         none | full | activations | larger_than[:N] |\n"
        "                       list_of_layers:NAME[,NAME...] | save_dots | budget:BYTES | auto\n"
        "                       (default none)\n"
        "  --costs flops|measured  what budget/auto minimize: FLOPs (default) or per-layer\n"
        "                       device times measured in a profiled warm-up step\n"
        "  --memory-limit B     device memory limit, e.g. 64MiB (default: device memory)\n"
        "  --gemm PATH          native | clblast | auto: GEMM kernels (default auto: clblast on\n"
        "                       GPUs, a cached calibration on CPUs; also $CLREMAT_GEMM)\n"
        "  --overlap            recompute on a second queue, overlapping the previous segment's\n"
        "                       backward, at no extra memory (same peak as without)\n"
        "  --precision P        float32 | mixed_float16 | mixed_bfloat16: 16-bit activations,\n"
        "                       float32 parameters (default: the model file's, else float32)\n"
        "  --no-fused-update    keep parameter gradients and update after the backward (default:\n"
        "                       sgd, adam and adamw update inside the backward, no gradient buffers)\n"
        "  --profile            per-layer device time of the last step\n"
        "  --memory-trace FILE  the last step's live tensors, measured, as Chrome trace / Perfetto\n"
        "                       JSON (docs/memory-trace.md)\n"
        "  --json               machine-readable report on stdout (docs/json-output.md)\n"
        "  --quiet              no progress on stderr\n");
    return f == stdout ? 0 : 2;
}

/* Limits of the integer options, the same on every subcommand. A batch
 * above CLREMAT_MAX_TENSOR_ELEMS could not fit even one element per sample
 * in a tensor (the model-dependent limit is checked when planning); steps
 * bound the per-step loss and time arrays (12 bytes a step). */
/* getopt codes of long options without a short letter */
#define CLI_OPT_OFFLOAD 0x101
#define CLI_OPT_SAVE_FORMAT 0x102
#define CLI_OPT_PRECISION 0x103

/* --precision's value: one of the three names (base/precision.c). */
static int check_precision(const char *v)
{
    if (clremat_precision_from_name(v) < 0)
        return cli_error("--precision must be float32, mixed_float16 or mixed_bfloat16, got '%s'", v), 1;
    return 0;
}
#define BATCH_MAX ((int64_t)2147483647)
#define STEPS_MAX ((int64_t)100000000)
#define POINTS_MAX ((int64_t)10000)

/* Parses an integer option value strictly (decimal digits, an optional
 * leading '-', nothing else) within [min, max]; returns 0 or prints an
 * error naming the option, the bad value and the range. */
static int parse_i64(const char *opt, const char *v, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    long long x;
    errno = 0;
    x = strtoll(v, &end, 10);
    if (!((*v >= '0' && *v <= '9') || (*v == '-' && v[1] >= '0' && v[1] <= '9')) || end == v || *end ||
        errno == ERANGE || x < min || x > max) {
        cli_error("%s takes an integer from %lld to %lld, got '%s'", opt, (long long)min, (long long)max, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* Parses --accumulate's value and checks that batch divides by it (the
 * numbers named, clremat_accumulate_split); returns 0 or prints an error. */
static int parse_accumulate(const char *v, int64_t *out)
{
    return parse_i64("--accumulate", v, 1, CLREMAT_MAX_ACCUMULATE, out);
}

static int check_accumulate(int64_t batch, int64_t accumulate)
{
    int64_t micro;
    if (accumulate > 1 && clremat_accumulate_split(batch, accumulate, &micro) != CLREMAT_OK)
        return cli_error("%s", clremat_last_error()), -1;
    return 0;
}

/* Parses --lr's value (a finite positive decimal number); returns 0 or prints an error. */
static int parse_lr(const char *v, double *out)
{
    /* representable as the float the optimizer uses (1e-50 would become 0, 1e39 infinity) */
    if (clremat_parse_decimal(v, out) != 0 || !(*out > 0) || !isfinite(*out) || !((float)*out > 0) || !isfinite((float)*out))
        return cli_error("--lr takes a positive number within float range, got '%s'", v), 1;
    return 0;
}

/* The optimizer hyperparameter options of train and compare. */
static const struct {
    const char *opt;
    unsigned bit;
    const char *range;
} hparam_opts[] = {
    {"--momentum", CLREMAT_OPT_SET_MOMENTUM, "a number in [0, 1)"},
    {"--beta1", CLREMAT_OPT_SET_BETA1, "a number in [0, 1)"},
    {"--beta2", CLREMAT_OPT_SET_BETA2, "a number in [0, 1)"},
    {"--epsilon", CLREMAT_OPT_SET_EPS, "a positive number"},
    {"--weight-decay", CLREMAT_OPT_SET_WEIGHT_DECAY, "a number >= 0"},
};

/* Parses the value of hyperparameter option i of hparam_opts (checked as
 * the float32 the optimizer will use) into *out and sets its bit in *set;
 * returns 0 or prints an error. */
static int parse_hparam(size_t i, const char *v, double *out, unsigned *set)
{
    double x = 0;
    float f;
    int ok = clremat_parse_decimal(v, &x) == 0; /* out of range: inf (refused) or 0 (then checked as 0) */
    f = (float)x;
    ok = ok && isfinite(x) && isfinite(f);
    if (hparam_opts[i].bit == CLREMAT_OPT_SET_EPS)
        ok = ok && f > 0.0f;
    else if (hparam_opts[i].bit == CLREMAT_OPT_SET_WEIGHT_DECAY)
        ok = ok && f >= 0.0f;
    else
        ok = ok && f >= 0.0f && f < 1.0f;
    if (!ok)
        return cli_error("%s takes %s, got '%s'", hparam_opts[i].opt, hparam_opts[i].range, v), 1;
    *out = x;
    *set |= hparam_opts[i].bit;
    return 0;
}

/* Checks --optimizer's value and that every hyperparameter given applies to
 * the optimizer (NULL: not known yet, the run checks); 0 or an error. */
static int check_optimizer(const char *optimizer, unsigned set)
{
    clremat_opt_config c;
    if (!optimizer)
        return 0;
    if (clremat_opt_defaults(optimizer, &c) != 0)
        return cli_error("--optimizer takes sgd, adam or adamw, got '%s'", optimizer), 1;
    for (size_t i = 0; i < sizeof hparam_opts / sizeof hparam_opts[0]; i++)
        if ((set & hparam_opts[i].bit) && !clremat_opt_uses(c.kind, hparam_opts[i].bit))
            return cli_error("%s applies to %s only, not to --optimizer %s", hparam_opts[i].opt,
                             hparam_opts[i].bit == CLREMAT_OPT_SET_MOMENTUM ? "sgd" : "adam and adamw", optimizer),
                   1;
    return 0;
}

/* Parses the value of hyperparameter option c ('1'..'5': index + '1') into
 * the matching field; returns 0 or prints an error. */
static int parse_hparam_field(int c, const char *v, double *momentum, double *beta1, double *beta2, double *epsilon,
                              double *weight_decay, unsigned *set)
{
    double *fields[] = {momentum, beta1, beta2, epsilon, weight_decay};
    return parse_hparam((size_t)(c - '1'), v, fields[c - '1'], set);
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
        {"momentum", required_argument, NULL, '1'}, {"beta1", required_argument, NULL, '2'},
        {"beta2", required_argument, NULL, '3'}, {"epsilon", required_argument, NULL, '4'},
        {"weight-decay", required_argument, NULL, '5'}, {"weights-only", no_argument, NULL, 'W'},
        {"memory-trace", required_argument, NULL, 'T'}, {"no-fused-update", no_argument, NULL, 'F'},
        {"help", no_argument, NULL, 'h'}, {"accumulate", required_argument, NULL, 'A'},
        {"offload", required_argument, NULL, CLI_OPT_OFFLOAD}, {"save-format", required_argument, NULL, CLI_OPT_SAVE_FORMAT},
        {"precision", required_argument, NULL, CLI_OPT_PRECISION}, {NULL, 0, NULL, 0}};
    int c;
    int64_t v;

    memset(cfg, 0, sizeof *cfg);
    *json = 0;
    cfg->device = g->device;
    cfg->batch = 32;
    cfg->steps = 200;
    cfg->warmup = 5;
    cfg->seed = 1;
    cfg->progress = 1;
    getopt_reset();
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (value_is_option(opts, c))
            return 2;
        switch (c) {
        case '1': case '2': case '3': case '4': case '5':
            if (parse_hparam_field(c, optarg, &cfg->momentum, &cfg->beta1, &cfg->beta2, &cfg->epsilon,
                                   &cfg->weight_decay, &cfg->opt_set))
                return 2;
            break;
        case 'W': cfg->weights_only = 1; break;
        case CLI_OPT_SAVE_FORMAT:
            if (strcmp(optarg, "hf") && strcmp(optarg, "clremat"))
                return cli_error("--save-format must be clremat or hf, got '%s'", optarg), 2;
            cfg->save_hf = !strcmp(optarg, "hf");
            break;
        case 'd': if (check_device("--device", optarg)) return 2; cfg->device = optarg; break;
        case 'b': if (parse_i64("--batch", optarg, 1, BATCH_MAX, &cfg->batch)) return 2; break;
        case 's': if (parse_i64("--steps", optarg, 1, STEPS_MAX, &cfg->steps)) return 2; break;
        case 'w': if (parse_i64("--warmup", optarg, 0, STEPS_MAX, &cfg->warmup)) return 2; break;
        case 'S': if (parse_i64("--seed", optarg, 0, INT64_MAX, &v)) return 2; cfg->seed = (uint64_t)v; break;
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
        case 'F': cfg->no_fused_update = 1; break;
        case 'G': if (check_gemm(optarg)) return 2; cfg->gemm = optarg; break;
        case 'j': *json = 1; break;
        case 'q': cfg->progress = 0; break;
        case 'T': cfg->memory_trace = optarg; break;
        case 'A': if (parse_accumulate(optarg, &cfg->accumulate)) return 2; break;
        case CLI_OPT_PRECISION: if (check_precision(optarg)) return 2; cfg->precision = optarg; break;
        case CLI_OPT_OFFLOAD:
            if (!*optarg)
                return cli_error("--offload takes all or layer names, got ''"), 2;
            cfg->offload = optarg;
            break;
        case 'h': return train_usage(stdout);
        default: return train_usage(stderr);
        }
    }
    if (optind + 1 != argc) {
        train_usage(stderr);
        return cli_error(optind >= argc ? "train: missing MODEL" : "train: unexpected argument '%s'",
                         argv[optind + 1]), 2;
    }
    if (cfg->weights_only && !cfg->load)
        return cli_error("--weights-only applies to --load"), 2;
    if (check_accumulate(cfg->batch, cfg->accumulate))
        return 2;
    if (cfg->offload && cfg->overlap)
        return cli_error("--offload does not go with --overlap"), 2;
    if (cfg->save_hf && !cfg->save)
        return cli_error("--save-format applies to --save"), 2;
    /* without --load the optimizer is known now (adam by default); with it,
     * the saved optimizer may decide, and the run checks */
    if (check_optimizer(cfg->optimizer ? cfg->optimizer : cfg->load && !cfg->weights_only ? NULL : "adam",
                        cfg->opt_set))
        return 2;
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
        {"memory-trace", required_argument, NULL, 'T'}, {"no-fused-update", no_argument, NULL, 'F'},
        {"help", no_argument, NULL, 'h'}, {"accumulate", required_argument, NULL, 'A'},
        {"offload", required_argument, NULL, CLI_OPT_OFFLOAD}, {"precision", required_argument, NULL, CLI_OPT_PRECISION},
        {NULL, 0, NULL, 0}};
    int c;
    int64_t v;

    memset(o, 0, sizeof *o);
    o->accumulate = 1;
    o->points = 40;
    o->remat = "none";
    o->optimizer = "adam";
    o->batch = 32;
    getopt_reset();
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (value_is_option(opts, c))
            return 2;
        switch (c) {
        case 'r': o->remat = optarg; o->remat_given = 1; break;
        case 'b': if (parse_i64("--batch", optarg, 1, BATCH_MAX, &o->batch)) return 2; break;
        case 'o': o->optimizer = optarg; break;
        case 'j': o->json = 1; break;
        case 'a': o->actions = 1; break;
        case 'd': /* only its memory size is used (auto) */
            if (check_device("--device", optarg))
                return 2;
            o->device = optarg;
            break;
        case 'm': if (parse_memory_limit(optarg, &o->memory_limit)) return 2; break;
        case 'p': o->pareto = 1; break;
        case 'O': o->overlap = 1; break;
        case 'F': o->no_fused_update = 1; break;
        case 'G': if (check_gemm(optarg)) return 2; o->gemm = optarg; break;
        case 'v': o->svg = optarg; break;
        case 'T': o->memory_trace = optarg; break;
        case 'A': if (parse_accumulate(optarg, &o->accumulate)) return 2; break;
        case CLI_OPT_PRECISION: if (check_precision(optarg)) return 2; o->precision = optarg; break;
        case CLI_OPT_OFFLOAD:
            if (!*optarg)
                return cli_error("--offload takes all or layer names, got ''"), 2;
            o->offload = optarg;
            break;
        case 'n':
            if (parse_i64("--points", optarg, 2, POINTS_MAX, &v))
                return 2;
            o->points = (int)v;
            o->points_given = 1;
            break;
        case 'h':
            printf("usage: clremat plan MODEL [--remat MODE] [--batch N] [--accumulate K] [--optimizer NAME]\n"
                   "       [--json] [--actions]\n"
                   "       [--memory-limit BYTES | --device SEL] [--overlap] [--gemm PATH] [--no-fused-update]\n"
                   "       [--precision float32|mixed_float16|mixed_bfloat16]\n"
                   "       [--pareto [--points N] [--svg FILE]] [--memory-trace FILE]\n"
                   "Prints, per layer, output and saved bytes, whether tensors are kept or discarded after\n"
                   "the forward pass, recomputations and forward FLOPs; then the predicted peak of live\n"
                   "device bytes, activation bytes kept, and recompute FLOPs as a share of the step.\n"
                   "--accumulate K plans one micro-batch of N / K samples, with the gradient accumulation\n"
                   "buffer in the fixed bytes (N must be a multiple of K).\n"
                   "--offload all|NAME[,NAME...] moves those layers' outputs to host memory between their\n"
                   "forward and backward uses; host bytes are predicted apart.\n"
                   "--actions also lists the step's actions with predicted live bytes. --remat auto plans\n"
                   "for --memory-limit, else for the memory of --device (or the default device).\n"
                   "--gemm plans for that GEMM path on the device (its workspace is in the peak);\n"
                   "without it no device is opened and the native path (no workspace) is assumed.\n"
                   "--pareto sweeps budgets from the smallest feasible peak to the none peak and lists\n"
                   "peak against recompute cost; --svg FILE plots it with the Keras-style modes marked.\n"
                   "--memory-trace FILE writes the step's live tensors over time as Chrome trace / Perfetto\n"
                   "JSON (docs/memory-trace.md).\n");
            return 0;
        default: return 2;
        }
    }
    if (optind + 1 != argc)
        return cli_error("plan: expected one MODEL argument"), 2;
    if (o->memory_trace && o->pareto)
        return cli_error("plan: --memory-trace traces one plan; it does not go with --pareto"), 2;
    if (check_accumulate(o->batch, o->accumulate))
        return 2;
    if (o->offload && (o->overlap || o->pareto))
        return cli_error("plan: --offload does not go with --overlap or --pareto"), 2;
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
        if (value_is_option(opts, c))
            return 2;
        switch (c) {
        case 'j': o->json = 1; break;
        case 'd': if (check_device("--device", optarg)) return 2; o->device = optarg; break;
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
        {"momentum", required_argument, NULL, '1'}, {"beta1", required_argument, NULL, '2'},
        {"beta2", required_argument, NULL, '3'}, {"epsilon", required_argument, NULL, '4'},
        {"weight-decay", required_argument, NULL, '5'}, {"accumulate", required_argument, NULL, 'A'},
        {"precision", required_argument, NULL, CLI_OPT_PRECISION}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    clremat_compare_config *cfg = &o->cfg;
    int c;
    int64_t v;

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
        if (value_is_option(opts, c))
            return 2;
        switch (c) {
        case 'D':
            if (!*optarg)
                return cli_error("--devices takes all or a comma-separated list of selections, got ''"), 2;
            cfg->devices = optarg;
            break;
        case 'r': cfg->modes = optarg; break;
        case 'b': if (parse_i64("--batch", optarg, 1, BATCH_MAX, &cfg->batch)) return 2; break;
        case 's': if (parse_i64("--steps", optarg, 1, STEPS_MAX, &cfg->steps)) return 2; break;
        case 'w': if (parse_i64("--warmup", optarg, 0, STEPS_MAX, &cfg->warmup)) return 2; break;
        case 'S': if (parse_i64("--seed", optarg, 0, INT64_MAX, &v)) return 2; cfg->seed = (uint64_t)v; break;
        case 'd': cfg->data = optarg; break;
        case 'o': cfg->optimizer = optarg; break;
        case 'l':
            if (parse_lr(optarg, &cfg->lr))
                return 2;
            break;
        case '1': case '2': case '3': case '4': case '5':
            if (parse_hparam_field(c, optarg, &cfg->momentum, &cfg->beta1, &cfg->beta2, &cfg->epsilon,
                                   &cfg->weight_decay, &cfg->opt_set))
                return 2;
            break;
        case 'm': if (parse_memory_limit(optarg, &cfg->memory_limit)) return 2; break;
        case 'j': o->json = 1; break;
        case 'c': o->csv = optarg; break;
        case 'v': o->svg = optarg; break;
        case 'q': cfg->progress = 0; break;
        case 'C': if (parse_costs(optarg, &cfg->costs_measured)) return 2; break;
        case 'A': if (parse_accumulate(optarg, &cfg->accumulate)) return 2; break;
        case CLI_OPT_PRECISION: if (check_precision(optarg)) return 2; cfg->precision = optarg; break;
        case 'h':
            printf("usage: clremat compare MODEL [--devices all|SEL,SEL...] [--remat MODE,MODE...]\n"
                   "       [--batch N] [--accumulate K] [--steps N] [--warmup N] [--seed N] [--data TASK|FILE] [--optimizer NAME]\n"
                   "       [--precision float32|mixed_float16|mixed_bfloat16]\n"

                   "       [--lr X] [--momentum X] [--beta1 X] [--beta2 X] [--epsilon X] [--weight-decay X]\n"
                   "       [--memory-limit BYTES] [--costs flops|measured] [--json] [--csv FILE]\n"
                   "       [--svg FILE] [--quiet]\n"
                   "Runs the same model, data, batch and seed on each device and remat mode (default\n"
                   "none,full on all devices, 20 steps with 3 warm-up steps excluded from timing) and\n"
                   "reports peaks (predicted and measured), fit, step time, overhead against none,\n"
                   "recompute share, losses, validation, and numerics checks. --accumulate K runs every\n"
                   "step as K micro-batches (as for train).\n"
                   "Optimizer (as for train): --optimizer sgd | adam | adamw (adam); --lr (sgd 0.01,\n"
                   "adam and adamw 0.001); sgd: --momentum (0.9); adam, adamw: --beta1 (0.9), --beta2\n"
                   "(0.999), --epsilon (1e-8); all: --weight-decay (sgd, adam 0; adamw 0.01).\n");
            return 0;
        default: return 2;
        }
    }
    if (optind + 1 != argc)
        return cli_error("compare: expected one MODEL argument"), 2;
    if (check_optimizer(cfg->optimizer, cfg->opt_set))
        return 2;
    if (check_accumulate(cfg->batch, cfg->accumulate))
        return 2;
    if (cfg->warmup >= cfg->steps)
        return cli_error("compare: --warmup (%lld) must be below --steps (%lld)", (long long)cfg->warmup,
                         (long long)cfg->steps), 2;
    cfg->model_path = argv[optind];
    return CLI_CONTINUE;
}

/* ------------------------------------------------------------------ fit */

static int fit_usage(FILE *f)
{
    fprintf(f,
        "usage: clremat fit MODEL [--memory SIZE,SIZE...] [--device SEL] [--batch N] [--optimizer NAME]\n"
        "       [--remat MODE,MODE...] [--accumulate K,K...] [--offload] [--max-batch N] [--steps N]\n"
        "       [--calibration-batch N] [--recalibrate] [--json] [--svg FILE]\n"
        "       [--precision float32|mixed_float16|mixed_bfloat16]\n"
        "For each memory size (--memory, e.g. 6GiB,8GiB,16GiB; else the memory of --device) and\n"
        "each remat mode: the predicted peak of a training step at --batch (32), whether it fits,\n"
        "the recompute share and the predicted step time, the fastest that fits marked; and the\n"
        "largest batch that fits, searched with the exact predictor (planning only). Modes\n"
        "(default): none, full, activations, save_dots, larger_than, list_of_layers:B per top-level block,\n"
        "and auto (the budget planner at each size). Step times are predicted only with --device\n"
        "(or the global --device): a calibration measures --steps (5) timed steps there first;\n"
        "without a device they are null. --calibration-batch N calibrates at another batch than\n"
        "--batch. --accumulate K,K... lists every mode once per gradient accumulation K (default 1):\n"
        "planned per micro-batch of N / K, the largest batch a multiple of K. --offload lists every\n"
        "configuration again with its kept outputs offloaded to host memory (as train --offload all).\n"
        "The step-time calibration is cached per device, model, batch and optimizer;\n"
        "--recalibrate measures it again.\n"
        "--max-batch caps the search (1048576). --svg FILE plots\n"
        "peak against predicted step time with the sizes as vertical lines. docs/user-guide.md.\n");
    return f == stdout ? 0 : 2;
}

/* Parses fit's --accumulate K,K... (each in [1, CLREMAT_MAX_ACCUMULATE],
 * no repeats); returns 0 or prints an error. */
static int parse_accumulate_list(const char *v, int64_t *ks, int *n)
{
    const char *s = v;
    *n = 0;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char item[32];
        if (len == 0 || len >= sizeof item)
            return cli_error("--accumulate takes counts such as 1,2,4, got '%s'", v), -1;
        memcpy(item, s, len);
        item[len] = 0;
        if (*n >= CLI_FIT_MAX_SIZES)
            return cli_error("--accumulate takes at most %d counts, got more in '%s'", CLI_FIT_MAX_SIZES, v), -1;
        if (parse_accumulate(item, &ks[*n]))
            return -1;
        for (int i = 0; i < *n; i++)
            if (ks[i] == ks[*n])
                return cli_error("--accumulate: %lld is given twice in '%s'", (long long)ks[i], v), -1;
        (*n)++;
        if (!e)
            return 0;
        s = e + 1;
    }
}

/* Parses --memory's comma-separated sizes; returns 0 or prints an error. */
static int parse_sizes(const char *v, uint64_t *sizes, int *n)
{
    const char *s = v;
    *n = 0;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char item[64];
        uint64_t b;
        if (len == 0 || len >= sizeof item) {
            cli_error("--memory takes sizes such as 6GiB,8GiB,16GiB, got '%s'", v);
            return -1;
        }
        memcpy(item, s, len);
        item[len] = 0;
        if (clremat_parse_bytes(item, &b) || b == 0) {
            cli_error("--memory: '%s' is not a memory size (such as 512MiB or 8GiB) in '%s'", item, v);
            return -1;
        }
        if (*n >= CLI_FIT_MAX_SIZES) {
            cli_error("--memory takes at most %d sizes, got more in '%s'", CLI_FIT_MAX_SIZES, v);
            return -1;
        }
        sizes[(*n)++] = b;
        if (!e)
            return 0;
        s = e + 1;
    }
}

int cli_fit_parse(const cli_global *g, int argc, char **argv, cli_fit_opts *o)
{
    static const struct option opts[] = {
        {"memory", required_argument, NULL, 'm'}, {"device", required_argument, NULL, 'd'},
        {"batch", required_argument, NULL, 'b'}, {"optimizer", required_argument, NULL, 'o'},
        {"remat", required_argument, NULL, 'r'}, {"max-batch", required_argument, NULL, 'M'},
        {"steps", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
        {"svg", required_argument, NULL, 'v'}, {"calibration-batch", required_argument, NULL, 'c'},
        {"accumulate", required_argument, NULL, 'A'}, {"offload", no_argument, NULL, 'F'},
        {"recalibrate", no_argument, NULL, 'R'}, {"help", no_argument, NULL, 'h'},
        {"precision", required_argument, NULL, CLI_OPT_PRECISION}, {NULL, 0, NULL, 0}};
    int c;

    memset(o, 0, sizeof *o);
    o->device = g->device;
    o->optimizer = "adam";
    o->batch = 32;
    o->max_batch = (int64_t)1 << 20;
    o->steps = 5;
    getopt_reset();
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (value_is_option(opts, c))
            return 2;
        switch (c) {
        case 'm': if (parse_sizes(optarg, o->sizes, &o->n_sizes)) return 2; break;
        case 'd': if (check_device("--device", optarg)) return 2; o->device = optarg; break;
        case 'b': if (parse_i64("--batch", optarg, 1, BATCH_MAX, &o->batch)) return 2; break;
        case 'M': if (parse_i64("--max-batch", optarg, 1, BATCH_MAX, &o->max_batch)) return 2; break;
        case 'c':
            if (parse_i64("--calibration-batch", optarg, 1, BATCH_MAX, &o->calibration_batch))
                return 2;
            break;
        case 's': if (parse_i64("--steps", optarg, 1, 1000, &o->steps)) return 2; break;
        case 'o': o->optimizer = optarg; break;
        case 'r':
            if (!*optarg)
                return cli_error("--remat takes a list of modes, got ''"), 2;
            o->remat = optarg;
            break;
        case 'j': o->json = 1; break;
        case 'v':
            if (!*optarg)
                return cli_error("--svg takes a file name, got ''"), 2;
            o->svg = optarg;
            break;
        case 'A': if (parse_accumulate_list(optarg, o->accumulate, &o->n_accumulate)) return 2; break;
        case 'F': o->offload = 1; break;
        case 'R': o->recalibrate = 1; break;
        case CLI_OPT_PRECISION: if (check_precision(optarg)) return 2; o->precision = optarg; break;
        case 'h': return fit_usage(stdout);
        default: return fit_usage(stderr);
        }
    }
    if (optind + 1 != argc) {
        fit_usage(stderr);
        return cli_error(optind >= argc ? "fit: missing MODEL" : "fit: unexpected argument '%s'", argv[optind + 1]), 2;
    }
    if (check_optimizer(o->optimizer, 0))
        return 2;
    if (o->batch > o->max_batch)
        return cli_error("fit: --batch (%lld) is above --max-batch (%lld)", (long long)o->batch,
                         (long long)o->max_batch), 2;
    o->model_path = argv[optind];
    return CLI_CONTINUE;
}

/* ------------------------------------------------------------ import-hf */

static int import_hf_usage(FILE *f)
{
    fputs("usage: clremat import-hf CONFIG.json [options]\n"
          "  writes the clremat model file of a Hugging Face Llama-architecture config.json\n"
          "  (its checkpoint loads with `clremat train MODEL --load model.safetensors`, or the\n"
          "  shards' model.safetensors.index.json)\n"
          "  --seq-len T          tokens per sample, the model's input [T] (default 128)\n"
          "  --output FILE        write the model there (atomically) instead of stdout\n",
          f);
    return f == stdout ? 0 : 2;
}

int cli_import_hf_parse(int argc, char **argv, const char **config, int64_t *seq_len, const char **output)
{
    static const struct option opts[] = {{"seq-len", required_argument, NULL, 't'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    *seq_len = 128;
    *output = NULL;
    getopt_reset();
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (value_is_option(opts, c))
            return 2;
        switch (c) {
        case 't': if (parse_i64("--seq-len", optarg, 1, (int64_t)1 << 24, seq_len)) return 2; break;
        case 'o':
            if (!*optarg)
                return cli_error("--output takes a file name, got ''"), 2;
            *output = optarg;
            break;
        case 'h': return import_hf_usage(stdout);
        default: return import_hf_usage(stderr);
        }
    }
    if (optind + 1 != argc) {
        import_hf_usage(stderr);
        return cli_error(optind >= argc ? "import-hf: missing CONFIG.json" : "import-hf: unexpected argument '%s'",
                         argv[optind + 1]), 2;
    }
    *config = argv[optind];
    return CLI_CONTINUE;
}
