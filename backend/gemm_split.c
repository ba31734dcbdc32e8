/* gemm_split.c: the native GEMM's work-group split (gemm_split.h), chosen
 * by modelled time: fewer, larger work-groups pack less (B is packed once
 * per row block, A once per column group), more of them balance the
 * compute units better. Both effects are measured in bench/README.md
 * ("the native GEMM's split"). */
#include "gemm_split.h"

/* Model units are FLOPs of the register tile (two a multiply-add). A
 * packed float costs PACK_COPY of them where the pack copies contiguous
 * runs (op(A) = A^T, op(B) = B), PACK_TRANSPOSE where it gathers across
 * rows (op(A) = A, op(B) = B^T).
 *
 * A launch of fewer than SMALL_LAUNCH FLOPs a compute unit is split by
 * rows only, and the model charges it one work-group more than its
 * busiest unit's rounds: there the wake-up of PoCL's worker threads is a
 * large part of the time (256 cubed: 95-102 GFLOP/s as one work-group on
 * two threads, 114-149 as two or four), a unit starting late finishes a
 * work-group after the others, and smaller work-groups shorten that where
 * packing allows.
 *
 * Fitted to alternating runs on PoCL (2 threads, AVX-512, 12 x 32 tile;
 * bench/README.md, "the native GEMM's split"). Above SMALL_LAUNCH the
 * choices on the benchmark's shapes are the same for PACK_COPY from 25 to
 * 200, and none measured slower than the rule before beyond the
 * method's scatter (0.98-0.99). Small launches: 256 cubed (16.8 MFLOP a
 * unit) ran 2-15% faster as four row blocks of 72 than as two of 132 in
 * three alternating runs (two runs with POCL_AFFINITY=1 went 1-2% the
 * other way), and 15% faster than as 2 x 2 blocks of 132 x 128; 384
 * cubed (28.3) faster as two row blocks of 192 than as four of 96;
 * 2048x64x64 as 16 row blocks than as 4; 64x64x2048 (A^T) as two row
 * blocks of 36 than as six of 12, each repacking B's 2048 x 64. */
#define PACK_COPY 100.0
#define PACK_TRANSPOSE 200.0
#define SMALL_LAUNCH 24e6

/* B read in place (no pack) on launches of fewer than SMALL_IN_PLACE FLOPs
 * a unit: rows only, the model charging nothing for B, so that the rows go
 * out in small work-groups (12 to 24 rows) without B packed once for each.
 * Measured (bench/README.md, "B read in place"; in-process alternation of
 * packed and in-place runs, PoCL, 2 threads, 12 x 32 tile): 256 cubed
 * (16.8 MFLOP a unit) 1.12-1.15x the packed split, 384 cubed (56.6) 1.22x,
 * 2048x64x64 1.07x, 128x512x128 1.12x; at 512 cubed (134) small blocks
 * reading B in place ran 0.96-1.00x the packed split, so larger launches
 * pack. */
#define SMALL_IN_PLACE 64e6

/* The block size that splits n into as many blocks as blocks of at most
 * maxb need, evenly, rounded up to a multiple of unit and never above maxb. */
static int even_block(int64_t n, int maxb, int unit)
{
    const int64_t blocks = (n + maxb - 1) / maxb;
    int64_t b = (n + blocks - 1) / blocks;
    b = (b + unit - 1) / unit * unit;
    return b < maxb ? (int)b : maxb;
}

/* The loop iterations the work-item of split s's largest work-group runs:
 * per k, ITER_PER_TILE_K for each register tile it computes plus
 * ITER_PER_K for its packing and write-back. Measured on Mesa's llvmpipe
 * (rusticl, Debian 12), the device whose loop budget this counts against,
 * with one-work-group GEMMs of growing K: one 6 x 16 tile ran correctly up
 * to K = 19351 (3.4 iterations a k), 8 x 4 tiles to 1009 (65 a k); one
 * 12 x 32 tile to 3939 (16.6), 4 x 2 to 554 (118): probably its 12-row
 * loop left rolled (inferred from the count, not read from the compiled
 * code). The figures here are above every measurement. */
#define ITER_PER_K 2
static int64_t iter_per_tile_k(const clremat_gemm_blocks *blocks)
{
    return blocks->mr >= 12 ? 16 : 2;
}

static int64_t split_iterations(const clremat_gemm_blocks *blocks, int64_t N, int64_t K, int bm, int bn,
                                int64_t groups)
{
    const int64_t cb = (N + bn - 1) / bn, per = (cb + groups - 1) / groups;
    const int64_t cols = per * bn < N ? per * bn : N;
    const int64_t tiles = (int64_t)(bm / blocks->mr) * ((cols + blocks->nr - 1) / blocks->nr);
    return (K > 0 ? K : 1) * (tiles * iter_per_tile_k(blocks) + ITER_PER_K);
}

int64_t clremat_gemm_split_iterations(const clremat_gemm_blocks *blocks, int64_t N, int64_t K,
                                      const clremat_gemm_split *s)
{
    return split_iterations(blocks, N, K, s->bm, s->bn, s->groups);
}

