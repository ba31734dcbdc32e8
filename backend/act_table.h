/* act_table.h: GELU (tanh form) of 16-bit operands by table lookup. A
 * binary16 or bfloat16 operand has 65536 bit patterns, so the activation
 * (or its derivative) of every one of them, in float32, fits a table of
 * 256 KiB. The mixed-precision launches of large activations fill one
 * from the pool (planned in the layer's cost, so peaks stay byte-exact)
 * and look it up instead of computing exp and a division per element: the
 * same floats as clremat_op_convert / clremat_op_mul_dact compute, so the
 * same bits, 1.4-1.8 times as fast on PoCL (bench/README.md). Only GELU (tanh form):
 * its formula calls no math builtin, so a table built by one kernel holds
 * exactly what every other kernel computes (a builtin may round
 * differently from kernel to kernel; rusticl's exp did). */
#ifndef CLREMAT_ACT_TABLE_H
#define CLREMAT_ACT_TABLE_H

#include "layers.h"

/** Entries of a table: one float per 16-bit pattern. */
#define CLREMAT_ACT_TABLE_ENTRIES 65536

/** Fewest elements a launch must have for a table (2^21). Filling one is a
 * launch of its own over 65536 values, a quarter of which underflow to
 * subnormals (slow on a CPU): on PoCL it took 0.12-0.2 ms for GELU and
 * 0.45-0.55 ms for its derivative, so with the table a bfloat16 GELU
 * backward only broke even at 2^20 elements and gained 5-15% at 2^21
 * (bench/README.md, "16-bit GELU by table"). */
#define CLREMAT_ACT_TABLE_MIN_ELEMS ((int64_t)32 * CLREMAT_ACT_TABLE_ENTRIES)

/** Bytes of the table a launch of n elements of activation act over
 * operands of format fmt (CLREMAT_FMT_*) takes: CLREMAT_ACT_TABLE_ENTRIES
 * floats for GELU (tanh form) over a 16-bit format with n at least
 * CLREMAT_ACT_TABLE_MIN_ELEMS, else 0 (the launch computes). Layer costs
 * add it to their staging at the planned batch; launches decide with the
 * same n, so what they take is what was planned. */
size_t clremat_act_table_bytes(int act, int fmt, int64_t n);

/** Fills table (CLREMAT_ACT_TABLE_ENTRIES floats) with act(x), or act'(x)
 * when deriv, for x the value of each 16-bit pattern of format fmt. */
int clremat_act_table_fill(clremat_ctx *ctx, clremat_buf *table, int act, int fmt, int deriv);

/** dst (format dfmt; acc: old + new) = table[src bits] * scale over n
 * elements of 16-bit src: clremat_op_convert's floats where table holds
 * act over src's format. */
int clremat_op_convert_table(clremat_ctx *ctx, const clremat_buf *src, clremat_buf *dst, int dfmt, int64_t n,
                             const clremat_buf *table, float scale, int acc);

/** z (format fz; acc: old + new) = dy * table[x bits] over n elements of
 * 16-bit x, dy of format fdy: clremat_op_mul_dact's floats where table
 * holds act' over x's format. */
int clremat_op_mul_dact_table(clremat_ctx *ctx, int64_t n, const clremat_buf *table, const clremat_buf *x,
                              const clremat_buf *dy, int fdy, clremat_buf *z, int fz, int acc);

/** A mixed launch's activation: dst (dfmt) = act(src (sfmt)) over n
 * elements, through a table taken from the pool for the call when
 * clremat_act_table_bytes(act, sfmt, planned) is not 0 (planned: the
 * element count at the batch the layer's cost was made for), else
 * clremat_op_convert. */
int clremat_act16_forward(clremat_layer_call *c, int64_t n, int64_t planned, int act, const clremat_buf *src,
                          int sfmt, clremat_buf *dst, int dfmt);

/** A mixed launch's activation gradient: z (fz; acc: old + new) = dy *
 * act'(x) over n elements, through a table as clremat_act16_forward, else
 * clremat_op_mul_dact. */
int clremat_act16_backward(clremat_layer_call *c, int64_t n, int64_t planned, int act, const clremat_buf *x,
                           int fx, const clremat_buf *dy, int fdy, clremat_buf *z, int fz, int acc);

#endif
