#!/usr/bin/env python3
"""make-seeds.py: writes the seed corpora of the fuzz targets into
fuzz/corpus/{model,safetensors,cli,keras,hf}/seed-*: the bundled models and the model
examples of docs/model-format.md, the layer types one by one, small valid and
malformed safetensors files (after tests/test_safetensors.c), and the command
lines of the README and tests; for the Keras and Hugging Face importers the
configurations of tests/keras and tests/hf and hostile edits of them. Run from the source tree root; idempotent."""
import json, os, re, struct

out = "fuzz/corpus"
def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(out, target, "seed-" + name), "wb") as f:
        f.write(data)

# ---- model files
for fn in sorted(f for f in os.listdir("models") if f.endswith(".json")):  # (the .keras one: below)
    put("model", fn, open(os.path.join("models", fn)).read())
doc = open("docs/model-format.md").read()
for i, m in enumerate(re.findall(r"```json\n(.*?)```", doc, re.S)):
    put("model", "doc%d.json" % i, m)
HEAD = '{"input": {"shape": [8]}, "layers": [\n'
SEQ = '{"input": {"shape": [6], "dtype": "int32"}, "layers": [\n'
TAIL = "\n]}"
layers = {
    "dense": '{"type": "dense", "units": 4, "activation": "gelu"}',
    "act": '{"type": "activation", "activation": "relu"}',
    "drop": '{"type": "dropout", "rate": 0.5}',
    "reshape": '{"type": "reshape", "shape": [2, 4]}',
    "ln": '{"type": "layernorm"}',
    "add": '{"name": "a", "type": "dense", "units": 8}, {"type": "add", "inputs": ["a", "@input"]}',
}
for k, v in layers.items():
    put("model", "layer-%s.json" % k, HEAD + v + ',\n{"name": "loss", "type": "mse"}' + TAIL)
put("model", "seq.json", SEQ + '{"type": "embedding", "vocab": 16, "dim": 8},'
    '{"type": "attention", "heads": 2},'
    '{"type": "dense", "units": 16}, {"name": "loss", "type": "softmax_cross_entropy"}' + TAIL)
put("model", "block.json", HEAD + '{"block": "b", "repeat": 2, "remat": true, "layers": ['
    '{"name": "d", "type": "dense", "units": 8}, {"type": "add", "inputs": ["d", "@block_input"]}]},'
    '{"name": "loss", "type": "mse"}' + TAIL)
put("model", "bad-units.json", HEAD + '{"type": "dense", "units": "abc"}' + TAIL)
put("model", "bad-syntax.json", HEAD + '{"type": "dense", "units": 4,,}' + TAIL)
# sizes whose products overflow 32 or 64 bits: per-sample shapes, units, vocabularies, sequence lengths
put("model", "huge-input.json", '{"input": {"shape": [2147483647, 2147483647]}, "layers": ['
    '{"type": "dense", "units": 4}, {"name": "loss", "type": "mse"}]}')
put("model", "huge-units.json", HEAD + '{"type": "dense", "units": 2147483647},'
    '{"type": "dense", "units": 9223372036854775807}, {"name": "loss", "type": "mse"}' + TAIL)
put("model", "huge-seq.json", '{"input": {"shape": [65536], "dtype": "int32"}, "layers": ['
    '{"type": "embedding", "vocab": 4294967296, "dim": 65536}, {"type": "attention", "heads": 65536},'
    '{"type": "dense", "units": 16}, {"name": "loss", "type": "softmax_cross_entropy"}]}')
put("model", "huge-repeat.json", HEAD + '{"block": "b", "repeat": 4294967297, "layers": ['
    '{"type": "dense", "units": 8}]}, {"name": "loss", "type": "mse"}' + TAIL)

