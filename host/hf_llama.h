/* hf_llama.h: Hugging Face Llama-architecture checkpoints: a config.json
 * turned into a clremat model file, and safetensors weights (one file or
 * shards listed by model.safetensors.index.json) read into and written from
 * a trainer with Hugging Face's tensor names and layouts. The clremat model
 * uses the layer names the import writes (embed_tokens, decoder_block_N/
 * {input_layernorm, self_attn, post_attention_layernorm, gate_proj,
 * up_proj, down_proj}, norm, lm_head; models/llama_tiny.json uses them
 * too). Host-level: nothing below host/ knows the format. */
#ifndef CLREMAT_HF_LLAMA_H
#define CLREMAT_HF_LLAMA_H

#include <stdint.h>
#include "executor.h"

/** Reads a Hugging Face config.json of a Llama-architecture model
 * (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads, rope_theta, rms_norm_eps, vocab_size,
 * tie_word_embeddings, attention_bias, mlp_bias, hidden_act "silu") and
 * writes the clremat model file's JSON text for token sequences of seq_len
 * into *out (malloc'd; the caller frees). Unsupported settings (another
 * activation, rope_scaling, head_dim other than hidden / heads) are refused
 * naming the field. Returns CLREMAT_OK or CLREMAT_ERR_IO / _PARSE. */
int clremat_hf_model_json(const char *config_path, int64_t seq_len, char **out);

/** 1 when path is a Hugging Face checkpoint: a file named *.index.json (a
 * sharded checkpoint's index), or a safetensors file holding
 * "model.embed_tokens.weight"; else 0. */
int clremat_hf_is_checkpoint(const char *path);

/** Loads the trainer's parameters from a Hugging Face checkpoint (path: a
 * safetensors file or a model.safetensors.index.json whose shards lie in
 * its folder): every parameter from its tensor (Linear weights [out, in]
 * transposed, q/k/v_proj concatenated into wqkv), F32, F16, BF16 or F64.
 * A tensor missing or of the wrong shape, or a tensor of the checkpoint
 * the model has no place for, is an error naming it. LoRA adapters keep
 * their values (a base checkpoint has none). */
int clremat_hf_load(clremat_trainer *t, const char *path);

/** Writes the trainer's parameters to path (one safetensors file, F32,
 * atomically) with Hugging Face's names and layouts; LoRA adapters are not
 * written (save those with clremat_weights_save). */
int clremat_hf_save(clremat_trainer *t, const char *path);

#endif
