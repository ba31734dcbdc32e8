/* test_hostile.c: hostile inputs to the clremat command, each of which once
 * crashed, hung, destroyed a file or gave an unclear error: sizes that
 * overflow, files that are not regular files (folders, FIFOs, devices),
 * output paths that cannot be written, weights files with stray or
 * non-finite tensors, bytes that are not UTF-8 in a JSON report, loosely
 * parsed numbers, and temporary files left by a killed save. Every case must
 * end with a clear message naming what and where, a non-zero exit (never a
 * signal, never a hang: each run is under `timeout`), and no file created
 * or replaced. Runs the command on the default device. */
#define _GNU_SOURCE
#include "testutil.h"
#include "safetensors.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>

/* A hung run is killed after this many seconds (exit 124: the test fails). */
#define RUN_TIMEOUT_S 60

static char dir[64];

static const char *model(void)
{
    static char path[1024];
    const char *d = getenv("CLREMAT_MODELS");
    snprintf(path, sizeof path, "%s/regression.json", d ? d : "models");
    return path;
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/clremat-hostileXXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Runs `env clremat ARGS` under timeout: the exit status (124 if it hung,
 * 128+N for signal N), stdout in out, stderr in err, and the wall time. */
static int run(const char *env, const char *args, char *out, size_t olen, char *err, size_t elen, double *secs)
{
    char cmd[8192], ef[128];
    const char *tool = getenv("CLREMAT_TOOL");
    FILE *p, *e;
    size_t n;
    int st;
    struct timespec a, b;
    snprintf(ef, sizeof ef, "%s/.stderr", dir);
    n = (size_t)snprintf(cmd, sizeof cmd, "%s timeout -s KILL %d %s %s 2>%s </dev/null", env ? env : "",
                         RUN_TIMEOUT_S, tool ? tool : "tools/clremat", args, ef);
    ck_assert_int_lt(n, sizeof cmd);
    clock_gettime(CLOCK_MONOTONIC, &a);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    n = fread(out, 1, olen - 1, p);
    out[n] = 0;
    while (fgetc(p) != EOF) /* drain the rest */
        ;
    st = pclose(p);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (secs)
        *secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    e = fopen(ef, "r");
    ck_assert_ptr_nonnull(e);
    n = fread(err, 1, elen - 1, e);
    err[n] = 0;
    fclose(e);
    unlink(ef);
    if (!WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st) == 137 ? 124 : WEXITSTATUS(st); /* timeout -s KILL: 137 */
}

static char out[1 << 16], err[1 << 14];

/* The command must fail cleanly (exit 1 or 2, not a crash or hang) within
 * max_s seconds, with every needle in its stderr. */
#define EXPECT_REFUSED(env, max_s, args, ...)                                                                     \
    do {                                                                                                       \
        const char *needles_[] = {__VA_ARGS__, NULL};                                                          \
        double s_;                                                                                             \
        int rc_ = run(env, args, out, sizeof out, err, sizeof err, &s_);                                      \
        ck_assert_msg(rc_ == 1 || rc_ == 2, "`%s`: exit %d (124: hung; 128+N: signal N); stderr: %s", args, rc_, \
                      err);                                                                                    \
        ck_assert_msg(s_ < (max_s), "`%s`: took %.1f s to be refused (at most %g)", args, s_, (double)(max_s));  \
        for (int k_ = 0; needles_[k_]; k_++)                                                                   \
            ck_assert_msg(strstr(err, needles_[k_]) != NULL, "`%s`: stderr lacks '%s': %s", args, needles_[k_],  \
                          err);                                                                                \
    } while (0)

static char *path_in(const char *name)
{
    static char buf[8][1024]; /* rotated: up to 8 results live at once */
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

/* The predicted peak `clremat ARGS --json` prints (a plan command). */
static unsigned long long planned_peak(const char *args)
{
    char cmd[2100];
    json_error_t jerr;
    json_t *root, *peak;
    unsigned long long bytes;
    snprintf(cmd, sizeof cmd, "%s --json", args);
    ck_assert_msg(run(NULL, cmd, out, sizeof out, err, sizeof err, NULL) == 0, "`%s` failed: %s", cmd, err);
    root = json_loads(out, 0, &jerr);
    ck_assert_msg(root != NULL, "`%s`: not JSON (%s): %s", cmd, jerr.text, out);
    peak = json_object_get(root, "predicted_peak_bytes");
    ck_assert_msg(json_is_integer(peak), "`%s`: no predicted_peak_bytes", cmd);
    bytes = (unsigned long long)json_integer_value(peak);
    json_decref(root);
    return bytes;
}

/* 1. and 2.: a batch whose products overflow, and one far too large for
 * the device, are refused before any host buffer is sized from them. */
START_TEST(test_huge_batch)
{
    char args[2048], needle[64];
    unsigned long long need;
    clremat_device_info info;
    snprintf(args, sizeof args, "train %s --batch 4611686018427387904 --costs measured --steps 1 --quiet", model());
    EXPECT_REFUSED(NULL, 20, args, "--batch", "'4611686018427387904'", "2147483647");
    snprintf(args, sizeof args, "compare %s --batch 4611686018427387904 --costs measured --steps 2 --warmup 0 --quiet",
             model());
    EXPECT_REFUSED(NULL, 20, args, "--batch", "'4611686018427387904'", "2147483647");
    snprintf(args, sizeof args, "plan %s --batch 4611686018427387904", model());
    EXPECT_REFUSED(NULL, 20, args, "--batch", "'4611686018427387904'", "2147483647");
    /* within the option's range but past the model's: every tensor must stay
     * within the kernels' 32-bit index range (h1's 128 floats a sample) */
    snprintf(args, sizeof args, "plan %s --batch 16777216", model());
    EXPECT_REFUSED(NULL, 20, args, "batch 16777216 is too large", "largest is 16777215", "'h1'");
    snprintf(args, sizeof args, "train %s --batch 2147483647 --costs measured --steps 1 --quiet", model());
    EXPECT_REFUSED(NULL, 20, args, "batch 2147483647 is too large", "largest is 16777215");
    snprintf(args, sizeof args, "compare %s --batch 2147483647 --costs measured --steps 2 --warmup 0 --quiet",
             model());
    EXPECT_REFUSED(NULL, 20, args, "batch 2147483647 is too large", "largest is 16777215");
    /* below the index limit but far beyond the device: the plan is refused
     * before the batch is allocated or measured (once 44 s and 7.9 GB),
     * naming the bytes the plan for this device needs: 18816628800 on the
     * native GEMM path, more where the device's GEMM path takes workspace
     * (CLBlast's, 22848757824 on an NVIDIA H200), as `plan --gemm auto`
     * predicts it. A device with that much (an H200 has 139 GiB, and PoCL on
     * a 128 GiB host offers it all) would train it, so there the same
     * refusal is asked for beneath a limit of 1 GiB. */
    snprintf(args, sizeof args, "plan %s --batch 4000000", model());
    need = planned_peak(args);
    ck_assert_uint_eq(need, 18816628800ull);
    snprintf(args, sizeof args, "plan %s --batch 4000000 --gemm auto", model());
    need = planned_peak(args);
    ck_assert_uint_ge(need, 18816628800ull);
    ck_assert_msg(clremat_select_device(getenv("CLREMAT_DEVICE"), &info) == CLREMAT_OK, "%s", clremat_last_error());
    snprintf(args, sizeof args, "train %s --batch 4000000 --costs measured --steps 1 --quiet%s", model(),
             info.global_mem_bytes >= need ? " --memory-limit 1GiB" : "");
    snprintf(needle, sizeof needle, "needs %llu bytes of device memory", need);
    EXPECT_REFUSED(NULL, 10, args, needle);
    /* one tensor beyond the device's largest allocation (h1's output is 5.1 GB
     * at this batch; PoCL and rusticl allow 2 GiB): refused by name at once.
     * Where the device allocates more (an H200 35 GiB), no tensor within the
     * kernels' 32-bit index range (8 GiB) can be too large for it. */
    if (info.max_alloc_bytes < 5119999488ull) {
        snprintf(args, sizeof args, "train %s --batch 9999999 --costs measured --steps 1 --quiet", model());
        EXPECT_REFUSED(NULL, 10, args, "h1/out of 5119999488 bytes", "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
    } else {
        fprintf(stderr, "huge_batch: %s allocates %llu bytes at once, more than any tensor within the index range: "
                "the largest-allocation case does not apply\n", info.name, (unsigned long long)info.max_alloc_bytes);
    }
    snprintf(args, sizeof args, "train %s --batch 99999999 --costs measured --steps 1 --quiet", model());
    EXPECT_REFUSED(NULL, 10, args, "batch 99999999");
    /* a number past 64 bits is refused by every command alike, --quiet or not */
    snprintf(args, sizeof args, "compare %s --batch 18446744073709551616 --quiet", model());
    EXPECT_REFUSED(NULL, 10, args, "--batch", "'18446744073709551616'");
    snprintf(args, sizeof args, "train %s --batch 18446744073709551616 --quiet", model());
    EXPECT_REFUSED(NULL, 10, args, "--batch", "'18446744073709551616'");
    snprintf(args, sizeof args, "plan %s --batch 18446744073709551616", model());
    EXPECT_REFUSED(NULL, 10, args, "--batch", "'18446744073709551616'");
}
END_TEST

/* 3. and 4.: a folder, a FIFO without a writer and a device as the model,
 * --load or --data: refused at once, naming the path and its kind. */
START_TEST(test_inputs_not_regular)
{
    char args[2048];
    const char *fifo = path_in("fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    snprintf(args, sizeof args, "plan %s", dir);
    EXPECT_REFUSED(NULL, 10, args, dir, "folder, not a regular file");
    snprintf(args, sizeof args, "plan %s", fifo);
    EXPECT_REFUSED(NULL, 10, args, fifo, "FIFO");
    snprintf(args, sizeof args, "train %s --steps 1 --quiet", fifo);
    EXPECT_REFUSED(NULL, 10, args, fifo, "FIFO");
    snprintf(args, sizeof args, "compare %s --steps 2 --warmup 0 --quiet", fifo);
    EXPECT_REFUSED(NULL, 10, args, fifo, "FIFO");
    snprintf(args, sizeof args, "train %s --steps 1 --quiet --load %s", model(), fifo);
    EXPECT_REFUSED(NULL, 10, args, fifo, "FIFO");
    snprintf(args, sizeof args, "train %s --steps 1 --quiet --data %s", model(), fifo);
    EXPECT_REFUSED(NULL, 10, args, fifo, "FIFO");
    snprintf(args, sizeof args, "train %s --steps 1 --quiet --load %s", model(), dir);
    EXPECT_REFUSED(NULL, 10, args, dir, "folder");
    snprintf(args, sizeof args, "train %s --steps 1 --quiet --load /dev/zero", model());
    EXPECT_REFUSED(NULL, 10, args, "/dev/zero", "character device");
    snprintf(args, sizeof args, "train %s --steps 1 --quiet --data /dev/zero", model());
    EXPECT_REFUSED(NULL, 10, args, "/dev/zero", "character device");
    snprintf(args, sizeof args, "train %s --steps 1 --quiet", model());
    EXPECT_REFUSED("CLREMAT_KERNELS=/dev/zero", 30, args, "CLREMAT_KERNELS", "/dev/zero", "character device");
    {
        char env[1200];
        snprintf(env, sizeof env, "CLREMAT_KERNELS=%s", fifo);
        EXPECT_REFUSED(env, 30, args, "CLREMAT_KERNELS", fifo, "FIFO");
        /* an empty source builds, and lacks every kernel: the file is named, not the embedded kernels.cl */
        snprintf(env, sizeof env, "CLREMAT_KERNELS=%s", path_in("empty.cl"));
        {
            FILE *e = fopen(path_in("empty.cl"), "w");
            ck_assert_ptr_nonnull(e);
            fclose(e);
        }
        EXPECT_REFUSED(env, 30, args, "not found in CLREMAT_KERNELS's", path_in("empty.cl"));
    }
    /* nothing was created next to the FIFO, and it is still one */
    {
        struct stat sb;
        ck_assert_int_eq(lstat(fifo, &sb), 0);
        ck_assert(S_ISFIFO(sb.st_mode));
    }
}
END_TEST

/* A character device to aim outputs at: a null device node of our own in
 * the test's folder where mknod is allowed (root), else /dev/null, which
 * only root could replace; NULL when neither is safe. Never /dev/null as
 * root: a command that failed this test would destroy it. */
static const char *char_device(void)
{
    static char own[256];
    snprintf(own, sizeof own, "%s", path_in("nulldev"));
    if (mknod(own, S_IFCHR | 0666, makedev(1, 3)) == 0)
        return own;
    return geteuid() != 0 ? "/dev/null" : NULL;
}

/* 5. and 8.: output paths are checked before the first step: empty, in a
 * missing folder, a FIFO, a device, a folder. Nothing is replaced. */
START_TEST(test_outputs_checked_first)
{
    char args[2048];
    char fifo[256];
    const char *dev;
    struct stat sb;
    snprintf(fifo, sizeof fifo, "%s", path_in("out.fifo")); /* path_in's buffers are reused */
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    /* 10^6 steps would take minutes: each refusal must come at once */
    snprintf(args, sizeof args, "train %s --steps 1000000 --quiet --save ''", model());
    EXPECT_REFUSED(NULL, 20, args, "--save", "empty");
    snprintf(args, sizeof args, "train %s --steps 1000000 --quiet --save %s", model(), fifo);
    EXPECT_REFUSED(NULL, 20, args, "--save", fifo, "FIFO", "refusing to replace");
    ck_assert_int_eq(lstat(fifo, &sb), 0);
    ck_assert(S_ISFIFO(sb.st_mode));
    if ((dev = char_device()) != NULL) {
        snprintf(args, sizeof args, "train %s --steps 1000000 --quiet --save %s", model(), dev);
        EXPECT_REFUSED(NULL, 20, args, dev, "character device");
        snprintf(args, sizeof args, "plan %s --pareto --points 3 --svg %s", model(), dev);
        EXPECT_REFUSED(NULL, 20, args, "--svg", dev);
        ck_assert_int_eq(lstat(dev, &sb), 0);
        ck_assert_msg(S_ISCHR(sb.st_mode), "%s is no longer a character device", dev);
    }
    snprintf(args, sizeof args, "train %s --steps 1000000 --quiet --save %s", model(), dir);
    EXPECT_REFUSED(NULL, 20, args, dir, "folder");
    snprintf(args, sizeof args, "train %s --steps 1000000 --quiet --save %s/", model(), path_in("sub"));
    EXPECT_REFUSED(NULL, 20, args, "--save");
    snprintf(args, sizeof args, "train %s --steps 1000000 --quiet --save %s", model(), path_in("no/such/w.st"));
    EXPECT_REFUSED(NULL, 20, args, "no/such", "does not exist");
    snprintf(args, sizeof args, "compare %s --steps 1000000 --quiet --csv %s", model(), fifo);
    EXPECT_REFUSED(NULL, 20, args, "--csv", fifo);
    snprintf(args, sizeof args, "compare %s --steps 1000000 --quiet --svg %s", model(), path_in("no/such/c.svg"));
    EXPECT_REFUSED(NULL, 20, args, "--svg", "does not exist");
    ck_assert_int_eq(lstat(fifo, &sb), 0);
    ck_assert(S_ISFIFO(sb.st_mode));
    /* an output that is one of the run's inputs */
    {
        char m[256];
        FILE *src = fopen(model(), "r"), *dst;
        int c;
        snprintf(m, sizeof m, "%s", path_in("m.json"));
        ck_assert_ptr_nonnull(dst = fopen(m, "w"));
        while ((c = fgetc(src)) != EOF)
            fputc(c, dst);
        fclose(src);
        fclose(dst);
        snprintf(args, sizeof args, "train %s --steps 1000000 --quiet --save %s", m, m);
        EXPECT_REFUSED(NULL, 20, args, "--save", "model file");
        snprintf(args, sizeof args, "compare %s --steps 1000000 --quiet --csv %s", m, m);
        EXPECT_REFUSED(NULL, 20, args, "--csv", "input");
        snprintf(args, sizeof args, "plan %s --pareto --svg %s", m, m);
        EXPECT_REFUSED(NULL, 20, args, "--svg", "model file");
    }
    /* a report that cannot be written to stdout is an error, not a success */
    snprintf(args, sizeof args, "plan %s --json >/dev/full", model());
    EXPECT_REFUSED(NULL, 20, args, "stdout");
    /* a dangling symbolic link is refused, not replaced by a file */
    ck_assert_int_eq(symlink(path_in("nowhere"), path_in("dangling")), 0);
    snprintf(args, sizeof args, "train %s --steps 1000000 --quiet --save %s", model(), path_in("dangling"));
    EXPECT_REFUSED(NULL, 20, args, "symbolic link");
    ck_assert_int_eq(lstat(path_in("dangling"), &sb), 0);
    ck_assert(S_ISLNK(sb.st_mode));
}
END_TEST

/* A fixture of the source tree (tests/keras, tests/hf), copied into the
 * test's folder as name; returns the copy's path. */
static const char *copy_fixture(const char *rel, const char *name)
{
    char src[1024];
    const char *s = getenv("CLREMAT_SRCDIR");
    const char *dst = path_in(name);
    FILE *in, *o;
    int c;
    snprintf(src, sizeof src, "%s/%s", s && *s ? s : ".", rel);
    ck_assert_msg((in = fopen(src, "rb")) != NULL, "fixture %s missing", src);
    ck_assert_ptr_nonnull(o = fopen(dst, "wb"));
    while ((c = fgetc(in)) != EOF)
        fputc(c, o);
    fclose(in);
    ck_assert_int_eq(fclose(o), 0);
    return dst;
}

/* The bytes of path (malloc'd, *len set), for before-and-after checks. */
static char *file_bytes(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    char *b;
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    *len = ftell(f);
    rewind(f);
    ck_assert_ptr_nonnull(b = malloc((size_t)*len + 1));
    ck_assert_int_eq(fread(b, 1, (size_t)*len, f), (size_t)*len);
    fclose(f);
    return b;
}

/* The command must be refused (EXPECT_REFUSED's rules) and leave the input
 * at `keep` byte for byte and nothing at `absent` (NULL: not checked). */
static void refused_and_kept(const char *args, const char *keep, const char *absent, const char *n1, const char *n2)
{
    long a, b;
    char *before = file_bytes(keep, &a), *after;
    struct stat sb;
    EXPECT_REFUSED(NULL, 20, args, n1, n2);
    after = file_bytes(keep, &b);
    ck_assert_msg(a == b && memcmp(before, after, (size_t)a) == 0, "`%s` changed %s", args, keep);
    free(before);
    free(after);
    if (absent)
        ck_assert_msg(lstat(absent, &sb) != 0, "`%s` left %s behind", args, absent);
}

/* Every command's outputs are checked against its inputs and against each
 * other before any work, also when the names differ ("./x" and "x") and
 * when the file does not exist yet: once, import-keras -o MODEL replaced
 * the .keras archive by JSON, fit --svg MODEL replaced the model by an SVG,
 * and two outputs named alike lost the first one's contents. */
START_TEST(test_outputs_distinct)
{
    char args[4096];
    const char *m = copy_fixture("models/regression.json", "m.json");
    const char *k = copy_fixture("tests/keras/seq_mlp.keras", "k.keras");
    const char *c = copy_fixture("tests/hf/tiny/config.json", "config.json");
    char outp[256], out_dot[300];
    snprintf(outp, sizeof outp, "%s", path_in("out"));
    snprintf(out_dot, sizeof out_dot, "%s/./out", dir);
    snprintf(args, sizeof args, "fit %s --memory 1GiB --batch 4 --svg %s/./m.json", m, dir);
    refused_and_kept(args, m, NULL, "--svg", "model file");
    snprintf(args, sizeof args, "import-keras %s -o %s/./k.keras", k, dir);
    refused_and_kept(args, k, NULL, "-o", "refusing to overwrite");
    snprintf(args, sizeof args, "import-keras %s -o %s --weights-out %s", k, outp, out_dot);
    refused_and_kept(args, k, outp, "same file", "--weights-out");
    snprintf(args, sizeof args, "import-hf %s --output %s/../%s/config.json", c, dir, strrchr(dir, '/') + 1);
    refused_and_kept(args, c, NULL, "--output", "config");
    snprintf(args, sizeof args, "train %s --steps 1000000 --quiet --save %s --memory-trace %s", m, outp, out_dot);
    refused_and_kept(args, m, outp, "--memory-trace", "--save");
    snprintf(args, sizeof args, "compare %s --steps 1000000 --quiet --csv %s --svg %s", m, outp, out_dot);
    refused_and_kept(args, m, outp, "same file", "--svg");
    /* distinct names of distinct files still work */
    snprintf(args, sizeof args, "import-hf %s --output %s", c, outp);
    ck_assert_msg(run(NULL, args, out, sizeof out, err, sizeof err, NULL) == 0, "`%s`: %s", args, err);
}
END_TEST

/* A run whose trained parameters make the validation loss non-finite (one
 * step at a learning rate of 1e30) fails like a non-finite training loss,
 * naming the samples and the first non-finite layer, and saves nothing:
 * once it ended with exit 0 and "validation loss nan". */
START_TEST(test_validation_nonfinite)
{
    char args[2048];
    struct stat sb;
    snprintf(args, sizeof args, "train %s --steps 1 --warmup 0 --lr 1e30 --quiet --save %s", model(),
             path_in("w.safetensors"));
    EXPECT_REFUSED(NULL, 30, args, "validation: the loss of samples 0..", "is not finite (nan)",
                   "first layer whose output is non-finite: '", "nothing was saved");
    ck_assert_msg(lstat(path_in("w.safetensors"), &sb) != 0, "a run whose validation failed saved its weights");
    /* the same run at a sane rate succeeds and saves */
    snprintf(args, sizeof args, "train %s --steps 1 --warmup 0 --quiet --save %s", model(), path_in("w.safetensors"));
    ck_assert_msg(run(NULL, args, out, sizeof out, err, sizeof err, NULL) == 0, "`%s`: %s", args, err);
    ck_assert_int_eq(lstat(path_in("w.safetensors"), &sb), 0);
}
END_TEST

/* 5.: a replaced file keeps its mode; a symbolic link is followed (the file
 * it points to is replaced, the link stays). */
START_TEST(test_save_mode_and_symlink)
{
    char args[2048];
    const char *w = path_in("w.safetensors"), *link = path_in("link.safetensors");
    struct stat sb;
    FILE *f = fopen(w, "w");
    ck_assert_ptr_nonnull(f);
    fputs("old", f);
    fclose(f);
    ck_assert_int_eq(chmod(w, 0600), 0);
    snprintf(args, sizeof args, "train %s --steps 1 --batch 8 --quiet --save %s", model(), w);
    ck_assert_msg(run(NULL, args, out, sizeof out, err, sizeof err, NULL) == 0, "%s", err);
    ck_assert_int_eq(stat(w, &sb), 0);
    ck_assert_msg((sb.st_mode & 07777) == 0600, "mode %o after saving over a 0600 file", sb.st_mode & 07777);
    ck_assert_int_gt(sb.st_size, 100);
    ck_assert_int_eq(truncate(w, 0), 0);
    ck_assert_int_eq(symlink("w.safetensors", link), 0);
    snprintf(args, sizeof args, "train %s --steps 1 --batch 8 --quiet --save %s", model(), link);
    ck_assert_msg(run(NULL, args, out, sizeof out, err, sizeof err, NULL) == 0, "%s", err);
    ck_assert_int_eq(lstat(link, &sb), 0);
    ck_assert_msg(S_ISLNK(sb.st_mode), "the symbolic link was replaced");
    ck_assert_int_eq(stat(w, &sb), 0);
    ck_assert_int_gt(sb.st_size, 100);
    ck_assert_int_eq(sb.st_mode & 07777, 0600);
}
END_TEST

/* 11.: a temporary file left by a killed save (".NAME.XXXXXX", lock
 * released) is removed by the next successful save of the same target; one
 * whose lock is held (a save in progress) and another target's are kept. */
START_TEST(test_stale_temporary_files)
{
    char args[2048];
    const char *stale = path_in(".w.safetensors.Ab12Cd"), *busy = path_in(".w.safetensors.Zz99Yy"),
               *other = path_in(".x.safetensors.Ab12Cd"),
               /* scratch files (a .keras save's weights): one of the stale save, one of the busy save, one
                * whose temporary file is gone, one not quite a scratch name */
               *stale_scratch = path_in(".w.safetensors.Ab12Cd.scratch"),
               *busy_scratch = path_in(".w.safetensors.Zz99Yy.scratch"),
               *orphan_scratch = path_in(".w.safetensors.Qq77Rr.scratch"),
               *not_scratch = path_in(".w.safetensors.Ab12Cd.scratchy");
    int fd;
    FILE *f;
    const char *names[] = {stale, busy, other, stale_scratch, busy_scratch, orphan_scratch, not_scratch};
    for (int i = 0; i < 7; i++) {
        ck_assert_ptr_nonnull(f = fopen(names[i], "w"));
        fputs("partial", f);
        fclose(f);
    }
    fd = open(busy, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(flock(fd, LOCK_EX), 0);
    snprintf(args, sizeof args, "train %s --steps 1 --batch 8 --quiet --save %s", model(), path_in("w.safetensors"));
    ck_assert_msg(run(NULL, args, out, sizeof out, err, sizeof err, NULL) == 0, "%s", err);
    ck_assert_msg(access(stale, F_OK) != 0, "stale temporary file %s was not removed", stale);
    ck_assert_msg(access(busy, F_OK) == 0, "a locked temporary file (a save in progress) was removed");
    ck_assert_msg(access(other, F_OK) == 0, "another target's temporary file was removed");
    ck_assert_msg(access(stale_scratch, F_OK) != 0, "stale scratch file %s was not removed", stale_scratch);
    ck_assert_msg(access(orphan_scratch, F_OK) != 0, "scratch file %s without its temporary file was not removed",
                  orphan_scratch);
    ck_assert_msg(access(busy_scratch, F_OK) == 0, "a save in progress lost its scratch file");
    ck_assert_msg(access(not_scratch, F_OK) == 0, "a file not named like a scratch file was removed");
    close(fd);
}
END_TEST

/* No file in the test's folder named like a temporary or scratch file (a
 * dot file: the only ones clremat creates). */
static void no_temporary_left(const char *args)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL)
        ck_assert_msg(e->d_name[0] != '.' || !strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."),
                      "`%s` left %s behind", args, e->d_name);
    closedir(d);
}

/* Past a file-size limit (ulimit -f) every output fails as a failed write:
 * exit 1, a message naming the file and the error, no partial or temporary
 * file, an existing file kept; not killed by SIGXFSZ halfway through a
 * file. A run that fails after its steps says why in its --json report. */
START_TEST(test_file_size_limit)
{
    static const char *const limit = "ulimit -f 2;"; /* 1 or 2 KiB: below every output here */
    char args[2048];
    const char *mt = path_in("trace.json"), *svg = path_in("front.svg"), *w = path_in("w.safetensors");
    const char *cases[][2] = {{"plan %s --memory-trace %s", NULL}, {"plan %s --pareto --svg %s", NULL},
                              {"train %s --steps 1 --batch 8 --quiet --memory-trace %s", NULL},
                              {"train %s --steps 1 --batch 8 --quiet --save %s", NULL}};
    const char *targets[] = {mt, svg, path_in("mt.json"), w};
    long before_len, after_len;
    char *before, *after;
    FILE *f;
    ck_assert_ptr_nonnull(f = fopen(w, "w")); /* an existing --save file, kept */
    fputs("the previous weights", f);
    fclose(f);
    before = file_bytes(w, &before_len);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, cases[i][0], model(), targets[i]);
        EXPECT_REFUSED(limit, 60, args, targets[i], "File too large");
        if (targets[i] != w)
            ck_assert_msg(access(targets[i], F_OK) != 0, "`%s` left %s", args, targets[i]);
        no_temporary_left(args);
    }
    after = file_bytes(w, &after_len);
    ck_assert_msg(after_len == before_len && !memcmp(before, after, (size_t)before_len), "the --save file changed");
    free(before);
    free(after);
    snprintf(args, sizeof args, "train %s --steps 2 --batch 8 --quiet --json --memory-trace %s", model(), mt);
    EXPECT_REFUSED(limit, 60, args, "File too large");
    ck_assert_msg(strstr(out, "\"steps\": 2") && strstr(out, "\"stopped\": \"") && strstr(out, "File too large"),
                  "the partial report does not say why it stopped: %s", out);
}
END_TEST

/* PoCL lists no device when it cannot create its kernel cache: the listing
 * and the error say so and where, not only "install an OpenCL
 * implementation"; an empty POCL_CACHE_DIR (PoCL 3.1 aborted the process on
 * it) is no crash. `devices` compiles nothing, so it is quick whatever
 * runtime answers; `train` runs with Mesa's rusticl off (without a cache
 * folder it would compile every kernel from scratch). Where PoCL is not
 * installed, or another runtime answers, the message part does not apply.
 * With the ICD loader pointed at another folder (OCL_ICD_VENDORS), the
 * hint follows what that folder holds, not /etc/OpenCL/vendors. */
START_TEST(test_unwritable_pocl_cache)
{
    static const char *const env = "HOME=/dev/null XDG_CACHE_HOME= POCL_CACHE_DIR= CLREMAT_DEVICE=";
    const int pocl = access("/etc/OpenCL/vendors/pocl.icd", F_OK) == 0;
    char args[2048], env2[256];
    int rc = run(env, "devices", out, sizeof out, err, sizeof err, NULL);
    ck_assert_msg(rc == 0, "devices: exit %d (128+N: signal N): %s", rc, err);
    if (pocl && strstr(out, "no OpenCL devices found"))
        ck_assert_msg(strstr(out, "PoCL is installed but cannot create its kernel cache in /dev/null/.cache/pocl") &&
                          strstr(out, "POCL_CACHE_DIR"),
                      "%s", out);
    if (pocl) { /* the loader's folder override: no hint without PoCL there, the hint with it under another name */
        char vend[1100], icd[1200], env3[1400], line[4096];
        FILE *src, *dst;
        size_t n;
        snprintf(vend, sizeof vend, "%s/vendors", dir);
        ck_assert_int_eq(mkdir(vend, 0755), 0);
        snprintf(env3, sizeof env3, "%s OCL_ICD_FILENAMES= OCL_ICD_VENDORS=%s", env, vend);
        rc = run(env3, "devices", out, sizeof out, err, sizeof err, NULL);
        ck_assert_msg(rc == 0 && strstr(out, "no OpenCL devices found") && !strstr(out, "PoCL"),
                      "devices, no ICD in OCL_ICD_VENDORS: exit %d: %s%s", rc, out, err);
        snprintf(icd, sizeof icd, "%s/site-PoCL.icd", vend);
        ck_assert_ptr_nonnull(src = fopen("/etc/OpenCL/vendors/pocl.icd", "rb"));
        ck_assert_ptr_nonnull(dst = fopen(icd, "wb"));
        while ((n = fread(line, 1, sizeof line, src)) > 0)
            ck_assert_uint_eq(fwrite(line, 1, n, dst), n);
        fclose(src);
        ck_assert_int_eq(fclose(dst), 0);
        rc = run(env3, "devices", out, sizeof out, err, sizeof err, NULL);
        ck_assert_msg(rc == 0, "devices, PoCL in OCL_ICD_VENDORS: exit %d: %s", rc, err);
        if (strstr(out, "no OpenCL devices found"))
            ck_assert_msg(strstr(out, "PoCL is installed but cannot create its kernel cache in /dev/null/.cache/pocl"),
                          "%s", out);
    }
    snprintf(env2, sizeof env2, "%s RUSTICL_ENABLE=", env);
    snprintf(args, sizeof args, "train %s --steps 1 --quiet", model());
    rc = run(env2, args, out, sizeof out, err, sizeof err, NULL);
    ck_assert_msg(rc == 0 || rc == 1, "train: exit %d (124: timed out; 128+N: signal N): %s", rc, err);
    if (rc == 0 || !pocl || !strstr(err, "no OpenCL device found")) {
        fprintf(stderr, "another runtime answered without a cache folder (exit %d): the message is not checked\n", rc);
        return;
    }
    ck_assert_msg(strstr(err, "PoCL is installed but cannot create its kernel cache in /dev/null/.cache/pocl") &&
                      strstr(err, "POCL_CACHE_DIR"),
                  "%s", err);
}
END_TEST

/* Writes the weights of src with one change: extra (a tensor name) added,
 * or element 7 of tensor poison set to value; the rest as it was, its
 * metadata included (a checkpoint's optimizer state stays whole). */
static void doctor_weights(const char *src, const char *dst, const char *extra, const char *poison, float value)
{
    clremat_st_file f;
    clremat_st_tensor *t;
    float *copy = NULL, one = 1.0f;
    ck_assert_msg(clremat_st_read(src, &f) == CLREMAT_OK, "%s", clremat_last_error());
    t = calloc(f.n + 1, sizeof *t);
    ck_assert_ptr_nonnull(t);
    memcpy(t, f.tensors, f.n * sizeof *t);
    for (size_t i = 0; i < f.n && poison; i++)
        if (!strcmp(t[i].name, poison)) {
            ck_assert_int_gt(t[i].elems, 7);
            copy = malloc((size_t)t[i].elems * sizeof(float));
            memcpy(copy, t[i].data, (size_t)t[i].elems * sizeof(float));
            copy[7] = value;
            t[i].data = copy;
        }
    ck_assert(!poison || copy);
    if (extra) {
        snprintf(t[f.n].name, sizeof t[f.n].name, "%s", extra);
        t[f.n].dtype = CLREMAT_ST_F32;
        t[f.n].rank = 1;
        t[f.n].dims[0] = 1;
        t[f.n].elems = 1;
        t[f.n].data = &one;
    }
    ck_assert_msg(clremat_st_write_meta(dst, t, f.n + (extra != NULL), f.meta, f.n_meta) == CLREMAT_OK, "%s",
                  clremat_last_error());
    free(copy);
    free(t);
    clremat_st_free(&f);
}

/* 6. and 7.: --load refuses stray tensors (whatever their prefix) and
 * non-finite values, naming the file, the tensor and the element. */
START_TEST(test_load_strays_and_nonfinite)
{
    char args[2048];
    const char *good = path_in("good.safetensors"), *bad = path_in("bad.safetensors");
    const char *strays[] = {"h1/extra", "h1", "h1/kernel/x", "nosuch/kernel", "/kernel", "h1/"};
    const float poison[] = {NAN, INFINITY, -INFINITY};
    snprintf(args, sizeof args, "train %s --steps 1 --batch 8 --quiet --save %s", model(), good);
    ck_assert_msg(run(NULL, args, out, sizeof out, err, sizeof err, NULL) == 0, "%s", err);
    for (size_t i = 0; i < sizeof strays / sizeof strays[0]; i++) {
        char want[160];
        doctor_weights(good, bad, strays[i], NULL, 0);
        snprintf(want, sizeof want, "'%s'", strays[i]);
        snprintf(args, sizeof args, "train %s --steps 1 --batch 8 --quiet --load %s", model(), bad);
        EXPECT_REFUSED(NULL, 30, args, bad, want, "not a parameter");
    }
    for (size_t i = 0; i < sizeof poison / sizeof poison[0]; i++) {
        doctor_weights(good, bad, NULL, "h2/kernel", poison[i]);
        snprintf(args, sizeof args, "train %s --steps 1 --batch 8 --quiet --load %s", model(), bad);
        EXPECT_REFUSED(NULL, 30, args, bad, "'h2/kernel'", "element 7", "not a finite");
    }
}
END_TEST

/* 9. and the smaller JSON items: the report is valid JSON whatever bytes
 * the model path holds; a run stopped by a non-finite loss reports
 * final_loss null, its measured peak, and counts steps from 1 as progress
 * does. */
START_TEST(test_json_reports_valid)
{
    char args[2048], path[512];
    json_t *j;
    json_error_t je;
    FILE *src, *dst;
    int c;
    snprintf(path, sizeof path, "%s/m\xff\xfe\xc3(\x01.json", dir);
    src = fopen(model(), "r");
    dst = fopen(path, "w");
    ck_assert(src && dst);
    while ((c = fgetc(src)) != EOF)
        fputc(c, dst);
    fclose(src);
    fclose(dst);
    snprintf(args, sizeof args, "train '%s' --steps 2 --batch 8 --quiet --json", path);
    ck_assert_msg(run(NULL, args, out, sizeof out, err, sizeof err, NULL) == 0, "%s", err);
    j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "train --json is not valid JSON (%s at %d): %s", je.text, je.position, out);
    /* each byte that is not UTF-8 reads back as U+00XX */
    snprintf(path, sizeof path, "%s/m\xc3\xbf\xc3\xbe\xc3\x83(\x01.json", dir);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model")), path);
    json_decref(j);

    /* a run stopped by a non-finite loss */
    snprintf(args, sizeof args, "train %s --steps 20 --batch 8 --quiet --json --optimizer sgd --lr 1e30", model());
    ck_assert_int_eq(run(NULL, args, out, sizeof out, err, sizeof err, NULL), 1);
    j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "--json of a stopped run is not valid JSON (%s): %s", je.text, out);
    {
        json_t *mem = json_object_get(j, "memory");
        long long steps = json_integer_value(json_object_get(j, "steps"));
        const char *why = json_string_value(json_object_get(j, "stopped"));
        char want[64];
        ck_assert_msg(json_is_null(json_object_get(j, "final_loss")), "final_loss of a stopped run: %s", out);
        ck_assert_int_gt(json_integer_value(json_object_get(mem, "measured_peak_bytes")), 0);
        ck_assert_int_eq(json_integer_value(json_object_get(mem, "measured_peak_bytes")),
                         json_integer_value(json_object_get(mem, "predicted_peak_bytes")));
        ck_assert_int_ge(steps, 1);
        ck_assert_int_eq((long long)json_array_size(json_object_get(j, "losses")), steps);
        ck_assert_ptr_nonnull(why);
        snprintf(want, sizeof want, "step %lld:", steps); /* counted from 1, as the progress lines are */
        ck_assert_msg(strstr(why, want) != NULL, "stopped after %lld steps: %s", steps, why);
        ck_assert_msg(strstr(err, want) != NULL, "stderr: %s", err);
    }
    json_decref(j);
}
END_TEST

