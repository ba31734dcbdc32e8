"""test_clremat.py: every function of the Python package against the library it
wraps: the same reports as the command's --json for the same options (losses
bitwise), the error classes with the library's details, the numpy checks, the
progress callback."""
import json
import os
import struct
import subprocess
import threading

import numpy as np
import pytest

import clremat


def cli_json(tool, *args):
    r = subprocess.run([tool, *args, "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


def bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def test_devices_match_cli(tool):
    devs = clremat.devices()
    assert devs and all(isinstance(d, clremat.Device) for d in devs)
    cli = json.loads(cli_json(tool, "devices"))["devices"]
    assert [d.id for d in devs] == [d["id"] for d in cli]
    assert [d.global_mem_bytes for d in devs] == [d["global_mem_bytes"] for d in cli]


def test_plan_same_as_cli(tool, models):
    path = os.path.join(models, "regression.json")
    p = clremat.Model(path).plan(remat="full", batch=64, actions=True)
    cli = json.loads(cli_json(tool, "plan", path, "--remat", "full", "--batch", "64", "--actions"))
    assert p.report == cli
    assert p.predicted_peak_bytes == cli["memory"]["predicted_peak_bytes"] > 0
    assert p.recompute_flops > 0 and len(p.layers) == 6 and p.layers[0]["name"] == "h1"


def test_plan_from_dict_and_modes(models):
    path = os.path.join(models, "regression.json")
    with open(path) as f:
        d = json.load(f)
    a = clremat.Model(d).plan(remat="none", batch=32)
    b = clremat.Model(path).plan(remat="none", batch=32)
    assert a.report == b.report
    full = clremat.Model(path).plan(remat="full", batch=32)
    assert full.predicted_peak_bytes < a.predicted_peak_bytes and a.recompute_flops == 0


def test_plan_to_frame(models):
    pandas = pytest.importorskip("pandas")
    frame = clremat.Model(os.path.join(models, "regression.json")).plan(remat="full").to_frame()
    assert isinstance(frame, pandas.DataFrame) and list(frame["name"])[:2] == ["h1", "h2"]


def test_pareto_same_as_cli(tool, models):
    path = os.path.join(models, "mlp_deep.json")
    front = clremat.Model(path).pareto(batch=16, points=8)
    assert front == json.loads(cli_json(tool, "plan", path, "--pareto", "--batch", "16", "--points", "8"))
    assert front["front"] and front["modes"]


def train_args(device, *extra):
    return ["--device", device, "--steps", "6", "--warmup", "1", "--batch", "16", "--seed", "7", "--quiet", *extra]


def test_train_same_losses_as_cli(tool, models, device):
    path = os.path.join(models, "regression.json")
    r = clremat.Model(path).train(steps=6, warmup=1, batch=16, seed=7, device=device, remat="full")
    cli = json.loads(cli_json(tool, "train", path, *train_args(device, "--remat", "full")))
    assert r.losses.dtype == np.float32 and r.losses.shape == (6,)
    assert np.array_equal(bits(r.losses), bits(cli["losses"]))
    assert r.memory["predicted_peak_bytes"] == cli["memory"]["predicted_peak_bytes"]
    assert r.measured_peak_bytes == r.predicted_peak_bytes
    assert r.weights["h1/kernel"].shape == (16, 128) and r.weights["out/bias"].shape == (4,)
    assert set(r.step_time_ms) >= {"median", "p10", "p90"}
    none = clremat.Model(path).train(steps=6, warmup=1, batch=16, seed=7, device=device, remat="none")
    assert np.array_equal(bits(none.losses), bits(r.losses))  # bitwise across remat modes
    for k, w in none.weights.items():
        assert np.array_equal(bits(w), bits(r.weights[k])), k
    w = r.weights["h2/kernel"]
    assert w.dtype == np.float32 and w.flags["C_CONTIGUOUS"] and not w.flags["OWNDATA"]  # a view, no copy
    del r  # the view keeps the library's run alive
    assert np.isfinite(w).all() and w.std() > 0


def write_safetensors(path, arrays):
    header, blobs, off = {}, [], 0
    for k, a in arrays.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_train_arrays_same_as_cli_data_file(tool, models, device, tmp_path):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 16), dtype=np.float32)
    y = np.tanh(x[:, :4] * 0.5).astype(np.float32)
    vx, vy = x[:16].copy(), y[:16].copy()
    path = os.path.join(models, "regression.json")
    data = tmp_path / "d.safetensors"
    write_safetensors(data, {"train_x": x, "train_y": y, "val_x": vx, "val_y": vy})
    r = clremat.Model(path).train(data=(x, y), validation=(vx, vy), steps=6, warmup=1, batch=16, seed=7,
                                  device=device)
    cli = json.loads(cli_json(tool, "train", path, *train_args(device, "--data", str(data))))
    assert np.array_equal(bits(r.losses), bits(cli["losses"]))
    assert r.report["val_loss"] == cli["val_loss"]
    f = clremat.Model(path).train(data=str(data), steps=6, warmup=1, batch=16, seed=7, device=device)
    assert np.array_equal(bits(f.losses), bits(r.losses))


