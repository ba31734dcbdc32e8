/* test_safetensors.c: safetensors reading and writing without a device:
 * round trips, every kind of corrupt or truncated file with its message,
 * and atomic writes (no leftovers on failure, replace-by-rename). */
#include "testutil.h"
#include "safetensors.h"
#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/clremat-st-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[512];
    if (!d)
        return;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

/* Entries in the test directory (., .. excluded). */
static int dir_entries(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static const char *path_of(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

/* Writes a raw file: 8-byte length, header text, then data_len bytes of data. */
static void write_raw(const char *path, const char *header, size_t data_len)
{
    FILE *f = fopen(path, "wb");
    uint64_t n = strlen(header);
    unsigned char len[8];
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)(n >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < data_len; i++)
        fputc((int)(i & 0xff), f);
    fclose(f);
}

/* Reading path must fail with status and a message containing each of the
 * NULL-terminated strings. */
static void expect_read_error(const char *path, int status, ...)
{
    clremat_st_file f;
    va_list ap;
    const char *s;
    int st = clremat_st_read(path, &f);
    ck_assert_msg(st == status, "status %s, message: %s", clremat_status_str(st), clremat_last_error());
    ck_assert_ptr_null(f.tensors);
    va_start(ap, status);
    while ((s = va_arg(ap, const char *)))
        ck_assert_msg(strstr(clremat_last_error(), s), "'%s' not in message: %s", s, clremat_last_error());
    va_end(ap);
}

static float f32[6] = {1.5f, -2.25f, 3, 4, 5, 6e-7f};
static int32_t i32[4] = {-1, 0, 7, 2147483647};
static int64_t i64[4] = {-5, 1LL << 40, 0, 9};
static double f64[3] = {3.141592653589793, -1e300, 0.0};
static float scalar = 42.0f;

static size_t make_tensors(clremat_st_tensor *t)
{
    memset(t, 0, 6 * sizeof *t);
    t[0] = (clremat_st_tensor){"weights", CLREMAT_ST_F32, 2, {2, 3}, 6, f32};
    t[1] = (clremat_st_tensor){"ids", CLREMAT_ST_I32, 1, {4}, 4, i32};
    t[2] = (clremat_st_tensor){"big", CLREMAT_ST_I64, 2, {2, 2}, 4, i64};
    t[3] = (clremat_st_tensor){"alpha", CLREMAT_ST_F64, 1, {3}, 3, f64};
    t[4] = (clremat_st_tensor){"s", CLREMAT_ST_F32, 0, {0}, 1, &scalar};
    t[5] = (clremat_st_tensor){"empty", CLREMAT_ST_F32, 2, {0, 5}, 0, NULL};
    return 6;
}

START_TEST(round_trip)
{
    clremat_st_tensor t[6];
    size_t n = make_tensors(t);
    clremat_st_file f;
    FILE *fp;
    unsigned char len[8];
    uint64_t hlen = 0;
    make_dir();
    ck_assert_int_eq(clremat_st_write(path_of("a.safetensors"), t, n), CLREMAT_OK);
    ck_assert_int_eq(dir_entries(), 1);
    ck_assert_msg(clremat_st_read(path_of("a.safetensors"), &f) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_uint_eq(f.n, n);
    for (size_t i = 0; i < n; i++) {
        const clremat_st_tensor *r = &f.tensors[i];
        ck_assert_str_eq(r->name, t[i].name); /* order kept */
        ck_assert_int_eq(r->dtype, t[i].dtype);
        ck_assert_int_eq(r->rank, t[i].rank);
        ck_assert_int_eq(r->elems, t[i].elems);
        for (int d = 0; d < r->rank; d++)
            ck_assert_int_eq(r->dims[d], t[i].dims[d]);
        if (t[i].elems)
            ck_assert_int_eq(memcmp(r->data, t[i].data, (size_t)t[i].elems * clremat_st_dtype_size(t[i].dtype)), 0);
        ck_assert_ptr_eq(clremat_st_find(&f, t[i].name), r);
    }
    ck_assert_ptr_null(clremat_st_find(&f, "nope"));
    /* header: 8-byte aligned, padded with spaces, data follows in order */
    fp = fopen(path_of("a.safetensors"), "rb");
    ck_assert_int_eq(fread(len, 1, 8, fp), 8);
    fclose(fp);
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | len[i];
    ck_assert_uint_eq(hlen % 8, 0);
    ck_assert_int_eq(((const char *)f.blob)[8], '{');
    ck_assert_ptr_eq(f.tensors[0].data, (const char *)f.blob + 8 + hlen);
    ck_assert_ptr_eq(f.tensors[1].data, (const char *)f.blob + 8 + hlen + 24);
    ck_assert_uint_eq(f.blob_len, 8 + hlen + 24 + 16 + 32 + 24 + 4);
    clremat_st_free(&f);
    ck_assert_ptr_null(f.tensors);
    /* no tensors at all is a valid file too */
    ck_assert_int_eq(clremat_st_write(path_of("none.safetensors"), NULL, 0), CLREMAT_OK);
    ck_assert_int_eq(clremat_st_read(path_of("none.safetensors"), &f), CLREMAT_OK);
    ck_assert_uint_eq(f.n, 0);
    clremat_st_free(&f);
    remove_dir();
}
END_TEST

START_TEST(reads_foreign_files)
{
    /* as other writers produce it: metadata, unsorted keys, no padding */
    clremat_st_file f;
    make_dir();
    write_raw(path_of("x.safetensors"),
              "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
              12);
    ck_assert_msg(clremat_st_read(path_of("x.safetensors"), &f) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_uint_eq(f.n, 2);
    ck_assert_str_eq(f.tensors[0].name, "b");
    ck_assert_str_eq(f.tensors[1].name, "a");
    ck_assert_int_eq(((const unsigned char *)clremat_st_find(&f, "b")->data)[0], 8);
    clremat_st_free(&f);
    remove_dir();
}
END_TEST

START_TEST(truncated_data)
{
    clremat_st_tensor t[6];
    size_t n = make_tensors(t);
    struct stat st;
    make_dir();
    ck_assert_int_eq(clremat_st_write(path_of("t.safetensors"), t, n), CLREMAT_OK);
    ck_assert_int_eq(stat(path_of("t.safetensors"), &st), 0);
    ck_assert_int_eq(truncate(path_of("t.safetensors"), st.st_size - 3), 0);
    /* the last tensor with data, "s", now ends beyond the data */
    expect_read_error(path_of("t.safetensors"), CLREMAT_ERR_PARSE, "t.safetensors", "tensor 's'", "truncated", NULL);
    remove_dir();
}
END_TEST

START_TEST(truncated_header)
{
    clremat_st_tensor t[6];
    size_t n = make_tensors(t);
    FILE *f;
    make_dir();
    f = fopen(path_of("short.safetensors"), "wb");
    fwrite("\x10\0\0", 1, 3, f);
    fclose(f);
    expect_read_error(path_of("short.safetensors"), CLREMAT_ERR_PARSE, "short.safetensors", "too short", NULL);
    ck_assert_int_eq(clremat_st_write(path_of("h.safetensors"), t, n), CLREMAT_OK);
    ck_assert_int_eq(truncate(path_of("h.safetensors"), 40), 0);
    expect_read_error(path_of("h.safetensors"), CLREMAT_ERR_PARSE, "h.safetensors", "header length", "exceeds",
                      NULL);
    remove_dir();
}
END_TEST

START_TEST(bad_json)
{
    make_dir();
    write_raw(path_of("j.safetensors"), "{\"a\": {\"dtype\": \"F32\",", 0);
    expect_read_error(path_of("j.safetensors"), CLREMAT_ERR_PARSE, "j.safetensors", "JSON", "line 1", NULL);
    write_raw(path_of("k.safetensors"), "[1, 2]", 0);
    expect_read_error(path_of("k.safetensors"), CLREMAT_ERR_PARSE, "k.safetensors", "not a JSON object", NULL);
    write_raw(path_of("l.safetensors"), "{\"a\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 0]}}", 0);
    expect_read_error(path_of("l.safetensors"), CLREMAT_ERR_PARSE, "tensor 'a'", "shape", "non-negative", NULL);
    write_raw(path_of("m.safetensors"), "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4);
    expect_read_error(path_of("m.safetensors"), CLREMAT_ERR_PARSE, "tensor 'a'", "data_offsets", NULL);
    write_raw(path_of("n.safetensors"),
              "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
              " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
              8);
    expect_read_error(path_of("n.safetensors"), CLREMAT_ERR_PARSE, "n.safetensors", "unique", NULL);
    remove_dir();
}
END_TEST

START_TEST(offsets_out_of_range)
{
    make_dir();
    write_raw(path_of("o.safetensors"),
              "{\"ok\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
              " \"far\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}",
              16);
    expect_read_error(path_of("o.safetensors"), CLREMAT_ERR_PARSE, "o.safetensors", "tensor 'far'", "[8, 24]",
                      "16 bytes", NULL);
    write_raw(path_of("p.safetensors"), "{\"back\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}",
              16);
    expect_read_error(path_of("p.safetensors"), CLREMAT_ERR_PARSE, "tensor 'back'", "end before begin", NULL);
    remove_dir();
}
END_TEST

START_TEST(size_mismatch)
{
    make_dir();
    write_raw(path_of("s.safetensors"), "{\"w\": {\"dtype\": \"F64\", \"shape\": [3], \"data_offsets\": [0, 12]}}", 24);
    expect_read_error(path_of("s.safetensors"), CLREMAT_ERR_PARSE, "s.safetensors", "tensor 'w'", "12 bytes",
                      "need 24", NULL);
    remove_dir();
}
END_TEST

START_TEST(overlapping)
{
    make_dir();
    write_raw(path_of("v.safetensors"),
              "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
              " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
              12);
    expect_read_error(path_of("v.safetensors"), CLREMAT_ERR_PARSE, "v.safetensors", "'b'", "overlaps", "'a'", NULL);
    /* an empty tensor between them must not hide the overlap of the others */
    write_raw(path_of("w.safetensors"),
              "{\"long\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
              " \"none\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]},"
              " \"mid\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
              16);
    expect_read_error(path_of("w.safetensors"), CLREMAT_ERR_PARSE, "'mid'", "overlaps", "'long'", NULL);
    remove_dir();
}
END_TEST

/* The tensors' data must cover the data section exactly, as the reference
 * implementation requires (once, bytes after the last tensor were accepted by
 * train --load, --data and the Hugging Face import). */
START_TEST(uncovered_data)
{
    clremat_st_tensor t[6];
    size_t n = make_tensors(t);
    struct stat st;
    FILE *f;
    make_dir();
    ck_assert_int_eq(clremat_st_write(path_of("t.safetensors"), t, n), CLREMAT_OK);
    ck_assert_int_eq(stat(path_of("t.safetensors"), &st), 0);
    f = fopen(path_of("t.safetensors"), "ab");
    ck_assert_ptr_nonnull(f);
    fwrite("junk", 1, 4, f);
    fclose(f);
    {
        char size[64], want[64];
        snprintf(size, sizeof size, "actual %lld", (long long)st.st_size + 4);
        snprintf(want, sizeof want, "expected file size %lld", (long long)st.st_size);
        expect_read_error(path_of("t.safetensors"), CLREMAT_ERR_PARSE, "t.safetensors",
                          "4 bytes after the last tensor's data", want, size, NULL);
    }
    /* a foreign file: one tensor, 8 bytes of data, 3 more */
    write_raw(path_of("x.safetensors"), "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 11);
    expect_read_error(path_of("x.safetensors"), CLREMAT_ERR_PARSE, "x.safetensors", "3 bytes after the last tensor",
                      "end at byte 8", "holds 11 bytes of data", NULL);
    /* no tensors at all, yet data */
    write_raw(path_of("e.safetensors"), "{}", 5);
    expect_read_error(path_of("e.safetensors"), CLREMAT_ERR_PARSE, "e.safetensors", "5 bytes after", NULL);
    /* a gap between two tensors */
    write_raw(path_of("g.safetensors"),
              "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
              " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
              12);
    expect_read_error(path_of("g.safetensors"), CLREMAT_ERR_PARSE, "g.safetensors", "cover 8 of the 12 bytes",
                      "4 bytes between tensors", NULL);
    /* in memory too */
    {
        clremat_st_file mf;
        static const unsigned char m[] = "\x02\0\0\0\0\0\0\0{}x";
        ck_assert_int_eq(clremat_st_read_mem(m, 11, "mem", &mf), CLREMAT_ERR_PARSE);
        ck_assert_msg(strstr(clremat_last_error(), "mem: 1 bytes after"), "%s", clremat_last_error());
    }
    remove_dir();
}
END_TEST

START_TEST(unknown_dtype)
{
    make_dir();
    /* F16 and BF16 are read (Hugging Face checkpoints); U8 is not */
    write_raw(path_of("d.safetensors"), "{\"bytes\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}}", 4);
    expect_read_error(path_of("d.safetensors"), CLREMAT_ERR_PARSE, "d.safetensors", "tensor 'bytes'", "'U8'",
                      "F32, I32, I64, F64, F16, BF16", NULL);
    remove_dir();
}
END_TEST

/* F16 and BF16 elements convert exactly: normal, subnormal, zero, infinity */
START_TEST(half_floats)
{
    static const uint16_t f16[] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x0000, 0xfc00, 0x3555};
    static const float want16[] = {1.0f, -2.0f, 5.9604645e-8f, 65504.0f, 0.0f, -INFINITY, 0.33325195f};
    static const uint16_t bf[] = {0x3f80, 0xc040, 0x3eab};
    static const float wantbf[] = {1.0f, -3.0f, 0.333984375f};
    for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++)
        ck_assert_msg(clremat_st_half_to_float(f16[i], 0) == want16[i], "F16 0x%04x: %.9g, want %.9g", f16[i],
                      (double)clremat_st_half_to_float(f16[i], 0), (double)want16[i]);
    ck_assert(isnan(clremat_st_half_to_float(0x7e00, 0)));
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++)
        ck_assert_msg(clremat_st_half_to_float(bf[i], 1) == wantbf[i], "BF16 0x%04x: %.9g, want %.9g", bf[i],
                      (double)clremat_st_half_to_float(bf[i], 1), (double)wantbf[i]);
    make_dir();
    write_raw(path_of("h.safetensors"), "{\"h\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]},"
              " \"b\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [4, 6]}}", 6);
    {
        clremat_st_file f;
        ck_assert_int_eq(clremat_st_read(path_of("h.safetensors"), &f), CLREMAT_OK);
        ck_assert_int_eq(clremat_st_find(&f, "h")->dtype, CLREMAT_ST_F16);
        ck_assert_int_eq(clremat_st_find(&f, "b")->dtype, CLREMAT_ST_BF16);
        ck_assert_str_eq(clremat_st_dtype_name(CLREMAT_ST_BF16), "BF16");
        clremat_st_free(&f);
    }
    remove_dir();
}
END_TEST

START_TEST(missing_file)
{
    make_dir();
    expect_read_error(path_of("absent.safetensors"), CLREMAT_ERR_IO, "absent.safetensors", "cannot open", NULL);
    expect_read_error(dir, CLREMAT_ERR_IO, "not a regular file", NULL);
    remove_dir();
}
END_TEST

START_TEST(write_into_missing_directory)
{
    clremat_st_tensor t[6];
    size_t n = make_tensors(t);
    char p[256];
    make_dir();
    snprintf(p, sizeof p, "%s/no/such/dir/x.safetensors", dir);
    ck_assert_int_eq(clremat_st_write(p, t, n), CLREMAT_ERR_IO);
    ck_assert_msg(strstr(clremat_last_error(), "x.safetensors") && strstr(clremat_last_error(), "no/such/dir"), "%s",
                  clremat_last_error());
    ck_assert_int_eq(dir_entries(), 0);
    remove_dir();
}
END_TEST

START_TEST(write_rejects_bad_tensors)
{
    clremat_st_tensor t[6];
    size_t n = make_tensors(t);
    make_dir();
    t[2].elems = 5; /* does not match [2, 2] */
    ck_assert_int_eq(clremat_st_write(path_of("b.safetensors"), t, n), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "'big'"));
    t[2].elems = 4;
    snprintf(t[3].name, sizeof t[3].name, "weights");
    ck_assert_int_eq(clremat_st_write(path_of("b.safetensors"), t, n), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clremat_last_error(), "twice"));
    ck_assert_int_eq(dir_entries(), 0);
    remove_dir();
}
END_TEST

