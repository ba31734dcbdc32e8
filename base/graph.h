/* graph.h: the layer graph IR: layers with names, types, inputs (a DAG in
 * file order), optional activations, parameters, per-sample shapes, and
 * named nested blocks. Pure C, no OpenCL: the parser, the planner and the
 * executor all read it. */
#ifndef CLREMAT_GRAPH_H
#define CLREMAT_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include "clremat.h"

#define CLREMAT_NAME_LEN 64
#define CLREMAT_MAX_RANK 4        /* per-sample rank (batch dimension excluded) */
#define CLREMAT_MAX_INPUTS 8      /* add takes 2, concat 2 .. 8 */
#define CLREMAT_MAX_PARAMS 4
#define CLREMAT_MAX_SLOTS 4

/** Layer types. Slot 0 of every layer is its output. */
typedef enum clremat_layer_type {
    CLREMAT_DENSE = 0,      /**< y = act(x W + b) over the last dimension */
    CLREMAT_ACTIVATION,     /**< y = act(x) */
    CLREMAT_DROPOUT,        /**< y = x * mask / (1 - rate), counter-based mask */
    CLREMAT_LAYERNORM,      /**< y = gamma * (x - mean) / sqrt(var + eps) + beta, last dim */
    CLREMAT_ADD,            /**< y = a + b; b's shape equal to a's or a suffix of it */
    CLREMAT_EMBEDDING,      /**< y[t] = table[id[t]] (+ pos_table[t] when positions) */
    CLREMAT_ATTENTION,      /**< multi-head self-attention over [T, D] */
    CLREMAT_RESHAPE,        /**< same elements, new per-sample shape (flatten = [-1]) */
    CLREMAT_SOFTMAX_CE,     /**< loss: softmax cross-entropy over the last dim vs class ids */
    CLREMAT_MSE,            /**< loss: mean squared error vs targets */
    /* small language models (issue 13) */
    CLREMAT_RMSNORM,        /**< y = scale * x / sqrt(mean(x^2) + eps), last dim */
    CLREMAT_ROPE,           /**< rotary position embedding over [T, D], half-split per head_dim chunk */
    CLREMAT_MULTIPLY,       /**< y = a * b elementwise; equal shapes */
    /* convolutional networks (NHWC, per-sample [H, W, C]) */
    CLREMAT_CONV2D,         /**< y = act(conv(x, kernel[kh, kw, C/groups, filters]) + b) */
    CLREMAT_MAX_POOL2D,     /**< max over pool windows */
    CLREMAT_AVG_POOL2D,     /**< mean over the real inputs of each pool window */
    CLREMAT_GLOBAL_AVG_POOL2D, /**< [H, W, C] -> [C], mean over H and W */
    CLREMAT_ZERO_PAD2D,     /**< zeros around H and W */
    CLREMAT_BATCHNORM,      /**< batch normalization over the last dim, moving statistics as state */
    CLREMAT_CONCAT,         /**< concatenation of 2 .. CLREMAT_MAX_INPUTS inputs along the last dim */
    CLREMAT_LAYER_TYPE_COUNT
} clremat_layer_type;

/** Activation functions. */
typedef enum clremat_act {
    CLREMAT_ACT_NONE = 0,
    CLREMAT_ACT_RELU,
    CLREMAT_ACT_GELU_TANH,  /**< "gelu": tanh approximation (Keras default approximate=False is "gelu_exact") */
    CLREMAT_ACT_GELU_EXACT, /**< "gelu_exact": x * Phi(x) with erf */
    CLREMAT_ACT_TANH,
    CLREMAT_ACT_SIGMOID,
    CLREMAT_ACT_SILU,
    CLREMAT_ACT_COUNT
} clremat_act;

/** A per-sample shape: dims[0..rank-1], batch dimension not included. */
typedef struct clremat_shape {
    int rank;
    int64_t dims[CLREMAT_MAX_RANK];
} clremat_shape;

