"""Builds every built-in architecture for an image folder and trains one step on 2 CPU replicas.

    python -m tests.helpers.builtin_steps FOLDER HxW

One process for all of them (TensorFlow and the logical devices are set up
once). Each is built by the app's own path (`models.load_run_model` inside a
2-replica MirroredStrategy, `--pretrained none`) from the app's pipeline on the
folder, then trains one global batch. The step runs eagerly: tracing each
backbone's training graph for 2 replicas took 10-30 s per model on 2 cores,
and the CLI test traces one for real. Prints one JSON line per architecture:
what the first preprocessing layers made of raw pixels, the loss, and how many
weights the step changed.
"""

from __future__ import annotations

import json
import sys

from mgpu_gui.core.config import DeviceKind
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.modelfiles.builtins import ARCHITECTURES


def main() -> None:
    folder, size = sys.argv[1], tuple(int(s) for s in sys.argv[2].split("x"))
    plan = DevicePlan(kind=DeviceKind.CPU, replicas=2, gpus=(), env={"CUDA_VISIBLE_DEVICES": ""},
                      names=[], note="")
    from mgpu_gui.engine.strategy import apply_device_env, make_strategy

    apply_device_env(plan)
    strategy, _ = make_strategy(plan)
    import keras
    import numpy as np

    from mgpu_gui.core.config import RunConfig
    from mgpu_gui.engine import models
    from mgpu_gui.engine.pipeline import load_data

    for name in ARCHITECTURES:
        config = RunConfig(model=name, pretrained="none", data=folder, image_size=size,
                           optimizer="sgd", validation_split=0.0)
        data = load_data(config)
        model = models.load_model(config, strategy, input_shape=data.input_shape,
                                  num_classes=data.num_classes, log=lambda message: None)
        model.run_eagerly = True
        x, y = next(iter(data.train.batch(4, drop_remainder=True)))
        before = [w.numpy().copy() for w in model.trainable_weights]
        loss = model.fit(x, y, batch_size=4, epochs=1, verbose=0).history["loss"][0]
        changed = sum(not np.array_equal(b, w.numpy())
                      for b, w in zip(before, model.trainable_weights, strict=True))
        normalised = _preprocessed(model, x.numpy())
        print(json.dumps({
            "name": name, "replicas": strategy.num_replicas_in_sync, "loss": float(loss),
            "input_max": float(x.numpy().max()), "output_shape": list(model.output_shape),
            "first_layer": normalised[0], "normalised": normalised[1:],
            "trainable": len(before), "changed": changed}), flush=True)
        keras.backend.clear_session()


def _preprocessed(model, x) -> list:
    """The layers that take the raw input, in graph order up to the first with weights to
    learn, and the (min, max) of what they make of `x`."""
    import keras

    names, out = [], x
    for layer in _graph_layers(model):
        if layer.trainable_weights:
            break
        out = keras.ops.convert_to_numpy(layer(out))
        names.append(type(layer).__name__)
    return [names, float(out.min()), float(out.max())]


def _graph_layers(model):
    import keras

    for layer in model.layers:  # a functional model's layers are in graph order
        if isinstance(layer, keras.Model):
            yield from _graph_layers(layer)
        elif not isinstance(layer, keras.layers.InputLayer):
            yield layer


if __name__ == "__main__":
    main()
