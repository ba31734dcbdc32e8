/* cli.h: shared pieces of the clremat command: the subcommand entry points
 * and small output helpers. */
#ifndef CLREMAT_CLI_H
#define CLREMAT_CLI_H

#include <stdio.h>

/** Options given before the subcommand ("clremat --device X devices"). */
typedef struct cli_global {
    const char *device;     /**< --device, else NULL ($CLREMAT_DEVICE applies) */
} cli_global;

/** `clremat devices [--json]`: lists every OpenCL device. */
int cli_devices(const cli_global *g, int argc, char **argv);

/** `clremat train MODEL [options]`: trains and reports. */
int cli_train(const cli_global *g, int argc, char **argv);

/** `clremat plan MODEL [options]`: prints the remat plan. */
int cli_plan(const cli_global *g, int argc, char **argv);

/** `clremat compare MODEL [options]`: the acceptance protocol across devices and modes. */
int cli_compare(const cli_global *g, int argc, char **argv);

/** Prints a JSON string literal (quoted and escaped) to f. */
void cli_json_string(FILE *f, const char *s);

/** Prints "error: <message>" to stderr and returns exit status 1. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
