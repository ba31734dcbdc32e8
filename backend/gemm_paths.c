/* gemm_paths.c: the GEMM paths themselves, each called with the path named
 * explicitly (clremat_gemm_on; gemm.c finds the context's path and calls
 * here, and the calibration calls here with each path in turn):
 *  - native: clremat_gemm_cpu of kernels.cl (register tiles, K blocking,
 *    packing in local memory), with the dense epilogue fused in;
 *  - clblast: CLBlastSgemmWithTempBuffer for single GEMMs, its workspace
 *    taken from ctx->gemm_ws (pool memory the plan accounted for; a call
 *    whose workspace was not planned fails rather than let CLBlast
 *    allocate), and the local-memory tiled kernel clremat_gemm_tiled for
 *    batched calls (GPU-friendly, no workspace).
 * Checks sizes, leading dimensions and that every matrix of the batch lies
 * inside its buffer before launching. In a dry run (ctx->dry_run) nothing
 * is enqueued; the workspace each call would need is recorded instead. */
#include "gemm.h"
#include "gemm16.h"
#include "gemm_split.h"
#include "kernel_run.h"
#include <clblast_c.h>

#define GEMM_TILE 32    /* C tile of one work-group (kernels.cl GEMM_TM/GEMM_TN) */
#define GEMM_LOCAL 8    /* work-group is GEMM_LOCAL x GEMM_LOCAL items */

/* Checks one operand stored rows x cols with leading dim ld, batch stride s,
 * starting at off: inside buf for every matrix of the batch. */
static int check_operand(clremat_ctx *ctx, const char *what, const clremat_buf *buf, int64_t off,
                         int64_t rows, int64_t cols, int64_t ld, int64_t s, int64_t batch, int fmt)
{
    int64_t last, cap;
    if (!buf)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "gemm: %s buffer is NULL", what);
    if (rows == 0 || cols == 0)
        return CLREMAT_OK;
    if (off < 0 || ld < cols || (batch > 1 && s < 0))
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "gemm: %s is %lldx%lld with offset %lld, leading dim %lld, stride %lld: invalid",
                            what, (long long)rows, (long long)cols, (long long)off, (long long)ld, (long long)s);
    cap = (int64_t)(buf->bytes / (fmt ? 2 : sizeof(float)));
    last = off + (batch - 1) * s + (rows - 1) * ld + cols;
    if (last > cap)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "gemm: %s (%lldx%lld, ld %lld, offset %lld, %lld matrices, stride %lld) needs %lld "
                            "%s, buffer holds %lld", what, (long long)rows, (long long)cols, (long long)ld,
                            (long long)off, (long long)batch, (long long)s, (long long)last,
                            fmt ? "16-bit elements" : "floats", (long long)cap);
    return CLREMAT_OK;
}

/* The sizes and every operand of a call; A and B in formats fA, fB
 * (CLREMAT_FMT_*), C float32. */
static int check_args_fmt(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, const clremat_buf *A,
                          int fA, int64_t offA, int64_t lda, int64_t sa, const clremat_buf *B, int fB, int64_t offB,
                          int64_t ldb, int64_t sb, const clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc,
                          int64_t batch)
{
    int st;
    if (M < 0 || N < 0 || K < 0 || batch < 0 || M > 2147483647 || N > 2147483647 || K > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "gemm: bad sizes M=%lld N=%lld K=%lld batch=%lld",
                            (long long)M, (long long)N, (long long)K, (long long)batch);
    if (M == 0 || N == 0 || batch == 0)
        return CLREMAT_OK;
    if ((st = check_operand(ctx, "A", A, offA, tA ? K : M, tA ? M : K, lda, sa, batch, fA)) != CLREMAT_OK ||
        (st = check_operand(ctx, "B", B, offB, tB ? N : K, tB ? K : N, ldb, sb, batch, fB)) != CLREMAT_OK ||
        (st = check_operand(ctx, "C", C, offC, M, N, ldc, sc, batch, 0)) != CLREMAT_OK)
        return st;
    return CLREMAT_OK;
}

static int check_args(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, const clremat_buf *A,
                      int64_t offA, int64_t lda, int64_t sa, const clremat_buf *B, int64_t offB, int64_t ldb,
                      int64_t sb, const clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch)
{
    return check_args_fmt(ctx, tA, tB, M, N, K, A, 0, offA, lda, sa, B, 0, offB, ldb, sb, C, offC, ldc, sc, batch);
}