/** One parameter tensor of a layer. */
typedef struct clremat_param {
    char name[16];          /**< "kernel", "bias", "gamma", "beta", "table", "pos_table", "wqkv", "bqkv", "wo", "bo", "scale" */
    clremat_shape shape;    /**< full shape (no batch) */
    int64_t elems;
    int init;               /**< clremat_init */
    int frozen;             /**< 1: not trained (no gradient, no optimizer state, no update): "trainable":
                                 false, LoRA's base kernel, batchnorm's moving statistics (saved and loaded
                                 with the weights; batchnorm's backward updates them itself) */
} clremat_param;

/** How a parameter is initialized (seeded). */
typedef enum clremat_init {
    CLREMAT_INIT_ZEROS = 0,
    CLREMAT_INIT_ONES,
    CLREMAT_INIT_GLOROT_UNIFORM,  /**< U(-a, a), a = sqrt(6 / (fan_in + fan_out)) */
    CLREMAT_INIT_HE_NORMAL,       /**< N(0, 2 / fan_in), for relu-family dense layers */
    CLREMAT_INIT_NORMAL_002,      /**< N(0, 0.02^2), embeddings */
    CLREMAT_INIT_NORMAL_LORA      /**< N(0, (1/r)^2), r the last dim: LoRA's A (as PEFT's "gaussian") */
} clremat_init;

/** A layer. Index -1 in inputs[] means the model input. */
typedef struct clremat_layer {
    char name[CLREMAT_NAME_LEN];
    clremat_layer_type type;
    clremat_act act;            /**< dense/activation; NONE otherwise */
    int n_inputs;
    int inputs[CLREMAT_MAX_INPUTS];
    int block;                  /**< innermost enclosing block, -1 for top level */
    /* type-specific settings */
    int64_t units;              /**< dense */
    int use_bias;               /**< dense (default 1) */
    double rate;                /**< dropout; attention dropout on weights */
    double eps;                 /**< layernorm (default 1e-5) */
    int64_t vocab, dim;         /**< embedding */
    int positions;              /**< embedding: add learned position vectors */
    int heads;                  /**< attention */
    int causal;                 /**< attention */
    clremat_shape target;       /**< reshape (may contain one -1 before inference) */
    /* small language models (issue 13) */
    int kv_heads;               /**< attention: key/value heads (0 = heads; divides heads; 1 = multi-query) */
    double rope_theta;          /**< attention: RoPE base applied to q and k (0 = none); rope layer: base */
    int64_t head_dim;           /**< rope layer: width of each rotated chunk of the last dim (even) */
    int frozen;                 /**< "trainable": false (on the layer or an enclosing block): its params
                                     are frozen, LoRA adapters (lora_a, lora_b) excepted */
    int tie;                    /**< dense: 1 + index of the embedding layer whose table (transposed) is the
                                     kernel (tied embeddings; the dense layer then has no parameters); 0 none */
    int lora_rank;              /**< dense: LoRA rank r (0 none): kernel and bias frozen, adds lora_a, lora_b */
    double lora_alpha;          /**< dense with LoRA: the update is scaled by alpha / r */
    /* convolutional layers (conv2d, pools, zero_pad2d) */
    int64_t filters;            /**< conv2d: output channels (set from depth_multiplier when depthwise) */
    int ksize[2];               /**< conv2d kernel_size / pools pool_size: [kh, kw] */
    int strides[2];             /**< conv2d, pools: [sh, sw] */
    int dilation[2];            /**< conv2d: [dh, dw] (default 1, 1) */
    int pad_same;               /**< conv2d, pools: 1 for padding "same", 0 for "valid" */
    int groups;                 /**< conv2d: channel groups (default 1) */
    int depth_multiplier;       /**< conv2d: > 0 for a depthwise conv (groups = C, filters = C * this) */
    int zpad[4];                /**< zero_pad2d: [top, bottom, left, right] */
    double momentum;            /**< batchnorm: moving-statistics momentum (default 0.99); eps is epsilon (1e-3) */
    int center, scale;          /**< batchnorm: learn beta / gamma (default 1, 1) */
    int bn_eval;                /**< batchnorm: 1 normalizes with the moving statistics (evaluation graph) */
    /* filled by shape inference */
    clremat_shape in_shape[CLREMAT_MAX_INPUTS];
    clremat_shape out_shape;    /**< per sample; losses: rank 0 (a scalar per batch) */
    int n_params;
    clremat_param params[CLREMAT_MAX_PARAMS];
    /* where the model file declared it, for error messages (0 if built in C) */
    int src_line, src_col;
    int attn_mode;              /**< attention: clremat_attn_mode (default 0: plain) */
} clremat_layer;

