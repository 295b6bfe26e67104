"""Legacy multi-GPU model files, built during the test session by Keras 2 itself (tf_keras).

`multi_gpu_model` was removed with TF 2.4, so its exact structure is rebuilt by
hand here: an Input, one Lambda per GPU slicing the batch
(`arguments={'i': i, 'parts': n}`, the last slice takes the remainder), the
template applied to each slice (one nested model shared by the towers), and a
`Concatenate(axis=0)` named like the template's output layer. Saved with
`model.save('x.h5')` as the users did.

`as_keras22` edits a copy to look like a Keras 2.2 file (class "Model" for
Functional, `batch_input_shape`, keras_version "2.2.4"); `to_multi_gpu_keras3`
is the well-known Keras 3 recipe with the same towers, and `to_multi_gpu_recipe`
uses it as the posts did: the model compiled and trained on one device first,
then wrapped, compiled and trained again. `make_parallel` is the other classic
recipe (kuza55's 2016 post), as ported to Keras 2.

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


def make_parallel(model: Any, gpu_count: int) -> Any:
    """kuza55's make_parallel in its Keras 2 form (without the device scopes): the wrapper
    takes the model's own inputs, slices them evenly (`idx`, `parts`), merges each output
    with an unnamed `concatenate(axis=0)`."""
    import tf_keras as k2

    outputs_all: list[list[Any]] = [[] for _ in model.outputs]
    for i in range(gpu_count):
        inputs = [k2.layers.Lambda(_parallel_slice, output_shape=tuple(x.shape[1:]),
                                   arguments={"idx": i, "parts": gpu_count})(x)
                  for x in model.inputs]
        outputs = model(inputs[0] if len(inputs) == 1 else inputs)
        for merged, output in zip(outputs_all, outputs if isinstance(outputs, list)
                                  else [outputs], strict=True):
            merged.append(output)
    merged = [k2.layers.concatenate(outputs, axis=0) for outputs in outputs_all]
    return k2.Model(inputs=model.inputs, outputs=merged)


def _parallel_slice(data: Any, idx: int, parts: int) -> Any:
    """make_parallel's get_slice: `parts` equal slices (the remainder is dropped)."""
    import tensorflow as tf

    shape = tf.shape(data)
    size = tf.concat([shape[:1] // parts, shape[1:]], axis=0)
    stride = tf.concat([shape[:1] // parts, shape[1:] * 0], axis=0)
    return tf.slice(data, stride * idx, size)


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


def to_multi_gpu_recipe(n_gpus: int, train_first: bool) -> tuple[Any, Any]:
    """(wrapper, template) as the posts made them: the template compiled and trained on one
    device first (`train_first`), then wrapped, compiled and trained; unsaved."""
    template = keras3_template()
    if train_first:
        template.compile("adam", "sparse_categorical_crossentropy")
        template.fit(X, Y, batch_size=12, epochs=1, verbose=0)
    wrapper = to_multi_gpu_keras3(template, n_gpus)
    wrapper.compile("adam", "sparse_categorical_crossentropy")
    wrapper.fit(X, Y, batch_size=12, epochs=2, verbose=0)
    return wrapper, template


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