/* 10. and the smaller items: numbers parsed strictly, with the same limits
 * and message on train, plan and compare, naming the bad value; empty
 * device selections and a misspelt CLREMAT_GEMM refused; compare names the
 * one bad mode of a list. */
START_TEST(test_options_strict)
{
    static const char *const cmds[] = {"train", "plan", "compare"};
    static const char *const bad_batch[] = {"0", "-1", " 5", "+5", "5x", "0x10", "1e3", "", "2147483648",
                                            "99999999999999999999"};
    char args[2048], want[128];
    for (size_t c = 0; c < 3; c++)
        for (size_t i = 0; i < sizeof bad_batch / sizeof bad_batch[0]; i++) {
            snprintf(args, sizeof args, "%s %s --quiet --batch '%s'", cmds[c], model(), bad_batch[i]);
            if (c == 1) /* plan has no --quiet */
                snprintf(args, sizeof args, "plan %s --batch '%s'", model(), bad_batch[i]);
            snprintf(want, sizeof want, "'%s'", bad_batch[i]);
            EXPECT_REFUSED(NULL, 10, args, "--batch takes an integer from 1 to 2147483647", want);
        }
    snprintf(args, sizeof args, "train %s --quiet --steps 100000001", model());
    EXPECT_REFUSED(NULL, 10, args, "--steps", "'100000001'");
    snprintf(args, sizeof args, "compare %s --quiet --steps 100000001", model());
    EXPECT_REFUSED(NULL, 10, args, "--steps", "'100000001'");
    snprintf(args, sizeof args, "train %s --quiet --seed -3", model());
    EXPECT_REFUSED(NULL, 10, args, "--seed", "'-3'");
    snprintf(args, sizeof args, "train %s --quiet --lr nan", model());
    EXPECT_REFUSED(NULL, 10, args, "--lr", "'nan'");
    snprintf(args, sizeof args, "compare %s --quiet --lr inf", model());
    EXPECT_REFUSED(NULL, 10, args, "--lr", "'inf'");
    snprintf(args, sizeof args, "train %s --quiet --lr 1e-50", model()); /* 0 as a float */
    EXPECT_REFUSED(NULL, 10, args, "--lr", "'1e-50'");
    snprintf(args, sizeof args, "train %s --quiet --lr 0x1p-3", model());
    EXPECT_REFUSED(NULL, 10, args, "--lr", "'0x1p-3'");
    {
        /* the hyperparameters as strictly as --lr: decimal, all of it */
        static const char *const bad_hp[] = {"0x0.8", " 0.5", "0.5 ", "nan", "inf", "1e", ".", "-", "+0.5", ""};
        for (size_t i = 0; i < sizeof bad_hp / sizeof bad_hp[0]; i++) {
            snprintf(args, sizeof args, "train %s --quiet --optimizer sgd --momentum '%s'", model(), bad_hp[i]);
            snprintf(want, sizeof want, "'%s'", bad_hp[i]);
            EXPECT_REFUSED(NULL, 10, args, "--momentum takes a number in [0, 1)", want);
        }
        snprintf(args, sizeof args, "compare %s --quiet --weight-decay 0x1p-3", model());
        EXPECT_REFUSED(NULL, 10, args, "--weight-decay", "'0x1p-3'");
    }
    /* an option is never taken as another option's value (a file named --quiet) */
    snprintf(args, sizeof args, "train %s --steps 1 --save --quiet", model());
    EXPECT_REFUSED(NULL, 10, args, "--save needs a value, got the option '--quiet'");
    ck_assert_msg(access("--quiet", F_OK) != 0, "a file named --quiet was written");
    snprintf(args, sizeof args, "plan %s --memory-trace --json", model());
    EXPECT_REFUSED(NULL, 10, args, "--memory-trace needs a value, got the option '--json'");
    snprintf(args, sizeof args, "fit %s --memory 1GiB --svg --json", model());
    EXPECT_REFUSED(NULL, 10, args, "--svg needs a value, got the option '--json'");
    EXPECT_REFUSED(NULL, 10, "--device", "--device needs a value");
    snprintf(args, sizeof args, "import-keras %s/../tests/keras/seq_mlp.keras -o --weights-out",
             getenv("CLREMAT_MODELS") ? getenv("CLREMAT_MODELS") : "models");
    EXPECT_REFUSED(NULL, 10, args, "-o needs a value, got the option '--weights-out'");
    /* a memory limit only lowers the device's memory */
    snprintf(args, sizeof args, "train %s --steps 1 --quiet --memory-limit 18446744073709551615", model());
    EXPECT_REFUSED(NULL, 30, args, "memory limit of 18446744073709551615 bytes is more than",
                   "a limit can only lower the device's memory");
    /* the first extra argument is the one named */
    snprintf(args, sizeof args, "train %s first second", model());
    EXPECT_REFUSED(NULL, 10, args, "unexpected argument 'first'");
    snprintf(args, sizeof args, "plan %s --pareto --points 10001", model());
    EXPECT_REFUSED(NULL, 10, args, "--points", "'10001'");
    snprintf(args, sizeof args, "plan %s --pareto --points 1", model());
    EXPECT_REFUSED(NULL, 10, args, "--points", "'1'");
    snprintf(args, sizeof args, "train %s --quiet --memory-limit 0", model());
    EXPECT_REFUSED(NULL, 10, args, "--memory-limit", "'0'");
    {
        static const char *const bad_bytes[] = {"0x100000", "1e9", "inf", "nan", " 5MiB", "18446744073709551616",
                                                "17179869184GiB", ".5", "1."};
        for (size_t i = 0; i < sizeof bad_bytes / sizeof bad_bytes[0]; i++) {
            snprintf(want, sizeof want, "'%s'", bad_bytes[i]);
            snprintf(args, sizeof args, "plan %s --remat auto --memory-limit '%s'", model(), bad_bytes[i]);
            EXPECT_REFUSED(NULL, 10, args, "--memory-limit", want);
            snprintf(args, sizeof args, "plan %s --remat 'budget:%s'", model(), bad_bytes[i]);
            EXPECT_REFUSED(NULL, 10, args, "budget");
        }
    }
    snprintf(args, sizeof args, "plan %s --remat ''", model());
    EXPECT_REFUSED(NULL, 10, args, "--remat", "empty");
    snprintf(args, sizeof args, "plan %s --remat 'larger_than:99999999999999999999'", model());
    EXPECT_REFUSED(NULL, 10, args, "larger_than");
    snprintf(args, sizeof args, "train %s --steps 1 --quiet --device ''", model());
    EXPECT_REFUSED(NULL, 10, args, "--device", "''");
    EXPECT_REFUSED(NULL, 10, "--device '' devices", "--device", "''");
    snprintf(args, sizeof args, "compare %s --steps 2 --warmup 0 --quiet --devices ''", model());
    EXPECT_REFUSED(NULL, 10, args, "--devices", "''");
    /* a list's items: none empty, none unknown (named as the list's), none twice */
    snprintf(args, sizeof args, "compare %s --steps 2 --warmup 0 --quiet --devices '0:0,'", model());
    EXPECT_REFUSED(NULL, 10, args, "--devices '0:0,': item 2 is empty");
    snprintf(args, sizeof args, "compare %s --steps 2 --warmup 0 --quiet --devices 'no-such-device-xyz'", model());
    EXPECT_REFUSED(NULL, 10, args, "--devices item 1 'no-such-device-xyz' matches no OpenCL device");
    snprintf(args, sizeof args, "compare %s --steps 2 --warmup 0 --quiet --devices '0:0,0:0'", model());
    EXPECT_REFUSED(NULL, 10, args, "items 1 and 2 are the same device, 0:0");
    /* the environment's selection is named as such */
    EXPECT_REFUSED("CLREMAT_DEVICE=no-such-device-xyz", 10, "devices",
                   "CLREMAT_DEVICE 'no-such-device-xyz' matches no OpenCL device");
    snprintf(args, sizeof args, "train %s --steps 1 --quiet", model());
    EXPECT_REFUSED("CLREMAT_GEMM=bogus", 20, args, "CLREMAT_GEMM", "'bogus'");
    snprintf(args, sizeof args, "compare %s --steps 2 --warmup 0 --quiet --remat none,bogus", model());
    EXPECT_REFUSED(NULL, 10, args, "'bogus'");
    ck_assert_msg(strstr(err, "none,bogus") == NULL, "the whole list was quoted: %s", err);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("hostile", 300, &tc);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_huge_batch);
    tcase_add_test(tc, test_inputs_not_regular);
    tcase_add_test(tc, test_outputs_checked_first);
    tcase_add_test(tc, test_outputs_distinct);
    tcase_add_test(tc, test_validation_nonfinite);
    tcase_add_test(tc, test_save_mode_and_symlink);
    tcase_add_test(tc, test_stale_temporary_files);
    tcase_add_test(tc, test_file_size_limit);
    tcase_add_test(tc, test_unwritable_pocl_cache);
    tcase_add_test(tc, test_load_strays_and_nonfinite);
    tcase_add_test(tc, test_json_reports_valid);
    tcase_add_test(tc, test_options_strict);
    return test_run_device_suite(s);
}
