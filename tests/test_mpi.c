/* test_mpi.c: data-parallel training under Open MPI (`mpirun -np 2 clremat
 * train`, two ranks sharing the PoCL device): every rank reports the same
 * losses and ends with the same parameters; losses agree with one process at
 * the same global batch within the documented float32 tolerance on every
 * bundled model; two runs are bitwise identical; each rank's predicted peak
 * (gradient staging included) equals its measured peak; -np 1 changes
 * nothing; weights are written once, by rank 0; batchnorm's moving
 * statistics agree across ranks and equal the global batch's; an uneven batch, a rank that
 * cannot open its device, a killed rank and a hung rank each end the job
 * with a clear message and a non-zero exit within bounded time. Skips (77)
 * with a message when configure found no MPI or there is no PoCL device. */
#include "testutil.h"
#include "config.h"
#include "safetensors.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Losses of two ranks against one process, per step: |a - b| <= TOL * |a|
 * (docs/user-guide.md, "Data-parallel training": at most 5.9e-6 measured
 * on the bundled models at 12 steps). */
#define TOL 1e-4
#define RUN_TIMEOUT_S 240
#define DEVICE "'Portable Computing Language'"

static char dir[64];
static char out[1 << 18], err[1 << 16];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/clremat-mpiXXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static const char *model(const char *name)
{
    static char path[4][1024];
    static int k;
    const char *d = getenv("CLREMAT_MODELS");
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s.json", d ? d : "models", name);
    return path[k];
}

/* Under AddressSanitizer (./configure --enable-sanitizers): Open MPI
 * dlcloses its MCA components at MPI_Finalize, and what they kept then
 * shows no module a suppression (tests/lsan.supp) could name; the ranks run
 * without leak checking (every other sanitizer check stays on). The same
 * training code is leak checked in one process by test_train. */
#ifdef __SANITIZE_ADDRESS__
#define RANK_ENV "-x ASAN_OPTIONS=detect_leaks=0 "
#else
#define RANK_ENV ""
#endif

/* Runs `env [mpirun -np NP] clremat ARGS` (np 0: no mpirun) under timeout:
 * exit status (124: hung), stdout in out, stderr in err, wall seconds. */
static int run(const char *env, int np, const char *args, double *secs)
{
    char cmd[8192], ef[128], pre[512] = "";
    const char *tool = getenv("CLREMAT_TOOL"), *mpirun = getenv("CLREMAT_MPIRUN");
    FILE *p, *e;
    size_t n;
    int st;
    double el;
    struct timespec a, b;
    /* containers often forbid the cross-process memory attach of Open MPI's
     * shared-memory transport (CMA): copy through the shared segment */
    if (np > 0)
        snprintf(pre, sizeof pre, "%s --allow-run-as-root --oversubscribe --mca btl_vader_single_copy_mechanism none "
                 "%s-np %d", mpirun, RANK_ENV, np);
    snprintf(ef, sizeof ef, "%s/.stderr", dir);
    n = (size_t)snprintf(cmd, sizeof cmd, "%s timeout -s KILL %d %s %s %s 2>%s </dev/null", env ? env : "",
                         RUN_TIMEOUT_S, pre, tool ? tool : "tools/clremat", args, ef);
    ck_assert_int_lt(n, sizeof cmd);
    clock_gettime(CLOCK_MONOTONIC, &a);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    while (fgetc(p) != EOF)
        ;
    st = pclose(p);
    clock_gettime(CLOCK_MONOTONIC, &b);
    el = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    if (secs)
        *secs = el;
    e = fopen(ef, "r");
    ck_assert_ptr_nonnull(e);
    n = fread(err, 1, sizeof err - 1, e);
    err[n] = 0;
    fclose(e);
    unlink(ef);
    if (!WIFEXITED(st))
        return -1;
    /* 137 is also mpirun's status for a rank killed by signal 9: a hang is
     * one that ran into the time limit */
    return WEXITSTATUS(st) == 137 && el >= RUN_TIMEOUT_S - 1 ? 124 : WEXITSTATUS(st);
}

/* A successful --json run's report (decref it). */
static json_t *run_json(const char *env, int np, const char *args)
{
    json_error_t je;
    json_t *doc;
    int rc = run(env, np, args, NULL);
    ck_assert_msg(rc == 0, "`%s` (np %d): exit %d; stderr: %s", args, np, rc, err);
    doc = json_loads(out, 0, &je);
    ck_assert_msg(doc != NULL, "`%s`: stdout is not one JSON object (%s): %s", args, je.text, out);
    return doc;
}

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_number(v), "no number '%s'", key);
    return json_number_value(v);
}

