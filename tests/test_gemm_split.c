/* test_gemm_split.c: the native GEMM's work-group split
 * (clremat_gemm_split_choose, backend/gemm_split.h). Without a device:
 * every split of a sweep of shapes, batches, transposes, tiles and
 * compute-unit counts is one the kernel can run (blocks within the compiled
 * ones, whole register tiles, no empty column group, actA by rows only) and
 * keeps at least half the compute units busy where the shape allows
 * (beyond small launches); and the splits measured best on a 2-thread PoCL
 * (bench/README.md) are the ones chosen; under a loop budget (Mesa's
 * llvmpipe) every work-group keeps within it where any split can. On a
 * device: the same GEMM split as for 1, 2, 3, 8 and 64 compute units
 * gives the host product's values and the same bits every time, B
 * read in place gives the bits of B packed, and the rows of a panel at C's
 * lower edge get the bits they get inside whole panels. */
#include "testutil.h"
#include "backend.h"
#include "layers.h"
#include "gemm_split.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The 12 x 32 tile's blocks on an AVX-512 PoCL device and the 6 x 16
 * tile's (backend/program.c), with cu compute units. */
static clremat_gemm_blocks blocks_of(int wide, int64_t cu)
{
    clremat_gemm_blocks b = {cu, wide ? 12 : 6, wide ? 32 : 16, wide ? 576 : 288, 256, 0};
    return b;
}

/* Work-groups of a split. */
static int64_t work_groups(const clremat_gemm_split *s, int64_t M, int64_t batch)
{
    return (M + s->bm - 1) / s->bm * s->groups * batch;
}

/* Operands whose sums round differently in another order. */
static void fill_operands(float *ha, int64_t na, float *hb, int64_t nb)
{
    for (int64_t j = 0; j < na; j++)
        ha[j] = (float)sin(0.37 * (double)j) * (1.0f + (float)(j % 7) * 1e-3f);
    for (int64_t j = 0; j < nb; j++)
        hb[j] = (float)cos(0.11 * (double)j) * 3.0f;
}

/* C (M x N) against the host product in double of op(A) (ha: M x K, or
 * K x M when tA) and op(B) (hb: K x N, or N x K when tB), within 1e-5 of
 * the products' magnitudes; what names the case in a failure. */
static void assert_host_product(const float *c, const float *ha, const float *hb, int64_t M, int64_t N, int64_t K,
                                int tA, int tB, const char *what)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                const double p = (double)(tA ? ha[k * M + m] : ha[m * K + k]) *
                                 (double)(tB ? hb[n * K + k] : hb[k * N + n]);
                acc += p;
                mag += fabs(p);
            }
            ck_assert_msg(fabs(c[m * N + n] - acc) <= 1e-5 * (1.0 + mag), "%s: C[%lld][%lld] = %.9g, reference %.9g",
                          what, (long long)m, (long long)n, c[m * N + n], acc);
        }
}

/* Releases A, B and C to ctx's pool. */
static void release3(clremat_ctx *ctx, clremat_buf *A, clremat_buf *B, clremat_buf *C)
{
    clremat_pool_release(ctx->pool, A);
    clremat_pool_release(ctx->pool, B);
    clremat_pool_release(ctx->pool, C);
}

