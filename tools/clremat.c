/* clremat.c: entry point of the clremat command; dispatches subcommands. */
#include "cli.h"
#include "config.h"
#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
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

int main(int argc, char **argv)
{
    cli_global g = {0};
    int i = 1;
    while (i < argc && argv[i][0] == '-') {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            g.device = argv[i + 1];
            i += 2;
        } else if (!strncmp(argv[i], "--device=", 9)) {
            g.device = argv[i] + 9;
            i++;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("clremat %s\n", PACKAGE_VERSION);
            return 0;
        } else {
            usage(stderr);
            return cli_error("unknown option '%s'", argv[i]);
        }
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[i], "devices"))
        return cli_devices(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "train"))
        return cli_train(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "compare"))
        return cli_compare(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "plan"))
        return cli_plan(&g, argc - i, argv + i);
    usage(stderr);
    return cli_error("unknown command '%s'", argv[i]);
}