/* Checks the per-rank report of a 2-rank run and returns it. */
static json_t *ranks_of(json_t *doc, int64_t global_batch)
{
    json_t *dp = json_object_get(doc, "data_parallel"), *ranks = json_object_get(dp, "per_rank");
    ck_assert_msg(json_is_object(dp) && json_is_array(ranks), "no data_parallel.per_rank in the report");
    ck_assert_int_eq(json_array_size(ranks), 2);
    ck_assert_int_eq((int64_t)num(dp, "ranks"), 2);
    ck_assert_int_eq((int64_t)num(dp, "global_batch"), global_batch);
    ck_assert_msg(json_is_true(json_object_get(dp, "params_identical")), "params_identical is not true");
    for (size_t r = 0; r < 2; r++) {
        json_t *a = json_array_get(ranks, r);
        ck_assert_int_eq((int64_t)num(a, "rank"), (int64_t)r);
        ck_assert_int_eq((int64_t)num(a, "local_batch"), global_batch / 2);
        ck_assert_msg(num(a, "predicted_peak_bytes") == num(a, "measured_peak_bytes"),
                      "rank %zu: predicted peak %.0f != measured %.0f", r, num(a, "predicted_peak_bytes"),
                      num(a, "measured_peak_bytes"));
        ck_assert_msg(num(a, "staging_bytes") > 0, "rank %zu: no gradient staging in the plan", r);
        ck_assert_msg(num(a, "comm_share") >= 0 && num(a, "comm_share") <= 1, "rank %zu: comm_share %g", r,
                      num(a, "comm_share"));
        ck_assert_msg(strlen(json_string_value(json_object_get(a, "device"))) > 0, "rank %zu: no device", r);
    }
    /* the same losses and parameters on both ranks, bit for bit */
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ranks, 0), "losses_fnv1a")),
                     json_string_value(json_object_get(json_array_get(ranks, 1), "losses_fnv1a")));
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ranks, 0), "params_fnv1a")),
                     json_string_value(json_object_get(json_array_get(ranks, 1), "params_fnv1a")));
    return ranks;
}

/* 2 ranks against one process on one model: every step's loss and the
 * validation loss within TOL; rank 0's own peak exact. */
static void agree_on(const char *name, const char *extra)
{
    char args[2048];
    json_t *one, *two, *l1, *l2;
    double worst = 0;
    snprintf(args, sizeof args, "--device " DEVICE " train %s --batch 16 --steps 12 --warmup 2 --gemm native --json "
             "--quiet %s", model(name), extra);
    one = run_json(NULL, 0, args);
    two = run_json(NULL, 2, args);
    ranks_of(two, 16);
    l1 = json_object_get(one, "losses");
    l2 = json_object_get(two, "losses");
    ck_assert_int_eq(json_array_size(l1), 12);
    ck_assert_int_eq(json_array_size(l2), 12);
    for (size_t i = 0; i < 12; i++) {
        double a = json_number_value(json_array_get(l1, i)), b = json_number_value(json_array_get(l2, i));
        double rel = fabs(a - b) / fabs(a);
        ck_assert_msg(isfinite(a) && isfinite(b) && rel <= TOL, "%s step %zu: one process %.9g, two ranks %.9g "
                      "(relative %.3g > %g)", name, i + 1, a, b, rel, TOL);
        if (rel > worst)
            worst = rel;
    }
    ck_assert_msg(fabs(num(one, "val_loss") - num(two, "val_loss")) <= TOL * fabs(num(one, "val_loss")),
                  "%s: validation loss %.9g vs %.9g", name, num(one, "val_loss"), num(two, "val_loss"));
    fprintf(stderr, "%s: largest relative loss difference, 2 ranks vs 1 process: %.3g\n", name, worst);
    json_decref(one);
    json_decref(two);
}

START_TEST(agrees_regression) { agree_on("regression", ""); }
END_TEST
START_TEST(agrees_mlp_deep) { agree_on("mlp_deep", ""); } /* dropout: the global batch's masks */
END_TEST
START_TEST(agrees_resnet_mlp) { agree_on("resnet_mlp", ""); }
END_TEST
START_TEST(agrees_transformer) { agree_on("transformer", "--remat full"); } /* attention dropout, recompute */
END_TEST

