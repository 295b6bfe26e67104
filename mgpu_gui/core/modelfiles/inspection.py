"""Inspect a model file without TensorFlow or Keras, so it is instant.

The GUI and the CLI call this before any worker starts: to show what a file
holds (input shape, output layer, compiled or not, Lambda layers that would run
code) and to reject a wrong file with a useful message at once instead of
after TensorFlow has spent seconds starting in the worker. It only reads JSON
from the `.keras` zip or the `.h5` root attributes, and parses `.py` files
with `ast`; nothing from the file is executed.
"""

from __future__ import annotations

import ast
import json
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import h5py

from mgpu_gui.core.errors import ModelError
from mgpu_gui.engine.unwrap import WrapperInfo, config_layers, find_wrapper, walk_config

ModelFormat = Literal["keras", "h5", "py"]
_SUFFIX_FORMATS: dict[str, ModelFormat] = {
    ".keras": "keras", ".h5": "h5", ".hdf5": "h5", ".py": "py",
}
_ZIP_MAGIC = b"PK\x03\x04"
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# Layers that only pass the previous layer's output through an activation.
_ACTIVATION_LAYERS = {"Activation": None, "Softmax": "softmax", "ReLU": "relu"}


@dataclass(frozen=True)
class ModelFileInfo:
    """What a model file holds, as far as can be seen without loading it.

    `input_shape` excludes the batch dimension; it and the output fields are
    None when the file does not say (several inputs or outputs, a subclassed
    model, a `.py` file). `lambda_layers` names every Lambda layer, nested
    models included, because each one runs Python code from the file on load.
    `wrapper` describes a legacy multi-GPU wrapper (towers of slicing Lambdas
    around one nested template); such a file is unwrapped, never run.
    """

    path: Path
    format: ModelFormat
    class_name: str | None = None
    name: str | None = None
    input_shape: tuple[int | None, ...] | None = None
    output_units: int | None = None
    output_activation: str | None = None
    compiled: bool = False
    loss: str | None = None
    has_lambda: bool = False
    keras_version: str | None = None
    lambda_layers: tuple[str, ...] = field(default=())
    wrapper: WrapperInfo | None = None


def inspect_model_file(path: str | Path) -> ModelFileInfo:
    """Read what `path` holds; raise ModelError saying what is wrong and what to do."""
    path = Path(path).expanduser()
    fmt = _SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ModelError(
            f"{path.name} is not a model file: use a .keras or .h5 file saved by Keras, "
            "or a .py file defining build_model()."
        )
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "not found"
        raise ModelError(f"model file {what}: {path}. Check the path, or use 'demo'.")
    if fmt == "keras":
        return _inspect_keras(path)
    if fmt == "h5":
        return _inspect_h5(path)
    return _inspect_py(path)


def lambda_refused(info: ModelFileInfo, names: str | None = None) -> str:
    """Why a model with Lambda layers is refused, and how the user can allow it."""
    names = names or ", ".join(info.lambda_layers) or "?"
    return (f"{info.path.name}: this model contains a Lambda layer ({names}) whose Python code "
            "would run on load. Only if you trust the file, allow it with "
            "--allow-unsafe-code (the 'Allow code from the model file' box in the app).")


