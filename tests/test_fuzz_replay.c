/* test_fuzz_replay.c: replays the fuzz corpora (fuzz/corpus/<target>/, the
 * seeds and every input the fuzzers kept or that once crashed) through the
 * same target functions libFuzzer drives (fuzz/fuzz_*.c), built with the
 * normal compiler, so a regression of any fixed crash fails make check (and
 * under --enable-sanitizers, any memory error or leak). Each target returns
 * whether it accepted its input; the seeds and the inputs that once crashed
 * are held to a known outcome (a valid model file loads and plans, a broken
 * one is refused; likewise safetensors files and command lines), and every
 * corpus must hold both accepted and refused inputs, so a parser that
 * refuses everything, or accepts everything, fails. No device needed.
 * The targets' output goes to /dev/null; CLREMAT_FUZZ_VERBOSE=1 keeps it and
 * names each file before it runs. */
#include "testutil.h"
#include "fuzz.h"
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#ifndef CLREMAT_FUZZ_CORPUS
#define CLREMAT_FUZZ_CORPUS "fuzz/corpus"
#endif

typedef int (*fuzz_fn)(const uint8_t *, size_t);

static const struct {
    const char *dir;
    fuzz_fn fn;
    int min_files;      /* the committed corpus has at least this many */
} targets[] = {
    {"model", fuzz_model, 10},
    {"safetensors", fuzz_safetensors, 10},
    {"cli", fuzz_cli, 10},
    {"keras", fuzz_keras, 10},
    {"hf", fuzz_hf, 10},
};

/* The known outcome of a corpus file: 1 accepted, 0 refused, -1 none
 * known (an input a fuzzer kept; it only must not crash). */
static int expected(const char *target, const char *name)
{
    static const char *const refused[] = {
        /* model files that do not load */
        "model/seed-bad-units.json", "model/seed-bad-syntax.json",
        /* safetensors files that break the format (fuzz/make-seeds.py) */
        "safetensors/seed-short", "safetensors/seed-truncated", "safetensors/seed-badjson",
        "safetensors/seed-array", "safetensors/seed-overlap", "safetensors/seed-back", "safetensors/seed-hugelen",
        "safetensors/seed-dup", /* (seed-f16 loads: F16 is read since Hugging Face checkpoints, issue 13) */
        /* command lines that stop before a run: --version, --help, an
         * unknown command, bad numbers, a missing model file name, an empty
         * mode list (seed-16's 1 KiB limit parses: the plan refuses it) */
        "cli/seed-04", "cli/seed-05", "cli/seed-06", "cli/seed-07", "cli/seed-08", "cli/seed-14", "cli/seed-15",
        "cli/seed-21", "cli/seed-22", "cli/seed-27", "cli/seed-28", "cli/seed-29", "cli/seed-30",
        "cli/seed-31", "cli/seed-32", "cli/seed-33",
        /* hostile inputs (fuzz/make-seeds.py): sizes whose products overflow,
         * shapes and offsets that wrap, names that are not UTF-8 */
        "model/seed-huge-input.json", "model/seed-huge-seq.json", "model/seed-huge-repeat.json",
        "model/seed-huge-units.json", "safetensors/seed-shape-neg", "safetensors/seed-shape-wrap",
        "safetensors/seed-offset-huge", "safetensors/seed-offset-wrap", "safetensors/seed-name-bytes",
        /* hostile command lines: numbers past their limits, empty devices,
         * bad modes and byte counts, and fit's refusals */
        "cli/seed-39", "cli/seed-42", "cli/seed-44", "cli/seed-45", "cli/seed-47", "cli/seed-49", "cli/seed-50",
        "cli/seed-52", "cli/seed-53", "cli/seed-58", "cli/seed-59", "cli/seed-60", "cli/seed-62", "cli/seed-64",
        "cli/seed-65", "cli/seed-66",
        /* a bundled model that loads but has over 64 layers: not planned
         * under the fuzzers (fuzz_plan_graph), so not counted as accepted */
        "model/seed-resnet20.json",
        /* Keras configurations edited to break (fuzz/make-seeds.py): every
         * one but the fixtures' own configs */
        "keras/seed-activation-bad.json", "keras/seed-class-bad.json", "keras/seed-inbound-index.json",
        "keras/seed-inbound-missing.json", "keras/seed-inbound-self.json", "keras/seed-layers-obj.json",
        "keras/seed-lr-nan.json", "keras/seed-name-long.json", "keras/seed-name-quotes.json",
        "keras/seed-nested-deep.json", "keras/seed-not-keras.json", "keras/seed-outputs-missing.json",
        "keras/seed-shape-huge.json", "keras/seed-shape-neg.json", "keras/seed-shape-none.json",
        "keras/seed-syntax.json", "keras/seed-units-huge.json", "keras/seed-units-neg.json",
        "keras/seed-units-str.json",
        /* Hugging Face configs likewise: all but tiny and tiny_tied */
        "hf/seed-act-gelu.json", "hf/seed-array.json", "hf/seed-eps-str.json", "hf/seed-head-dim.json",
        "hf/seed-heads-zero.json", "hf/seed-hidden-huge.json", "hf/seed-kv-indivisible.json",
        "hf/seed-layers-huge.json", "hf/seed-rope-scaling.json", "hf/seed-syntax.json", "hf/seed-theta-inf.json",
        "hf/seed-type-bad.json", "hf/seed-vocab-neg.json",
        "cli/seed-34", "cli/seed-35", "cli/seed-36", "cli/seed-37", "cli/seed-38", "cli/seed-40", "cli/seed-41", "cli/seed-43", "cli/seed-46", "cli/seed-48", "cli/seed-54",
    };
    char key[512];
    if (strncmp(name, "seed-", 5) != 0 && strncmp(name, "regress-", 8) != 0)
        return -1;
    snprintf(key, sizeof key, "%s/%s", target, name);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (!strcmp(key, refused[i]))
            return 0;
    return 1; /* every other seed is valid, and every fixed crash now loads and plans */
}