/* Reads the whole of a small file for comparisons. */
static size_t read_bytes(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n;
    ck_assert_ptr_nonnull(f);
    n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

START_TEST(overwrite_is_atomic)
{
    static unsigned char before[4096], after[4096], old_link[4096];
    static float big[100000];
    clremat_st_tensor t[6], b = {"big", CLREMAT_ST_F32, 1, {100000}, 100000, big};
    size_t n = make_tensors(t), len_before, len;
    struct stat s1, s2;
    struct rlimit rl;
    char keep[256];
    make_dir();
    snprintf(keep, sizeof keep, "%s", path_of("old.safetensors"));
    ck_assert_int_eq(clremat_st_write(path_of("m.safetensors"), t, 2), CLREMAT_OK);
    ck_assert_int_eq(link(path_of("m.safetensors"), keep), 0);
    ck_assert_int_eq(stat(path_of("m.safetensors"), &s1), 0);
    len_before = read_bytes(keep, before, sizeof before);
    /* a successful overwrite replaces the file by rename: the old inode keeps
     * the old bytes whole, the path has the new ones */
    ck_assert_int_eq(clremat_st_write(path_of("m.safetensors"), t, n), CLREMAT_OK);
    ck_assert_int_eq(stat(path_of("m.safetensors"), &s2), 0);
    ck_assert_uint_ne(s1.st_ino, s2.st_ino);
    ck_assert_uint_eq(read_bytes(keep, old_link, sizeof old_link), len_before);
    ck_assert_int_eq(memcmp(old_link, before, len_before), 0);
    ck_assert_int_eq(dir_entries(), 2);
    len = read_bytes(path_of("m.safetensors"), before, sizeof before);
    /* a write failing half way (file size limit) leaves the file as it was
     * and no temporary file beside it */
    signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &rl), 0);
    rl.rlim_cur = 65536;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    ck_assert_int_eq(clremat_st_write(path_of("m.safetensors"), &b, 1), CLREMAT_ERR_IO);
    ck_assert_msg(strstr(clremat_last_error(), "m.safetensors") && strstr(clremat_last_error(), "writing"), "%s",
                  clremat_last_error());
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_FSIZE, &rl);
    ck_assert_int_eq(dir_entries(), 2);
    ck_assert_uint_eq(read_bytes(path_of("m.safetensors"), after, sizeof after), len);
    ck_assert_int_eq(memcmp(after, before, len), 0);
    remove_dir();
}
END_TEST

