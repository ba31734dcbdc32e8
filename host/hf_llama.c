/* hf_llama.c: Hugging Face Llama checkpoints (see hf_llama.h): config.json
 * to a clremat model file, and weights read and written with Hugging
 * Face's tensor names and layouts. Each clremat parameter maps to one or
 * three Hugging Face tensors:
 *   embed_tokens/table                 model.embed_tokens.weight        as is
 *   decoder_block_N/input_layernorm/scale  model.layers.N.input_layernorm.weight
 *   decoder_block_N/self_attn/wqkv     model.layers.N.self_attn.{q,k,v}_proj.weight
 *                                      ([out, in] each, transposed and concatenated)
 *   decoder_block_N/self_attn/bqkv     ...{q,k,v}_proj.bias (concatenated)
 *   decoder_block_N/self_attn/wo, bo   ...o_proj.weight (transposed), .bias
 *   decoder_block_N/post_attention_layernorm/scale
 *   decoder_block_N/{gate,up,down}_proj/kernel, bias  model.layers.N.mlp.X.weight (transposed), .bias
 *   norm/scale                         model.norm.weight
 *   lm_head/kernel                     lm_head.weight (transposed; absent when tied)
 * LoRA adapters (lora_a, lora_b) have no Hugging Face name: loading keeps
 * them, saving leaves them out. */
#include "hf_llama.h"
#include "atomic_file.h"
#include "json_pos.h"
#include "safetensors.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ config */

/* A config.json being read: its tree, the positions of its values
 * (json_pos.h) and its path, for errors "PATH:LINE:COL: field ...". */
typedef struct hf_cfg {
    json_t *root;
    clremat_json_index *ix;
    const char *path;
} hf_cfg;

/* The error of field key of the config: where its value is and what it is. */
static int cfg_fail(const hf_cfg *c, const char *key, const char *expect)
{
    json_t *v = json_object_get(c->root, key);
    clremat_jpos p = clremat_json_member_pos(c->ix, c->root, key, 0);
    char *text = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    int st = clremat_set_error(CLREMAT_ERR_PARSE, "%s:%d:%d: field '%s' must be %s, got %.64s", c->path, p.line, p.col,
                               key, expect, text ? text : "?");
    free(text);
    return st;
}

static int cfg_int(const hf_cfg *c, const char *key, int required, int64_t def, int64_t *out)
{
    json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) {
        if (required)
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: missing field '%s' (a positive integer)", c->path, key);
        *out = def;
        return CLREMAT_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > ((int64_t)1 << 30))
        return cfg_fail(c, key, "an integer in 1 .. 2^30");
    *out = json_integer_value(v);
    return CLREMAT_OK;
}

/* A number in (0, max] (the range clremat's layers take). */
static int cfg_num(const hf_cfg *c, const char *key, double def, double max, const char *expect, double *out)
{
    json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return CLREMAT_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0.0) || !(json_number_value(v) <= max))
        return cfg_fail(c, key, expect);
    *out = json_number_value(v);
    return CLREMAT_OK;
}

static int cfg_bool(const hf_cfg *c, const char *key, int def, int *out)
{
    json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return CLREMAT_OK;
    }
    if (!json_is_boolean(v))
        return cfg_fail(c, key, "true or false");
    *out = json_is_true(v);
    return CLREMAT_OK;
}