/* Small buckets (many exchanges per step) and a remat mode: two runs give
 * the same bits, as does the default bucket size; -np 1 is an ordinary run. */
START_TEST(bitwise_repeatable)
{
    const char *args_fmt = "--device " DEVICE " train %s --batch 8 --steps 6 --gemm native --remat auto --json --quiet";
    char args[2048];
    json_t *a, *b, *c, *single, *np1;
    snprintf(args, sizeof args, args_fmt, model("mlp_deep"));
    a = run_json("CLREMAT_MPI_BUCKET_BYTES=4096", 2, args);
    b = run_json("CLREMAT_MPI_BUCKET_BYTES=4096", 2, args);
    ranks_of(a, 8);
    ck_assert_msg(num(json_object_get(a, "data_parallel"), "buckets") > 5, "4096-byte buckets: only %.0f buckets",
                  num(json_object_get(a, "data_parallel"), "buckets"));
    ck_assert_msg(json_equal(json_object_get(a, "losses"), json_object_get(b, "losses")), "losses differ between runs");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ranks_of(a, 8), 0), "params_fnv1a")),
                     json_string_value(json_object_get(json_array_get(ranks_of(b, 8), 0), "params_fnv1a")));
    /* each element is summed over the ranks in rank order whatever the
     * buckets: the default bucket size gives the same bits */
    c = run_json(NULL, 2, args);
    ck_assert_msg(num(json_object_get(c, "data_parallel"), "buckets") < num(json_object_get(a, "data_parallel"),
                  "buckets"), "the default buckets are no fewer than 4096-byte ones");
    ck_assert_msg(json_equal(json_object_get(a, "losses"), json_object_get(c, "losses")),
                  "the bucket size changed the losses");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ranks_of(a, 8), 0), "params_fnv1a")),
                     json_string_value(json_object_get(json_array_get(ranks_of(c, 8), 0), "params_fnv1a")));
    /* one rank under mpirun: the same as no mpirun at all */
    single = run_json(NULL, 0, args);
    np1 = run_json(NULL, 1, args);
    ck_assert_msg(json_equal(json_object_get(single, "losses"), json_object_get(np1, "losses")),
                  "-np 1 changed the losses");
    ck_assert_ptr_null(json_object_get(np1, "data_parallel"));
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(single);
    json_decref(np1);
}
END_TEST

/* --save: one file, written by rank 0 (atomically: nothing else left),
 * holding the parameters both ranks ended with. */
START_TEST(rank0_saves)
{
    char args[2048], path[256], cmd[512];
    json_t *a;
    FILE *p;
    int files = 0;
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    snprintf(args, sizeof args, "--device " DEVICE " train %s --batch 8 --steps 3 --gemm native --json --quiet --save %s",
             model("regression"), path);
    a = run_json(NULL, 2, args);
    ranks_of(a, 8);
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -v '^\\.stderr$' | wc -l", dir);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(fscanf(p, "%d", &files), 1);
    pclose(p);
    ck_assert_msg(files == 1, "%d files in the output folder (want the weights file alone)", files);
    /* resumable by one process */
    snprintf(args, sizeof args, "--device " DEVICE " train %s --batch 8 --steps 1 --gemm native --quiet --load %s",
             model("regression"), path);
    ck_assert_msg(run(NULL, 0, args, NULL) == 0, "loading rank 0's weights failed: %s", err);
    json_decref(a);
}
END_TEST

/* Batchnorm's moving statistics under two ranks: both ranks end with the
 * same bits (ranks_of: params_identical, moving statistics included), and
 * after one step they are the global batch's, as one process at the same
 * global batch computes them, within BN_TOL (the ranks' statistics sums
 * added on every rank, host/dp.c; each rank's own shard would be off by
 * far more). */
