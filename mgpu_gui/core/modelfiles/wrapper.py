"""Legacy multi-GPU wrappers in a model config: found without TensorFlow, h5py or Keras.

Keras 2's `multi_gpu_model` (and the Keras 3 `to_multi_gpu(model, n_gpus)`
recipe) wrapped the user's model (the *template*) in towers: an Input, one
slicing `Lambda` per GPU, the template applied to each slice (one nested model
called N times) and a `Concatenate(axis=0)`, sometimes followed by more layers.
Saved with `save()`, the file holds that wrapper; re-wrapping nested it again.

`find_wrapper(config)` reads a model config (a dict from the file's JSON) and
says whether it is such a wrapper: towers, template, nesting depth, layers
after the Concatenate. It is plain Python on dicts, so the GUI and the CLI
call it (through `inspection.inspect_model_file`); the Keras rebuild of the
template is `mgpu_gui.engine.unwrap.recover_model`, which walks the same
`wrapper_levels`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MODEL_CLASSES = ("Functional", "Model", "Sequential")
# Layers that never run code from the file and are rebuilt from their config.
CODE_LAYERS = ("Lambda",)


@dataclass(frozen=True)
class WrapperInfo:
    """A multi-GPU wrapper found in a model config.

    `depth` is how many wrappers nest around the template (1: wrapped once).
    `towers` is the tower count of each wrapper, outermost first. `after_layers`
    are the layers the wrappers add after their Concatenate, as (name, class),
    innermost wrapper first (the order they are appended in); `code_layers`
    names those that cannot be rebuilt without running code from the file.
    """

    towers: tuple[int, ...]
    template_name: str
    template_class: str  # "Functional" or "Sequential" (a Keras 2 "Model" is Functional)
    template_layers: int
    depth: int
    after_layers: tuple[tuple[str, str], ...] = field(default=())
    code_layers: tuple[str, ...] = field(default=())
    template_lambdas: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """One paragraph for the CLI, the log and the GUI dialog."""
        towers = " x ".join(str(n) for n in self.towers)
        nest = "" if self.depth == 1 else f", nested {self.depth} deep (wrapped again on reload)"
        text = (f"multi-GPU wrapper ({towers} towers{nest}) around the {self.template_class} "
                f"model '{self.template_name}' ({self.template_layers} layers)")
        if self.after_layers:
            text += "; after the Concatenate: " + ", ".join(
                f"{name} ({cls})" for name, cls in self.after_layers)
        if self.code_layers:
            text += ("; cannot be rebuilt without running code from the file: "
                     + ", ".join(self.code_layers))
        return text


@dataclass(frozen=True)
class Level:
    """One wrapper: its config, the nested template's entry, towers, layers after it."""

    config: dict[str, Any]  # the wrapper's model config
    template: dict[str, Any]  # the nested template's layer entry
    towers: int
    after: tuple[dict[str, Any], ...]


def find_wrapper(config: dict[str, Any]) -> WrapperInfo | None:
    """The wrapper structure of a model config, or None for a plain model."""
    levels = wrapper_levels(config)
    if not levels:
        return None
    template = levels[-1].template
    after = [layer for level in reversed(levels) for layer in level.after]
    code: list[str] = []
    for layer in after:
        if layer.get("class_name") in CODE_LAYERS or code:
            code.append(layer_name(layer))  # everything after a code layer depends on it
    return WrapperInfo(
        towers=tuple(level.towers for level in levels),
        template_name=layer_name(template),
        template_class="Sequential" if template.get("class_name") == "Sequential"
        else "Functional",
        template_layers=len([layer for layer in config_layers(template)
                             if layer.get("class_name") != "InputLayer"]),
        depth=len(levels),
        after_layers=tuple((layer_name(layer), str(layer.get("class_name"))) for layer in after),
        code_layers=tuple(code),
        template_lambdas=tuple(layer_name(node) for node in walk_config(template)
                               if node.get("class_name") == "Lambda"),
    )