/* Reads and parses config_path into c (c->root NULL on error). */
static int cfg_open(const char *config_path, hf_cfg *c)
{
    FILE *f = NULL;
    uint64_t size = 0;
    char *text = NULL;
    json_error_t err;
    int st;
    memset(c, 0, sizeof *c);
    c->path = config_path;
    if ((st = clremat_open_regular(config_path, "config", &f, &size)) != CLREMAT_OK)
        return st;
    if (size > ((uint64_t)1 << 24))
        st = clremat_set_error(CLREMAT_ERR_IO, "%s: config is %llu bytes, more than the 16 MiB allowed", config_path,
                               (unsigned long long)size);
    else if (!(text = malloc((size_t)size + 1)))
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", config_path);
    else if (fread(text, 1, (size_t)size, f) != (size_t)size)
        st = clremat_set_error(CLREMAT_ERR_IO, "%s: read error", config_path);
    fclose(f);
    if (st == CLREMAT_OK && !(c->root = json_loadb(text, (size_t)size, JSON_REJECT_DUPLICATES, &err)))
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s:%d:%d: %s", config_path, err.line, err.column, err.text);
    if (st == CLREMAT_OK && !(c->ix = clremat_json_index_new(text, (size_t)size, c->root)))
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", config_path);
    free(text);
    if (st != CLREMAT_OK) {
        json_decref(c->root);
        c->root = NULL;
    }
    return st;
}

