"""Legacy multi-GPU model files, built during the test session by Keras 2 itself (tf_keras).

`multi_gpu_model` was removed with TF 2.4, so its exact structure is rebuilt by
hand here: an Input, one Lambda per GPU slicing the batch
(`arguments={'i': i, 'parts': n}`, the last slice takes the remainder), the
template applied to each slice (one nested model shared by the towers), and a
`Concatenate(axis=0)` named like the template's output layer. Saved with
`model.save('x.h5')` as the users did.

`as_keras22` edits a copy to look like a Keras 2.2 file (class "Model" for
Functional, `batch_input_shape`, keras_version "2.2.4"); `to_multi_gpu_keras3`
is the well-known Keras 3 recipe with the same towers.

Only tests import this module; it imports tf_keras and keras inside functions.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np

RNG = np.random.default_rng(7)
X = RNG.random((48, 6), dtype=np.float32)
Y = RNG.integers(0, 3, 48)


def get_slice(data: Any, i: int, parts: int) -> Any:
    """Keras 2's multi_gpu_model slice: part i of `parts`, the last one takes the rest."""
    import tensorflow as tf

    shape = tf.shape(data)
    batch_size = shape[:1]
    input_shape = shape[1:]
    step = batch_size // parts
    size = batch_size - step * i if i == parts - 1 else step
    size = tf.concat([size, input_shape], axis=0)
    stride = tf.concat([step, input_shape * 0], axis=0)
    start = stride * i
    return tf.slice(data, start, size)


def functional_template(name: str = "template") -> Any:
    import tf_keras as k2

    inp = k2.Input((6,), name="features")
    x = k2.layers.Dense(16, activation="relu", name="hidden")(inp)
    x = k2.layers.BatchNormalization(name="norm")(x)
    x = k2.layers.Dropout(0.3, name="drop")(x)
    out = k2.layers.Dense(3, activation="softmax", name="probs")(x)
    return k2.Model(inp, out, name=name)


def sequential_template(name: str = "seq_template", softmax: bool = True) -> Any:
    import tf_keras as k2

    return k2.Sequential([
        k2.layers.Dense(12, activation="relu", input_shape=(6,), name="dense_a"),
        k2.layers.BatchNormalization(name="bn_a"),
        k2.layers.Dropout(0.2, name="dropout_a"),
        k2.layers.Dense(3, activation="softmax" if softmax else None, name="logits"),
    ], name=name)


def multi_gpu_model(template: Any, gpus: int, after: list[Any] | None = None) -> Any:
    """Keras 2's multi_gpu_model structure (without the devices), optionally with extra layers."""
    import tf_keras as k2

    shape = tuple(template.input_shape[1:])
    x = template.inputs[0]  # as multi_gpu_model did: the wrapper takes the template's input
    towers = []
    for i in range(gpus):
        sliced = k2.layers.Lambda(get_slice, output_shape=shape,
                                  arguments={"i": i, "parts": gpus})(x)
        towers.append(template(sliced))
    out_name = template.output_names[0]
    merged = k2.layers.Concatenate(axis=0, name=out_name)(towers)
    for layer in after or []:
        merged = layer(merged)
    return k2.Model(x, merged)


def train_and_save(model: Any, path: Path, epochs: int = 2) -> Path:
    import tf_keras as k2

    model.compile(k2.optimizers.Adam(0.01), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(X, Y, batch_size=12, epochs=epochs, verbose=0)
    with warnings.catch_warnings():  # tf_keras warns that .h5 is legacy: that is the point
        warnings.filterwarnings("ignore", message=".*HDF5 file.*legacy", category=UserWarning)
        model.save(path)
    return path


def as_keras22(src: Path, dst: Path) -> Path:
    """A copy edited to look like Keras 2.2: class 'Model', batch_input_shape, version 2.2.4."""
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as h5:
        config = json.loads(h5.attrs["model_config"])
        h5.attrs["model_config"] = json.dumps(_to_22(config))
        h5.attrs["keras_version"] = "2.2.4"
        h5.attrs["backend"] = "tensorflow"
    return dst


def as_keras21_sequential(src: Path, dst: Path) -> Path:
    """Like `as_keras22`, and nested Sequential configs as a bare layer list (Keras 2.0-2.1)."""
    as_keras22(src, dst)
    with h5py.File(dst, "r+") as h5:
        config = json.loads(h5.attrs["model_config"])
        for layer in config["config"]["layers"]:
            if layer["class_name"] == "Sequential":
                layers = [entry for entry in layer["config"]["layers"]
                          if entry["class_name"] != "InputLayer"]
                layer["config"] = layers
        h5.attrs["model_config"] = json.dumps(config)
        h5.attrs["keras_version"] = "2.1.6"
    return dst


def _to_22(node: Any) -> Any:
    if isinstance(node, list):
        return [_to_22(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _to_22(v) for k, v in node.items()}
    if node.get("class_name") == "Functional":
        node["class_name"] = "Model"
    cfg = node.get("config")
    if isinstance(cfg, dict) and "batch_shape" in cfg:
        cfg["batch_input_shape"] = cfg.pop("batch_shape")
    if isinstance(cfg, dict) and "batch_input_shape" in cfg and "sparse" in cfg:
        cfg.pop("ragged", None)  # Keras 2.2's InputLayer had no `ragged`
    return node


def to_multi_gpu_keras3(template: Any, n_gpus: int, after: list[Any] | None = None) -> Any:
    """The well-known Keras 3 `to_multi_gpu(model, n_gpus)` recipe: same towers."""
    import keras

    x = keras.Input(template.input_shape[1:], name="wrapper_input")
    towers = []
    for g in range(n_gpus):
        sliced = keras.layers.Lambda(_slice_batch3, output_shape=template.input_shape[1:],
                                     arguments={"n_gpus": n_gpus, "part": g})(x)
        towers.append(template(sliced))
    merged = keras.layers.Concatenate(axis=0, name="merged")(towers)
    for layer in after or []:
        merged = layer(merged)
    return keras.Model(x, merged, name="multi_gpu")


def _slice_batch3(x: Any, n_gpus: int, part: int) -> Any:
    from keras import ops

    size = ops.shape(x)[0] // n_gpus
    if part == n_gpus - 1:
        return x[part * size:]
    return x[part * size:(part + 1) * size]


def keras3_template() -> Any:
    import keras

    inp = keras.Input((6,), name="features")
    x = keras.layers.Dense(16, activation="relu", name="hidden")(inp)
    x = keras.layers.BatchNormalization(name="norm")(x)
    x = keras.layers.Dropout(0.3, name="drop")(x)
    out = keras.layers.Dense(3, activation="softmax", name="probs")(x)
    return keras.Model(inp, out, name="template3")
