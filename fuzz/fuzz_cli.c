/* fuzz_cli.c: fuzz target for the clremat command line. The input is a
 * command line with one argument per line ("clremat" is put in front); it
 * goes through the same parse-only entries the command uses
 * (tools/cli_options.c: train, plan, devices, compare, fit) and, where the
 * command would go on, through the validation the run starts with (remat
 * modes, optimizer). Nothing is run. */
#include "fuzz.h"
#include "cli.h"
#include "optim.h"
#include "plan.h"
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 64

/* The validation a run does first on what the parser accepted; 1 when it
 * passes. */
static int check_run_options(const char *remat, const char *optimizer)
{
    clremat_policy pol;
    clremat_opt_config opt;
    int ok = clremat_policy_parse(remat, &pol) == CLREMAT_OK;
    return clremat_opt_defaults(optimizer ? optimizer : "adam", &opt) == 0 && ok;
}

/* compare's validation: its mode list split as the run splits it, then
 * each mode and the optimizer like a single run's. */
static int check_compare_options(const char *modes, const char *optimizer)
{
    char **v = NULL;
    int n = 0, ok = 1;
    if (clremat_split_modes(modes, &v, &n) != CLREMAT_OK)
        return 0;
    for (int i = 0; i < n; i++) {
        ok &= check_run_options(v[i], optimizer);
        free(v[i]);
    }
    free(v);
    return ok;
}

int fuzz_cli(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *argv[MAX_ARGS + 2];
    int argc = 0, next = 0, st, accepted = 0;
    cli_global g;
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    argv[argc++] = "clremat";
    for (char *p = text; argc < MAX_ARGS;) {
        char *nl = strchr(p, '\n');
        argv[argc++] = p;
        if (!nl)
            break;
        *nl = 0;
        p = nl + 1;
    }
    argv[argc] = NULL;
    st = cli_parse_global(argc, argv, &g, &next);
    if (st == CLI_CONTINUE) {
        char **sub = argv + next;
        int n = argc - next;
        if (!strcmp(sub[0], "train")) {
            clremat_train_config cfg;
            int json;
            if (cli_train_parse(&g, n, sub, &cfg, &json) == CLI_CONTINUE)
                accepted = check_run_options(cfg.remat, cfg.optimizer);
        } else if (!strcmp(sub[0], "plan")) {
            cli_plan_opts o;
            if (cli_plan_parse(n, sub, &o) == CLI_CONTINUE)
                accepted = check_run_options(o.remat, o.optimizer);
        } else if (!strcmp(sub[0], "devices")) {
            cli_devices_opts o;
            accepted = cli_devices_parse(&g, n, sub, &o) == CLI_CONTINUE;
        } else if (!strcmp(sub[0], "compare")) {
            cli_compare_opts o;
            if (cli_compare_parse(&g, n, sub, &o) == CLI_CONTINUE)
                accepted = check_compare_options(o.cfg.modes, o.cfg.optimizer);
        } else if (!strcmp(sub[0], "fit")) {
            cli_fit_opts o;
            if (cli_fit_parse(&g, n, sub, &o) == CLI_CONTINUE)
                accepted = check_compare_options(o.remat ? o.remat : "none", o.optimizer);
        }
    }
    free(text);
    return accepted;
}

#ifdef CLREMAT_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)fuzz_cli(data, size);
    return 0;
}
#endif
