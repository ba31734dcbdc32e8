/* test_cache.c: the on-disk caches (GEMM choice, program binaries). The program-binary cache:
 * a context writes kernels.cl's binary under $XDG_CACHE_HOME/clremat with a
 * length and hash header; a later context loads it; a truncated, corrupted
 * or foreign file is never handed to the driver -- the program is rebuilt
 * from source and the file rewritten. Also the atomic writer and hash.
 * Skips (77) without a device. */
#include "testutil.h"
#include "backend.h"
#include "gemm.h"
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static char dir[256];

/* Path of the (single) program binary in the test's cache directory; 0 if none. */
static int find_binary(char *out, size_t len)
{
    char sub[300];
    DIR *d;
    struct dirent *e;
    int found = 0;
    snprintf(sub, sizeof sub, "%s/clremat", dir);
    if (!(d = opendir(sub)))
        return 0;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "program-", 8) == 0 && strstr(e->d_name, ".bin") && !strstr(e->d_name, "tmp")) {
            snprintf(out, len, "%s/%s", sub, e->d_name);
            found++;
        }
    closedir(d);
    return found;
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* 1 when path is a whole, intact cache file: magic, then "len N hash H",
 * then N bytes whose FNV-1a hash is H. */
static int valid_file(const char *path)
{
    unsigned long long n = 0, h = 0;
    long size = file_size(path);
    char *buf, *nl;
    int ok = 0;
    FILE *f = fopen(path, "rb");
    if (!f || size < 40 || !(buf = calloc(1, (size_t)size + 1))) {
        if (f)
            fclose(f);
        return 0;
    }
    if (fread(buf, 1, (size_t)size, f) == (size_t)size && strncmp(buf, "clremat-program-binary", 22) == 0 &&
        (nl = memchr(buf, '\n', (size_t)size)) != NULL && sscanf(nl + 1, "len %llu hash %llx", &n, &h) == 2 &&
        (nl = memchr(nl + 1, '\n', (size_t)(size - (nl + 1 - buf)))) != NULL &&
        size == (long)((size_t)(nl + 1 - buf) + n))
        ok = clremat_hash64(0, nl + 1, (size_t)n) == (uint64_t)h;
    fclose(f);
    free(buf);
    return ok;
}

/* The file's inode: clremat_write_atomic renames a new file over the old
 * one, so a rewritten cache file has a new inode and a loaded one keeps it. */
static unsigned long long file_inode(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (unsigned long long)sb.st_ino : 0;
}

/* A context can run a kernel (the program it got works). */
static void check_ctx_works(void)
{
    clremat_ctx *ctx;
    clremat_buf *b;
    float v[4] = {1, 2, 3, 4}, out[4];
    int64_t cnt = -1;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, sizeof v, "t", &b), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, b, 0, sizeof v, v), CLREMAT_OK);
    ck_assert_int_eq(clremat_op_count_nonfinite(ctx, b, 4, &cnt), CLREMAT_OK);
    ck_assert_int_eq(cnt, 0);
    ck_assert_int_eq(clremat_read(ctx, b, 0, sizeof out, out), CLREMAT_OK);
    ck_assert_float_eq(out[3], 4.0f);
    clremat_pool_release(ctx->pool, b);
    clremat_ctx_destroy(ctx);
}

START_TEST(test_program_binary_cache)
{
    char path[600], cmd[700];
    long full;
    unsigned long long ino;
    FILE *f;
    snprintf(dir, sizeof dir, "/tmp/clremat-cache-test-%d", (int)getpid());
    setenv("XDG_CACHE_HOME", dir, 1);
    unsetenv("CLREMAT_NO_PROGRAM_CACHE");
    check_ctx_works();                      /* builds from source, writes the binary */
    ck_assert_int_eq(find_binary(path, sizeof path), 1);
    full = file_size(path);
    ck_assert_int_gt(full, 64);
    {
        char head[64] = {0};
        f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_gt(fread(head, 1, sizeof head - 1, f), 30);
        fclose(f);
        ck_assert_ptr_nonnull(strstr(head, "clremat-program-binary"));
        ck_assert_ptr_nonnull(strstr(head, "len "));
    }
    ck_assert(valid_file(path));
    ino = file_inode(path);
    check_ctx_works();                      /* loads the binary: the file is not rewritten */
    ck_assert_msg(file_inode(path) == ino, "a valid cache file was rewritten instead of loaded");
    ck_assert(valid_file(path));
    /* truncated: rebuilt from source and rewritten whole */
    ck_assert_int_eq(truncate(path, full / 2), 0);
    check_ctx_works();
    ck_assert_msg(file_inode(path) != ino, "a truncated cache file was not rewritten");
    ck_assert(valid_file(path));
    ino = file_inode(path);
    full = file_size(path);
    /* one flipped byte in the binary: caught by the hash before the driver
     * sees it, rebuilt from source and rewritten (a driver handed the
     * corrupted binary may well accept it: the file would then stay as is) */
    f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, full - 10, SEEK_SET);
    {
        int c = fgetc(f);
        fseek(f, full - 10, SEEK_SET);
        fputc(0x5a ^ c, f);
    }
    fclose(f);
    ck_assert(!valid_file(path));
    check_ctx_works();
    ck_assert_msg(file_inode(path) != ino, "a cache file with a corrupted byte was loaded, not rebuilt");
    ck_assert_msg(valid_file(path), "the corrupted cache file was not rewritten whole");
    ino = file_inode(path);
    /* not a cache file at all */
    f = fopen(path, "wb");
    fputs("garbage", f);
    fclose(f);
    ino = file_inode(path);
    check_ctx_works();
    ck_assert_msg(file_inode(path) != ino, "a garbage cache file was not rewritten");
    ck_assert(valid_file(path));
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    unsetenv("XDG_CACHE_HOME");
}
END_TEST

START_TEST(test_atomic_write_and_hash)
{
    char d[256], p[300], buf[16] = {0};
    FILE *f;
    snprintf(d, sizeof d, "/tmp/clremat-atomic-%d", (int)getpid());
    ck_assert_int_eq(mkdir(d, 0755), 0);
    snprintf(p, sizeof p, "%s/x", d);
    ck_assert_int_eq(clremat_write_atomic(p, "hello", 5), 0);
    ck_assert_int_eq(clremat_write_atomic(p, "world!", 6), 0);
    f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fread(buf, 1, sizeof buf, f), 6);
    fclose(f);
    ck_assert_str_eq(buf, "world!");
    ck_assert_int_eq(unlink(p), 0);
    ck_assert_int_eq(rmdir(d), 0); /* no temporary file left behind */
    ck_assert_int_ne(clremat_write_atomic("/nonexistent-dir/x", "a", 1), 0);
    ck_assert(clremat_hash64(0, "a", 1) != clremat_hash64(0, "b", 1));
    ck_assert(clremat_hash64(0, "ab", 2) == clremat_hash64(clremat_hash64(0, "a", 1), "b", 1));
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("cache", 300, &tc);
    tcase_add_test(tc, test_program_binary_cache);
    tcase_add_test(tc, test_atomic_write_and_hash);
    return test_run_device_suite(s);
}