def test_train_progress_and_callback_exception(models, device):
    path = os.path.join(models, "regression.json")
    seen = []
    clremat.Model(path).train(steps=4, warmup=1, batch=8, device=device,
                              progress=lambda s, n, loss: seen.append((s, n, loss)))
    assert [s for s, _, _ in seen] == [1, 2, 3, 4] and all(n == 4 for _, n, _ in seen)

    def boom(step, steps, loss):
        if step == 2:
            raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        clremat.Model(path).train(steps=50, warmup=1, batch=8, device=device, progress=boom)


def test_train_runs_beside_other_threads(models, device):
    """ctypes releases the GIL during the call: a Python thread keeps counting."""
    path = os.path.join(models, "regression.json")
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        clremat.Model(path).train(steps=20, warmup=1, batch=32, device=device)
    finally:
        stop.set()
        t.join()
    assert count[0] > 1000


def test_model_error_position(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x",\n "input": {"shape": [4]},\n "layers": [ {"type": "dense", "units": }]}\n')
    with pytest.raises(clremat.ModelError) as e:
        clremat.Model(str(bad)).plan()
    assert e.value.file == str(bad) and e.value.line == 3 and e.value.col > 1
    assert str(bad) in str(e.value) and e.value.status_name == "CLREMAT_ERR_PARSE"
    unk = tmp_path / "unk.json"
    unk.write_text('{"name": "x", "input": {"shape": [4]},\n "layers": [{"type": "nosuchlayer"}]}\n')
    with pytest.raises(clremat.ModelError) as e:
        clremat.Model(str(unk)).plan()
    assert e.value.line == 2


def test_missing_file_and_bad_options(models, tmp_path):
    with pytest.raises(clremat.Error) as e:
        clremat.Model(str(tmp_path / "none.json")).plan()
    assert "none.json" in str(e.value)
    path = os.path.join(models, "regression.json")
    with pytest.raises(clremat.InvalidArgumentError, match="unknown option 'bogus'"):
        clremat.Model(path).train(bogus=1)
    with pytest.raises(clremat.InvalidArgumentError, match="batch"):
        clremat.Model(path).plan(batch=0)
    with pytest.raises(clremat.InvalidArgumentError, match="optimizer"):
        clremat.Model(path).plan(optimizer="nadam")
    with pytest.raises(clremat.Error, match="remat"):
        clremat.Model(path).plan(remat="sometimes")
    with pytest.raises(clremat.InvalidArgumentError, match="'batch' must be an integer"):
        clremat.Model(path).train(batch="8")
    with pytest.raises(clremat.InvalidArgumentError, match="'lr' must be a finite number"):
        clremat.Model(path).train(lr=float("nan"))
    with pytest.raises(clremat.InvalidArgumentError, match="beta1 applies to adam and adamw"):
        clremat.Model(path).train(optimizer="sgd", beta1=0.5)
    with pytest.raises(clremat.InvalidArgumentError, match="memory_limit"):
        clremat.Model(path).plan(memory_limit=-5)
    with pytest.raises(TypeError):
        clremat.Model(42)


def test_device_not_found(models):
    with pytest.raises(clremat.DeviceNotFoundError, match="nosuchdevice"):
        clremat.Model(os.path.join(models, "regression.json")).train(steps=2, device="nosuchdevice")


def test_out_of_memory_bytes(models, device):
    with pytest.raises(clremat.OutOfMemoryError) as e:
        clremat.Model(os.path.join(models, "regression.json")).train(steps=2, device=device, batch=64,
                                                                      memory_limit=65536)
    assert e.value.bytes_needed > e.value.bytes_available >= 0
    assert str(e.value.bytes_needed) in str(e.value)


def test_array_checks(models, device):
    m = clremat.Model(os.path.join(models, "regression.json"))
    x = np.zeros((32, 16), np.float32)
    y = np.zeros((32, 4), np.float32)
    with pytest.raises(TypeError, match="float16"):
        m.train(data=(x.astype(np.float16), y), steps=2, device=device)
    with pytest.raises(ValueError, match="C-contiguous"):
        m.train(data=(np.zeros((16, 32), np.float32).T, y), steps=2, device=device)
    with pytest.raises(ValueError, match="sample count"):
        m.train(data=(x, y[:5]), steps=2, device=device)
    with pytest.raises(clremat.Error, match="per-sample shape"):
        m.train(data=(np.zeros((32, 15), np.float32), y), steps=2, device=device)
    with pytest.raises(clremat.Error, match="finite"):
        m.train(data=(np.full((32, 16), np.nan, np.float32), y), steps=2, device=device)
    with pytest.raises(TypeError):
        m.train(data=[1, 2, 3], steps=2, device=device)
    with pytest.raises(clremat.InvalidArgumentError, match="validation applies to array data"):
        m.train(data="regression", validation=(x, y), steps=2, device=device)
    with pytest.raises(TypeError, match="int8"):
        m.train(data=(x, y.astype(np.int8)), steps=2, device=device)
    r = m.train(data=(np.ones((40, 16), np.float32), np.zeros((40, 4), np.float32)), steps=3, batch=8,
                device=device)
    assert r.losses.shape == (3,) and r.report["val_loss"] is None  # no validation arrays: no validation


def test_compare_same_as_cli(tool, models, device):
    path = os.path.join(models, "regression.json")
    r = clremat.compare(clremat.Model(path), devices=device, remat=["none", "full"], batch=16, steps=4, warmup=1)
    cli = json.loads(cli_json(tool, "compare", path, "--devices", device, "--remat", "none,full", "--batch", "16",
                              "--steps", "4", "--warmup", "1", "--quiet"))
    assert [x["remat"] for x in r["runs"]] == ["none", "full"]
    for a, b in zip(r["runs"], cli["runs"]):
        assert np.array_equal(bits(a["losses"]), bits(b["losses"]))
        assert a["predicted_peak_bytes"] == b["predicted_peak_bytes"] == a["measured_peak_bytes"]
        assert a["numerics"]["bitwise_equal_to_none"] in (None, True)


def test_keras_file_same_as_cli(tool):
    from conftest import SRC
    path = os.path.join(SRC, "tests", "keras", "seq_mlp.keras")
    p = clremat.Model(path).plan(remat="full", batch=8)
    assert p.report == json.loads(cli_json(tool, "plan", path, "--remat", "full", "--batch", "8"))


def test_from_keras_saves_a_temporary_file():
    """Model.from_keras saves through the model's own save(); a stand-in that writes a
    real Keras 3 file (tests/keras) checks the path without needing Keras here."""
    from conftest import SRC
    src = os.path.join(SRC, "tests", "keras", "seq_mlp.keras")
    saved = []

    class StandIn:
        def save(self, path):
            assert path.endswith(".keras")
            saved.append(path)
            with open(src, "rb") as a, open(path, "wb") as b:
                b.write(a.read())

    m = clremat.Model.from_keras(StandIn())
    assert m.plan(batch=8).report == clremat.Model(src).plan(batch=8).report
    d = os.path.dirname(saved[0])
    del m
    assert not os.path.exists(d)


def test_from_keras_real_keras():
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    plan = clremat.Model.from_keras(model).plan(batch=4)
    assert plan.predicted_peak_bytes > 0 and [x["type"] for x in plan.layers][:2] == ["dense", "dense"]


def test_fit_same_as_cli(tool, models):
    path = os.path.join(models, "mlp_deep.json")
    r = clremat.fit(clremat.Model(path), memory=["1MiB", 64 << 20], remat=["none", "full"], batch=16)
    cli = json.loads(cli_json(tool, "fit", path, "--memory", "1MiB,64MiB", "--remat", "none,full", "--batch", "16"))
    assert r == cli
    assert [s["memory_bytes"] for s in r["sizes"]] == [1 << 20, 64 << 20]
    assert r["sizes"][1]["configs"][0]["fits"] and r["calibration"] is None
    with pytest.raises(clremat.Error, match="sometimes"):
        clremat.fit(path, memory="1GiB", remat="sometimes")
    with pytest.raises(clremat.InvalidArgumentError, match="memory"):
        clremat.fit(path, memory="lots")


def test_fit_with_device_times(models, device):
    r = clremat.fit(os.path.join(models, "regression.json"), memory="64MiB", remat="none,full", device=device,
                    batch=16, steps=2)
    assert r["calibration"]["measured_step_ms"] > 0
    assert all(c["predicted_step_ms"] > 0 for c in r["sizes"][0]["configs"])


def test_precision_same_as_cli(tool, models, device):
    path = os.path.join(models, "regression.json")
    p = clremat.Model(path).plan(remat="full", batch=64, precision="mixed_bfloat16")
    cli = json.loads(cli_json(tool, "plan", path, "--remat", "full", "--batch", "64", "--precision", "mixed_bfloat16"))
    assert p.report == cli and cli["precision"] == "mixed_bfloat16"
    f32 = clremat.Model(path).plan(remat="full", batch=64)
    assert f32.report["precision"] == "float32"
    assert p.report["memory"]["kept_activation_bytes"] < f32.report["memory"]["kept_activation_bytes"]
    r = clremat.Model(path).train(steps=6, warmup=1, batch=16, seed=7, device=device, remat="full",
                                  precision="mixed_float16")
    cli = json.loads(cli_json(tool, "train", path, *train_args(device, "--remat", "full", "--precision",
                                                               "mixed_float16")))
    assert np.array_equal(bits(r.losses), bits(cli["losses"]))
    assert r.report["precision"] == "mixed_float16" and r.report["skipped_steps"] == cli["skipped_steps"]
    with pytest.raises(clremat.InvalidArgumentError, match="float16x"):
        clremat.Model(path).plan(precision="float16x")