/* The native kernel's blocks on ctx and its share of the loop budget. */
static clremat_gemm_blocks native_blocks(const clremat_ctx *ctx)
{
    const clremat_gemm_blocks b = {ctx->info.compute_units, ctx->gemm_mr, ctx->gemm_nr, ctx->gemm_mc, ctx->gemm_nc,
                                   ctx->gemm_max_iterations};
    return b;
}

/* Element offsets of a product's A and B at k0 along K (A is K x M when
 * tA, else M x K; B is N x K when tB, else K x N): where a split over K
 * starts its part. */
static int64_t a_at_k(int tA, int64_t offA, int64_t lda, int64_t k0) { return offA + (tA ? k0 * lda : k0); }
static int64_t b_at_k(int tB, int64_t offB, int64_t ldb, int64_t k0) { return offB + (tB ? k0 : k0 * ldb); }

/* The native kernel over the whole of K, optionally with the dense
 * epilogue (bias, act, out). */
static int run_native_one(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                      const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa, const clremat_buf *B,
                      int64_t offB, int64_t ldb, int64_t sb, float beta, clremat_buf *C, int64_t offC, int64_t ldc,
                      int64_t sc, int64_t batch, int epi, const clremat_buf *bias, int act, clremat_buf *out,
                      const clremat_buf *s1, const float hp[8], int okind, int actA, const clremat_gemm16_fmt *f16)
{
    cl_int itA = tA ? 1 : 0, itB = tB ? 1 : 0, iM = (cl_int)M, iN = (cl_int)N, iK = (cl_int)K, iepi = epi,
           iub = bias ? 1 : 0, iact = act;
    cl_long loA = offA, llda = lda, lsa = sa, loB = offB, lldb = ldb, lsb = sb, loC = offC, lldc = ldc, lsc = sc;
    cl_mem mA = clremat_mem(A), mB = clremat_mem(B), mC = clremat_mem(C);
    cl_mem mbias = bias ? clremat_mem(bias) : mC, mout = out ? clremat_mem(out) : mC;
    cl_mem ms1 = s1 ? clremat_mem(s1) : mC;
    cl_float8 chp;
    cl_int iok = okind, iactA = actA;
    cl_int ifA = f16 ? f16->fA : 0, ifB = f16 ? f16->fB : 0, ifC = f16 ? f16->fC : 0, iaccC = f16 ? f16->accC : 0;
    cl_int ikeep = f16 && f16->fC ? f16->keepC : 0;
    cl_mem mC16 = f16 && f16->C16 ? clremat_mem(f16->C16) : mC;
    size_t global[3], local[3] = {1, 1, 1};
    const clremat_gemm_blocks blocks = native_blocks(ctx);
    clremat_gemm_split split;
    cl_int bm, bn, ib_in_place;
    clremat_gemm_split_choose(&blocks, tA, tB, M, N, K, batch, actA,
                              clremat_gemm_b_in_place(&blocks, tB, ifB, offB, ldb, sb, batch), &split);
    if (blocks.max_iterations > 0) {
        const int64_t iterations = clremat_gemm_split_iterations(&blocks, N, K, &split);
        if (iterations > blocks.max_iterations && ctx->loop_budget_env)
            return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE,
                                "native GEMM %lldx%lldx%lld: a work-item would run about %lld loop iterations, over "
                                "the GEMM's %lld of the budget set by CLREMAT_LOOP_BUDGET",
                                (long long)M, (long long)N, (long long)K, (long long)iterations,
                                (long long)blocks.max_iterations);
        if (iterations > blocks.max_iterations)
            return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE,
                                "native GEMM %lldx%lldx%lld: a work-item would run about %lld loop iterations; "
                                "this device (%s) leaves a work-item's loops after %lld (Mesa's llvmpipe), so the "
                                "product would come out wrong; use the CLBlast path (--gemm clblast)",
                                (long long)M, (long long)N, (long long)K, (long long)iterations, ctx->info.name,
                                (long long)ctx->loop_budget);
    }
    bm = split.bm;
    bn = split.bn;
    ib_in_place = split.b_in_place;
    global[0] = (size_t)split.groups;
    global[1] = (size_t)((M + bm - 1) / bm);
    global[2] = (size_t)batch;
    for (int i = 0; i < 8; i++)
        chp.s[i] = hp ? hp[i] : 0.0f;
    return clremat_run(ctx, "clremat_gemm_cpu", 3, global, local, sizeof itA, &itA, sizeof itB, &itB, sizeof iM,
                       &iM, sizeof iN, &iN, sizeof iK, &iK, sizeof alpha, &alpha, sizeof mA, &mA, sizeof loA, &loA,
                       sizeof llda, &llda, sizeof lsa, &lsa, sizeof mB, &mB, sizeof loB, &loB, sizeof lldb, &lldb,
                       sizeof lsb, &lsb, sizeof beta, &beta, sizeof mC, &mC, sizeof loC, &loC, sizeof lldc, &lldc,
                       sizeof lsc, &lsc, sizeof iepi, &iepi, sizeof iub, &iub, sizeof iact, &iact, sizeof mbias,
                       &mbias, sizeof mout, &mout, sizeof bm, &bm, sizeof bn, &bn, sizeof ms1, &ms1, sizeof chp,
                       &chp, sizeof iok, &iok, sizeof iactA, &iactA, sizeof ifA, &ifA, sizeof ifB, &ifB, sizeof ifC,
                       &ifC, sizeof iaccC, &iaccC, sizeof mC16, &mC16, sizeof ikeep, &ikeep, sizeof ib_in_place,
                       &ib_in_place, (size_t)0);
}