# ---- safetensors files
def st(header, data=b"", hlen=None):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data
f32 = struct.pack("<4f", 1, 2, 3, 4)
put("safetensors", "f32", st({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, f32))
put("safetensors", "mixed", st({"__metadata__": {"format": "pt"},
    "a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]},
    "c": {"dtype": "F64", "shape": [1], "data_offsets": [16, 24]},
    "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [24, 24]}}, bytes(range(24))))
put("safetensors", "data", st({"train_x": {"dtype": "F32", "shape": [2, 1], "data_offsets": [0, 8]},
    "train_y": {"dtype": "I64", "shape": [2], "data_offsets": [8, 24]}}, bytes(24)))
put("safetensors", "empty", st({}))
put("safetensors", "short", b"\x10\0\0")
put("safetensors", "truncated", st({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, f32[:9]))
put("safetensors", "badjson", st(b'{"a": {"dtype": "F32",'))
put("safetensors", "array", st(b"[1, 2]"))
put("safetensors", "overlap", st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)))
put("safetensors", "back", st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}}, bytes(8)))
put("safetensors", "f16", st({"h": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, bytes(4)))
put("safetensors", "hugelen", st(b"{}", hlen=1 << 62))
put("safetensors", "dup", st(b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
                             b'"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', bytes(4)))
# hostile files: non-finite values, offsets and shapes whose products overflow 64 bits, stray names
put("safetensors", "nan", st({"h1/kernel": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
                             struct.pack("<2f", float("nan"), float("inf"))))
put("safetensors", "offset-wrap", st({"a": {"dtype": "F32", "shape": [1],
                                            "data_offsets": [18446744073709551612, 0]}}, bytes(4)))
put("safetensors", "offset-huge", st({"a": {"dtype": "F32", "shape": [1],
                                            "data_offsets": [0, 18446744073709551615]}}, bytes(4)))
put("safetensors", "shape-wrap", st({"a": {"dtype": "F64", "shape": [4294967296, 4294967296, 16],
                                           "data_offsets": [0, 0]}}))
put("safetensors", "shape-neg", st({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, bytes(4)))
put("safetensors", "strays", st({"h1": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                 "h1/extra": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
                                 "h1/": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, bytes(12)))
put("safetensors", "name-bytes", st(b'{"\\u0000\\udcff": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
                                    bytes(4)))

# ---- command lines (one argument per line)
cmds = [
    "devices", "devices\n--json", "--device\n0:0\ndevices", "--device=cpu\ndevices\n--json", "--version", "--help",
    "train\n--help", "plan\n--help", "bogus",
    "train\nmodels/transformer.json\n--steps\n150",
    "train\nm.json\n--remat\nlist_of_layers:encoder_block\n--batch\n8\n--json\n--quiet",
    "train\nm.json\n--memory-limit\n1.5GiB\n--lr\n0.001\n--optimizer\nadamw\n--seed\n7\n--warmup\n0",
    "train\nm.json\n--data\nsequence\n--load\nw.st\n--save\nw2.st\n--profile",
    "train\nm.json\n--remat=larger_than:100\n--memory-limit=64MB",
    "train\nm.json\n--batch\nzero", "train\nm.json\n--lr\n-1", "train\nm.json\n--memory-limit\n1KiB",
    "plan\nm.json\n--remat\nfull\n--batch\n32\n--json\n--actions",
    "plan\nm.json\n--remat\nbudget:3MiB\n--optimizer\nsgd", "plan\nm.json\n--remat\nauto",
    "plan\nm.json\n--remat\nlist_of_layers:a,b,c/d", "plan",
    "compare\n--help", "compare\nmodels/regression.json\n--steps\n4\n--warmup\n1\n--batch\n8\n--json",
    "--device\ncpu\ncompare\nm.json\n--remat\nnone,full,list_of_layers:a,b,budget:1MiB,auto\n--quiet",
    "compare\nm.json\n--devices\nall\n--memory-limit\n64MiB\n--costs\nmeasured\n--csv\nr.csv\n--svg\nr.svg",
    "compare\nm.json\n--seed\n3\n--data\nsequence\n--optimizer\nsgd\n--lr\n0.05",
    "compare\nm.json\n--warmup\n20\n--steps\n20", "compare\nm.json\n--batch\n0",
    "compare\nm.json\n--lr\ninf", "compare\nm.json\n--costs\ntime", "compare\nm.json\n--remat\n,",
    "compare\nm.json\n--memory-limit\n0", "compare",
    # hostile values: past 64 bits, signs, spaces, radix prefixes, empty selections, bad modes in a list
    "train\nm.json\n--batch\n4611686018427387904\n--costs\nmeasured", "compare\nm.json\n--batch\n18446744073709551616",
    "plan\nm.json\n--batch\n-9223372036854775808", "train\nm.json\n--batch\n 5", "train\nm.json\n--batch\n+5",
    "plan\nm.json\n--batch\n0x10", "train\nm.json\n--steps\n100000001", "compare\nm.json\n--seed\n-1",
    "train\nm.json\n--lr\nnan", "train\nm.json\n--lr\n 1e-3", "train\nm.json\n--lr\n1e400",
    "plan\nm.json\n--pareto\n--points\n10001", "plan\nm.json\n--pareto\n--points\n1\n--svg\n",
    "--device\n\ndevices", "--device=\ntrain\nm.json", "train\nm.json\n--device\n", "compare\nm.json\n--devices\n",
    "compare\nm.json\n--devices\n,,", "compare\nm.json\n--remat\nnone,bogus",
    "compare\nm.json\n--remat\nlist_of_layers:a,,b,full,bogus", "compare\nm.json\n--remat\nlist_of_layers:",
    "train\nm.json\n--save\n", "train\nm.json\n--save\n/dev/null", "train\n\xff\xfe.json\n--json",
    "train\nm.json\n--memory-limit\n18446744073709551616", "train\nm.json\n--memory-limit\n1e30GiB",
    "fit\n--help", "fit\nm.json\n--memory\n6GiB,8GiB,16GiB",
    "fit\nm.json\n--memory\n1MiB,,2\n--remat\nnone,list_of_layers:a,b,auto",
    "--device\ncpu\nfit\nm.json\n--batch\n64\n--max-batch\n4096\n--json\n--svg\nx.svg",
    "fit\nm.json\n--memory\n0\n--steps\n1001", "fit\nm.json\n--memory\nlots", "fit",
]
for i, c in enumerate(cmds):
    put("cli", "%02d" % i, c)

# ---- Keras model configurations (the config.json of tests/keras's archives, and hostile edits of them)
import copy, zipfile
keras = {}
for fn in sorted(os.listdir("tests/keras")):
    if fn.endswith(".keras"):
        keras[fn[:-6]] = json.loads(zipfile.ZipFile(os.path.join("tests/keras", fn)).read("config.json"))
        put("keras", fn[:-6] + ".json", json.dumps(keras[fn[:-6]]))
put("keras", "keras_encoder.json", zipfile.ZipFile("models/keras_encoder.keras").read("config.json"))
def keras_edit(name, base, fn):
    d = copy.deepcopy(keras[base])
    fn(d)
    put("keras", name + ".json", json.dumps(d))
def seq_layer(d, cls):
    return next(l for l in d["config"]["layers"] if l["class_name"] == cls)["config"]
def set_(obj, key, value):
    obj[key] = value
# names that need escaping in the JSON the importer writes
keras_edit("name-quotes", "seq_mlp", lambda d: set_(seq_layer(d, "Dense"), "name", 'd"1\\\n\t\u0001'))
keras_edit("name-long", "seq_mlp", lambda d: set_(seq_layer(d, "Dense"), "name", "n" * 5000))
# sizes past their ranges
keras_edit("units-huge", "seq_mlp", lambda d: set_(seq_layer(d, "Dense"), "units", 1 << 40))
keras_edit("units-neg", "seq_mlp", lambda d: set_(seq_layer(d, "Dense"), "units", -3))
keras_edit("units-str", "seq_mlp", lambda d: set_(seq_layer(d, "Dense"), "units", "16"))
keras_edit("shape-huge", "seq_mlp", lambda d: set_(seq_layer(d, "InputLayer"), "batch_shape",
                                                   [None, 4294967296, 4294967296]))
keras_edit("shape-neg", "seq_mlp", lambda d: set_(seq_layer(d, "InputLayer"), "batch_shape", [None, -8]))
keras_edit("shape-none", "seq_mlp", lambda d: set_(seq_layer(d, "InputLayer"), "batch_shape", [None, None]))
keras_edit("activation-bad", "seq_mlp", lambda d: set_(seq_layer(d, "Dense"), "activation", "swishy"))
keras_edit("class-bad", "seq_mlp", lambda d: set_(d["config"]["layers"][1], "class_name", "Frobnicate"))
keras_edit("layers-obj", "seq_mlp", lambda d: set_(d["config"], "layers", {"a": 1}))
keras_edit("lr-nan", "seq_mlp", lambda d: set_(d.setdefault("compile_config", {}), "optimizer",
                                               {"class_name": "SGD", "config": {"learning_rate": "nan"}}))
# functional graphs: an input that names no layer, a cycle, an output that names no layer
def inbound(d, layer, history):
    l = next(x for x in d["config"]["layers"] if x["config"]["name"] == layer)
    l["inbound_nodes"][0]["args"][0]["config"]["keras_history"] = history
keras_edit("inbound-missing", "func_mlp", lambda d: inbound(d, "d1", ["nowhere", 0, 0]))
keras_edit("inbound-index", "func_mlp", lambda d: inbound(d, "d1", ["features", 7, 9]))
keras_edit("inbound-self", "func_mlp", lambda d: inbound(d, "d1", ["d1", 0, 0]))
keras_edit("outputs-missing", "func_mlp", lambda d: set_(d["config"], "output_layers", [["nowhere", 0, 0]]))
# models nested in models, deeper than any real one
deep = copy.deepcopy(keras["seq_mlp"])
for i in range(300):
    deep = {"module": "keras", "class_name": "Sequential",
            "config": {"name": "s%d" % i, "layers": [copy.deepcopy(keras["seq_mlp"]["config"]["layers"][0]), deep]}}
put("keras", "nested-deep.json", json.dumps(deep))
put("keras", "not-keras.json", '{"class_name": 3, "config": []}')
put("keras", "syntax.json", '{"class_name": "Sequential", "config": {"layers": [}')

# ---- Hugging Face config.json files (tests/hf's, and hostile edits)
hf = json.load(open("tests/hf/tiny/config.json"))
for d in ("tiny", "tiny_tied"):
    put("hf", d + ".json", open(os.path.join("tests/hf", d, "config.json")).read())
def hf_edit(name, **kw):
    d = dict(hf)
    d.update(kw)
    put("hf", name + ".json", json.dumps(d))
hf_edit("act-gelu", hidden_act="gelu")
hf_edit("rope-scaling", rope_scaling={"type": "linear", "factor": 2.0})
hf_edit("heads-zero", num_attention_heads=0)
hf_edit("kv-indivisible", num_key_value_heads=3)
hf_edit("hidden-huge", hidden_size=1 << 40, intermediate_size=1 << 40)
hf_edit("vocab-neg", vocab_size=-1)
hf_edit("layers-huge", num_hidden_layers=1 << 31)
hf_edit("eps-str", rms_norm_eps="1e-5")
hf_edit("theta-inf", rope_theta=1e400)  # json.dumps writes Infinity: no JSON, refused as such
hf_edit("head-dim", head_dim=5)
hf_edit("type-bad", model_type="gpt2")
put("hf", "array.json", "[1, 2, 3]")
put("hf", "syntax.json", '{"model_type": "llama", "hidden_size": }')