int clremat_hf_model_json(const char *config_path, int64_t seq_len, char **out)
{
    hf_cfg c;
    json_t *root, *v;
    int64_t D, I, N, H, KV, V, hd;
    double theta, eps;
    int tie, abias, mbias, st;
    size_t cap = 8192, len = 0;
    char *s = NULL;
    *out = NULL;
    if (seq_len < 1 || seq_len > ((int64_t)1 << 24))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "sequence length %lld is not in 1 .. 2^24",
                                 (long long)seq_len);
    if ((st = cfg_open(config_path, &c)) != CLREMAT_OK)
        return st;
    root = c.root;
    st = !json_is_object(root) ? clremat_set_error(CLREMAT_ERR_PARSE, "%s: not a JSON object", config_path)
                               : CLREMAT_OK;
    if (st == CLREMAT_OK && (v = json_object_get(root, "model_type")) &&
        (!json_is_string(v) || strcmp(json_string_value(v), "llama") != 0))
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: model_type is %s%s%s; only \"llama\" is supported", config_path,
                               json_is_string(v) ? "\"" : "", json_is_string(v) ? json_string_value(v) : "not a string",
                               json_is_string(v) ? "\"" : "");
    if (st == CLREMAT_OK)
        st = cfg_int(&c, "hidden_size", 1, 0, &D);
    if (st == CLREMAT_OK)
        st = cfg_int(&c, "intermediate_size", 1, 0, &I);
    if (st == CLREMAT_OK)
        st = cfg_int(&c, "num_hidden_layers", 1, 0, &N);
    if (st == CLREMAT_OK)
        st = cfg_int(&c, "num_attention_heads", 1, 0, &H);
    if (st == CLREMAT_OK)
        st = cfg_int(&c, "num_key_value_heads", 0, H, &KV);
    if (st == CLREMAT_OK)
        st = cfg_int(&c, "vocab_size", 1, 0, &V);
    if (st == CLREMAT_OK)
        st = cfg_int(&c, "head_dim", 0, D / H, &hd);
    if (st == CLREMAT_OK)
        st = cfg_num(&c, "rope_theta", 10000.0, 1e30, "a positive number (RoPE's base)", &theta);
    if (st == CLREMAT_OK)
        st = cfg_num(&c, "rms_norm_eps", 1e-6, 1.0, "a number with 0 < eps <= 1", &eps);
    if (st == CLREMAT_OK)
        st = cfg_bool(&c, "tie_word_embeddings", 0, &tie);
    if (st == CLREMAT_OK)
        st = cfg_bool(&c, "attention_bias", 0, &abias);
    if (st == CLREMAT_OK)
        st = cfg_bool(&c, "mlp_bias", 0, &mbias);
    if (st == CLREMAT_OK && D % H != 0)
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: hidden_size %lld is not a multiple of num_attention_heads "
                               "%lld", config_path, (long long)D, (long long)H);
    if (st == CLREMAT_OK && (H % KV != 0))
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: num_key_value_heads %lld does not divide num_attention_heads "
                               "%lld", config_path, (long long)KV, (long long)H);
    if (st == CLREMAT_OK && hd != D / H)
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: head_dim %lld differs from hidden_size / num_attention_heads "
                               "= %lld: not supported", config_path, (long long)hd, (long long)(D / H));
    if (st == CLREMAT_OK && hd % 2 != 0)
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: the head width %lld is odd: RoPE needs it even", config_path,
                               (long long)hd);
    if (st == CLREMAT_OK && (v = json_object_get(root, "hidden_act")) &&
        (!json_is_string(v) || strcmp(json_string_value(v), "silu") != 0))
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: hidden_act must be \"silu\" (Llama's SwiGLU)", config_path);
    if (st == CLREMAT_OK && (v = json_object_get(root, "rope_scaling")) && !json_is_null(v))
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: rope_scaling is set: scaled RoPE is not supported",
                               config_path);
    if (st == CLREMAT_OK && !(s = malloc(cap)))
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    if (st == CLREMAT_OK) {
        const char *bias = abias ? "" : ", \"use_bias\": false";
        const char *mb = mbias ? "" : ", \"use_bias\": false";
#define EMIT(...) (len += (size_t)snprintf(s + len, len < cap ? cap - len : 0, __VA_ARGS__))
        EMIT("{\n  \"name\": \"hf_llama\",\n  \"description\": \"Imported from a Hugging Face Llama config.json "
             "by clremat import-hf: %lld decoder blocks of width %lld, %lld heads (%lld kv heads), MLP %lld, vocab "
             "%lld%s.\",\n", (long long)N, (long long)D, (long long)H, (long long)KV, (long long)I, (long long)V,
             tie ? ", tied embeddings" : "");
        EMIT("  \"task\": \"language\",\n"); /* a causal LM: next-token prediction when no --data is given */
        EMIT("  \"input\": {\"shape\": [%lld], \"dtype\": \"int32\"},\n  \"layers\": [\n", (long long)seq_len);
        EMIT("    {\"name\": \"embed_tokens\", \"type\": \"embedding\", \"vocab\": %lld, \"dim\": %lld},\n",
             (long long)V, (long long)D);
        EMIT("    {\"block\": \"decoder_block\", \"repeat\": %lld, \"layers\": [\n", (long long)N);
        EMIT("        {\"name\": \"input_layernorm\", \"type\": \"rmsnorm\", \"eps\": %.17g},\n", eps);
        EMIT("        {\"name\": \"self_attn\", \"type\": \"attention\", \"heads\": %lld, \"kv_heads\": %lld, "
             "\"causal\": true%s,\n         \"rope\": {\"theta\": %.17g}},\n", (long long)H, (long long)KV, bias,
             theta);
        EMIT("        {\"name\": \"res1\", \"type\": \"add\", \"inputs\": [\"self_attn\", \"@block_input\"]},\n");
        EMIT("        {\"name\": \"post_attention_layernorm\", \"type\": \"rmsnorm\", \"eps\": %.17g},\n", eps);
        EMIT("        {\"name\": \"gate_proj\", \"type\": \"dense\", \"units\": %lld%s, \"activation\": \"silu\"},\n",
             (long long)I, mb);
        EMIT("        {\"name\": \"up_proj\", \"type\": \"dense\", \"units\": %lld%s, \"inputs\": "
             "[\"post_attention_layernorm\"]},\n", (long long)I, mb);
        EMIT("        {\"name\": \"gated\", \"type\": \"multiply\", \"inputs\": [\"gate_proj\", \"up_proj\"]},\n");
        EMIT("        {\"name\": \"down_proj\", \"type\": \"dense\", \"units\": %lld%s},\n", (long long)D, mb);
        EMIT("        {\"name\": \"res2\", \"type\": \"add\", \"inputs\": [\"down_proj\", \"res1\"]}\n      ]},\n");
        EMIT("    {\"name\": \"norm\", \"type\": \"rmsnorm\", \"eps\": %.17g},\n", eps);
        EMIT("    {\"name\": \"lm_head\", \"type\": \"dense\", \"units\": %lld, \"use_bias\": false%s},\n",
             (long long)V, tie ? ", \"tie\": \"embed_tokens\"" : "");
        EMIT("    {\"name\": \"loss\", \"type\": \"softmax_cross_entropy\"}\n  ]\n}\n");
#undef EMIT
        if (len >= cap) {
            st = clremat_set_error(CLREMAT_ERR_INTERNAL, "import-hf: model text longer than %zu bytes", cap);
            free(s);
            s = NULL;
        }
    }
    json_decref(root);
    clremat_json_index_free(c.ix);
    *out = s;
    return st;
}