START_TEST(test_splits_valid)
{
    static const int64_t dims[] = {1, 5, 12, 13, 100, 256, 333, 1000, 4096, 50257};
    static const int64_t ks[] = {0, 1, 64, 300, 4096};
    static const int64_t batches[] = {1, 3, 64};
    static const int64_t cus[] = {1, 2, 3, 16, 64};
    const size_t nd = sizeof dims / sizeof dims[0];
    int64_t checked = 0;
    for (int wide = 0; wide < 2; wide++)
        for (size_t c = 0; c < sizeof cus / sizeof cus[0]; c++) {
            const clremat_gemm_blocks b = blocks_of(wide, cus[c]);
            for (size_t i = 0; i < nd; i++)
                for (size_t j = 0; j < nd; j++)
                    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++)
                        for (size_t z = 0; z < sizeof batches / sizeof batches[0]; z++)
                            for (int t = 0; t < 16; t++) {
                                const int64_t M = dims[i], N = dims[j], K = ks[k], batch = batches[z];
                                const int tA = t & 1, tB = (t >> 1) & 1, actA = (t >> 2) & 1, in_place = t >> 3;
                                const int64_t rb_most = (M + b.mr - 1) / b.mr;
                                clremat_gemm_split s;
                                int64_t cb, per, w, most;
                                double flop;
                                clremat_gemm_split_choose(&b, tA, tB, M, N, K, batch, actA, in_place, &s);
                                /* B in place only where allowed, never transposed, and only on a launch
                                 * small enough to share its rows out finely (by rows only) */
                                ck_assert_msg(!s.b_in_place || (in_place && !tB && s.groups == 1),
                                              "%lldx%lldx%lld tB %d: B read in place (allowed %d, %lld groups)",
                                              (long long)M, (long long)N, (long long)K, tB, in_place,
                                              (long long)s.groups);
                                ck_assert_msg(s.bm > 0 && s.bm <= b.mc && s.bm % b.mr == 0 && s.bn > 0 &&
                                                  s.bn <= b.nc && s.bn % b.nr == 0,
                                              "%lldx%lldx%lld: blocks %d x %d outside the compiled %d x %d or not "
                                              "whole tiles", (long long)M, (long long)N, (long long)K, s.bm, s.bn,
                                              b.mc, b.nc);
                                cb = (N + s.bn - 1) / s.bn;
                                ck_assert(s.groups >= 1 && s.groups <= cb);
                                per = (cb + s.groups - 1) / s.groups;
                                ck_assert_msg((s.groups - 1) * per < cb, "%lldx%lld: group %lld of %lld is empty",
                                              (long long)M, (long long)N, (long long)s.groups, (long long)s.groups);
                                if (actA)
                                    ck_assert_int_eq(s.groups, 1);
                                ck_assert((cb - 1) * s.bn < N); /* no empty column block */
                                w = work_groups(&s, M, batch);
                                most = rb_most * (actA ? 1 : cb) * batch; /* one tile of rows a work-group */
                                flop = 2.0 * (double)M * (double)N * (double)(K > 0 ? K : 1) * (double)batch /
                                       (double)b.compute_units;
                                /* beyond a small launch (where one unit waking late is a large part of
                                 * the time and the model may take fewer work-groups), at least half the
                                 * units work where the shape allows (blocks that do not divide among the
                                 * units, 4 column blocks on 3 units, may leave one idle) */
                                /* a small launch (or B read in place): by rows only, the widest column blocks */
                                if (flop < 24e6 || s.b_in_place)
                                    ck_assert_msg(s.groups == 1 && (N <= b.nc ? cb == 1 : s.bn > b.nc / 2),
                                                  "%lldx%lldx%lld: small launch split %d x %d, %lld groups",
                                                  (long long)M, (long long)N, (long long)K, s.bm, s.bn,
                                                  (long long)s.groups);
                                else {
                                    const int64_t can = most < b.compute_units ? most : b.compute_units;
                                    ck_assert_msg(2 * (w < b.compute_units ? w : b.compute_units) >= can,
                                                  "%lldx%lldx%lld batch %lld on %lld units: %lld work-groups, %lld "
                                                  "possible", (long long)M, (long long)N, (long long)K,
                                                  (long long)batch, (long long)b.compute_units, (long long)w,
                                                  (long long)most);
                                }
                                checked++;
                            }
        }
    ck_assert_int_eq(checked, 2 * 5 * 10 * 10 * 5 * 3 * 16);
}
END_TEST

/* The splits measured best (alternating runs, 2-thread PoCL, 12 x 32 tile;
 * bench/README.md), each against the split the previous rule took. */
