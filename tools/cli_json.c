/* cli_json.c: the --json error object of the clremat subcommands (the
 * JSON writing helpers are host/json_out.c). */
#include "cli.h"

int cli_json_error(int status, const char *message)
{
    cli_error("%s", message);
    printf("{\"error\": {\"status\": %d, \"status_name\": ", status);
    cli_json_string(stdout, clremat_status_str(status));
    printf(", \"message\": ");
    cli_json_string(stdout, message);
    printf("}}\n");
    fflush(stdout);
    return 1;
}