/* Whether some split of an M x N x K product keeps within the native
 * GEMM's share of the loop budget. */
static int native_fits(const clremat_gemm_blocks *blocks, int tA, int tB, int64_t M, int64_t N, int64_t K,
                       int64_t batch, int actA, int b_in_place)
{
    clremat_gemm_split split;
    clremat_gemm_split_choose(blocks, tA, tB, M, N, K, batch, actA, b_in_place, &split);
    return clremat_gemm_split_iterations(blocks, N, K, &split) <= blocks->max_iterations;
}

/* The k-blocks (of ctx->gemm_kc) one launch of an M x N x K product may
 * take under the native GEMM's share of a loop budget: all of them
 * without a budget or where the whole product keeps within it (one split
 * search: the usual case), else the most whose split keeps within it (0:
 * not even one). fB, offB, ldb, sb: B's format and layout, which decide
 * whether the split may read it in place (clremat_gemm_b_in_place). */
static int64_t native_kblocks_per_launch(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K,
                                         int64_t batch, int actA, int fB, int64_t offB, int64_t ldb, int64_t sb)
{
    const clremat_gemm_blocks blocks = native_blocks(ctx);
    const int b_in_place = clremat_gemm_b_in_place(&blocks, tB, fB, offB, ldb, sb, batch);
    const int64_t nkb = K > 0 ? (K + ctx->gemm_kc - 1) / ctx->gemm_kc : 1;
    int64_t lo = 0, hi = nkb - 1;
    if (blocks.max_iterations <= 0 || native_fits(&blocks, tA, tB, M, N, K, batch, actA, b_in_place))
        return nkb;
    while (lo < hi) { /* the largest count below nkb whose split keeps within (monotone in K) */
        const int64_t mid = (lo + hi + 1) / 2;
        if (native_fits(&blocks, tA, tB, M, N, mid * ctx->gemm_kc, batch, actA, b_in_place))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The native kernel. Under a loop budget a K too long for one launch is
 * split at k-block boundaries into launches in K order, the first with
 * beta, the later ones adding into C (beta 1): the kernel adds each k-block
 * after the first to the C it stored (v = C + alpha c), and a launch's first
 * k-block with beta 1 computes alpha c + C, the same float, so the parts
 * give the same bits as one launch. The parts before the last store plain
 * float32 partial sums into C, as the kernel does between k-blocks (with a
 * 16-bit result C is its float32 scratch); the last part applies the
 * epilogue (bias, activation, the 16-bit rounding). The fused optimizer
 * update (epi 2) takes one k-block and never splits. */
static int run_native(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                      const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa, const clremat_buf *B,
                      int64_t offB, int64_t ldb, int64_t sb, float beta, clremat_buf *C, int64_t offC, int64_t ldc,
                      int64_t sc, int64_t batch, int epi, const clremat_buf *bias, int act, clremat_buf *out,
                      const clremat_buf *s1, const float hp[8], int okind, int actA, const clremat_gemm16_fmt *f16)
{
    const int64_t kb = ctx->gemm_max_iterations > 0 && epi != 2 && K > ctx->gemm_kc
                           ? native_kblocks_per_launch(ctx, tA, tB, M, N, K, batch, actA, f16 ? f16->fB : 0, offB,
                                                       ldb, sb)
                           : 0;
    const int64_t kpart = kb * ctx->gemm_kc;
    clremat_gemm16_fmt partial = {f16 ? f16->fA : 0, f16 ? f16->fB : 0, 0, 0, NULL, 0};
    int st = CLREMAT_OK;
    if (kpart <= 0 || kpart >= K)
        return run_native_one(ctx, tA, tB, M, N, K, alpha, A, offA, lda, sa, B, offB, ldb, sb, beta, C, offC, ldc,
                              sc, batch, epi, bias, act, out, s1, hp, okind, actA, f16);
    for (int64_t k0 = 0; st == CLREMAT_OK && k0 < K; k0 += kpart) {
        const int64_t kn = K - k0 < kpart ? K - k0 : kpart;
        const int last = k0 + kn >= K;
        st = run_native_one(ctx, tA, tB, M, N, kn, alpha, A, a_at_k(tA, offA, lda, k0), lda, sa, B,
                            b_at_k(tB, offB, ldb, k0), ldb, sb, k0 == 0 ? beta : 1.0f, C, offC, ldc, sc, batch,
                            last ? epi : 0, last ? bias : NULL, last ? act : 0, last ? out : NULL, s1, hp, okind,
                            actA, last ? f16 : &partial);
    }
    return st;
}

/* The local-memory tiled kernel (batched calls on the CLBlast path). */
static int run_tiled_one(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                         const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa, const clremat_buf *B,
                         int64_t offB, int64_t ldb, int64_t sb, float beta, clremat_buf *C, int64_t offC,
                         int64_t ldc, int64_t sc, int64_t batch)
{
    cl_int itA = tA ? 1 : 0, itB = tB ? 1 : 0, iM = (cl_int)M, iN = (cl_int)N, iK = (cl_int)K;
    cl_long loA = offA, llda = lda, lsa = sa, loB = offB, lldb = ldb, lsb = sb, loC = offC, lldc = ldc, lsc = sc;
    cl_mem mA = clremat_mem(A), mB = clremat_mem(B), mC = clremat_mem(C);
    size_t global[3], local[3] = {GEMM_LOCAL, GEMM_LOCAL, 1};
    global[0] = (size_t)((N + GEMM_TILE - 1) / GEMM_TILE) * GEMM_LOCAL;
    global[1] = (size_t)((M + GEMM_TILE - 1) / GEMM_TILE) * GEMM_LOCAL;
    global[2] = (size_t)batch;
    return clremat_run(ctx, "clremat_gemm_tiled", 3, global, local, sizeof itA, &itA, sizeof itB, &itB, sizeof iM,
                       &iM, sizeof iN, &iN, sizeof iK, &iK, sizeof alpha, &alpha, sizeof mA, &mA, sizeof loA, &loA,
                       sizeof llda, &llda, sizeof lsa, &lsa, sizeof mB, &mB, sizeof loB, &loB, sizeof lldb, &lldb,
                       sizeof lsb, &lsb, sizeof beta, &beta, sizeof mC, &mC, sizeof loC, &loC, sizeof lldc, &lldc,
                       sizeof lsc, &lsc, (size_t)0);
}

/* The tiled kernel; under a loop budget (loop_budget.c counts 40 loop
 * iterations a 16-deep k-tile, measured about 35 on llvmpipe) a K too long
 * for one launch goes in parts in K order, the later ones adding into C
 * (the same sums, rounded at each part's end). */
static int run_tiled(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                     const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa, const clremat_buf *B, int64_t offB,
                     int64_t ldb, int64_t sb, float beta, clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc,
                     int64_t batch)
{
    const int64_t kpart = ctx->loop_budget > 0 ? (ctx->loop_budget / 40 - 1) * 16 : K;
    int st = CLREMAT_OK;
    if (kpart <= 0 || kpart >= K) /* one launch (the check refuses one too long) */
        return run_tiled_one(ctx, tA, tB, M, N, K, alpha, A, offA, lda, sa, B, offB, ldb, sb, beta, C, offC, ldc, sc,
                             batch);
    for (int64_t k0 = 0; st == CLREMAT_OK && k0 < K; k0 += kpart) {
        const int64_t kn = K - k0 < kpart ? K - k0 : kpart;
        st = run_tiled_one(ctx, tA, tB, M, N, kn, alpha, A, a_at_k(tA, offA, lda, k0), lda, sa, B,
                           b_at_k(tB, offB, ldb, k0), ldb, sb, k0 == 0 ? beta : 1.0f, C, offC, ldc, sc, batch);
    }
    return st;
}

/* Bytes CLBlast asks for one single GEMM; 0 on a query failure. */
static size_t clblast_temp(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, int64_t offA,
                           int64_t lda, int64_t offB, int64_t ldb, int64_t offC, int64_t ldc)
{
    size_t bytes = 0;
    if (CLBlastSGemmTempBufferSize(CLBlastLayoutRowMajor, tA ? CLBlastTransposeYes : CLBlastTransposeNo,
                                   tB ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)M, (size_t)N, (size_t)K,
                                   (size_t)offA, (size_t)lda, (size_t)offB, (size_t)ldb, (size_t)offC, (size_t)ldc,
                                   &ctx->queue, &bytes) != CLBlastSuccess)
        return 0;
    return bytes;
}

/* The most of K one CLBlast GEMM takes on a device with a loop budget
 * (loop_budget.h): its kernels run about K / 16 iterations a work-item
 * (measured on rusticl llvmpipe: K = 10^6 correct, 2 x 10^6 not), so four
 * times the budget keeps them within it four times over; K itself elsewhere.
 * run_clblast splits a longer K into products added into C in K order. */
static int64_t clblast_k_per_call(const clremat_ctx *ctx, int64_t K)
{
    return ctx->loop_budget > 0 && K > 4 * ctx->loop_budget ? 4 * ctx->loop_budget : K;
}

/* The largest workspace of the calls run_clblast makes for this product
 * (each K part at its offsets). */
static size_t clblast_need(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, int64_t offA,
                           int64_t lda, int64_t offB, int64_t ldb, int64_t offC, int64_t ldc)
{
    const int64_t kc = clblast_k_per_call(ctx, K);
    size_t need = 0;
    for (int64_t k0 = 0; k0 < K; k0 += kc) {
        const int64_t kn = K - k0 < kc ? K - k0 : kc;
        const size_t b = clblast_temp(ctx, tA, tB, M, N, kn, a_at_k(tA, offA, lda, k0), lda,
                                      b_at_k(tB, offB, ldb, k0), ldb, offC, ldc);
        need = b > need ? b : need;
    }
    return need;
}

size_t clremat_gemm_workspace_on(clremat_ctx *ctx, clremat_gemm_path path, int tA, int tB, int64_t M, int64_t N,
                                 int64_t K, int64_t offA, int64_t lda, int64_t sa, int64_t offB, int64_t ldb,
                                 int64_t sb, int64_t offC, int64_t ldc, int64_t sc, int64_t batch)
{
    (void)sa, (void)sb, (void)sc;
    if (path != CLREMAT_GEMM_CLBLAST || batch != 1 || M <= 0 || N <= 0 || K <= 0)
        return 0;
    return clblast_need(ctx, tA, tB, M, N, K, offA, lda, offB, ldb, offC, ldc);
}

/* One CLBlast GEMM over the whole of K (need: its workspace, planned). */
static int run_clblast_one(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                           const clremat_buf *A, int64_t offA, int64_t lda, const clremat_buf *B, int64_t offB,
                           int64_t ldb, float beta, clremat_buf *C, int64_t offC, int64_t ldc, size_t need)
{
    cl_event ev = NULL;
    CLBlastStatusCode cs;
    cs = CLBlastSgemmWithTempBuffer(CLBlastLayoutRowMajor, tA ? CLBlastTransposeYes : CLBlastTransposeNo,
                                    tB ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)M, (size_t)N, (size_t)K,
                                    alpha, clremat_mem(A), (size_t)offA, (size_t)lda, clremat_mem(B), (size_t)offB,
                                    (size_t)ldb, beta, clremat_mem(C), (size_t)offC, (size_t)ldc,
                                    &ctx->active_queue, &ev, need > 0 ? clremat_mem(ctx->gemm_ws) : NULL);
    if (cs != CLBlastSuccess)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "CLBlastSgemm %lldx%lldx%lld (tA=%d tB=%d) failed: status %d",
                            (long long)M, (long long)N, (long long)K, tA, tB, (int)cs);
    return clremat_profile_event(ctx, ev, "CLBlastSgemm");
}

