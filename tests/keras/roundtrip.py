#!/usr/bin/env python3
"""roundtrip.py: Keras -> clremat -> Keras. Imports tests/keras/nested.keras
into clremat, trains it 20 steps under --remat full on the fixture's batch
(as a data file), exports the weights (.weights.h5 and .keras), loads them
into the original Keras model, and evaluates the same batch in Keras and in
clremat: the losses must agree within 1e-5 (relative), and training must have
moved the loss. Needs Keras 3 with a backend (exit 77, skipped, without it).
Usage: roundtrip.py CLREMAT_TOOL SRCDIR WORKDIR"""
import json
import os
import struct
import subprocess
import sys

try:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import numpy as np
    import keras
except Exception as e:  # noqa: BLE001
    print(f"roundtrip: skipped: Keras 3 cannot be imported here ({e!r}); .ci/run installs it in a venv",
          file=sys.stderr)
    sys.exit(77)

TOL = 1e-5
tool, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
model = os.path.join(src, "tests", "keras", "nested.keras")
exp = json.load(open(os.path.join(src, "tests", "keras", "nested.expect.json")))
B = exp["batch"]
x = np.array(exp["x"], dtype="float32").reshape(B, -1)
y = np.array(exp["y"], dtype="float32")


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


data = os.path.join(work, "rt_data.safetensors")
write_safetensors(data, {"train_x": x, "train_y": y, "val_x": x, "val_y": y})
worst = 0.0
for out in ("rt.weights.h5", "rt.keras"):
    path = os.path.join(work, out)
    r = subprocess.run([tool, "train", model, "--steps", "20", "--batch", str(B), "--remat", "full",
                        "--data", data, "--save", path, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        sys.exit(1)
    clr = json.loads(r.stdout)["val_loss"]
    if out.endswith(".keras"):
        m = keras.models.load_model(path)
    else:
        m = keras.models.load_model(model)
        m.load_weights(path)
    k = float(m.evaluate(x, y.astype("int32"), batch_size=B, verbose=0))
    diff = abs(k - clr)
    worst = max(worst, diff / max(1.0, abs(k)))
    print(f"roundtrip {out}: clremat loss after 20 steps {clr:.9g}, Keras on the exported weights {k:.9g}, "
          f"difference {diff:.3g} (loss before training {exp['loss']:.6g})")
    if not abs(k - exp["loss"]) > 1e-3:
        print("roundtrip: training did not change the loss: the export is not tested", file=sys.stderr)
        sys.exit(1)
if worst > TOL:
    print(f"roundtrip: FAIL: relative difference {worst:.3g} > {TOL}", file=sys.stderr)
    sys.exit(1)
print("roundtrip: PASS")
