#!/usr/bin/env python3
"""roundtrip.py: Keras -> clremat -> Keras, for tests/keras/nested.keras (a
nested encoder_block), tests/keras/resnet.keras (a convnet with
BatchNormalization) and tests/keras/legacy.h5 (a legacy HDF5 model, exported
back into a legacy .h5). Each is imported into clremat, trained 20 steps under
--remat full on the fixture's batch (as a data file), and its weights are
exported (.weights.h5 and .keras), loaded into the original Keras model and
the same batch evaluated in Keras and in clremat: the losses must agree
within 1e-5 (relative), and training must have moved the loss. For the
convnets Keras also trains the same 20 SGD steps itself from the same start:
the exported parameters, BatchNormalization moving statistics included,
must match Keras's own within 1e-4 (absolute, after 20 float32 steps).
Needs Keras 3 with a backend (exit 77, skipped, without it).
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
PARAM_TOL = 1e-4
STEPS = 20
tool, src, work = sys.argv[1], sys.argv[2], sys.argv[3]


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


def roundtrip(name, outs, train_in_keras):
    exp = json.load(open(os.path.join(src, "tests", "keras", name + ".expect.json")))
    model = os.path.join(src, "tests", "keras", exp["model"])
    B = exp["batch"]
    ref = keras.models.load_model(model)
    x = np.array(exp["x"], dtype="float32").reshape((B,) + tuple(ref.inputs[0].shape[1:]))
    y = np.array(exp["y"], dtype="float32")
    data = os.path.join(work, name + "_data.safetensors")
    write_safetensors(data, {"train_x": x, "train_y": y, "val_x": x, "val_y": y})
    worst = 0.0
    for out in outs:
        path = os.path.join(work, name + "_" + out)
        r = subprocess.run([tool, "train", model, "--steps", str(STEPS), "--batch", str(B), "--remat", "full",
                            "--data", data, "--save", path, "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            sys.exit(1)
        clr = json.loads(r.stdout)["val_loss"]
        if out.endswith(".keras") or not out.endswith(".weights.h5"):  # .keras, or a legacy whole-model .h5
            m = keras.models.load_model(path)
        else:
            m = keras.models.load_model(model)
            m.load_weights(path)
        k = float(m.evaluate(x, y.astype("int32"), batch_size=B, verbose=0))
        diff = abs(k - clr)
        worst = max(worst, diff / max(1.0, abs(k)))
        print(f"roundtrip {name} {out}: clremat loss after {STEPS} steps {clr:.9g}, Keras on the exported weights "
              f"{k:.9g}, difference {diff:.3g} (loss before training {exp['loss']:.6g})")
        if not abs(k - exp["loss"]) > 1e-3:
            print(f"roundtrip {name}: training did not change the loss: the export is not tested", file=sys.stderr)
            sys.exit(1)
        if train_in_keras:
            # a fresh optimizer of the same config (a legacy .h5 loads one Keras cannot step)
            ref.compile(optimizer=ref.optimizer.__class__.from_config(ref.optimizer.get_config()), loss=ref.loss)
            for _ in range(STEPS):
                ref.train_on_batch(x, y.astype("int32"))
            kd = float(ref.evaluate(x, y.astype("int32"), batch_size=B, verbose=0))
            pd, moving = 0.0, 0.0
            for lk, lc in zip(ref.layers, m.layers):
                for vk, vc in zip(lk.weights, lc.weights):
                    d = float(np.max(np.abs(np.asarray(vk) - np.asarray(vc)))) if vk.shape else 0.0
                    pd = max(pd, d)
                    if "moving" in vk.path:
                        moving = max(moving, d)
            print(f"roundtrip {name}: Keras trained {STEPS} steps itself: loss {kd:.9g} (clremat {clr:.9g}); "
                  f"largest parameter difference {pd:.3g}, of the moving statistics {moving:.3g}")
            if pd > PARAM_TOL:
                print(f"roundtrip {name}: FAIL: parameters differ from Keras's own training by {pd:.3g} > "
                      f"{PARAM_TOL}", file=sys.stderr)
                sys.exit(1)
            train_in_keras = False
    return worst


worst = max(roundtrip("nested", ("rt.weights.h5", "rt.keras"), False),
            roundtrip("resnet", ("rt.weights.h5",), True),
            roundtrip("legacy", ("rt.h5",), True))
if worst > TOL:
    print(f"roundtrip: FAIL: relative difference {worst:.3g} > {TOL}", file=sys.stderr)
    sys.exit(1)
print("roundtrip: PASS")
