#!/usr/bin/env python3
"""make_fixtures.py: builds the Keras 3 fixtures of tests/test_keras.c with
real Keras (from PyPI, in a virtual environment, any training backend such as
jax[cpu]). For each model it writes MODEL.keras (config, weights, metadata)
and MODEL.expect.json: a fixed batch (inputs, labels), Keras's logits and
loss on it (inference mode), and the loss on the same batch after one
optimizer step (train_on_batch), or null with the reason when that step is
not reproducible (dropout masks). Models with BatchNormalization get random
gamma, beta and moving statistics first (so inference is not the identity)
and also carry the moving statistics after the step ("moving_after_step").
legacy.h5 is saved in the legacy HDF5 format. The convnets (resnet,
mobilenet, legacy) seed themselves, so `--only resnet,mobilenet,legacy`
rebuilds just them, identically. Run: python make_fixtures.py OUTDIR
[EXAMPLE.keras] [--only NAME,...]."""
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else os.path.dirname(os.path.abspath(__file__))
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


def all_layers(m, prefix=""):
    """(clremat name, layer) of every layer, nested models' layers included."""
    for layer in m.layers:
        if isinstance(layer, keras.Model):
            yield from all_layers(layer, prefix + layer.name + "/")
        else:
            yield prefix + layer.name, layer


def randomize_bn(m, seed):
    """Random gamma, beta and moving statistics in every BatchNormalization."""
    r = np.random.default_rng(seed)
    for _, layer in all_layers(m):
        if isinstance(layer, layers.BatchNormalization):
            ws = []
            for v in layer.weights:
                n = v.path.split("/")[-1]
                lo, hi = (0.5, 1.5) if n in ("gamma", "moving_variance") else (-0.3, 0.3)
                ws.append(r.uniform(lo, hi, size=tuple(v.shape)).astype("float32"))
            layer.set_weights(ws)


def resnet():
    """ResNet-style: conv/BN stem, a residual block with a strided
    projection shortcut (1x1 conv, groups 2, BN without scale), a dilated
    conv, BN without center, max and average pooling, global pooling."""
    keras.utils.set_random_seed(2001)
    x = keras.Input((8, 8, 3), name="image")
    h = layers.Conv2D(8, 3, padding="same", use_bias=False, name="stem")(x)
    h = layers.BatchNormalization(momentum=0.9, name="stem_bn")(h)
    h = layers.Activation("relu", name="stem_relu")(h)
    r = layers.Conv2D(16, 3, strides=2, padding="same", name="b1_conv1")(h)
    r = layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name="b1_bn1")(r)
    r = layers.ReLU(name="b1_relu1")(r)
    r = layers.Conv2D(16, 3, padding="same", dilation_rate=2, use_bias=False, name="b1_conv2")(r)
    r = layers.BatchNormalization(center=False, name="b1_bn2")(r)
    s = layers.Conv2D(16, 1, strides=2, groups=2, name="b1_proj")(h)
    s = layers.BatchNormalization(scale=False, momentum=0.8, name="b1_proj_bn")(s)
    h = layers.Add(name="b1_add")([r, s])
    h = layers.ReLU(name="b1_out")(h)
    h = layers.Conv2D(16, 3, padding="valid", activation="relu", name="b2_conv")(h)
    h = layers.MaxPooling2D(2, name="pool")(h)
    h = layers.AveragePooling2D(2, strides=1, padding="same", name="avg")(h)
    h = layers.GlobalAveragePooling2D(name="gap")(h)
    y = layers.Dense(5, name="logits")(h)
    m = keras.Model(x, y, name="resnet")
    randomize_bn(m, 2002)
    m.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), loss=sce())
    return m, "classes", 5, None