START_TEST(test_measured_choices)
{
    /* compute units, tA, tB, M, N, K, actA; the split expected: rows, columns, groups, work-groups;
     * B allowed in place, and read in place */
    static const struct {
        int64_t cu;
        int tA, tB;
        int64_t M, N, K;
        int actA, bm, bn;
        int64_t groups, wgs;
        const char *why;
        int allowed, in_place;
    } cases[] = {
        {2, 0, 0, 256, 1024, 1024, 0, 264, 256, 2, 2,
         "one row block, two column groups (B packed once) rather than 2 x 2 (B twice)", 0, 0},
        {2, 0, 1, 256, 1024, 1024, 0, 264, 256, 2, 2, "the same with B transposed", 0, 0},
        {2, 0, 0, 1024, 1024, 1024, 0, 516, 256, 1, 2, "two row blocks by rows only rather than 2 x 2", 0, 0},
        {2, 0, 0, 512, 512, 512, 0, 264, 256, 1, 2,
         "two row blocks by rows only rather than one in two groups: A's pack gathers, B's copies", 0, 0},
        {2, 0, 1, 512, 2048, 2048, 0, 516, 256, 2, 2, "two column groups rather than eight", 0, 0},
        {2, 0, 0, 256, 256, 256, 0, 72, 256, 1, 4, "a small launch: four row blocks of 72 (two a unit)", 0, 0},
        {2, 0, 0, 384, 384, 384, 0, 192, 192, 1, 2, "28.3 MFLOP a unit: two row blocks of 192", 0, 0},
        {2, 1, 0, 256, 1024, 1024, 1, 132, 256, 1, 2, "A through an activation: by rows only", 0, 0},
        {1, 0, 1, 256, 1024, 1024, 0, 264, 256, 1, 1, "one compute unit: one work-group, the least packing", 0, 0},
        /* B read in place (bench/README.md, "B read in place") */
        {2, 0, 0, 256, 256, 256, 0, 12, 256, 1, 22, "B in place: 22 row blocks of 12 (B no longer packed each)", 1,
         1},
        {2, 0, 0, 384, 384, 384, 0, 12, 192, 1, 32, "B in place at 56.6 MFLOP a unit: 32 row blocks of 12", 1, 1},
        {2, 0, 0, 2048, 64, 64, 0, 12, 64, 1, 171, "B in place: row blocks of one tile", 1, 1},
        {2, 0, 0, 512, 512, 512, 0, 264, 256, 1, 2, "134 MFLOP a unit: packed as before, though allowed", 1, 0},
        {2, 0, 1, 256, 256, 256, 0, 132, 256, 1, 2, "B transposed: never in place (the packed split)", 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const clremat_gemm_blocks b = blocks_of(1, cases[i].cu);
        clremat_gemm_split s;
        clremat_gemm_split_choose(&b, cases[i].tA, cases[i].tB, cases[i].M, cases[i].N, cases[i].K, 1,
                                  cases[i].actA, cases[i].allowed, &s);
        ck_assert_msg(s.bm == cases[i].bm && s.bn == cases[i].bn && s.groups == cases[i].groups &&
                          work_groups(&s, cases[i].M, 1) == cases[i].wgs && s.b_in_place == cases[i].in_place,
                      "%lldx%lldx%lld on %lld units: split %d x %d, %lld groups, B in place %d, expected %d x %d, "
                      "%lld groups, in place %d (%s)", (long long)cases[i].M, (long long)cases[i].N,
                      (long long)cases[i].K, (long long)cases[i].cu, s.bm, s.bn, (long long)s.groups, s.b_in_place,
                      cases[i].bm, cases[i].bn, (long long)cases[i].groups, cases[i].in_place, cases[i].why);
    }
}
END_TEST

/* Under a loop budget (Mesa's llvmpipe leaves a work-item's loops after
 * 65535 iterations in all: backend/program.c gives the GEMM three
 * quarters), every work-item keeps within it wherever the smallest split
 * can (one tile of rows and columns), on llvmpipe's blocks and both tiles;
 * where none can, the split of fewest iterations. 45x290x513 (A, B^T) with one work
 * group by rows only computed wrong sums on rusticl before the budget. */
START_TEST(test_loop_budget)
{
    static const int64_t dims[] = {1, 13, 45, 100, 290, 1000, 4096};
    static const int64_t ks[] = {1, 64, 513, 4096, 40000};
    static const int64_t cus[] = {1, 2, 8};
    const int64_t budget = 49149;
    for (int wide = 0; wide < 2; wide++)
        for (size_t c = 0; c < sizeof cus / sizeof cus[0]; c++) {
            const clremat_gemm_blocks b = {cus[c], wide ? 12 : 6, wide ? 32 : 16, 48, 64, budget};
            for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
                for (size_t j = 0; j < sizeof dims / sizeof dims[0]; j++)
                    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++)
                        for (int t = 0; t < 8; t++) {
                            const int64_t M = dims[i], N = dims[j], K = ks[k];
                            clremat_gemm_split s;
                            clremat_gemm_split_choose(&b, t & 1, (t >> 1) & 1, M, N, K, 1, t >> 2, 1, &s);
                            const int64_t steps = clremat_gemm_split_iterations(&b, N, K, &s);
                            /* the fewest steps possible: one tile of rows and of columns, but all of
                             * N's column tiles with A packed through an activation (by rows only) */
                            const int64_t least = (K > 0 ? K : 1) * (((t >> 2) ? (N + b.nr - 1) / b.nr : 1) *
                                                                         (wide ? 16 : 2) + 2);
                            ck_assert_msg(steps <= (least <= budget ? budget : least),
                                          "%lldx%lldx%lld on %lld units: %lld loop iterations (split %d x %d, "
                                          "%lld groups), budget %lld", (long long)M, (long long)N, (long long)K,
                                          (long long)b.compute_units, (long long)steps, s.bm, s.bn,
                                          (long long)s.groups, (long long)budget);
                            ck_assert(s.bm % b.mr == 0 && s.bm <= b.mc && s.bn % b.nr == 0 && s.bn <= b.nc);
                        }
        }
}
END_TEST

