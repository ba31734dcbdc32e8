/* json_out.h: JSON writing helpers shared by the --json reports of the
 * command (tools/) and the library's report builders (host/report_json.c). */
#ifndef CLREMAT_JSON_OUT_H
#define CLREMAT_JSON_OUT_H

#include <stdio.h>
#include "clremat.h"

/** Prints a JSON string literal (quoted and escaped) to f; a byte of s that
 * is not part of well-formed UTF-8 is written as \u00XX, so the output is
 * always valid JSON. */
void clremat_json_string(FILE *f, const char *s);

/** Prints v as a JSON number ("%.9g") to f, or null when v is not finite. */
void clremat_json_num(FILE *f, double v);

/** Prints the text before (such as ", \"p10\": ") and then clremat_json_num(f, v). */
void clremat_json_member(FILE *f, const char *before, double v);

/** Prints "\"optimizer\": NAME, \"hyperparameters\": {...}" (docs/json-output.md):
 * lr, momentum, beta1, beta2, epsilon, weight_decay, null where the
 * optimizer does not use one. */
void clremat_json_optimizer(FILE *f, const clremat_opt_config *o);

#endif