static int run_clblast(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                       const clremat_buf *A, int64_t offA, int64_t lda, const clremat_buf *B, int64_t offB,
                       int64_t ldb, float beta, clremat_buf *C, int64_t offC, int64_t ldc)
{
    size_t need = clblast_need(ctx, tA, tB, M, N, K, offA, lda, offB, ldb, offC, ldc);
    const int64_t kc = clblast_k_per_call(ctx, K);
    int st = CLREMAT_OK;
    if (ctx->dry_run) {
        if (need > ctx->dry_ws)
            ctx->dry_ws = need;
        return CLREMAT_OK;
    }
    if (need > 0 && (!ctx->gemm_ws || ctx->gemm_ws->bytes < need))
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL,
                            "gemm (CLBlast) %lldx%lldx%lld needs %zu bytes of workspace but %zu were planned",
                            (long long)M, (long long)N, (long long)K, need,
                            ctx->gemm_ws ? (size_t)ctx->gemm_ws->bytes : (size_t)0);
    /* K in parts under a loop budget: C = alpha A B + beta C, then += the
     * next parts in K order */
    for (int64_t k0 = 0; st == CLREMAT_OK && k0 < K; k0 += kc) {
        const int64_t kn = K - k0 < kc ? K - k0 : kc;
        st = run_clblast_one(ctx, tA, tB, M, N, kn, alpha, A, a_at_k(tA, offA, lda, k0), lda, B,
                             b_at_k(tB, offB, ldb, k0), ldb, k0 == 0 ? beta : 1.0f, C, offC, ldc, need);
    }
    return st;
}

