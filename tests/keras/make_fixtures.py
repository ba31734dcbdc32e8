#!/usr/bin/env python3
"""make_fixtures.py: builds the Keras 3 fixtures of tests/test_keras.c with
real Keras (from PyPI, in a virtual environment, any training backend such as
jax[cpu]). For each model it writes MODEL.keras (config, weights, metadata)
and MODEL.expect.json: a fixed batch (inputs, labels), Keras's logits and
loss on it (inference mode), and the loss on the same batch after one
optimizer step (train_on_batch), or null with the reason when that step is
not reproducible (dropout masks). Run: python make_fixtures.py OUTDIR."""
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
BATCH = 4


def sce():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def seq_mlp():
    m = keras.Sequential([
        keras.Input((8,)),
        layers.Dense(16, activation="relu", name="d1"),
        layers.LayerNormalization(name="ln"),
        layers.Dense(16, activation="tanh", name="d2"),
        layers.Dense(4, name="logits"),
    ], name="seq_mlp")
    m.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss=sce())
    return m, "classes", 4, None


def func_mlp():
    x = keras.Input((8,), name="features")
    h = layers.Dense(16, activation="gelu", name="d1")(x)
    h = layers.Dropout(0.1, name="drop")(h)
    h = layers.Activation("sigmoid", name="act")(h)
    h = layers.Dense(12, activation="silu", name="d2")(h)
    y = layers.Dense(3, name="logits")(h)
    m = keras.Model(x, y, name="func_mlp")
    m.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss=sce())
    return m, "classes", 3, "dropout masks are drawn differently by Keras and clremat"


def residual():
    x = keras.Input((8,))
    a = layers.Dense(16, name="stem")(x)
    b = layers.Dense(16, activation="relu", name="d1")(a)
    b = layers.Dense(16, name="d2")(b)
    s = layers.Add(name="skip")([b, a])
    r = layers.ReLU(name="relu")(s)
    y = layers.Dense(2, name="out")(r)
    m = keras.Model(x, y, name="residual")
    m.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    return m, "regression", 2, None


def transformer():
    T, D = 6, 16
    x = keras.Input((T,), dtype="int32", name="tokens")
    e = layers.Embedding(20, D, name="embed")(x)
    h = layers.LayerNormalization(epsilon=1e-5, name="ln1")(e)
    a = layers.MultiHeadAttention(num_heads=2, key_dim=D // 2, name="attn")(h, h)
    r1 = layers.Add(name="res1")([a, e])
    h = layers.LayerNormalization(epsilon=1e-5, name="ln2")(r1)
    h = layers.Dense(32, activation="relu", name="up")(h)
    h = layers.Dense(D, name="down")(h)
    r2 = layers.Add(name="res2")([h, r1])
    y = layers.Dense(5, name="logits")(r2)
    m = keras.Model(x, y, name="transformer")
    m.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss=sce())
    return m, "tokens", 5, None


def nested():
    D = 16
    bi = keras.Input((D,), name="block_in")
    h = layers.LayerNormalization(name="ln")(bi)
    h = layers.Dense(32, activation="relu", name="up")(h)
    h = layers.Dense(D, name="down")(h)
    o = layers.Add(name="skip")([h, bi])
    block = keras.Model(bi, o, name="encoder_block")
    x = keras.Input((8,), name="features")
    s = layers.Dense(D, name="stem")(x)
    s = block(s)
    y = layers.Dense(4, name="logits")(s)
    m = keras.Model(x, y, name="nested")
    m.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss=sce())
    return m, "classes", 4, None


def encoder_block(i, T, D, heads):
    bi = keras.Input((T, D), name="block_in")
    h = layers.LayerNormalization(epsilon=1e-5, name="ln1")(bi)
    h = layers.MultiHeadAttention(num_heads=heads, key_dim=D // heads, name="attn")(h, h, use_causal_mask=True)
    r = layers.Add(name="res1")([h, bi])
    h = layers.LayerNormalization(epsilon=1e-5, name="ln2")(r)
    h = layers.Dense(4 * D, activation="gelu", name="up")(h)
    h = layers.Dense(D, name="down")(h)
    o = layers.Add(name="res2")([h, r])
    return keras.Model(bi, o, name=f"encoder_block_{i}")


def example(path):
    T, D, V = 32, 32, 32
    x = keras.Input((T,), dtype="int32", name="tokens")
    h = layers.Embedding(V, D, name="embed")(x)
    for i in range(2):
        h = encoder_block(i, T, D, 4)(h)
    y = layers.Dense(V, name="logits")(h)
    m = keras.Model(x, y, name="keras_encoder")
    m.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3), loss=sce())
    m.save(path)
    print("example", path)


def batch_for(m, kind, classes, rng):
    shape = (BATCH,) + tuple(m.inputs[0].shape[1:])
    if kind == "tokens":
        x = rng.integers(0, 20, size=shape).astype("int32")
        y = rng.integers(0, classes, size=shape).astype("int32")
    else:
        x = rng.standard_normal(shape).astype("float32")
        if kind == "classes":
            y = rng.integers(0, classes, size=(BATCH,)).astype("int32")
        else:
            y = rng.standard_normal((BATCH, classes)).astype("float32")
    return x, y


def main():
    keras.utils.set_random_seed(1234)
    rng = np.random.default_rng(1234)
    os.makedirs(OUT, exist_ok=True)
    for build in (seq_mlp, func_mlp, residual, transformer, nested):
        m, kind, classes, no_step = build()
        x, y = batch_for(m, kind, classes, rng)
        path = os.path.join(OUT, m.name + ".keras")
        m.save(path)
        logits = np.asarray(m(x, training=False), dtype="float32")
        loss = float(m.evaluate(x, y, batch_size=BATCH, verbose=0))
        expect = {"model": m.name + ".keras", "keras_version": keras.__version__,
                  "backend": keras.backend.backend(), "batch": BATCH,
                  "x": x.astype("float32").ravel().tolist(), "y": y.astype("float32").ravel().tolist(),
                  "logits": logits.ravel().tolist(), "loss": loss}
        if no_step is None:
            m.train_on_batch(x, y)
            expect["step_loss"] = float(m.evaluate(x, y, batch_size=BATCH, verbose=0))
        else:
            expect["step_loss"] = None
            expect["step_skipped"] = no_step
        with open(os.path.join(OUT, m.name + ".expect.json"), "w") as f:
            json.dump(expect, f, indent=1)
        print(m.name, "loss", loss, "step_loss", expect["step_loss"])
    if len(sys.argv) > 2:
        example(sys.argv[2])


if __name__ == "__main__":
    main()
