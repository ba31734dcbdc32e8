/* clremat.c: entry point of the clremat command; dispatches subcommands. */
#include "cli.h"
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    cli_global g;
    int i = 0, st = cli_parse_global(argc, argv, &g, &i);
    if (st != CLI_CONTINUE)
        return st;
    if (!strcmp(argv[i], "devices"))
        return cli_devices(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "train"))
        return cli_train(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "compare"))
        return cli_compare(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "fit"))
        return cli_fit(&g, argc - i, argv + i);
    if (!strcmp(argv[i], "plan"))
        return cli_plan(&g, argc - i, argv + i);
    cli_usage(stderr);
    return cli_error("unknown command '%s'", argv[i]);
}