/* Reads a whole file; NULL on failure. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    struct stat sb;
    if (!f)
        return NULL;
    if (fstat(fileno(f), &sb) == 0 && (buf = malloc((size_t)sb.st_size + 1)) != NULL) {
        *len = fread(buf, 1, (size_t)sb.st_size, f);
        if (*len != (size_t)sb.st_size) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

START_TEST(test_replay)
{
    char dir[1024], path[2048];
    const char *root = getenv("CLREMAT_FUZZ_CORPUS");
    int verbose = getenv("CLREMAT_FUZZ_VERBOSE") != NULL, n = 0, n_accepted = 0, n_known = 0;
    char wrong[4096] = "";
    int saved_out = -1, saved_err = -1, devnull = -1;
    DIR *d;
    struct dirent *e;
    snprintf(dir, sizeof dir, "%s/%s", root ? root : CLREMAT_FUZZ_CORPUS, targets[_i].dir);
    d = opendir(dir);
    ck_assert_msg(d != NULL, "corpus folder %s cannot be opened", dir);
    fflush(stdout);
    fflush(stderr);
    if (!verbose) { /* the targets' own output (usage texts, errors) is noise here */
        saved_out = dup(1);
        saved_err = dup(2);
        devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
    }
    while ((e = readdir(d)) != NULL) {
        uint8_t *buf;
        size_t len = 0;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        buf = slurp(path, &len);
        ck_assert_msg(buf != NULL, "%s cannot be read", path);
        if (verbose)
            fprintf(stderr, "replay %s (%zu bytes)\n", path, len);
        {
            int got = targets[_i].fn(buf, len), want = expected(targets[_i].dir, e->d_name);
            ck_assert(got == 0 || got == 1);
            n_accepted += got;
            if (want >= 0) {
                n_known++;
                if (got != want && strlen(wrong) + strlen(e->d_name) + 16 < sizeof wrong)
                    snprintf(wrong + strlen(wrong), sizeof wrong - strlen(wrong), " %s (%s)", e->d_name,
                             got ? "accepted" : "refused");
            }
        }
        free(buf);
        n++;
    }
    closedir(d);
    if (!verbose) {
        fflush(stdout);
        fflush(stderr);
        dup2(saved_out, 1);
        dup2(saved_err, 2);
        close(saved_out);
        close(saved_err);
        close(devnull);
    }
    fprintf(stderr, "%s: %d inputs, %d accepted, %d with a known outcome\n", dir, n, n_accepted, n_known);
    ck_assert_msg(n >= targets[_i].min_files, "%s holds %d inputs, expected at least %d", dir, n,
                  targets[_i].min_files);
    ck_assert_msg(wrong[0] == 0, "%s: outcome not the known one:%s", dir, wrong);
    ck_assert_msg(n_known >= 10, "%s: only %d inputs with a known outcome", dir, n_known);
    ck_assert_msg(n_accepted > 0 && n_accepted < n, "%s: %d of %d inputs accepted", dir, n_accepted, n);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("fuzz_replay", 300, &tc);
    tcase_add_loop_test(tc, test_replay, 0, (int)(sizeof targets / sizeof targets[0]));
    return test_run_suite(s);
}