/* ------------------------------------------------------------ names */

/* How a clremat parameter is stored in a Hugging Face checkpoint. */
typedef enum hf_kind { HF_NONE, HF_COPY, HF_TRANSPOSE, HF_QKV_W, HF_QKV_B } hf_kind;

/* The Hugging Face name(s) of parameter p of layer l (three for q, k, v).
 * Returns the kind; HF_NONE with an error set when the parameter has no
 * name, HF_NONE without one for LoRA adapters. */
static hf_kind hf_names(const clremat_graph *g, int l, int p, char names[3][128])
{
    const clremat_layer *L = &g->layers[l];
    const char *pn = L->params[p].name, *sub;
    int n = -1, used = 0;
    if (!strncmp(pn, "lora_", 5))
        return HF_NONE;
    if (!strcmp(L->name, "embed_tokens") && !strcmp(pn, "table")) {
        snprintf(names[0], 128, "model.embed_tokens.weight");
        return HF_COPY;
    }
    if (!strcmp(L->name, "norm") && !strcmp(pn, "scale")) {
        snprintf(names[0], 128, "model.norm.weight");
        return HF_COPY;
    }
    if (!strcmp(L->name, "lm_head") && !strcmp(pn, "kernel")) {
        snprintf(names[0], 128, "lm_head.weight");
        return HF_TRANSPOSE;
    }
    if (sscanf(L->name, "decoder_block_%d/%n", &n, &used) == 1 && used > 0 && n >= 0) {
        sub = L->name + used;
        if ((!strcmp(sub, "input_layernorm") || !strcmp(sub, "post_attention_layernorm")) && !strcmp(pn, "scale")) {
            snprintf(names[0], 128, "model.layers.%d.%s.weight", n, sub);
            return HF_COPY;
        }
        if (!strcmp(sub, "self_attn")) {
            int w = !strcmp(pn, "wqkv"), b = !strcmp(pn, "bqkv");
            if (w || b) {
                snprintf(names[0], 128, "model.layers.%d.self_attn.q_proj.%s", n, w ? "weight" : "bias");
                snprintf(names[1], 128, "model.layers.%d.self_attn.k_proj.%s", n, w ? "weight" : "bias");
                snprintf(names[2], 128, "model.layers.%d.self_attn.v_proj.%s", n, w ? "weight" : "bias");
                return w ? HF_QKV_W : HF_QKV_B;
            }
            if (!strcmp(pn, "wo") || !strcmp(pn, "bo")) {
                snprintf(names[0], 128, "model.layers.%d.self_attn.o_proj.%s", n, pn[0] == 'b' ? "bias" : "weight");
                return pn[0] == 'b' ? HF_COPY : HF_TRANSPOSE;
            }
        }
        if (!strcmp(sub, "gate_proj") || !strcmp(sub, "up_proj") || !strcmp(sub, "down_proj")) {
            int k = !strcmp(pn, "kernel");
            if (k || !strcmp(pn, "bias")) {
                snprintf(names[0], 128, "model.layers.%d.mlp.%s.%s", n, sub, k ? "weight" : "bias");
                return k ? HF_TRANSPOSE : HF_COPY;
            }
        }
    }
    clremat_set_error(CLREMAT_ERR_MISMATCH, "parameter '%s/%s' has no Hugging Face Llama name (the model's layers "
                      "must be named as clremat import-hf names them)", L->name, pn);
    return HF_NONE;
}