#define BN_TOL 2e-6
START_TEST(batchnorm_ranks_agree)
{
    char args[2048], mpath[256], w1[256], w2[256];
    FILE *f;
    json_t *a;
    clremat_st_file s1, s2;
    double worst = 0;
    snprintf(mpath, sizeof mpath, "%s/bn.json", dir);
    f = fopen(mpath, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"name\": \"bn_dp\", \"input\": {\"shape\": [6, 5, 3]}, \"layers\": ["
          "{\"name\": \"conv\", \"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 3, \"padding\": \"same\"},"
          "{\"name\": \"bn\", \"type\": \"batchnorm\", \"momentum\": 0.5},"
          "{\"name\": \"relu\", \"type\": \"activation\", \"activation\": \"relu\"},"
          "{\"name\": \"gap\", \"type\": \"global_avg_pool2d\"},"
          "{\"name\": \"logits\", \"type\": \"dense\", \"units\": 3},"
          "{\"name\": \"loss\", \"type\": \"softmax_cross_entropy\"}]}", f);
    fclose(f);
    snprintf(args, sizeof args, "--device " DEVICE " train %s --batch 8 --steps 3 --gemm native --json --quiet", mpath);
    a = run_json(NULL, 2, args);
    ranks_of(a, 8);
    json_decref(a);
    snprintf(w1, sizeof w1, "%s/one.safetensors", dir);
    snprintf(w2, sizeof w2, "%s/two.safetensors", dir);
    snprintf(args, sizeof args, "--device " DEVICE " train %s --batch 8 --steps 1 --gemm native --quiet --save %s",
             mpath, w1);
    ck_assert_msg(run(NULL, 0, args, NULL) == 0, "one process: %s", err);
    snprintf(args, sizeof args, "--device " DEVICE " train %s --batch 8 --steps 1 --gemm native --quiet --save %s",
             mpath, w2);
    ck_assert_msg(run(NULL, 2, args, NULL) == 0, "two ranks: %s", err);
    ck_assert_msg(clremat_st_read(w1, &s1) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_msg(clremat_st_read(w2, &s2) == CLREMAT_OK, "%s", clremat_last_error());
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "bn/moving_variance" : "bn/moving_mean";
        const clremat_st_tensor *t1 = clremat_st_find(&s1, name), *t2 = clremat_st_find(&s2, name);
        ck_assert_msg(t1 && t2 && t1->elems == 4 && t2->elems == 4, "%s missing", name);
        for (int64_t i = 0; i < 4; i++) {
            float v1, v2;
            memcpy(&v1, (const char *)t1->data + 4 * i, 4);
            memcpy(&v2, (const char *)t2->data + 4 * i, 4);
            worst = fmax(worst, fabs((double)v1 - (double)v2) / fmax(1.0, fabs((double)v1)));
        }
    }
    fprintf(stderr, "batchnorm: moving statistics of 2 ranks within %.3g of one process's after one step\n", worst);
    ck_assert_msg(worst <= BN_TOL, "moving statistics of 2 ranks differ by %.3g from one process's", worst);
    clremat_st_free(&s1);
    clremat_st_free(&s2);
}
END_TEST

START_TEST(uneven_batch_refused)
{
    char args[2048];
    double s;
    int rc;
    snprintf(args, sizeof args, "--device " DEVICE " train %s --batch 15 --steps 2 --quiet", model("regression"));
    rc = run(NULL, 2, args, &s);
    ck_assert_msg(rc != 0 && rc != 124, "exit %d; stderr: %s", rc, err);
    ck_assert_msg(strstr(err, "global batch 15 does not split evenly over 2 ranks (15 = 2 x 7 + 1)"), "stderr: %s",
                  err);
}
END_TEST

/* A loss that goes non-finite stops every rank at the same step (the loss
 * is reduced first): exit 1, with rank 0's report and the reason. */
START_TEST(nonfinite_stops_every_rank)
{
    char args[2048];
    json_error_t je;
    json_t *doc, *st;
    int rc;
    snprintf(args, sizeof args, "--device " DEVICE " train %s --batch 8 --steps 10 --gemm native --optimizer sgd "
             "--lr 1e30 --json --quiet", model("regression"));
    rc = run(NULL, 2, args, NULL);
    ck_assert_msg(rc == 1, "exit %d; stderr: %s", rc, err);
    doc = json_loads(out, 0, &je);
    ck_assert_msg(doc != NULL, "stdout is not one JSON object (%s): %s", je.text, out);
    st = json_object_get(doc, "stopped");
    ck_assert_msg(json_is_string(st) && strstr(json_string_value(st), "not finite"), "stopped: %s", out);
    ck_assert_msg(num(doc, "steps") < 10, "ran all 10 steps");
    ranks_of(doc, 8);
    ck_assert_msg(strstr(err, "the loss is not finite"), "stderr: %s", err);
    json_decref(doc);
}
END_TEST