/* The same product on several compute-unit counts, so under several
 * splits: the same bits (every C element sums the same k-blocks in the
 * same order whatever the split). */
START_TEST(test_bits_independent_of_split)
{
    static const int64_t shapes[][5] = {/* M, N, K, tA, tB */
                                        {256, 1024, 300, 0, 0}, {333, 777, 555, 1, 0}, {40, 1000, 70, 0, 1},
                                        {150, 145, 300, 1, 1},
                                        /* long work-groups: past Mesa llvmpipe's loop budget unless split for it */
                                        {45, 290, 513, 0, 1}};
    static const int64_t cus[] = {1, 2, 3, 8, 64};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_ctx_set_gemm(ctx, CLREMAT_GEMM_NATIVE), CLREMAT_OK);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
        const int tA = (int)shapes[i][3], tB = (int)shapes[i][4];
        const int64_t na = M * K, nb = K * N, nc = M * N;
        const cl_uint saved = ctx->info.compute_units;
        float *ha, *hb, *first, *got;
        clremat_buf *A, *B, *C;
        int distinct = 0;
        clremat_gemm_split prev = {0, 0, 0, 0};
        if (test_reduced() && M * N * K > 7000000)
            continue;
        ha = malloc(na * sizeof(float));
        hb = malloc(nb * sizeof(float));
        first = malloc(nc * sizeof(float));
        got = malloc(nc * sizeof(float));
        ck_assert_ptr_nonnull(ha);
        ck_assert_ptr_nonnull(hb);
        ck_assert_ptr_nonnull(first);
        ck_assert_ptr_nonnull(got);
        fill_operands(ha, na, hb, nb);
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, na * sizeof(float), "A", &A), CLREMAT_OK);
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, nb * sizeof(float), "B", &B), CLREMAT_OK);
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, nc * sizeof(float), "C", &C), CLREMAT_OK);
        ck_assert_int_eq(clremat_write(ctx, A, 0, na * sizeof(float), ha), CLREMAT_OK);
        ck_assert_int_eq(clremat_write(ctx, B, 0, nb * sizeof(float), hb), CLREMAT_OK);
        for (size_t c = 0; c < sizeof cus / sizeof cus[0]; c++) {
            const clremat_gemm_blocks b = {(int64_t)cus[c], ctx->gemm_mr, ctx->gemm_nr, ctx->gemm_mc, ctx->gemm_nc,
                                           ctx->gemm_max_iterations};
            clremat_gemm_split s;
            clremat_gemm_split_choose(&b, tA, tB, M, N, K, 1, 0,
                                      clremat_gemm_b_in_place(&b, tB, 0, 0, tB ? K : N, 0, 1), &s);
            if (c == 0 || s.bm != prev.bm || s.bn != prev.bn || s.groups != prev.groups ||
                s.b_in_place != prev.b_in_place)
                distinct++;
            prev = s;
            ctx->info.compute_units = (cl_uint)cus[c];
            ck_assert_int_eq(clremat_gemm(ctx, tA, tB, M, N, K, 1.0f, A, 0, tA ? M : K, 0, B, 0, tB ? K : N, 0,
                                          0.0f, C, 0, N, 0, 1),
                             CLREMAT_OK);
            ctx->info.compute_units = saved;
            ck_assert_int_eq(clremat_read(ctx, C, 0, nc * sizeof(float), c == 0 ? first : got), CLREMAT_OK);
            if (c == 0) { /* the first against a host product in double: a split the device cuts short fails */
                char what[96];
                snprintf(what, sizeof what, "%lldx%lldx%lld (split %d x %d, %lld groups)", (long long)M,
                         (long long)N, (long long)K, s.bm, s.bn, (long long)s.groups);
                assert_host_product(first, ha, hb, M, N, K, tA, tB, what);
            } else
                ck_assert_msg(memcmp(first, got, nc * sizeof(float)) == 0,
                              "%lldx%lldx%lld: %lld compute units (split %d x %d, %lld groups) changed the bits",
                              (long long)M, (long long)N, (long long)K, (long long)cus[c], s.bm, s.bn,
                              (long long)s.groups);
        }
        /* under a loop budget (llvmpipe) fewer splits keep within it */
        ck_assert_msg(distinct >= (ctx->gemm_max_iterations ? 2 : 3),
                      "%lldx%lldx%lld: only %d distinct splits: the test compares too little",
                      (long long)M, (long long)N, (long long)K, distinct);
        release3(ctx, A, B, C);
        free(ha);
        free(hb);
        free(first);
        free(got);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* B read in place (clremat_gemm_b_in_place) against B packed: the same
 * product with B's rows 2 KB apart or closer and aligned (read in place on
 * a small launch) and with B in a wider or shifted buffer (packed) gives
 * the same bits, and the host product's values. N = 272 leaves a last
 * column block of 112 (not whole tiles of 32), which the kernel packs beside blocks read in place;
 * K = 300 takes two k-blocks; batch 3 reads each matrix at its stride. */