/* ------------------------------------------------------------ loading */

/* A checkpoint: its files and, per tensor, whether a parameter took it. */
typedef struct hf_ckpt {
    clremat_st_file *files;
    char **file_names;
    unsigned char **used;
    int n;
} hf_ckpt;

static void ckpt_free(hf_ckpt *c)
{
    for (int i = 0; i < c->n; i++) {
        clremat_st_free(&c->files[i]);
        free(c->file_names[i]);
        free(c->used[i]);
    }
    free(c->files);
    free(c->file_names);
    free(c->used);
    memset(c, 0, sizeof *c);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int ckpt_add(hf_ckpt *c, const char *path)
{
    clremat_st_file *nf = realloc(c->files, sizeof *nf * (size_t)(c->n + 1));
    char **nn;
    unsigned char **nu;
    int st;
    if (!nf)
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    c->files = nf;
    if (!(nn = realloc(c->file_names, sizeof *nn * (size_t)(c->n + 1))))
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    c->file_names = nn;
    if (!(nu = realloc(c->used, sizeof *nu * (size_t)(c->n + 1))))
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    c->used = nu;
    if ((st = clremat_st_read(path, &c->files[c->n])) != CLREMAT_OK)
        return st;
    c->file_names[c->n] = strdup(path);
    c->used[c->n] = calloc(c->files[c->n].n + 1, 1);
    c->n++;
    if (!c->file_names[c->n - 1] || !c->used[c->n - 1])
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    return CLREMAT_OK;
}

/* Opens a single file, or every shard of an index (shards in the index's
 * folder; each file once). */
static int ckpt_open(hf_ckpt *c, const char *path)
{
    json_error_t err;
    json_t *root, *map, *v;
    const char *key;
    char dir[1024], shard[2048];
    const char *slash;
    int st = CLREMAT_OK;
    memset(c, 0, sizeof *c);
    if (!ends_with(path, ".index.json"))
        return ckpt_add(c, path);
    if (!(root = json_load_file(path, 0, &err)))
        return clremat_set_error(err.line > 0 ? CLREMAT_ERR_PARSE : CLREMAT_ERR_IO, "%s:%d:%d: %s", path, err.line,
                                 err.column, err.text);
    map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0) {
        json_decref(root);
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: no \"weight_map\" object mapping tensor names to shard files",
                                 path);
    }
    slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path + 1) : 0, path);
    json_object_foreach(map, key, v) {
        int seen = 0;
        if (!json_is_string(v) || strchr(json_string_value(v), '/')) {
            st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: weight_map[\"%s\"] must be a shard file name in the "
                                   "index's folder", path, key);
            break;
        }
        snprintf(shard, sizeof shard, "%s%s", dir, json_string_value(v));
        for (int i = 0; i < c->n && !seen; i++)
            seen = strcmp(c->file_names[i], shard) == 0;
        if (!seen && (st = ckpt_add(c, shard)) != CLREMAT_OK)
            break;
        {
            int found = 0;
            for (int i = 0; i < c->n && !found; i++)
                found = !strcmp(c->file_names[i], shard) && clremat_st_find(&c->files[i], key);
            if (!found) {
                st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: weight_map puts tensor '%s' in %s, which does not hold "
                                       "it", path, key, shard);
                break;
            }
        }
    }
    json_decref(root);
    return st;
}

/* The tensor called name in any file of c (marked used), or NULL. */
static const clremat_st_tensor *ckpt_find(hf_ckpt *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        for (size_t k = 0; k < c->files[i].n; k++)
            if (!strcmp(c->files[i].tensors[k].name, name)) {
                c->used[i][k] = 1;
                return &c->files[i].tensors[k];
            }
    return NULL;
}

