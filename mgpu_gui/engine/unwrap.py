"""Recover the plain template from a legacy multi-GPU wrapper file, in Keras 3.

The wrapper itself is found without Keras (`mgpu_gui.core.modelfiles.wrapper`).
`recover_model(path)` rebuilds the innermost template from its own config
(`keras.Model.from_config` / `keras.Sequential.from_config`), appends the
standard layers that followed the Concatenate, and sets the weights, read by
structure (`unwrap_weights`): every weight of the recovered model must be
found, and stored arrays that are no layer's (a nested model's optimizer
state) are skipped and reported, or a ModelError names what is wrong.
The Lambda layers are never deserialized: no code from the file runs.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import keras

from mgpu_gui.core.errors import ModelError
from mgpu_gui.core.modelfiles.inspection import inspect_model_file
from mgpu_gui.core.modelfiles.wrapper import (
    CODE_LAYERS,
    MODEL_CLASSES,
    Level,
    WrapperInfo,
    config_layers,
    layer_name,
    wrapper_levels,
)
from mgpu_gui.engine.legacy_compile import compile_from_training_config
from mgpu_gui.engine.unwrap_weights import (
    SkippedState,
    attr_text,
    set_h5_weights,
    set_keras_weights,
)

Log = Callable[[str], None]


@dataclass
class Recovered:
    """The plain model recovered from a wrapper, and what was done to get it."""

    model: Any
    wrapper: WrapperInfo
    skipped: tuple[str, ...]  # layers after the Concatenate left out (they would run code)
    weights_set: int
    compile_note: str
    skipped_state: tuple[SkippedState, ...] = ()  # stored arrays that are no layer's weights

    def summary(self) -> str:
        lines = [f"found: {self.wrapper.describe()}",
                 f"recovered '{self.model.name}' ({len(self.model.layers)} layers, "
                 f"{self.model.count_params():,} parameters); {self.weights_set} weight "
                 "arrays set, each to its own layer, none missing"]
        appended = [n for n, _ in self.wrapper.after_layers if n not in self.skipped]
        if appended:
            lines.append("appended after the template: " + ", ".join(appended))
        if self.skipped_state:
            lines.append("skipped (stored in the file, but no layer's weights): " + "; ".join(
                state.describe() for state in self.skipped_state)
                + "; a model trained before it was wrapped keeps them")
        if self.skipped:
            lines.append("NOT recovered (they would run code from the file): "
                         + ", ".join(self.skipped) + "; the model ends before them")
        if self.compile_note:
            lines.append(self.compile_note)
        return "\n".join(lines)


def recover_model(path: str | Path, *, custom_objects: dict[str, Any] | None = None,
                  compile: bool = True, log: Log | None = None) -> Recovered:
    """Rebuild the template inside a multi-GPU wrapper file, with its weights.

    Raises ModelError when the file is not a wrapper, a weight is missing, or
    the template needs a class that is not available (provide it through a .py
    with `custom_objects`). Build inside `strategy.scope()` to train it.
    """
    info = inspect_model_file(path)
    wrapper = info.wrapper
    if wrapper is None:
        raise ModelError(f"{info.path.name} is not a multi-GPU wrapper; load it as it is.")
    log = log or (lambda text: None)
    custom_objects = dict(custom_objects or {})
    if info.format == "h5":
        config, training, compile_config = _h5_configs(info.path)
    else:
        config, compile_config = _keras_configs(info.path)
        training = None
    levels = wrapper_levels(config)
    template_cfg = levels[-1].template
    if wrapper.template_lambdas:
        raise ModelError(
            f"{info.path.name}: the template '{wrapper.template_name}' itself has Lambda "
            f"layers ({', '.join(wrapper.template_lambdas)}); rebuilding it would run code "
            "from the file, so it cannot be unwrapped safely.")
    _check_classes(info.path.name, template_cfg, custom_objects)
    template = _build_template(info.path.name, template_cfg, custom_objects)
    appended, skipped = _after_layers(info.path.name, levels, custom_objects)
    model = _append(template, [layer for _, layer in appended]) if appended else template
    if info.format == "h5":
        weights = set_h5_weights(info.path, model, skip=set(skipped))
    else:
        weights = set_keras_weights(info.path, levels, template, appended)
    note = ""  # compile=False: the caller compiles it, and says how
    if compile:
        note = (_compile(model, training, compile_config, info.path.name)
                if training or compile_config else
                "not compiled (the file has no training settings)")
    recovered = Recovered(model, wrapper, tuple(skipped), weights.arrays, note, weights.skipped)
    for line in recovered.summary().splitlines():
        log(line)
    return recovered


def _h5_configs(path: Path) -> tuple[dict[str, Any], dict | None, dict | None]:

    with h5py.File(path, "r") as h5:
        config = json.loads(attr_text(h5.attrs["model_config"]))
        raw = h5.attrs.get("training_config")
    return config, (json.loads(attr_text(raw)) if raw is not None else None), None


def _keras_configs(path: Path) -> tuple[dict[str, Any], dict | None]:
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    return config, config.get("compile_config") or None


def _normalized(node: Any) -> Any:
    """A Keras 2 config in the form Keras 3 reads: 'Model' -> 'Functional', batch shapes."""
    if isinstance(node, list):
        return [_normalized(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _normalized(v) for k, v in node.items()}
    if node.get("class_name") == "Model":
        node["class_name"] = "Functional"
    if node.get("class_name") == "Sequential" and isinstance(node.get("config"), list):
        node["config"] = {"name": node.get("name", "sequential"), "layers": node["config"]}
    if node.get("class_name") == "Sequential":
        node["config"] = _sequential_input(node["config"])
    cfg = node.get("config")
    if node.get("class_name") == "Functional" and isinstance(cfg, dict):
        for key in ("input_layers", "output_layers"):
            cfg[key] = _one_tensor(cfg.get(key))
    if node.get("class_name") == "InputLayer" and isinstance(cfg, dict):
        if "batch_input_shape" in cfg:
            cfg.setdefault("batch_shape", cfg.pop("batch_input_shape"))
        if cfg.get("ragged") is False:
            cfg.pop("ragged")
    return node


def _one_tensor(tensors: Any) -> Any:
    """Keras 2 wrote a single input or output as `[[name, 0, 0]]`, Keras 3 as `[name, 0,
    0]`: rebuilt from the first, a template kept a list input, which its SavedModel
    signature then wanted (the zoo's `export --format savedmodel` failed)."""
    if (isinstance(tensors, list) and len(tensors) == 1 and isinstance(tensors[0], list)
            and len(tensors[0]) == 3 and isinstance(tensors[0][0], str)):
        return tensors[0]
    return tensors


def _sequential_input(cfg: dict[str, Any]) -> dict[str, Any]:
    """Keras 2 Sequential: the input shape sits on the first layer; give it an InputLayer."""
    layers = list(cfg.get("layers") or [])
    shape = None
    for layer in layers:
        inner = layer.get("config") or {}
        for key in ("batch_input_shape", "batch_shape"):
            if layer.get("class_name") != "InputLayer" and key in inner:
                shape = shape or inner.pop(key)
        if layer.get("class_name") != "InputLayer":
            inner.pop("input_shape", None)
    if shape is not None and (not layers or layers[0].get("class_name") != "InputLayer"):
        layers.insert(0, {"class_name": "InputLayer",
                          "config": {"batch_shape": shape, "name": "input"}})
    return {**cfg, "layers": layers}


def _check_classes(file: str, template: dict[str, Any], custom_objects: dict[str, Any]) -> None:
    for node in _layer_entries(template):
        name = str(node.get("class_name"))
        if name in MODEL_CLASSES or _known_layer(node, custom_objects):
            continue
        key = node.get("registered_name") or name
        raise ModelError(
            f"{file}: the template uses a custom layer class '{name}' that is not "
            f"available: provide it through a .py file that defines it and "
            f"`custom_objects = {{'{key}': {name}}}` (--custom-objects, or the app's "
            "custom objects file).")


def _layer_entries(model_config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every layer entry of a model config, nested models' layers included."""
    for layer in config_layers(model_config):
        yield layer
        if layer.get("class_name") in MODEL_CLASSES:
            yield from _layer_entries(layer)


def _known_layer(node: dict[str, Any], custom_objects: dict[str, Any]) -> bool:

    name = str(node.get("class_name"))
    if name in custom_objects or node.get("registered_name") in custom_objects:
        return True
    return isinstance(getattr(keras.layers, name, None), type)


def _build_template(file: str, template: dict[str, Any], custom_objects: dict[str, Any]) -> Any:

    entry = _normalized(template)
    cls = keras.Sequential if entry["class_name"] == "Sequential" else keras.Model
    try:
        return cls.from_config(entry["config"], custom_objects=custom_objects or None)
    except Exception as exc:
        raise ModelError(f"{file}: could not rebuild the template '{layer_name(template)}' "
                         f"from its config: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0]}") from exc


def _after_layers(file: str, levels: list[Level], custom_objects: dict[str, Any]
                  ) -> tuple[list[tuple[str, Any]], list[str]]:

    appended: list[tuple[str, Any]] = []
    skipped: list[str] = []
    for level in reversed(levels):
        for entry in level.after:
            name = layer_name(entry)
            if skipped or entry.get("class_name") in CODE_LAYERS or not _known_layer(
                    entry, custom_objects):
                skipped.append(name)
                continue
            layer_cfg = _normalized(entry)
            kind = str(entry.get("class_name"))
            cls = custom_objects.get(entry.get("registered_name") or kind) or custom_objects.get(
                kind) or getattr(keras.layers, kind)
            try:
                layer = cls.from_config(layer_cfg["config"])
            except Exception as exc:
                raise ModelError(f"{file}: could not rebuild layer '{name}' after the "
                                 f"Concatenate: {type(exc).__name__}: {exc}") from exc
            appended.append((name, layer))
    return appended, skipped


def _append(model: Any, layers: list[Any]) -> Any:

    if isinstance(model, keras.Sequential):
        return keras.Sequential([keras.Input(batch_shape=model.inputs[0].shape,
                                             dtype=model.inputs[0].dtype),
                                 *model.layers, *layers], name=model.name)
    out = model.outputs[0]
    for layer in layers:
        out = layer(out)
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs  # see _one_tensor
    return keras.Model(inputs, out, name=model.name)


def _compile(model: Any, training: dict | None, compile_config: dict | None, file: str) -> str:
    if training:
        done = compile_from_training_config(model, training, lambda _: None)
        if not done:
            return "not compiled: the file's training settings could not be used"
    else:
        try:
            model.compile_from_config(compile_config)
        except Exception as exc:
            return f"not compiled: the file's compile settings could not be used ({exc})"
    # A fresh, built optimizer: the saved model then reloads without a variable mismatch.
    model.optimizer.build(model.trainable_variables)
    return (f"compiled with the settings saved in {file} "
            f"({type(model.optimizer).__name__}, loss {_lossattr_text(model.loss)}); "
            "the optimizer state (moments, step count) is not carried over")


def _lossattr_text(loss: Any) -> str:
    return loss if isinstance(loss, str) else getattr(loss, "name", type(loss).__name__)