int clremat_gemm_on(clremat_ctx *ctx, clremat_gemm_path path, int tA, int tB, int64_t M, int64_t N, int64_t K,
                    float alpha, const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa,
                    const clremat_buf *B, int64_t offB, int64_t ldb, int64_t sb, float beta,
                    clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch)
{
    int st = check_args(ctx, tA, tB, M, N, K, A, offA, lda, sa, B, offB, ldb, sb, C, offC, ldc, sc, batch);
    if (st != CLREMAT_OK || M == 0 || N == 0 || batch == 0)
        return st;
    if (path == CLREMAT_GEMM_CLBLAST) {
        if (batch == 1 && K > 0)
            return run_clblast(ctx, tA, tB, M, N, K, alpha, A, offA, lda, B, offB, ldb, beta, C, offC, ldc);
        return run_tiled(ctx, tA, tB, M, N, K, alpha, A, offA, lda, sa, B, offB, ldb, sb, beta, C, offC, ldc, sc,
                         batch);
    }
    return run_native(ctx, tA, tB, M, N, K, alpha, A, offA, lda, sa, B, offB, ldb, sb, beta, C, offC, ldc, sc, batch,
                      0, NULL, 0, NULL, NULL, NULL, 0, 0, NULL);
}

int clremat_gemm_dense_on(clremat_ctx *ctx, clremat_gemm_path path, int64_t rows, int64_t in, int64_t units,
                          const clremat_buf *x, const clremat_buf *W, const clremat_buf *bias, int act,
                          clremat_buf *pre, clremat_buf *out)
{
    int st = check_args(ctx, 0, 0, rows, units, in, x, 0, in, 0, W, 0, units, 0, pre, 0, units, 0, 1);
    cl_int n, iu, ub, iact = act;
    cl_mem mb, mp, mo;
    if (st != CLREMAT_OK || rows == 0 || units == 0)
        return st;
    if (act != 0 && !out)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "dense gemm: activation without an output buffer");
    if (path != CLREMAT_GEMM_CLBLAST)
        return run_native(ctx, 0, 0, rows, units, in, 1.0f, x, 0, in, 0, W, 0, units, 0, 0.0f, pre, 0, units, 0, 1,
                          bias || act ? 1 : 0, bias, act, act ? out : NULL, NULL, NULL, 0, 0, NULL);
    st = clremat_gemm_on(ctx, path, 0, 0, rows, units, in, 1.0f, x, 0, in, 0, W, 0, units, 0, 0.0f, pre, 0, units, 0,
                         1);
    if (st != CLREMAT_OK || (!bias && !act))
        return st;
    if (rows * units > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_TOO_LARGE, "dense gemm: %lld outputs exceed the 2^31 limit",
                            (long long)(rows * units));
    n = (cl_int)(rows * units), iu = (cl_int)units, ub = bias ? 1 : 0;
    mb = clremat_mem(bias ? bias : pre), mp = clremat_mem(pre), mo = clremat_mem(act ? out : pre);
    return clremat_run1d(ctx, "clremat_bias_act8", (rows * units + 7) / 8, sizeof n, &n, sizeof iu, &iu, sizeof ub, &ub,
                         sizeof iact, &iact, sizeof mb, &mb, sizeof mp, &mp, sizeof mo, &mo, (size_t)0);
}