/* Element i of a float tensor (any alignment, little-endian). */
static float elem(const clremat_st_tensor *t, int64_t i)
{
    const unsigned char *p = (const unsigned char *)t->data;
    switch (t->dtype) {
    case CLREMAT_ST_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case CLREMAT_ST_F64: {
        double d;
        memcpy(&d, p + 8 * i, 8);
        return (float)d;
    }
    case CLREMAT_ST_F16:
    case CLREMAT_ST_BF16:
        return clremat_st_half_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8), t->dtype == CLREMAT_ST_BF16);
    default:
        return 0.0f;
    }
}

/* Finds name with shape [d0, d1] (rank 1 when d1 is 0). */
static int need(hf_ckpt *c, const char *path, const char *name, int64_t d0, int64_t d1, const clremat_st_tensor **out)
{
    const clremat_st_tensor *t = ckpt_find(c, name);
    int rank = d1 ? 2 : 1;
    if (!t)
        return clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: the checkpoint has no tensor '%s'", path, name);
    if (t->dtype == CLREMAT_ST_I32 || t->dtype == CLREMAT_ST_I64)
        return clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: tensor '%s' is %s, not a float type", path, name,
                                 clremat_st_dtype_name(t->dtype));
    if (t->rank != rank || t->dims[0] != d0 || (rank == 2 && t->dims[1] != d1))
        return clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: tensor '%s' has shape [%lld%s%lld] but the model needs "
                                 "[%lld%s%lld]", path, name, (long long)t->dims[0], t->rank > 1 ? ", " : "",
                                 t->rank > 1 ? (long long)t->dims[1] : 0LL, (long long)d0, d1 ? ", " : "",
                                 (long long)d1);
    *out = t;
    return CLREMAT_OK;
}

/* Fills dst (the parameter, elems floats) from its Hugging Face tensors. */
static int load_param(hf_ckpt *c, const char *path, const clremat_param *pr, hf_kind kind, char names[3][128],
                      float *dst)
{
    const clremat_st_tensor *t[3];
    int64_t r = pr->shape.dims[0], k = pr->shape.rank > 1 ? pr->shape.dims[1] : 0;
    int st;
    switch (kind) {
    case HF_COPY:
        if ((st = need(c, path, names[0], r, k, &t[0])) != CLREMAT_OK)
            return st;
        for (int64_t i = 0; i < pr->elems; i++)
            dst[i] = elem(t[0], i);
        return CLREMAT_OK;
    case HF_TRANSPOSE: /* clremat [in, out], Hugging Face [out, in] */
        if ((st = need(c, path, names[0], k, r, &t[0])) != CLREMAT_OK)
            return st;
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < k; j++)
                dst[i * k + j] = elem(t[0], j * r + i);
        return CLREMAT_OK;
    case HF_QKV_W:
    case HF_QKV_B: {
        /* wqkv [D, D + 2 Dkv] or bqkv [D + 2 Dkv]; q has D rows, k and v Dkv */
        int64_t D = kind == HF_QKV_W ? r : -1, W3 = kind == HF_QKV_W ? k : r, Dq, Dkv, off = 0;
        const clremat_st_tensor *q = ckpt_find(c, names[0]);
        if (!q)
            return clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: the checkpoint has no tensor '%s'", path, names[0]);
        Dq = q->dims[0];
        Dkv = (W3 - Dq) / 2;
        if (Dq <= 0 || Dkv <= 0 || Dq + 2 * Dkv != W3)
            return clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: tensor '%s' has %lld rows, which does not fit the "
                                     "model's q, k, v width %lld", path, names[0], (long long)Dq, (long long)W3);
        for (int part = 0; part < 3; part++) {
            int64_t rows = part ? Dkv : Dq;
            if ((st = need(c, path, names[part], rows, kind == HF_QKV_W ? D : 0, &t[part])) != CLREMAT_OK)
                return st;
            if (kind == HF_QKV_W) {
                for (int64_t i = 0; i < D; i++)
                    for (int64_t j = 0; j < rows; j++)
                        dst[i * W3 + off + j] = elem(t[part], j * D + i);
            } else {
                for (int64_t j = 0; j < rows; j++)
                    dst[off + j] = elem(t[part], j);
            }
            off += rows;
        }
        return CLREMAT_OK;
    }
    case HF_NONE:
        break;
    }
    return CLREMAT_ERR_INTERNAL;
}