START_TEST(test_b_in_place_bits)
{
    static const int64_t shapes[][4] = {/* M, N, K, batch */
                                        {256, 256, 300, 1}, {100, 272, 64, 1}, {37, 64, 513, 1}, {48, 96, 80, 3}};
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_ctx_set_gemm(ctx, CLREMAT_GEMM_NATIVE), CLREMAT_OK);
    const clremat_gemm_blocks b = {ctx->info.compute_units, ctx->gemm_mr, ctx->gemm_nr, ctx->gemm_mc, ctx->gemm_nc,
                                   ctx->gemm_max_iterations};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2], batch = shapes[i][3];
        /* B's layouts: rows N apart from 0 (in place), 640 apart (> 512: packed), N apart from offset 3
         * (misaligned: packed) */
        const int64_t ldbs[3] = {N, 640, N}, offs[3] = {0, 0, 3};
        const int64_t na = M * K * batch, nc = M * N * batch;
        float *ha = malloc(na * sizeof(float)), *hb = malloc(K * N * batch * sizeof(float));
        float *first = malloc(nc * sizeof(float)), *got = malloc(nc * sizeof(float));
        float *bl = malloc((3 + 640 * K * batch) * sizeof(float));
        clremat_buf *A, *B, *C;
        ck_assert(ha && hb && first && got && bl);
        fill_operands(ha, na, hb, K * N * batch); /* B's values: matrix z row k column n at (z K + k) N + n */
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, na * sizeof(float), "A", &A), CLREMAT_OK);
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, (3 + 640 * K * batch) * sizeof(float), "B", &B), CLREMAT_OK);
        ck_assert_int_eq(clremat_pool_alloc(ctx->pool, nc * sizeof(float), "C", &C), CLREMAT_OK);
        ck_assert_int_eq(clremat_write(ctx, A, 0, na * sizeof(float), ha), CLREMAT_OK);
        for (int l = 0; l < 3; l++) {
            const int64_t ldb = ldbs[l], off = offs[l], sb = ldb * K;
            clremat_gemm_split s;
            for (int64_t j = 0; j < 3 + 640 * K * batch; j++)
                bl[j] = 1e30f; /* what a kernel reading outside B's rows would pick up */
            for (int64_t z = 0; z < batch; z++)
                for (int64_t k = 0; k < K; k++)
                    memcpy(bl + off + z * sb + k * ldb, hb + (z * K + k) * N, N * sizeof(float));
            ck_assert_int_eq(clremat_write(ctx, B, 0, (3 + 640 * K * batch) * sizeof(float), bl), CLREMAT_OK);
            clremat_gemm_split_choose(&b, 0, 0, M, N, K, batch, 0,
                                      clremat_gemm_b_in_place(&b, 0, 0, off, ldb, sb, batch), &s);
            /* the first layout is read in place where the device has no loop budget (llvmpipe's may
             * leave a launch too long for the small split), the others never */
            if (l == 0 && !ctx->gemm_max_iterations)
                ck_assert_msg(s.b_in_place, "%lldx%lldx%lld: B not read in place", (long long)M, (long long)N,
                              (long long)K);
            if (l > 0)
                ck_assert_int_eq(s.b_in_place, 0);
            ck_assert_int_eq(clremat_gemm(ctx, 0, 0, M, N, K, 1.0f, A, 0, K, M * K, B, off, ldb, sb, 0.0f, C, 0, N,
                                          M * N, batch),
                             CLREMAT_OK);
            ck_assert_int_eq(clremat_read(ctx, C, 0, nc * sizeof(float), l == 0 ? first : got), CLREMAT_OK);
            if (l == 0)
                for (int64_t z = 0; z < batch; z++) {
                    char what[96];
                    snprintf(what, sizeof what, "%lldx%lldx%lld, matrix %lld", (long long)M, (long long)N,
                             (long long)K, (long long)z);
                    assert_host_product(first + z * M * N, ha + z * M * K, hb + z * K * N, M, N, K, 0, 0, what);
                }
            else
                ck_assert_msg(memcmp(first, got, nc * sizeof(float)) == 0,
                              "%lldx%lldx%lld: B packed (ldb %lld, offset %lld) and read in place differ in bits",
                              (long long)M, (long long)N, (long long)K, (long long)ldb, (long long)off);
        }
        release3(ctx, A, B, C);
        free(ha);
        free(hb);
        free(first);
        free(got);
        free(bl);
    }
    clremat_ctx_destroy(ctx);
}
END_TEST