/** How an attention layer computes (its "attention" field). */
typedef enum clremat_attn_mode {
    CLREMAT_ATTN_DEFAULT = 0,           /**< field absent: plain */
    CLREMAT_ATTN_PLAIN = 1,             /**< "plain": keeps the T x T probabilities (fixed) */
    CLREMAT_ATTN_MEMORY_EFFICIENT = 2,  /**< "memory_efficient": keeps row statistics only (fixed) */
    CLREMAT_ATTN_AUTO = 3               /**< "auto": plain, unless budget:/auto choose memory_efficient */
} clremat_attn_mode;

/** 1 when attention layer L runs memory-efficient (memory_efficient, set
 * in the model file or by the planner in the executor's copy of an "auto"
 * layer), 0 otherwise ("auto" runs plain unless resolved). */
static inline int clremat_attn_is_mem_eff(const clremat_layer *L)
{
    return L->type == CLREMAT_ATTENTION && L->attn_mode == CLREMAT_ATTN_MEMORY_EFFICIENT;
}

/** A named group of consecutive layers; blocks nest. */
typedef struct clremat_block {
    char name[CLREMAT_NAME_LEN];
    int parent;                 /**< enclosing block, -1 for top level */
    int first, last;            /**< layer index range [first, last] */
    int remat;                  /**< "remat": true: always rematerialized */
} clremat_block;

/** What the data must provide for the model. */
typedef struct clremat_graph_io {
    clremat_shape input;        /**< per-sample input shape */
    int input_ids;              /**< 1: the input holds integer token ids (stored as float) */
    clremat_shape labels;       /**< per-sample label shape (class ids or regression targets) */
    int labels_ids;             /**< 1: class ids (softmax_ce), 0: float targets (mse) */
    int64_t classes;            /**< softmax_ce: number of classes */
} clremat_graph_io;

/** Model precision (issue 16, base/precision.c): float32, or Keras's mixed
 * policies, in which activations and activation gradients are stored in 16
 * bits while parameters, their gradients and optimizer states stay float32. */
typedef enum clremat_precision {
    CLREMAT_PREC_FLOAT32 = 0,
    CLREMAT_PREC_MIXED_FLOAT16 = 1,  /**< IEEE binary16 storage, dynamic loss scaling */
    CLREMAT_PREC_MIXED_BFLOAT16 = 2, /**< bfloat16 storage (the high half of a float32), no loss scaling */
    CLREMAT_PREC_COUNT
} clremat_precision;

typedef struct clremat_graph {
    char name[CLREMAT_NAME_LEN];
    clremat_layer *layers;
    int n_layers, cap_layers;
    clremat_block *blocks;
    int n_blocks, cap_blocks;
    int open_block;             /**< block being built (-1 none) */
    clremat_graph_io io;
    int finalized;
    char error[1024];           /**< last error of a graph call */
    int precision;              /**< clremat_precision (0: float32) */
    char task[16];              /**< the synthetic task the model file names ("task"), used when no data
                                     is given (host/data.h); "" for none */
} clremat_graph;

/** A new empty graph; NULL when out of host memory. */
clremat_graph *clremat_graph_new(const char *name);

/** Frees a graph; NULL is ignored. */
void clremat_graph_free(clremat_graph *g);

/** Declares the model input's per-sample shape; ids != 0 for token ids. */
int clremat_graph_set_input(clremat_graph *g, const clremat_shape *shape, int ids);

/** Opens a block named name inside the current one; layers added until the
 * matching end_block belong to it. remat != 0 marks it always rematerialized. */
int clremat_graph_begin_block(clremat_graph *g, const char *name, int remat);

/** Closes the innermost open block (an empty block is an error). */
int clremat_graph_end_block(clremat_graph *g);

/** Appends a layer (copied). name must be unique; inputs[] name earlier layers
 * by index (-1 the model input); n_inputs 0 means "the previous layer" (or the
 * model input for the first). Returns CLREMAT_OK or an error in g->error. */
