/* gemm_split.h: how the native GEMM (clremat_gemm_cpu) divides C among its
 * work-groups -- rows per work-group, the column block, and how many
 * work-group columns share the column blocks -- chosen by a small model of
 * the time each split takes on a CPU device. A pure function of the sizes
 * and the device's compute units and compiled blocks, so tests can check
 * it without a device. The GEMM's result never depends on the split. */
#ifndef CLREMAT_GEMM_SPLIT_H
#define CLREMAT_GEMM_SPLIT_H

#include <stdint.h>

/** The blocks the native kernel was compiled with (backend/program.c) and
 * the device's compute units. */
typedef struct {
    int64_t compute_units; /**< CL_DEVICE_MAX_COMPUTE_UNITS (PoCL: worker threads) */
    int mr, nr;            /**< the register tile: rows (6 or 12) and columns (16 or 32) */
    int mc, nc;            /**< the largest row and column blocks local memory holds */
    int64_t max_iterations; /**< the most loop iterations a work-item may run in all (Mesa's llvmpipe); 0: no limit */
} clremat_gemm_blocks;

/** One launch's split: work-group (g, r, b) computes rows [r*bm, r*bm+bm)
 * of matrix b, walking column blocks [g*per, g*per+per) of bn columns in
 * every k-block, per = ceil(ceil(N/bn) / groups); groups == 1 walks them
 * all (split by rows only). */
typedef struct {
    int bm;         /**< rows per work-group: a multiple of mr, at most mc */
    int bn;         /**< columns per column block: a multiple of nr, at most nc */
    int64_t groups; /**< work-group columns; every one has column blocks to walk */
    int b_in_place; /**< the register tiles read B where it is, unpacked (see clremat_gemm_split_choose) */
} clremat_gemm_split;

/** The split of least modelled time for op(A) (M x K) times op(B) (K x N),
 * batch matrices, transposes tA, tB; actA: A is packed through an
 * activation, which then must run once per element (groups 1);
 * b_in_place: B may be read where it is (float32, not transposed, rows
 * aligned and close together: clremat_gemm_b_in_place), which the split
 * then does on small launches, where packing B once per row block would
 * otherwise decide how finely the rows can be shared out. The model:
 * each work-group's cost is its multiply-adds plus the floats it packs (A
 * once per column group, B once per row block; a gathering pack costs
 * twice a copying one); the launch takes its busiest compute unit's whole
 * rounds of work-groups, plus one work-group on a launch small enough that
 * a unit waking late decides its time (gemm_split.c). With max_iterations,
 * only splits whose work-items stay within it; where none does, the split
 * of fewest, which the caller must not run (clremat_gemm_split_iterations). */
void clremat_gemm_split_choose(const clremat_gemm_blocks *blocks, int tA, int tB, int64_t M, int64_t N, int64_t K,
                               int64_t batch, int actA, int b_in_place, clremat_gemm_split *out);

/** Whether the register tiles may read a float32 B (K x N, not transposed)
 * in place: its rows ldb floats apart, at most CLREMAT_GEMM_IN_PLACE_LDB
 * (2 KB: farther apart, the rows' strided reads measured slower than the
 * pack), and every row of every matrix starting on a whole vector of the
 * tile (offB, ldb and sb multiples of nr / 2 floats). */
int clremat_gemm_b_in_place(const clremat_gemm_blocks *blocks, int tB, int fB, int64_t offB, int64_t ldb,
                            int64_t sb, int64_t batch);
#define CLREMAT_GEMM_IN_PLACE_LDB 512

/** The loop iterations (estimated from measurements on llvmpipe:
 * gemm_split.c) the work-item of split s's largest work-group runs, to hold
 * against blocks->max_iterations. */
int64_t clremat_gemm_split_iterations(const clremat_gemm_blocks *blocks, int64_t N, int64_t K,
                                      const clremat_gemm_split *s);

#endif