/* The rows of an edge panel (the last micro-panel of C, with fewer than
 * the tile's rows inside: the kernel runs a third, two thirds or all of
 * its rows) get the bits the same rows get inside whole panels: for every
 * M up to three panels, the product of A's first M rows equals those rows
 * of the product of all 3 * mr, bit for bit, and leaves C's rows past M as
 * they were. Every transpose (A's and B's packing paths, B in place where
 * allowed), K over two k-blocks; the tall product against a host product. */
START_TEST(test_edge_panel_bits)
{
    clremat_ctx *ctx;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_ctx_set_gemm(ctx, CLREMAT_GEMM_NATIVE), CLREMAT_OK);
    const int64_t tall = 3 * ctx->gemm_mr, N = 96, K = 300, na = tall * K, nb = K * N, nc = tall * N;
    float *ha = malloc(na * sizeof(float)), *hb = malloc(nb * sizeof(float));
    float *full = malloc(nc * sizeof(float)), *got = malloc(nc * sizeof(float)), *hm = malloc(na * sizeof(float));
    clremat_buf *A, *B, *C;
    ck_assert(ha && hb && full && got && hm);
    fill_operands(ha, na, hb, nb);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, na * sizeof(float), "A", &A), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, nb * sizeof(float), "B", &B), CLREMAT_OK);
    ck_assert_int_eq(clremat_pool_alloc(ctx->pool, nc * sizeof(float), "C", &C), CLREMAT_OK);
    ck_assert_int_eq(clremat_write(ctx, B, 0, nb * sizeof(float), hb), CLREMAT_OK);
    for (int t = 0; t < 4; t++) {
        const int tA = t & 1, tB = t >> 1;
        for (int64_t M = tall; M >= 1; M--) {
            /* A's first M rows of op(A): stored M x K, or K x M for A^T (rebuilt for each M) */
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < K; k++)
                    hm[tA ? k * M + m : m * K + k] = ha[m * K + k];
            ck_assert_int_eq(clremat_write(ctx, A, 0, M * K * sizeof(float), hm), CLREMAT_OK);
            for (int64_t j = 0; j < nc; j++)
                got[j] = -7.0f; /* rows past M must keep it */
            ck_assert_int_eq(clremat_write(ctx, C, 0, nc * sizeof(float), got), CLREMAT_OK);
            ck_assert_int_eq(clremat_gemm(ctx, tA, tB, M, N, K, 1.0f, A, 0, tA ? M : K, 0, B, 0, tB ? K : N, 0, 0.0f,
                                          C, 0, N, 0, 1),
                             CLREMAT_OK);
            ck_assert_int_eq(clremat_read(ctx, C, 0, nc * sizeof(float), M == tall ? full : got), CLREMAT_OK);
            if (M == tall) { /* the tall product against a host product in double (B^T holds the same floats) */
                char what[32];
                snprintf(what, sizeof what, "op %d%d", tA, tB);
                assert_host_product(full, ha, hb, M, N, K, 0, tB, what);
                continue;
            }
            ck_assert_msg(memcmp(got, full, M * N * sizeof(float)) == 0,
                          "op %d%d, M = %lld (%lld rows in the edge panel): its rows differ from the same rows "
                          "inside whole panels", tA, tB, (long long)M, (long long)((M - 1) % ctx->gemm_mr + 1));
            for (int64_t j = M * N; j < nc; j++)
                ck_assert_msg(got[j] == -7.0f, "op %d%d, M = %lld: C written past row M (C[%lld][%lld] = %g)", tA,
                              tB, (long long)M, (long long)(j / N), (long long)(j % N), got[j]);
        }
    }
    release3(ctx, A, B, C);
    free(ha);
    free(hb);
    free(full);
    free(got);
    free(hm);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* clremat_gemm_b_in_place: float32, not transposed, rows at most 512 floats
 * apart, and every row on a whole vector of the tile. */
