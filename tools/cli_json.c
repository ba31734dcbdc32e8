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

void cli_json_optimizer(FILE *f, const clremat_opt_config *o)
{
    int sgd = o->kind == CLREMAT_OPT_SGD;
    fprintf(f, "\"optimizer\": ");
    cli_json_string(f, clremat_opt_name(o->kind));
    cli_json_member(f, ", \"hyperparameters\": {\"lr\": ", o->lr);
    cli_json_member(f, ", \"momentum\": ", sgd ? o->momentum : NAN);
    cli_json_member(f, ", \"beta1\": ", sgd ? NAN : o->beta1);
    cli_json_member(f, ", \"beta2\": ", sgd ? NAN : o->beta2);
    cli_json_member(f, ", \"epsilon\": ", sgd ? NAN : o->eps);
    cli_json_member(f, ", \"weight_decay\": ", o->weight_decay);
    fputc('}', f);
}