int clremat_gemm_update_native(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K,
                               const clremat_buf *A, int64_t lda, const clremat_buf *B, int64_t ldb,
                               clremat_buf *param, clremat_buf *s0, clremat_buf *s1, int okind, const float hp[8],
                               int actA)
{
    int st = check_args(ctx, tA, tB, M, N, K, A, 0, lda, 0, B, 0, ldb, 0, param, 0, N, 0, 1);
    if (st != CLREMAT_OK || M == 0 || N == 0)
        return st;
    if (K < 1 || K > ctx->gemm_kc)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL,
                            "fused update GEMM %lldx%lldx%lld: K must fit one k-block of %d", (long long)M,
                            (long long)N, (long long)K, ctx->gemm_kc);
    if ((st = clremat_check_buf(ctx, "fused update", "state 0", s0, M * N)) != CLREMAT_OK ||
        (okind && (st = clremat_check_buf(ctx, "fused update", "state 1", s1, M * N)) != CLREMAT_OK))
        return st;
    return run_native(ctx, tA, tB, M, N, K, 1.0f, A, 0, lda, 0, B, 0, ldb, 0, 0.0f, param, 0, N, 0, 1, 2, NULL, 0,
                      s0, okind ? s1 : NULL, hp, okind, actA, NULL);
}