START_TEST(test_b_in_place_rule)
{
    const clremat_gemm_blocks b = blocks_of(1, 2); /* 12 x 32: vectors of 16 floats */
    ck_assert(clremat_gemm_b_in_place(&b, 0, 0, 0, 256, 0, 1));
    ck_assert(clremat_gemm_b_in_place(&b, 0, 0, 32, 512, 0, 1));
    ck_assert(clremat_gemm_b_in_place(&b, 0, 0, 0, 64, 64 * 100, 4));
    ck_assert(!clremat_gemm_b_in_place(&b, 0, 0, 0, 528, 0, 1));   /* rows too far apart */
    ck_assert(!clremat_gemm_b_in_place(&b, 0, 0, 0, 1024, 0, 1));  /* 4 KB apart */
    ck_assert(!clremat_gemm_b_in_place(&b, 1, 0, 0, 256, 0, 1));   /* B transposed */
    ck_assert(!clremat_gemm_b_in_place(&b, 0, 1, 0, 256, 0, 1));   /* a 16-bit B */
    ck_assert(!clremat_gemm_b_in_place(&b, 0, 0, 8, 256, 0, 1));   /* shifted off a vector */
    ck_assert(!clremat_gemm_b_in_place(&b, 0, 0, 0, 200, 0, 1));   /* rows off vectors */
    ck_assert(!clremat_gemm_b_in_place(&b, 0, 0, 0, 256, 256 * 64 + 8, 2)); /* matrices off vectors */
    ck_assert(clremat_gemm_b_in_place(&b, 0, 0, 0, 256, 256 * 64 + 8, 1));  /* one matrix: its stride unread */
    const clremat_gemm_blocks n = blocks_of(0, 2); /* 6 x 16: vectors of 8 */
    ck_assert(clremat_gemm_b_in_place(&n, 0, 0, 8, 200, 0, 1));
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("gemm_split", 300, &tc);
    tcase_add_test(tc, test_splits_valid);
    tcase_add_test(tc, test_measured_choices);
    tcase_add_test(tc, test_loop_budget);
    tcase_add_test(tc, test_bits_independent_of_split);
    tcase_add_test(tc, test_b_in_place_bits);
    tcase_add_test(tc, test_b_in_place_rule);
    tcase_add_test(tc, test_edge_panel_bits);
    return test_run_device_suite(s);
}