int clremat_hf_is_checkpoint(const char *path)
{
    clremat_st_file f;
    int yes;
    if (!path)
        return 0;
    if (ends_with(path, ".index.json"))
        return 1;
    if (!ends_with(path, ".safetensors") || clremat_st_read(path, &f) != CLREMAT_OK)
        return 0; /* not readable: the clremat loader reports why */
    yes = clremat_st_find(&f, "model.embed_tokens.weight") != NULL;
    clremat_st_free(&f);
    return yes;
}

int clremat_hf_load(clremat_trainer *t, const char *path)
{
    const clremat_graph *g = t->g;
    hf_ckpt c;
    size_t off = 0;
    float *host = NULL;
    int st = clremat_host_alloc_check(t->plan.param_bytes, "loading the checkpoint");
    int tied = 0;
    if (st != CLREMAT_OK)
        return st;
    if (!(host = malloc(t->plan.param_bytes + 1)))
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    if ((st = clremat_trainer_get_params(t, host)) != CLREMAT_OK) {
        clremat_set_error(st, "%s", clremat_ctx_last_error(t->ctx));
        free(host);
        return st;
    }
    if ((st = ckpt_open(&c, path)) != CLREMAT_OK)
        goto done;
    for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++) {
        tied |= g->layers[l].type == CLREMAT_DENSE && g->layers[l].tie;
        for (int p = 0; p < g->layers[l].n_params && st == CLREMAT_OK; p++) {
            char names[3][128];
            const clremat_param *pr = &g->layers[l].params[p];
            hf_kind kind = hf_names(g, l, p, names);
            if (kind == HF_NONE && strncmp(pr->name, "lora_", 5) != 0)
                st = CLREMAT_ERR_MISMATCH; /* the message is set */
            else if (kind != HF_NONE)
                st = load_param(&c, path, pr, kind, names, host + off);
            off += (size_t)pr->elems;
        }
    }
    /* every tensor of the checkpoint has a place (a tied model ignores a
     * stored copy of lm_head.weight; rotary inv_freq buffers are derived) */
    for (int i = 0; i < c.n && st == CLREMAT_OK; i++)
        for (size_t k = 0; k < c.files[i].n && st == CLREMAT_OK; k++) {
            const char *name = c.files[i].tensors[k].name;
            if (c.used[i][k] || ends_with(name, "rotary_emb.inv_freq") || (tied && !strcmp(name, "lm_head.weight")))
                continue;
            st = clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: tensor '%s' of the checkpoint has no place in model "
                                   "'%s' (is the model file the import of this checkpoint's config.json?)",
                                   c.file_names[i], name, g->name);
        }
    for (size_t i = 0; i < off && st == CLREMAT_OK; i++)
        if (!isfinite(host[i]))
            st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: a parameter value is %g, not finite", path,
                                   (double)host[i]);
    if (st == CLREMAT_OK && (st = clremat_trainer_set_params(t, host)) != CLREMAT_OK)
        clremat_set_error(st, "%s", clremat_ctx_last_error(t->ctx));
done:
    ckpt_free(&c);
    free(host);
    return st;
}

/* ------------------------------------------------------------ saving */

