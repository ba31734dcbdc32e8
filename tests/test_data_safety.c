/* test_data_safety.c: the clremat command and weights files: `train --save`
 * writes atomically (no temporary file left, an existing file replaced whole
 * or left untouched when the run fails before saving), and `train --load`
 * of a truncated or corrupted weights file exits non-zero with a message
 * naming the file and what is wrong, for every cut point class (empty, inside
 * the length prefix, inside the header, inside the data, one byte short).
 * Runs on every device: CLREMAT_TEST_DEVICE becomes the command's
 * CLREMAT_DEVICE. */
#define _GNU_SOURCE /* memmem */
#include "testutil.h"
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static char dir[] = "/tmp/clremat-safetyXXXXXX";

static const char *model(void)
{
    static char path[1024];
    const char *d = getenv("CLREMAT_MODELS");
    snprintf(path, sizeof path, "%s/regression.json", d ? d : "models");
    return path;
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static unsigned char *slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    ck_assert_ptr_nonnull(f);
    *len = file_size(path);
    b = malloc((size_t)*len);
    ck_assert_int_eq(fread(b, 1, (size_t)*len, f), (size_t)*len);
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, long len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
}

/* Entries of dir other than the ones named (NULL-terminated). */
static int stray_files(const char *const *keep)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        int known = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
        for (int i = 0; keep[i] && !known; i++)
            known = !strcmp(e->d_name, keep[i]);
        if (!known) {
            fprintf(stderr, "stray file %s/%s\n", dir, e->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

START_TEST(test_save_atomic_load_rejects_damage)
{
    char good[1100], bad[1100], args[4096], err[8192];
    const char *const keep[] = {"w.safetensors", "bad.safetensors", NULL};
    unsigned char *blob;
    long len, hlen;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(good, sizeof good, "%s/w.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);

    /* a good file, then a run that fails before saving leaves it untouched */
    snprintf(args, sizeof args, "train %s --steps 2 --batch 8 --quiet --save %s", model(), good);
    ck_assert_msg(test_run_tool(args, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(stray_files(keep), 0);
    blob = slurp(good, &len);
    ck_assert_int_gt(len, 16);
    snprintf(args, sizeof args, "train %s --steps 2 --batch 8 --quiet --memory-limit 1KiB --save %s", model(), good);
    ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
    {
        long len2;
        unsigned char *again = slurp(good, &len2);
        ck_assert_int_eq(len2, len);
        ck_assert_int_eq(memcmp(again, blob, (size_t)len), 0);
        free(again);
    }
    /* saving into a folder that does not exist: an error naming it, no file */
    snprintf(args, sizeof args, "train %s --steps 1 --batch 8 --quiet --save %s/no/such/dir/w.safetensors", model(),
             dir);
    ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "/no/such/dir/w.safetensors") != NULL, "%s", err);
    ck_assert_int_eq(stray_files(keep), 0);

    /* the good file loads */
    snprintf(args, sizeof args, "train %s --steps 1 --batch 8 --quiet --load %s", model(), good);
    ck_assert_msg(test_run_tool(args, err, sizeof err) == 0, "%s", err);

    /* every kind of truncation is refused, naming the file */
    hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen * 256 + blob[i];
    {
        const long cuts[] = {0, 5, 8, 8 + hlen / 2, 8 + hlen, 8 + hlen + 3, len - 1};
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            spit(bad, blob, cuts[c]);
            snprintf(args, sizeof args, "train %s --steps 1 --batch 8 --quiet --load %s", model(), bad);
            ck_assert_msg(test_run_tool(args, err, sizeof err) != 0, "a file cut at %ld of %ld bytes was accepted", cuts[c],
                          len);
            ck_assert_msg(strstr(err, bad) != NULL, "cut at %ld: message does not name the file: %s", cuts[c], err);
            ck_assert_msg(strstr(err, "truncated") != NULL || strstr(err, "header JSON invalid") != NULL,
                          "cut at %ld: %s", cuts[c], err);
        }
    }
    /* corruption: a header byte, an oversized length, a tensor renamed */
    {
        unsigned char *c = malloc((size_t)len);
        memcpy(c, blob, (size_t)len);
        c[8] = '[';
        spit(bad, c, len);
        snprintf(args, sizeof args, "train %s --steps 1 --batch 8 --quiet --load %s", model(), bad);
        ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
        ck_assert_msg(strstr(err, bad) != NULL && strstr(err, "header") != NULL, "%s", err);
        memcpy(c, blob, (size_t)len);
        c[7] = 0x7f;
        spit(bad, c, len);
        ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
        ck_assert_msg(strstr(err, bad) != NULL && strstr(err, "header length") != NULL, "%s", err);
        memcpy(c, blob, (size_t)len);
        {
            char *h1 = memmem(c + 8, (size_t)hlen, "\"h1/", 4);
            ck_assert_ptr_nonnull(h1);
            h1[2] = '9'; /* "h9/...": no such layer, and h1's tensor is missing */
        }
        spit(bad, c, len);
        ck_assert_int_ne(test_run_tool(args, err, sizeof err), 0);
        ck_assert_msg(strstr(err, bad) != NULL && strstr(err, "h1/") != NULL, "%s", err);
        free(c);
    }
    free(blob);
    unlink(good);
    unlink(bad);
    ck_assert_int_eq(stray_files(keep), 0);
    rmdir(dir);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("data_safety", 600, &tc);
    tcase_add_test(tc, test_save_atomic_load_rejects_damage);
    /* every device: the runs of the command use the device this run is for */
    if (getenv("CLREMAT_TEST_DEVICE"))
        setenv("CLREMAT_DEVICE", getenv("CLREMAT_TEST_DEVICE"), 1);
    return test_run_device_suite(s);
}
