/* clremat.c: entry point of the clremat command; dispatches subcommands and
 * makes a failed write of the report on stdout (a full disk, a closed pipe
 * reader) an error rather than a silent success. */
#include "cli.h"
#include "config.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run(int argc, char **argv)
{
    cli_global g;
    int i = 0, st = cli_parse_global(argc, argv, &g, &i);
    if (st != CLI_CONTINUE)
        return st;
    if (!strcmp(argv[i], "devices"))
        return cli_devices(&g, argc - i, argv + i);
#ifdef CLREMAT_HAVE_MPI
    /* under mpirun (Open MPI's or a PMI environment): data-parallel training */
    if (!strcmp(argv[i], "train") && (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE")))
        return cli_train_dist(&g, argc - i, argv + i);
#endif
    if (!strcmp(argv[i], "train"))
        return cli_train(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "compare"))
        return cli_compare(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "fit"))
        return cli_fit(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "import-keras"))
        return cli_import_keras(argc - i, argv + i);
    if (!strcmp(argv[i], "plan"))
        return cli_plan(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "import-hf"))
        return cli_import_hf(argc - i, argv + i);
    cli_usage(stderr);
    return cli_error("unknown command '%s'", argv[i]);
}

int main(int argc, char **argv)
{
    int st;
    /* past a file-size limit (ulimit -f) a write fails with EFBIG and is
     * reported like any failed write, its temporary file removed, instead
     * of the default SIGXFSZ killing the command midway through a file */
    signal(SIGXFSZ, SIG_IGN);
    st = run(argc, argv);
    errno = 0;
    if ((fflush(stdout) != 0 || ferror(stdout)) && st == 0)
        st = cli_error("writing the report to stdout failed: %s", errno ? strerror(errno) : "write error");
    return st;
}