int clremat_hf_save(clremat_trainer *t, const char *path)
{
    const clremat_graph *g = t->g;
    size_t n = 0, off = 0, nt = 0;
    float *host = NULL, *out = NULL;
    clremat_st_tensor *ts = NULL;
    clremat_st_meta meta = {"format", "pt"};
    int st = clremat_host_alloc_check(2 * t->plan.param_bytes, "saving the checkpoint");
    if (st != CLREMAT_OK)
        return st;
    for (int l = 0; l < g->n_layers; l++)
        n += (size_t)g->layers[l].n_params;
    host = malloc(t->plan.param_bytes + 1);
    out = malloc(t->plan.param_bytes + 1);
    ts = calloc(3 * n + 1, sizeof *ts);
    if (!host || !out || !ts) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
        goto done;
    }
    if ((st = clremat_trainer_get_params(t, host)) != CLREMAT_OK) {
        clremat_set_error(st, "%s", clremat_ctx_last_error(t->ctx));
        goto done;
    }
    for (int l = 0; l < g->n_layers && st == CLREMAT_OK; l++)
        for (int p = 0; p < g->layers[l].n_params && st == CLREMAT_OK; p++) {
            const clremat_param *pr = &g->layers[l].params[p];
            const float *src = host + off;
            float *dst = out + off;
            int64_t r = pr->shape.dims[0], k = pr->shape.rank > 1 ? pr->shape.dims[1] : 0;
            char names[3][128];
            hf_kind kind = hf_names(g, l, p, names);
            off += (size_t)pr->elems;
            if (kind == HF_NONE) {
                if (strncmp(pr->name, "lora_", 5) != 0)
                    st = CLREMAT_ERR_MISMATCH;
                continue;
            }
            if (kind == HF_COPY || kind == HF_TRANSPOSE) {
                clremat_st_tensor *x = &ts[nt++];
                snprintf(x->name, sizeof x->name, "%s", names[0]);
                x->dtype = CLREMAT_ST_F32;
                x->rank = pr->shape.rank;
                x->dims[0] = kind == HF_TRANSPOSE ? k : r;
                x->dims[1] = kind == HF_TRANSPOSE ? r : k;
                x->elems = pr->elems;
                x->data = dst;
                for (int64_t i = 0; i < pr->elems; i++)
                    dst[i] = kind == HF_COPY ? src[i] : src[(i % r) * k + i / r];
                continue;
            }
            {
                /* q, k, v: the layer's heads give the split */
                const clremat_layer *L = &g->layers[l];
                int64_t W3 = kind == HF_QKV_W ? k : r, D = kind == HF_QKV_W ? r : -1;
                int64_t Dq = L->in_shape[0].dims[1], Dkv = (W3 - Dq) / 2, coff = 0;
                for (int part = 0; part < 3; part++) {
                    int64_t rows = part ? Dkv : Dq;
                    clremat_st_tensor *x = &ts[nt++];
                    snprintf(x->name, sizeof x->name, "%s", names[part]);
                    x->dtype = CLREMAT_ST_F32;
                    x->rank = kind == HF_QKV_W ? 2 : 1;
                    x->dims[0] = rows;
                    x->dims[1] = kind == HF_QKV_W ? D : 0;
                    x->elems = kind == HF_QKV_W ? rows * D : rows;
                    x->data = dst;
                    if (kind == HF_QKV_W) {
                        for (int64_t j = 0; j < rows; j++)
                            for (int64_t i = 0; i < D; i++)
                                dst[j * D + i] = src[i * W3 + coff + j];
                    } else {
                        for (int64_t j = 0; j < rows; j++)
                            dst[j] = src[coff + j];
                    }
                    dst += x->elems;
                    coff += rows;
                }
            }
        }
    if (st == CLREMAT_OK)
        st = clremat_st_write_meta(path, ts, nt, &meta, 1);
done:
    free(ts);
    free(out);
    free(host);
    return st;
}