int clremat_graph_add_layer(clremat_graph *g, const clremat_layer *layer);

/** Index of the layer named name, or -1. */
int clremat_graph_find_layer(const clremat_graph *g, const char *name);

/** Index of the block named name, or -1. */
int clremat_graph_find_block(const clremat_graph *g, const char *name);

/** Checks the graph (one loss layer, last; blocks closed; outside references
 * only to a block's last layer) and infers every shape and parameter, naming
 * the layer and the mismatch on error (g->error). */
int clremat_graph_finalize(clremat_graph *g);

/** Elements of a per-sample shape. */
int64_t clremat_shape_elems(const clremat_shape *s);

/** 1 when a and b have the same rank and dimensions, else 0. */
int clremat_shape_eq(const clremat_shape *a, const clremat_shape *b);

/** Formats a shape as "[a, b, c]" into buf. */
const char *clremat_shape_str(const clremat_shape *s, char *buf, size_t len);

/** Name of a layer type ("dense", ...) and its inverse (-1 if unknown). */
const char *clremat_layer_type_name(clremat_layer_type t);
int clremat_layer_type_from_name(const char *name);

/** Name of an activation ("relu", ...) and its inverse (-1 if unknown). */
const char *clremat_act_name(clremat_act a);

/** "float32", "mixed_float16", "mixed_bfloat16" (NULL for an unknown value). */
const char *clremat_precision_name(int precision);

/** The clremat_precision named name, or -1 for an unknown name. */
int clremat_precision_from_name(const char *name);

/** Bytes of one stored activation element at precision (4, or 2 mixed). */
size_t clremat_precision_act_bytes(int precision);

/** Host conversions between float and the 16-bit formats, rounding to
 * nearest even (binary16 overflow gives infinity; NaN stays a quiet NaN of
 * the same sign): the reference of the device kernels. */
float clremat_half_to_float(uint16_t h);
uint16_t clremat_float_to_half(float f);
float clremat_bf16_to_float(uint16_t h);
uint16_t clremat_float_to_bf16(float f);
int clremat_act_from_name(const char *name);

/** Blocks a user-given name (as in a list_of_layers remat policy) refers to:
 * the block with exactly that full name if there is one; otherwise every
 * block whose path matches component by component, where a component NAME
 * also matches the repeat instances NAME_0, NAME_1, ... ("encoder_block"
 * matches encoder_block_0 and encoder_block_1; "encoder_block/mlp" matches
 * encoder_block_0/mlp, ...). Writes up to max indices (in block order) into
 * out (may be NULL when max is 0) and returns the number of matches. */
int clremat_graph_blocks_named(const clremat_graph *g, const char *name, int *out, int max);

/** 1 if block b is layer l's block or encloses it. */
int clremat_block_contains(const clremat_graph *g, int b, int l);

/** Total parameter elements of the model. */
int64_t clremat_graph_param_elems(const clremat_graph *g);

/** Parameter elements that are trained (not frozen): each has a gradient
 * and optimizer state. */
int64_t clremat_graph_trainable_elems(const clremat_graph *g);

/** The layer whose "tie" names embedding layer e (it reuses e's table), or
 * -1 when none does. */
int clremat_graph_tied_user(const clremat_graph *g, int e);

/** Loads a model file (JSON, docs/model-format.md) into a finalized graph.
 * On error returns CLREMAT_ERR_PARSE / CLREMAT_ERR_SHAPE / CLREMAT_ERR_IO with
 * "FILE:LINE:COL: what was expected" in clremat_last_error(). */
int clremat_graph_load(const char *path, clremat_graph **out);

/** Same as clremat_graph_load from a string; origin names it in errors. */
int clremat_graph_load_string(const char *json, const char *origin, clremat_graph **out);

/** Same as clremat_graph_load_string for a model text made from another
 * file (source: a .keras archive, a Hugging Face config.json). Errors name
 * "SOURCE, as a clremat model" and the layer or field, without the
 * generated text's lines and columns, which are in no file the user has. */
int clremat_graph_load_generated(const char *json, const char *source, clremat_graph **out);

#endif /* CLREMAT_GRAPH_H */
