/* ref_seq.h: double-precision host references of the sequence layers
 * (layernorm, embedding, attention, softmax cross-entropy, mse), written
 * for clarity rather than speed; the device kernels are checked against
 * them, and they are checked against central finite differences. Shapes
 * follow backend/layer_*.c; ids and labels are clamped like the kernels. */
#ifndef CLREMAT_REF_SEQ_H
#define CLREMAT_REF_SEQ_H

#include <stdint.h>

/** Clamps an id held in a double to [0, n) like kernels.cl seq_clamp_id. */
int ref_clamp_id(double f, int n);

/** Layernorm over rows of D: y and stats (mean, rstd per row; may be NULL). */
void ref_layernorm_fwd(int rows, int D, double eps, const double *x, const double *gamma, const double *beta,
                       double *y, double *stats);

/** Layernorm backward for upstream dy: dx, dgamma, dbeta (each may be NULL). */
void ref_layernorm_bwd(int rows, int D, double eps, const double *x, const double *gamma, const double *dy,
                       double *dx, double *dgamma, double *dbeta);

/** Embedding: out[tok] = table[id] (+ pos[tok % T] when positions). */
void ref_embedding_fwd(int ntok, int dim, int vocab, int T, int positions, const double *ids, const double *table,
                       const double *pos, double *out);

/** Embedding backward: gtable [vocab, dim] and gpos [T, dim] (may be NULL). */
void ref_embedding_bwd(int ntok, int dim, int vocab, int T, int positions, const double *ids, const double *dout,
                       double *gtable, double *gpos);

/** Attention configuration (see backend/layer_attention.c). */
typedef struct ref_attn {
    int B, T, D, H;         /**< batch items, sequence, width, heads */
    int causal;
    double rate;            /**< dropout on probs; mask from clremat_hash */
    uint64_t seed;
    uint32_t step, layer;
    int KV;                 /**< key/value heads (0: H); query head h uses kv head h / (H / KV) */
    double theta;           /**< RoPE base on q and k (0: none) */
} ref_attn;

/** 1/(1-rate) if attention-dropout element e is kept, else 0 (1 when rate 0). */
double ref_attn_keep(const ref_attn *a, uint32_t e);

/** Attention forward; qkv [B*T, D + 2 KV dh] (after RoPE), probs [B, H, T, T], ctx [B*T, D] may be
 * NULL; so may bqkv and bo (no biases). */
void ref_attention_fwd(const ref_attn *a, const double *x, const double *wqkv, const double *bqkv,
                       const double *wo, const double *bo, double *out, double *qkv, double *probs, double *ctx);

/** Attention backward for upstream dout: dx and parameter gradients (each may be NULL). */
void ref_attention_bwd(const ref_attn *a, const double *x, const double *wqkv, const double *bqkv,
                       const double *wo, const double *bo, const double *dout, double *dx, double *dwqkv,
                       double *dbqkv, double *dwo, double *dbo);

/** Softmax cross-entropy: mean loss over rows and the number of rows whose
 * argmax (lowest index on ties) equals the label. */
void ref_softmax_ce_fwd(int rows, int C, const double *logits, const double *labels, double *loss,
                        double *correct);

/** Gradient of the mean loss: (softmax - onehot) / rows. */
void ref_softmax_ce_bwd(int rows, int C, const double *logits, const double *labels, double *din);

/** Mean of (p - y)^2 over n elements. */
double ref_mse_fwd(int n, const double *p, const double *y);

/** din = 2 (p - y) / n. */
void ref_mse_bwd(int n, const double *p, const double *y, double *din);

#endif