/* Rank 1's device does not exist: both ranks say so and stop. */
START_TEST(device_failure_ends_job)
{
    char args[2048];
    double s;
    int rc;
    snprintf(args, sizeof args, "--device 'Portable Computing Language,no-such-device' train %s --steps 2 --quiet",
             model("regression"));
    rc = run(NULL, 2, args, &s);
    ck_assert_msg(rc != 0 && rc != 124, "exit %d; stderr: %s", rc, err);
    ck_assert_msg(s < 60, "took %.1f s", s);
    ck_assert_msg(strstr(err, "rank 0 of 2") && strstr(err, "rank 1 of 2") &&
                      strstr(err, "cannot open device 'no-such-device'"),
                  "stderr lacks a message from every rank: %s", err);
}
END_TEST

/* A rank killed in the middle of training ends the job with an error. */
START_TEST(killed_rank_ends_job)
{
    char args[2048];
    double s;
    int rc;
    snprintf(args, sizeof args, "--device " DEVICE " train %s --batch 8 --steps 50 --gemm native --quiet",
             model("regression"));
    rc = run("CLREMAT_MPI_FAULT=kill:1:3", 2, args, &s);
    ck_assert_msg(rc != 0 && rc != 124, "exit %d (124: hung); stderr: %s", rc, err);
    ck_assert_msg(s < 60, "took %.1f s to end", s);
    ck_assert_msg(strstr(err, "killing this rank at exchange 3") && strstr(err, "signal 9"), "stderr: %s", err);
}
END_TEST

/* A rank that hangs: the others give up after CLREMAT_MPI_TIMEOUT and end
 * the job with a message saying what they waited for. */
START_TEST(hung_rank_times_out)
{
    char args[2048];
    double s;
    int rc;
    snprintf(args, sizeof args, "--device " DEVICE " train %s --batch 8 --steps 50 --gemm native --quiet",
             model("regression"));
    rc = run("CLREMAT_MPI_TIMEOUT=4 CLREMAT_MPI_FAULT=hang:1:2", 2, args, &s);
    ck_assert_msg(rc != 0 && rc != 124, "exit %d (124: hung); stderr: %s", rc, err);
    ck_assert_msg(s < 60, "took %.1f s to end", s);
    ck_assert_msg(strstr(err, "rank 0 of 2") && strstr(err, "no answer from the other ranks within 4 s"),
                  "stderr: %s", err);
}
END_TEST

/* 1 when a PoCL device exists (asked in a child: no OpenCL before fork). */
static int have_pocl(void)
{
    int status = 0;
    pid_t pid = fork();
    if (pid == 0) {
        clremat_device_info d;
        _exit(clremat_select_device("Portable Computing Language", &d) == CLREMAT_OK ? 0 : 1);
    }
    if (pid < 0 || waitpid(pid, &status, 0) < 0)
        return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(void)
{
    TCase *tc;
    Suite *s;
    const char *mpirun = getenv("CLREMAT_MPIRUN");
#ifndef CLREMAT_HAVE_MPI
    fprintf(stderr, "MPI not configured (configure found no MPI; apt-get install libopenmpi-dev openmpi-bin, then "
                    "re-run configure): skipping the data-parallel tests\n");
    return TEST_SKIP;
#endif
    if (!mpirun || !*mpirun) {
        fprintf(stderr, "configure found no mpirun (apt-get install openmpi-bin): skipping the data-parallel tests\n");
        return TEST_SKIP;
    }
    if (!have_pocl()) {
        fprintf(stderr, "no PoCL device: skipping the data-parallel tests\n");
        return TEST_SKIP;
    }
    s = test_suite("mpi", 600, &tc);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, agrees_regression);
    tcase_add_test(tc, agrees_mlp_deep);
    tcase_add_test(tc, agrees_resnet_mlp);
    tcase_add_test(tc, agrees_transformer);
    tcase_add_test(tc, bitwise_repeatable);
    tcase_add_test(tc, rank0_saves);
    tcase_add_test(tc, uneven_batch_refused);
    tcase_add_test(tc, nonfinite_stops_every_rank);
    tcase_add_test(tc, device_failure_ends_job);
    tcase_add_test(tc, killed_rank_ends_job);
    tcase_add_test(tc, hung_rank_times_out);
    tcase_add_test(tc, batchnorm_ranks_agree);
    return test_run_suite(s);
}