def wrapper_levels(config: dict[str, Any]) -> list[Level]:
    """The wrappers from the outermost in; empty when `config` is not a wrapper."""
    levels: list[Level] = []
    node = config
    while isinstance(node, dict) and node.get("class_name") in ("Functional", "Model"):
        level = _level(node)
        if level is None:
            break
        levels.append(level)
        node = level.template
    return levels


def _level(config: dict[str, Any]) -> Level | None:
    layers = config_layers(config)
    by_name = {layer_name(layer): layer for layer in layers}
    for candidate in layers:
        if candidate.get("class_name") not in MODEL_CLASSES:
            continue
        calls = _inbound(candidate)
        if len(calls) < 2 or any(len(call) != 1 for call in calls):
            continue
        feeders = [by_name.get(call[0]) for call in calls]
        if not all(f is not None and f.get("class_name") == "Lambda" for f in feeders):
            continue
        tname = layer_name(candidate)
        concat = next((
            layer for layer in layers
            if layer.get("class_name") == "Concatenate"
            and (layer.get("config") or {}).get("axis") == 0
            and _inbound(layer) and set(_inbound(layer)[0]) == {tname}
        ), None)
        if concat is None:
            continue
        after = _chain_after(config, by_name, layer_name(concat))
        if after is None:
            continue
        return Level(config, candidate, len(calls), tuple(after))
    return None


def _chain_after(config: dict[str, Any], by_name: dict[str, dict[str, Any]],
                 concat: str) -> list[dict[str, Any]] | None:
    """The single chain of layers from the Concatenate to the one output, or None."""
    outputs = (config.get("config") or {}).get("output_layers")
    if isinstance(outputs, list) and outputs and isinstance(outputs[0], str):
        outputs = [outputs]
    if not isinstance(outputs, list) or len(outputs) != 1:
        return None
    chain: list[dict[str, Any]] = []
    name = outputs[0][0]
    while name != concat:
        layer = by_name.get(name)
        if layer is None or len(chain) > len(by_name):
            return None
        calls = _inbound(layer)
        if len(calls) != 1 or len(calls[0]) != 1:
            return None
        chain.append(layer)
        name = calls[0][0]
    return list(reversed(chain))


def _inbound(layer: dict[str, Any]) -> list[list[str]]:
    """Per call of `layer`, the names of the layers feeding it (Keras 2 and 3 formats)."""
    calls: list[list[str]] = []
    for node in layer.get("inbound_nodes") or []:
        if isinstance(node, list):  # Keras 2: [["dense", 0, 0, {}], ...]
            calls.append([entry[0] for entry in node
                          if isinstance(entry, list) and entry and isinstance(entry[0], str)])
        elif isinstance(node, dict):  # Keras 3: {"args": [...keras tensors...], "kwargs": {}}
            names = []
            for item in walk_config(node.get("args")):
                history = (item.get("config") or {}).get("keras_history") if (
                    item.get("class_name") == "__keras_tensor__") else None
                if isinstance(history, list) and history:
                    names.append(history[0])
            calls.append(names)
    return calls


def config_layers(model_config: dict[str, Any]) -> list[dict[str, Any]]:
    """The layer entries of a model config, old (list-style) Sequential configs too."""
    inner = model_config.get("config")
    if isinstance(inner, list):  # Keras 2.0-2.1 Sequential: config is the layer list
        return inner
    layers = (inner or {}).get("layers")
    return layers if isinstance(layers, list) else []


def layer_name(layer: dict[str, Any]) -> str:
    cfg = layer.get("config")
    return str(layer.get("name") or (cfg.get("name") if isinstance(cfg, dict) else None) or "?")


def walk_config(node: Any) -> Iterator[dict[str, Any]]:
    """Every dict in a nested config, so nested models are searched too."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk_config(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk_config(value)