# -- .keras -----------------------------------------------------------------
def _inspect_keras(path: Path) -> ModelFileInfo:
    magic = _read_magic(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "config.json" not in names:
                raise ModelError(
                    f"{path.name} is a zip archive but not a Keras model (no config.json). "
                    "Save the model with model.save('name.keras')."
                )
            config = _json(archive.read("config.json"), path, "config.json")
            metadata = (
                _json(archive.read("metadata.json"), path, "metadata.json")
                if "metadata.json" in names else {}
            )
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        if magic.startswith(_HDF5_MAGIC):
            raise ModelError(
                f"{path.name} is an HDF5 (.h5) file with a .keras name; rename it to .h5."
            ) from exc
        if magic.startswith(_ZIP_MAGIC):
            raise ModelError(
                f"{path.name} is truncated or damaged (not a complete zip archive); "
                "copy or save it again."
            ) from exc
        raise ModelError(
            f"{path.name} is not a Keras model file (a .keras file is a zip archive); "
            "save the model with model.save('name.keras')."
        ) from exc
    if not isinstance(config, dict) or "class_name" not in config:
        raise ModelError(f"{path.name}: config.json does not describe a Keras model.")
    compile_config = config.get("compile_config") or None
    return _info_from_config(
        path, "keras", config,
        compiled=bool(compile_config),
        loss=_loss_name(compile_config.get("loss")) if compile_config else None,
        keras_version=metadata.get("keras_version"),
    )


# -- .h5 --------------------------------------------------------------------
def _inspect_h5(path: Path) -> ModelFileInfo:
    magic = _read_magic(path)
    if magic.startswith(_ZIP_MAGIC):
        raise ModelError(
            f"{path.name} is a .keras (zip) file with an .h5 name; rename it to .keras."
        )
    try:
        with h5py.File(path, "r") as h5:
            attrs = {key: _text(h5.attrs[key]) for key in h5.attrs}
            weights_only = "layer_names" in attrs or "model_weights" not in h5
    except OSError as exc:
        if magic.startswith(_HDF5_MAGIC):
            raise ModelError(
                f"{path.name} is truncated or damaged ({exc}); copy or save it again."
            ) from exc
        raise ModelError(
            f"{path.name} is not an HDF5 model file; save the model with model.save('name.h5') "
            "or, better, model.save('name.keras')."
        ) from exc
    if "model_config" not in attrs:
        hint = (
            "it holds only weights (saved with save_weights); write a .py file whose "
            "build_model() builds the model and loads these weights"
            if weights_only else "save the whole model with model.save()"
        )
        raise ModelError(f"{path.name} has no model architecture (no model_config): {hint}.")
    config = _json(attrs["model_config"], path, "model_config")
    if not isinstance(config, dict) or "class_name" not in config:
        raise ModelError(f"{path.name}: model_config does not describe a Keras model.")
    training = _json(attrs["training_config"], path, "training_config") if attrs.get(
        "training_config") else None
    return _info_from_config(
        path, "h5", config,
        compiled=bool(training),
        loss=_loss_name(training.get("loss")) if isinstance(training, dict) else None,
        keras_version=attrs.get("keras_version"),
    )


def read_h5_training_config(path: str | Path) -> dict[str, Any] | None:
    """The `training_config` of a legacy `.h5` (how it was compiled), or None."""
    with h5py.File(Path(path).expanduser(), "r") as h5:
        raw = h5.attrs.get("training_config")
        return json.loads(_text(raw)) if raw is not None else None


# -- .py --------------------------------------------------------------------
def _inspect_py(path: Path) -> ModelFileInfo:
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError(f"{path.name} is not a UTF-8 Python file ({exc}).") from exc
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ModelError(
            f"{path.name}, line {exc.lineno}: syntax error: {exc.msg}. Fix the file and try again."
        ) from exc
    if "build_model" not in _top_level_names(tree):
        raise ModelError(
            f"{path.name} defines no top-level build_model() function. Add "
            "`def build_model(input_shape, num_classes):` returning an uncompiled keras.Model."
        )
    return ModelFileInfo(path=path, format="py", name=path.stem)


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names bound at module level: defs, assignments and imports."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


# -- shared config reading --------------------------------------------------
def _info_from_config(
    path: Path, fmt: ModelFormat, config: dict[str, Any], *,
    compiled: bool, loss: str | None, keras_version: str | None,
) -> ModelFileInfo:
    lambdas = tuple(
        str((node.get("config") or {}).get("name", "?"))
        for node in walk_config(config) if node.get("class_name") == "Lambda"
    )
    units, activation = _output_of(config)
    return ModelFileInfo(
        path=path, format=fmt,
        class_name=config.get("class_name"),
        name=(config.get("config") or {}).get("name"),
        input_shape=_input_shape_of(config),
        output_units=units, output_activation=activation,
        compiled=compiled, loss=loss,
        has_lambda=bool(lambdas), keras_version=keras_version, lambda_layers=lambdas,
        wrapper=find_wrapper(config),
    )


def _by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for layer in config_layers(model_config):
        cfg = layer.get("config")  # a Keras 2.0-2.1 nested Sequential's config is a list
        if layer.get("name", cfg.get("name") if isinstance(cfg, dict) else None) == name:
            return layer
    return None


def _endpoints(model_config: dict[str, Any], key: str) -> list[Any] | None:
    """`input_layers`/`output_layers` of a Functional config as a list of [name, i, j]."""
    value = (model_config.get("config") or {}).get(key)
    if not isinstance(value, list) or not value:
        return None
    return [value] if isinstance(value[0], str) else value


def _input_shape_of(model_config: dict[str, Any]) -> tuple[int | None, ...] | None:
    inputs = _endpoints(model_config, "input_layers")
    if inputs is not None:  # Functional
        if len(inputs) != 1:
            return None
        first = _by_name(model_config, inputs[0][0])
    else:
        layers = config_layers(model_config)
        first = layers[0] if layers else None
    candidates = []
    if first is not None:
        cfg = first.get("config") if isinstance(first.get("config"), dict) else {}
        candidates += [cfg.get("batch_shape"), cfg.get("batch_input_shape")]
        if first.get("class_name") in ("Sequential", "Functional", "Model"):
            nested = _input_shape_of(first)
            candidates.append([None, *nested] if nested is not None else None)
        candidates.append((first.get("build_config") or {}).get("input_shape"))
    candidates.append((model_config.get("config") or {}).get("build_input_shape"))
    candidates.append((model_config.get("build_config") or {}).get("input_shape"))
    for shape in candidates:
        if isinstance(shape, list) and shape and all(
                d is None or isinstance(d, int) for d in shape):
            return tuple(shape[1:])
    return None


def _output_of(model_config: dict[str, Any]) -> tuple[int | None, str | None]:
    """Units and activation of the (single) output layer, looking through wrappers."""
    outputs = _endpoints(model_config, "output_layers")
    layers = config_layers(model_config)
    if outputs is not None:
        if len(outputs) != 1:
            return None, None
        last = _by_name(model_config, outputs[0][0])
        index = layers.index(last) if last in layers else -1
    else:
        last, index = (layers[-1], len(layers) - 1) if layers else (None, -1)
    if last is None:
        return None, None
    kind, cfg = last.get("class_name"), last.get("config") or {}
    if kind in ("Sequential", "Functional", "Model"):
        return _output_of(last)
    if kind in _ACTIVATION_LAYERS:
        activation = _ACTIVATION_LAYERS[kind] or _activation_name(cfg.get("activation"))
        # The units come from the layer feeding it: the previous one in a
        # Sequential, its inbound layer in a Functional model.
        before = _inbound(model_config, last) if outputs is not None else (
            {"class_name": "Sequential", "config": {"layers": layers[:index]}} if index > 0
            else None)
        units = _output_of(before)[0] if before is not None else None
        return units, activation
    units = cfg.get("units", cfg.get("output_dim"))
    if units is None and kind and kind.startswith("Conv"):
        units = cfg.get("filters")
    return (units if isinstance(units, int) else None), _activation_name(cfg.get("activation"))


def _inbound(model_config: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any] | None:
    """The layer feeding `layer` in a Functional config, wrapped as a one-output model."""
    nodes = layer.get("inbound_nodes") or []
    name = None
    for node in walk_config(nodes):
        history = (node.get("config") or {}).get("keras_history")
        if isinstance(history, list) and history:
            name = history[0]
            break
    if name is None and nodes and isinstance(nodes[0], list) and nodes[0]:
        name = nodes[0][0][0]  # Keras 2: [[["dense", 0, 0, {}]]]
    if not isinstance(name, str):
        return None
    return {"class_name": "Functional", "config": {
        "layers": config_layers(model_config), "output_layers": [[name, 0, 0]]}}


def _activation_name(activation: Any) -> str | None:
    if isinstance(activation, str):
        return activation
    if isinstance(activation, dict):  # serialized function or Activation object
        cfg = activation.get("config")
        return cfg if isinstance(cfg, str) else activation.get("class_name")
    return None


def _loss_name(loss: Any) -> str | None:
    if isinstance(loss, str):
        return loss
    if isinstance(loss, dict) and "class_name" in loss:
        cfg = loss.get("config")
        if isinstance(cfg, str):  # a serialized function: {"class_name": "function", ...}
            return cfg
        return loss["class_name"]
    return None  # several outputs or nothing: the caller cannot name one loss


def _json(raw: bytes | str, path: Path, what: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelError(
            f"{path.name}: {what} is not valid JSON ({exc}); the file is damaged."
        ) from exc


def _text(value: Any) -> Any:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _read_magic(path: Path) -> bytes:
    with path.open("rb") as handle:
        return handle.read(8)