/* "__metadata__" entries are written and read back (string values only);
 * empty, NULL or repeated keys are refused. */
START_TEST(metadata_round_trip)
{
    char path[] = "/tmp/clremat-st-metaXXXXXX";
    float v[3] = {1, 2, 3};
    clremat_st_tensor t = {.name = "w", .dtype = CLREMAT_ST_F32, .rank = 1, .dims = {3}, .elems = 3, .data = v};
    clremat_st_meta meta[] = {{"clremat.step", "12"}, {"note", "caf\xc3\xa9 \"quoted\""}};
    clremat_st_meta dup[] = {{"a", "1"}, {"a", "2"}}, empty[] = {{"", "1"}}, nullv[] = {{"k", NULL}};
    clremat_st_file f;
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(clremat_st_write_meta(path, &t, 1, meta, 2), CLREMAT_OK);
    ck_assert_int_eq(clremat_st_read(path, &f), CLREMAT_OK);
    ck_assert_uint_eq(f.n, 1);
    ck_assert_uint_eq(f.n_meta, 2);
    ck_assert_str_eq(clremat_st_meta_get(&f, "clremat.step"), "12");
    ck_assert_str_eq(clremat_st_meta_get(&f, "note"), "caf\xc3\xa9 \"quoted\"");
    ck_assert_ptr_null(clremat_st_meta_get(&f, "missing"));
    clremat_st_free(&f);
    /* a plain write has no metadata */
    ck_assert_int_eq(clremat_st_write(path, &t, 1), CLREMAT_OK);
    ck_assert_int_eq(clremat_st_read(path, &f), CLREMAT_OK);
    ck_assert_uint_eq(f.n_meta, 0);
    ck_assert_ptr_null(clremat_st_meta_get(&f, "clremat.step"));
    clremat_st_free(&f);
    ck_assert_int_eq(clremat_st_write_meta(path, &t, 1, dup, 2), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_st_write_meta(path, &t, 1, empty, 1), CLREMAT_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(clremat_st_write_meta(path, &t, 1, nullv, 1), CLREMAT_ERR_INVALID_ARGUMENT);
    /* non-string values of a foreign file are skipped, not an error */
    {
        const char hdr[] = "{\"__metadata__\":{\"n\":1,\"s\":\"x\"},\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                           "\"data_offsets\":[0,4]}}";
        unsigned char buf[256] = {0};
        size_t hl = sizeof hdr - 1;
        buf[0] = (unsigned char)hl;
        memcpy(buf + 8, hdr, hl);
        ck_assert_int_eq(clremat_st_read_mem(buf, 8 + hl + 4, "mem", &f), CLREMAT_OK);
        ck_assert_uint_eq(f.n_meta, 1);
        ck_assert_str_eq(clremat_st_meta_get(&f, "s"), "x");
        ck_assert_ptr_null(clremat_st_meta_get(&f, "n"));
        clremat_st_free(&f);
    }
    unlink(path);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, reads_foreign_files);
    tcase_add_test(tc, truncated_data);
    tcase_add_test(tc, truncated_header);
    tcase_add_test(tc, bad_json);
    tcase_add_test(tc, offsets_out_of_range);
    tcase_add_test(tc, size_mismatch);
    tcase_add_test(tc, overlapping);
    tcase_add_test(tc, uncovered_data);
    tcase_add_test(tc, unknown_dtype);
    tcase_add_test(tc, half_floats);
    tcase_add_test(tc, missing_file);
    tcase_add_test(tc, write_into_missing_directory);
    tcase_add_test(tc, write_rejects_bad_tensors);
    tcase_add_test(tc, overwrite_is_atomic);
    tcase_add_test(tc, metadata_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return test_run_suite(suite()); }