/* The least modelled time among the splits allowed: by rows only in the
 * widest column blocks when small, within max_iterations loop iterations
 * a work-item when max_iterations > 0 (fewest iterations when fewest is
 * set, whatever the time). Returns whether one was found. */
static int search(const clremat_gemm_blocks *blocks, int tA, int tB, int64_t M, int64_t N, int64_t K, int64_t batch,
                  int actA, int small, int in_place, int64_t max_iterations, int fewest, clremat_gemm_split *out)
{
    const int64_t cu = blocks->compute_units > 0 ? blocks->compute_units : 1;
    const int64_t kk = K > 0 ? K : 1, nb = batch > 0 ? batch : 1;
    const double pack_a = tA ? PACK_COPY : PACK_TRANSPOSE, pack_b = in_place ? 0.0 : tB ? PACK_TRANSPOSE : PACK_COPY;
    const int64_t top = (M + blocks->mr - 1) / blocks->mr * blocks->mr; /* M in whole tiles */
    double best = -1.0;
    /* every column block size that halving the compiled one gives (the
     * even split of N: fewer, wider blocks pack A less often, more of them
     * give small N work-groups for every unit), and every row block size
     * that some number of row blocks gives (the even split into that
     * number: other sizes repeat one of those); a small launch is split by
     * rows only, in the widest column blocks */
    for (int nc = blocks->nc; nc >= blocks->nr && (nc == blocks->nc || !small); nc /= 2) {
        const int bn = even_block(N, nc, blocks->nr);
        const int64_t cb = (N + bn - 1) / bn;
        if (nc < blocks->nc && bn == even_block(N, nc * 2, blocks->nr))
            continue; /* the same blocks as the wider nc */
        for (int bm = blocks->mr; bm <= blocks->mc && bm <= top; bm += blocks->mr) {
            const int64_t rb = (M + bm - 1) / bm;
            if (even_block(M, bm, blocks->mr) != bm)
                continue;
            for (int64_t g = 1; g <= (actA || small ? 1 : cb); g++) {
                const int64_t per = (cb + g - 1) / g, w = rb * g * nb;
                const double cols = (double)(per * bn < N ? per * bn : N);
                /* a work-item's loop iterations, where a budget or fewest asks for them */
                const int64_t steps = fewest || max_iterations > 0 ? split_iterations(blocks, N, K, bm, bn, g) : 0;
                double t;
                if ((cb + per - 1) / per != g) /* a column group would be empty */
                    continue;
                if (g > 1 && w > 4 * cu && !fewest) /* enough work-groups already: more only pack A again */
                    break;
                if (max_iterations > 0 && steps > max_iterations && !fewest)
                    continue;
                /* the busiest unit's work-groups (whole rounds of cu), plus one
                 * for a unit that starts late on a small launch, each its
                 * multiply-adds and packing at the largest block's size */
                t = fewest ? (double)steps
                           : ((double)((w + cu - 1) / cu) + (small ? 1.0 : 0.0)) *
                                 (2.0 * bm * cols * (double)kk + pack_a * (double)bm * (double)kk +
                                  pack_b * (double)kk * cols);
                if (best < 0.0 || t < best) {
                    best = t;
                    out->bm = bm;
                    out->bn = bn;
                    out->groups = g;
                    out->b_in_place = in_place;
                }
            }
        }
    }
    return best >= 0.0;
}

void clremat_gemm_split_choose(const clremat_gemm_blocks *blocks, int tA, int tB, int64_t M, int64_t N, int64_t K,
                               int64_t batch, int actA, int b_in_place, clremat_gemm_split *out)
{
    const int64_t cu = blocks->compute_units > 0 ? blocks->compute_units : 1;
    const double flop_per_unit = 2.0 * (double)M * (double)N * (double)(K > 0 ? K : 1) *
                                 (double)(batch > 0 ? batch : 1) / (double)cu;
    const int small = flop_per_unit < SMALL_LAUNCH;
    const int in_place = b_in_place && !tB && flop_per_unit < SMALL_IN_PLACE;
    out->bm = blocks->mr;
    out->bn = blocks->nr;
    out->groups = 1;
    out->b_in_place = 0;
    if (M <= 0 || N <= 0)
        return;
    /* under a loop budget a small launch may need column blocks too; where
     * no split keeps within it, the one of fewest iterations (the caller
     * refuses to run it: clremat_gemm_split_iterations) */
    if (!search(blocks, tA, tB, M, N, K, batch, actA, small || in_place, in_place, blocks->max_iterations, 0, out) &&
        !search(blocks, tA, tB, M, N, K, batch, actA, 0, 0, blocks->max_iterations, 0, out))
        search(blocks, tA, tB, M, N, K, batch, actA, 0, 0, 0, 1, out);
}

int clremat_gemm_b_in_place(const clremat_gemm_blocks *blocks, int tB, int fB, int64_t offB, int64_t ldb,
                            int64_t sb, int64_t batch)
{
    const int64_t vw = blocks->nr / 2 > 0 ? blocks->nr / 2 : 1;
    return !tB && !fB && ldb <= CLREMAT_GEMM_IN_PLACE_LDB && offB % vw == 0 && ldb % vw == 0 &&
           (batch <= 1 || sb % vw == 0);
}