int clremat_gemm_acta_native(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, int actA,
                             const clremat_buf *A, int64_t lda, const clremat_buf *B, int64_t ldb, clremat_buf *C)
{
    int st = check_args(ctx, tA, tB, M, N, K, A, 0, lda, 0, B, 0, ldb, 0, C, 0, N, 0, 1);
    if (st != CLREMAT_OK || M == 0 || N == 0)
        return st;
    return run_native(ctx, tA, tB, M, N, K, 1.0f, A, 0, lda, 0, B, 0, ldb, 0, 0.0f, C, 0, N, 0, 1, 0, NULL, 0, NULL,
                      NULL, NULL, 0, actA, NULL);
}

int clremat_gemm_dact_native(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K,
                             const clremat_buf *A, int64_t lda, const clremat_buf *B, int64_t ldb, clremat_buf *C,
                             int act, clremat_buf *X, int store_act)
{
    int st = check_args(ctx, tA, tB, M, N, K, A, 0, lda, 0, B, 0, ldb, 0, C, 0, N, 0, 1);
    if (st != CLREMAT_OK || M == 0 || N == 0)
        return st;
    if (act == 0)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "gemm dact: no activation to differentiate");
    if ((st = clremat_check_buf(ctx, "gemm dact", "pre-activation", X, M * N)) != CLREMAT_OK)
        return st;
    /* epi 3 reads X through the kernel's out argument (in C's layout);
     * epi 4 also writes act(X) there */
    return run_native(ctx, tA, tB, M, N, K, 1.0f, A, 0, lda, 0, B, 0, ldb, 0, 0.0f, C, 0, N, 0, 1,
                      store_act ? 4 : 3, NULL, act, X, NULL, NULL, 0, 0, NULL);
}

/* ---- 16-bit operands and results on the native path (gemm16.h) ---- */

/* buf holds at least n elements of format fmt. */
static int check16(clremat_ctx *ctx, const char *what, const clremat_buf *buf, int64_t n, int fmt)
{
    const size_t es = fmt ? 2 : 4;
    if (!buf || buf->bytes / es < (size_t)n)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "gemm16: %s holds %zu bytes, %lld elements of %zu bytes needed", what,
                            buf ? (size_t)buf->bytes : (size_t)0, (long long)n, es);
    return CLREMAT_OK;
}

