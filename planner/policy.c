/* policy.c: parses --remat MODE strings into a clremat_policy. */
#include "plan.h"
#include "error.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const valid_modes =
    "none, full, activations, larger_than[:N], list_of_layers:NAME[,NAME...], save_dots, budget:BYTES, auto";

int clremat_policy_parse(const char *text, clremat_policy *out)
{
    memset(out, 0, sizeof *out);
    if (text && !*text) /* given, but empty: not the same as not given */
        return clremat_set_error(CLREMAT_ERR_PLAN, "--remat '': empty remat mode; valid modes: %s", valid_modes);
    if (!text)
        text = "none";
    snprintf(out->text, sizeof out->text, "%s", text);
    out->threshold = 1024;
    if (!strcmp(text, "none")) {
        out->kind = CLREMAT_POLICY_NONE;
    } else if (!strcmp(text, "full")) {
        out->kind = CLREMAT_POLICY_FULL;
    } else if (!strcmp(text, "activations")) {
        out->kind = CLREMAT_POLICY_ACTIVATIONS;
    } else if (!strcmp(text, "save_dots")) {
        out->kind = CLREMAT_POLICY_SAVE_DOTS;
    } else if (!strcmp(text, "auto")) {
        out->kind = CLREMAT_POLICY_AUTO;
    } else if (!strncmp(text, "larger_than", 11) && (text[11] == 0 || text[11] == ':')) {
        out->kind = CLREMAT_POLICY_LARGER_THAN;
        if (text[11] == ':') {
            char *end;
            long long v;
            errno = 0;
            v = strtoll(text + 12, &end, 10);
            if (!(text[12] >= '0' && text[12] <= '9') || end == text + 12 || *end || errno == ERANGE || v < 0)
                return clremat_set_error(CLREMAT_ERR_PLAN,
                    "--remat %s: larger_than takes a non-negative element count, e.g. larger_than:4096", text);
            out->threshold = v;
        }
    } else if (!strncmp(text, "list_of_layers:", 15)) {
        const char *s = text + 15;
        out->kind = CLREMAT_POLICY_LIST;
        while (*s) {
            const char *comma = strchr(s, ',');
            size_t len = comma ? (size_t)(comma - s) : strlen(s);
            if (len == 0 || len >= CLREMAT_NAME_LEN)
                return clremat_set_error(CLREMAT_ERR_PLAN, "--remat %s: empty or too long layer name", text);
            if (out->n_names == CLREMAT_MAX_POLICY_NAMES)
                return clremat_set_error(CLREMAT_ERR_PLAN, "--remat %s: more than %d names", text,
                                         CLREMAT_MAX_POLICY_NAMES);
            memcpy(out->names[out->n_names], s, len);
            out->names[out->n_names++][len] = 0;
            s += len + (comma ? 1 : 0);
            if (comma && !*s)
                return clremat_set_error(CLREMAT_ERR_PLAN, "--remat %s: trailing comma", text);
        }
        if (out->n_names == 0)
            return clremat_set_error(CLREMAT_ERR_PLAN, "--remat %s: list_of_layers needs at least one name", text);
    } else if (!strncmp(text, "budget:", 7)) {
        out->kind = CLREMAT_POLICY_BUDGET;
        if (clremat_parse_bytes(text + 7, &out->budget) != 0 || out->budget == 0)
            return clremat_set_error(CLREMAT_ERR_PLAN,
                "--remat %s: budget takes a byte count such as 512MiB or 1073741824", text);
    } else {
        return clremat_set_error(CLREMAT_ERR_PLAN, "unknown remat mode '%s'; valid modes: %s", text, valid_modes);
    }
    return CLREMAT_OK;
}
