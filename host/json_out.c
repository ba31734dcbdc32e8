/* json_out.c: the JSON writing helpers of every --json report (moved from
 * tools/cli_json.c so the library's report builders and the embedding API
 * share them): string literals (always valid JSON: a byte that is not UTF-8
 * becomes \u00XX) and numbers (null when not finite). */
#include "json_out.h"
#include "utf8.h"
#include <math.h>

void clremat_json_string(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        unsigned char c = *p;
        size_t n = clremat_utf8_seq(p);
        if (n == 0) { /* not UTF-8 (a path's raw byte): U+00XX, so the byte can be recovered */
            fprintf(f, "\\u%04x", c);
            p++;
            continue;
        }
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fwrite(p, 1, n, f);
        p += n;
    }
    fputc('"', f);
}

void clremat_json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
}

void clremat_json_member(FILE *f, const char *before, double v)
{
    fputs(before, f);
    clremat_json_num(f, v);
}

void clremat_json_optimizer(FILE *f, const clremat_opt_config *o)
{
    int sgd = o->kind == CLREMAT_OPT_SGD;
    fprintf(f, "\"optimizer\": ");
    clremat_json_string(f, clremat_opt_name(o->kind));
    clremat_json_member(f, ", \"hyperparameters\": {\"lr\": ", o->lr);
    clremat_json_member(f, ", \"momentum\": ", sgd ? o->momentum : NAN);
    clremat_json_member(f, ", \"beta1\": ", sgd ? NAN : o->beta1);
    clremat_json_member(f, ", \"beta2\": ", sgd ? NAN : o->beta2);
    clremat_json_member(f, ", \"epsilon\": ", sgd ? NAN : o->eps);
    clremat_json_member(f, ", \"weight_decay\": ", o->weight_decay);
    fputc('}', f);
}
