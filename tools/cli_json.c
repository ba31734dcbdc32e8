/* cli_json.c: the JSON output helpers shared by the clremat subcommands'
 * --json reports: string literals and numbers (null when not finite). */
#include "cli.h"
#include <math.h>

void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void cli_json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
}

void cli_json_member(FILE *f, const char *before, double v)
{
    fputs(before, f);
    cli_json_num(f, v);
}

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