def mobilenet():
    """MobileNet-style: ZeroPadding2D and a strided valid stem, a depthwise
    conv (depth_multiplier 2) with BN, a pointwise conv, a SeparableConv2D
    reading the stem (not the layer before it), Concatenate, a
    squeeze-excite style Multiply by a sigmoid gate, global pooling with
    keepdims, Flatten."""
    keras.utils.set_random_seed(3001)
    x = keras.Input((9, 9, 3), name="image")
    h = layers.ZeroPadding2D(((0, 1), (1, 0)), name="pad")(x)
    h = layers.Conv2D(8, 3, strides=2, use_bias=False, name="stem")(h)
    h = layers.BatchNormalization(momentum=0.9, name="stem_bn")(h)
    h = layers.ReLU(name="stem_relu")(h)
    d = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, use_bias=False, name="dw")(h)
    d = layers.BatchNormalization(momentum=0.9, name="dw_bn")(d)
    d = layers.Activation("relu", name="dw_relu")(d)
    p = layers.Conv2D(8, 1, name="pw")(d)
    sep = layers.SeparableConv2D(8, 3, padding="same", activation="relu", name="sep")(h)
    c = layers.Concatenate(name="cat")([p, sep])
    g = layers.Conv2D(16, 1, activation="sigmoid", name="gate")(c)
    e = layers.Multiply(name="excite")([c, g])
    e = layers.DepthwiseConv2D(2, strides=2, name="dw_down")(e)
    q = layers.GlobalAveragePooling2D(keepdims=True, name="gap")(e)
    q = layers.Flatten(name="flat")(q)
    y = layers.Dense(4, name="logits")(q)
    m = keras.Model(x, y, name="mobilenet")
    randomize_bn(m, 3002)
    m.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss=sce())
    return m, "classes", 4, None


def legacy():
    """Saved in the legacy HDF5 format (model.save("legacy.h5")): a nested
    conv block with BatchNormalization, whose weights the legacy file lists
    trainable first, then the moving statistics."""
    keras.utils.set_random_seed(4001)
    bi = keras.Input((6, 6, 4), name="block_in")
    h = layers.Conv2D(4, 3, padding="same", use_bias=False, name="conv")(bi)
    h = layers.BatchNormalization(momentum=0.9, name="bn")(h)
    h = layers.ReLU(name="relu")(h)
    h = layers.Conv2D(4, 1, name="proj")(h)  # trainable weights after the moving statistics
    h = layers.Add(name="skip")([h, bi])
    block = keras.Model(bi, h, name="conv_block")
    x = keras.Input((6, 6, 3), name="image")
    s = layers.Conv2D(4, 1, name="stem")(x)
    s = block(s)
    s = layers.GlobalAveragePooling2D(name="gap")(s)
    y = layers.Dense(3, name="logits")(s)
    m = keras.Model(x, y, name="legacy")
    randomize_bn(m, 4002)
    m.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss=sce())
    return m, "classes", 3, None


def moving_stats(m):
    out = {}
    for name, layer in all_layers(m):
        if isinstance(layer, layers.BatchNormalization):
            out[name] = {"moving_mean": np.asarray(layer.moving_mean, dtype="float32").tolist(),
                               "moving_variance": np.asarray(layer.moving_variance, dtype="float32").tolist()}
    return out


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


SEEDED = {"resnet": 2003, "mobilenet": 3003, "legacy": 4003}


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--only")]
    only = [a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--only=")]
    only = only[0] if only else None
    keras.utils.set_random_seed(1234)
    rng = np.random.default_rng(1234)
    os.makedirs(OUT, exist_ok=True)
    for build in (seq_mlp, func_mlp, residual, transformer, nested, resnet, mobilenet, legacy):
        if only and build.__name__ not in only:
            continue
        m, kind, classes, no_step = build()
        if m.name in SEEDED:
            x, y = batch_for(m, kind, classes, np.random.default_rng(SEEDED[m.name]))
        else:
            x, y = batch_for(m, kind, classes, rng)
        fname = m.name + (".h5" if m.name == "legacy" else ".keras")
        path = os.path.join(OUT, fname)
        m.save(path)
        logits = np.asarray(m(x, training=False), dtype="float32")
        loss = float(m.evaluate(x, y, batch_size=BATCH, verbose=0))
        expect = {"model": fname, "keras_version": keras.__version__,
                  "backend": keras.backend.backend(), "batch": BATCH,
                  "x": x.astype("float32").ravel().tolist(), "y": y.astype("float32").ravel().tolist(),
                  "logits": logits.ravel().tolist(), "loss": loss}
        if no_step is None:
            m.train_on_batch(x, y)
            expect["step_loss"] = float(m.evaluate(x, y, batch_size=BATCH, verbose=0))
            if moving_stats(m):
                expect["moving_after_step"] = moving_stats(m)
        else:
            expect["step_loss"] = None
            expect["step_skipped"] = no_step
        with open(os.path.join(OUT, m.name + ".expect.json"), "w") as f:
            json.dump(expect, f, indent=1)
        print(m.name, "loss", loss, "step_loss", expect["step_loss"])
    if len(args) > 1:
        example(args[1])


if __name__ == "__main__":
    main()
