/* layer_rope.h: the rotary position embedding launcher shared by the rope
 * layer (layer_rope.c) and attention's RoPE on q and k (layer_attention.c). */
#ifndef CLREMAT_LAYER_ROPE_H
#define CLREMAT_LAYER_ROPE_H

#include "backend.h"

/** Rotates, in rows rows of nh chunks of dh (even) columns each, columns i
 * and i + dh/2 by the angle (row % T) * theta^(-2i/dh) (Llama's half-split
 * convention); inverse != 0 rotates back (the transpose: the backward).
 * src and dst rows start at the offsets given, ld_src / ld_dst floats
 * apart; dst may equal src (in place); acc != 0 adds into dst. */
int clremat_rope_run(clremat_ctx *ctx, int64_t rows, int64_t T, int64_t nh, int64_t dh, double theta, int inverse,
                     int acc, const clremat_buf *src, int64_t off_src, int64_t ld_src, clremat_buf *dst,
                     int64_t off_dst, int64_t ld_dst);

#endif
