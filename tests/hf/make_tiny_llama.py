#!/usr/bin/env python3
"""make_tiny_llama.py: writes the tiny Hugging Face Llama checkpoints the
tests read (tests/hf/, kilobytes), with numpy alone, and, where the
`transformers` library is importable, the reference logits its
LlamaForCausalLM computes from them (tests/hf/tiny_llama_logits.json).

Checkpoints (float32, weights N(0, 0.2^2) from a fixed seed, norms
1 + N(0, 0.1^2)):
  tiny/        config.json (untied, 2 layers, width 16, 4 heads, 2 kv heads,
               MLP 40, vocab 24, rope_theta 500) and model.safetensors
  tiny_sharded/ the same tensors in two shards with model.safetensors.index.json
               (layer 0's attention in shard 1, its MLP in shard 2)
  tiny_tied/   tie_word_embeddings true (no lm_head.weight), attention_bias
               true (q/k/v/o biases), bf16 weights
With --grads (transformers too) it also writes tiny_llama_grads.safetensors:
the mean softmax cross-entropy of LlamaForCausalLM's logits over TOKENS
against LABELS (every position, no shift: clremat's softmax_cross_entropy)
and the gradient of every parameter of tiny/ and tiny_tied/ under Hugging
Face's names ("tiny/loss", "tiny/model.norm.weight", ...; tied: the
embedding's gradient holds the lm_head's share), float32, eager attention;
tokens and labels as I32 [2, 8].
Run: /usr/bin/python3 tests/hf/make_tiny_llama.py [--logits] [--grads]
(--logits and --grads need transformers: python3 -m venv --system-site-packages V &&
V/bin/pip install transformers==4.44.2)."""
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def config(tied, bias):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16,
        "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 24, "rope_theta": 500.0, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": tied, "attention_bias": bias, "mlp_bias": False, "hidden_act": "silu",
        "max_position_embeddings": 64, "rope_scaling": None, "torch_dtype": "float32",
    }


def tensors(cfg, seed):
    rng = np.random.default_rng(seed)
    D, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    dh = D // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * dh
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
    norm = lambda: (1.0 + rng.standard_normal(D) * 0.1).astype(np.float32)
    t = {"model.embed_tokens.weight": w(V, D)}
    for n in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % n
        t[p + "input_layernorm.weight"] = norm()
        for name, out in (("q", D), ("k", kv), ("v", kv), ("o", D)):
            t[p + "self_attn.%s_proj.weight" % name] = w(out, D)
            if cfg["attention_bias"]:
                t[p + "self_attn.%s_proj.bias" % name] = w(out)
        t[p + "post_attention_layernorm.weight"] = norm()
        t[p + "mlp.gate_proj.weight"] = w(I, D)
        t[p + "mlp.up_proj.weight"] = w(I, D)
        t[p + "mlp.down_proj.weight"] = w(D, I)
    t["model.norm.weight"] = norm()
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = w(V, D)
    return t


def bf16_bytes(a):
    """Round-to-nearest-even bfloat16 of a float32 array, as raw bytes."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2").tobytes()


def write_safetensors(path, ts, dtype="F32", meta=None):
    """Writes the arrays of ts (sorted by name) as a safetensors file: int32
    arrays as I32, the others as dtype (F32 or BF16); meta is the
    __metadata__ (default {"format": "pt"})."""
    header, blobs, off = {"__metadata__": meta or {"format": "pt"}}, [], 0
    for name in sorted(ts):
        a = ts[name]
        kind = "I32" if a.dtype == np.int32 else dtype
        b = a.astype("<i4").tobytes() if kind == "I32" else bf16_bytes(a) if kind == "BF16" else \
            a.astype("<f4").tobytes()
        header[name] = {"dtype": kind, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_dir(name, cfg, ts, dtype="F32", shards=None):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    if not shards:
        write_safetensors(os.path.join(d, "model.safetensors"), ts, dtype)
        return
    weight_map = {}
    for i, names in enumerate(shards):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        write_safetensors(os.path.join(d, fname), {n: ts[n] for n in names}, dtype)
        weight_map.update({n: fname for n in names})
    size = sum(a.nbytes for a in ts.values())
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": size}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")


TOKENS = [[3, 17, 5, 5, 22, 0, 9, 14], [23, 1, 8, 12, 12, 4, 19, 6]]
LABELS = [[17, 5, 5, 22, 0, 9, 14, 2], [1, 8, 12, 12, 4, 19, 6, 11]]


def logits(name):
    import torch
    import transformers
    m = transformers.LlamaForCausalLM.from_pretrained(os.path.join(HERE, name), torch_dtype=torch.float32,
                                                      attn_implementation="eager")
    m.eval()
    with torch.no_grad():
        out = m(torch.tensor(TOKENS)).logits
    return transformers.__version__, torch.__version__, out.double().numpy().tolist()


def grads(name):
    """Loss and parameter gradients of LlamaForCausalLM (float32) on TOKENS / LABELS."""
    import torch
    import transformers
    m = transformers.LlamaForCausalLM.from_pretrained(os.path.join(HERE, name), torch_dtype=torch.float32,
                                                      attn_implementation="eager")
    logits = m(torch.tensor(TOKENS)).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(LABELS).reshape(-1))
    loss.backward()
    out = {name + "/loss": np.array([loss.item()], np.float32)}
    for k, v in m.named_parameters():  # tied: lm_head.weight is the embedding's tensor, listed once
        out[name + "/" + k] = v.grad.detach().numpy().astype(np.float32)
    return transformers.__version__, torch.__version__, out


def write_grads(path):
    ts = {"tokens": np.array(TOKENS, np.int32), "labels": np.array(LABELS, np.int32)}
    for name in ("tiny", "tiny_tied"):
        tv, pv, g = grads(name)
        ts.update(g)
    meta = {"format": "pt", "made_by": "transformers %s, torch %s (LlamaForCausalLM, float32, eager attention)"
            % (tv, pv)}
    write_safetensors(path, ts, meta=meta)


def main():
    base = config(False, False)
    ts = tensors(base, 20261201)
    write_dir("tiny", base, ts)
    names = sorted(ts)
    first = [n for n in names if n.startswith("model.layers.0.self_attn") or n.startswith("model.embed")]
    write_dir("tiny_sharded", base, ts, shards=[first, [n for n in names if n not in first]])
    tied = config(True, True)
    tied["torch_dtype"] = "bfloat16"
    tts = tensors(tied, 20261202)
    write_dir("tiny_tied", tied, tts, dtype="BF16")
    if "--logits" in sys.argv:
        ref = {"tokens": TOKENS}
        for name in ("tiny", "tiny_tied"):
            tv, pv, lg = logits(name)
            ref[name] = lg
        ref["made_by"] = "transformers %s, torch %s (LlamaForCausalLM, float32, eager attention)" % (tv, pv)
        with open(os.path.join(HERE, "tiny_llama_logits.json"), "w") as f:
            json.dump(ref, f)
            f.write("\n")
    if "--grads" in sys.argv:
        write_grads(os.path.join(HERE, "tiny_llama_grads.safetensors"))


if __name__ == "__main__":
    main()