int clremat_gemm16(clremat_ctx *ctx, const clremat_gemm16_call *g)
{
    const int64_t M = g->M, N = g->N, K = g->K;
    const int upd = !g->fC && g->s0;
    clremat_gemm16_fmt f = {g->fA, g->fB, g->fC, g->fC ? g->acc : 0, g->C, g->fC ? g->keep : 0};
    clremat_buf *C = g->fC ? (g->scratch ? g->scratch : g->C) : g->C;
    int st;
    if (M < 0 || N < 0 || K < 0 || M > 2147483647 || N > 2147483647 || K > 2147483647)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "gemm16: bad sizes M=%lld N=%lld K=%lld",
                            (long long)M, (long long)N, (long long)K);
    if (M == 0 || N == 0)
        return CLREMAT_OK;
    if (g->offA < 0 || g->offB < 0)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "gemm16: negative offset (A %lld, B %lld)",
                            (long long)g->offA, (long long)g->offB);
    if (!g->fC && g->bias && (upd || g->act))
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "gemm16: a float32 C takes a bias without an update or "
                            "activation only");
    if ((st = check16(ctx, "A", g->A, g->offA + M * K, g->fA)) != CLREMAT_OK ||
        (st = check16(ctx, "B", g->B, g->offB + K * N, g->fB)) != CLREMAT_OK ||
        (st = check16(ctx, "C", g->C, M * N, g->fC)) != CLREMAT_OK ||
        (g->fC && g->act && (st = check16(ctx, "out", g->out, M * N, g->fC)) != CLREMAT_OK) ||
        (g->bias && (st = check16(ctx, "bias", g->bias, N, 0)) != CLREMAT_OK))
        return st;
    if (g->fC && (K > ctx->gemm_kc || g->keep) && (st = check16(ctx, "scratch", g->scratch, M * N, 0)) != CLREMAT_OK)
        return st;
    if (upd && (K < 1 || K > ctx->gemm_kc))
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "gemm16 update %lldx%lldx%lld: K must fit one k-block of %d",
                            (long long)M, (long long)N, (long long)K, ctx->gemm_kc);
    if (upd && ((st = check16(ctx, "state 0", g->s0, M * N, 0)) != CLREMAT_OK ||
                (g->okind && (st = check16(ctx, "state 1", g->s1, M * N, 0)) != CLREMAT_OK)))
        return st;
    /* (in a dry run clremat_run enqueues nothing, after the loop check) */
    return run_native(ctx, g->tA, g->tB, M, N, K, 1.0f, g->A, g->offA, g->tA ? M : K, 0, g->B, g->offB,
                      g->tB ? K : N, 0, 0.0f, C, 0, N, 0, 1, upd ? 2 : (g->bias || (g->fC && g->act)) ? 1 : 0, g->bias,
                      g->fC ? g->act : 0, upd ? g->s0 : (g->fC && g->act ? g->out : NULL),
                      upd && g->okind ? g->s1 : NULL,
                      g->hp, upd ? g->okind : 0, 0, &f);
}

/* A float32 or 16-bit A and B (f->fA, f->fB) and, with f->fC, C also
 * rounded into f->C16 at C's places: the checks of every operand, then the
 * native kernel. */
static int run_fmt(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                   const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa, const clremat_buf *B, int64_t offB,
                   int64_t ldb, int64_t sb, float beta, clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc,
                   int64_t batch, const clremat_gemm16_fmt *f)
{
    int st = check_args_fmt(ctx, tA, tB, M, N, K, A, f->fA, offA, lda, sa, B, f->fB, offB, ldb, sb, C, offC, ldc, sc,
                            batch);
    if (st == CLREMAT_OK && f->fC && M > 0 && N > 0 && batch > 0)
        st = check_operand(ctx, "C16", f->C16, offC, M, N, ldc, sc, batch, f->fC);
    if (st != CLREMAT_OK || M == 0 || N == 0 || batch == 0)
        return st;
    return run_native(ctx, tA, tB, M, N, K, alpha, A, offA, lda, sa, B, offB, ldb, sb, beta, C, offC, ldc, sc, batch,
                      0, NULL, 0, NULL, NULL, NULL, 0, 0, f);
}

int clremat_gemm_fmt_native(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                            const clremat_buf *A, int fA, int64_t offA, int64_t lda, int64_t sa,
                            const clremat_buf *B, int fB, int64_t offB, int64_t ldb, int64_t sb, float beta,
                            clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch)
{
    const clremat_gemm16_fmt f = {fA, fB, 0, 0, NULL, 0};
    return run_fmt(ctx, tA, tB, M, N, K, alpha, A, offA, lda, sa, B, offB, ldb, sb, beta, C, offC, ldc, sc, batch, &f);
}

int clremat_gemm_round_copy(clremat_ctx *ctx, int tA, int tB, int64_t M, int64_t N, int64_t K, float alpha,
                            const clremat_buf *A, int64_t offA, int64_t lda, int64_t sa,
                            const clremat_buf *B, int64_t offB, int64_t ldb, int64_t sb, float beta,
                            clremat_buf *C, int64_t offC, int64_t ldc, int64_t sc, int64_t batch,
                            clremat_buf *C16, int fC)
{
    const clremat_gemm16_fmt f = {0, 0, fC, 0, C16, 1};
    if (!fC)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "gemm round copy: the copy's format is float32");
    return run_fmt(ctx, tA, tB, M, N, K, alpha, A, offA, lda, sa, B, offB, ldb, sb, beta, C, offC, ldc, sc, batch, &f);
}
