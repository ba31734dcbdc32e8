/* test_fuzz_replay.c: replays the fuzz corpora (fuzz/corpus/<target>/, the
 * seeds and every input the fuzzers kept or that once crashed) through the
 * same target functions libFuzzer drives (fuzz/fuzz_*.c), built with the
 * normal compiler, so a regression of any fixed crash fails make check (and
 * under --enable-sanitizers, any memory error or leak). No device needed.
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
};

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
    int verbose = getenv("CLREMAT_FUZZ_VERBOSE") != NULL, n = 0;
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
        ck_assert_int_eq(targets[_i].fn(buf, len), 0);
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
    ck_assert_msg(n >= targets[_i].min_files, "%s holds %d inputs, expected at least %d", dir, n,
                  targets[_i].min_files);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("fuzz_replay", 300, &tc);
    tcase_add_loop_test(tc, test_replay, 0, (int)(sizeof targets / sizeof targets[0]));
    return test_run_suite(s);
}
