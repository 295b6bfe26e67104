"""Inspect a model file without TensorFlow or Keras, so it is instant.

The GUI and the CLI call this before any worker starts: to show what a file
holds (input shape, output layer, compiled or not, Lambda layers that would run
code) and to reject a wrong file with a useful message at once instead of
after TensorFlow has spent seconds starting in the worker. It only reads JSON
from the `.keras` zip or the `.h5` root attributes, and parses `.py` files
with `ast`; nothing from the file is executed. What is read becomes a
`ModelFileInfo` (`info`, which imports no h5py, so the GUI can hold one).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import zipfile
import zlib
from pathlib import Path
from typing import Any

import h5py

from mgpu_gui.core.errors import ModelError
from mgpu_gui.core.modelfiles.builder import BUILDER_NAMES, BUILDERS_TEXT
from mgpu_gui.core.modelfiles.compile_facts import compile_facts
from mgpu_gui.core.modelfiles.info import ModelFileInfo, ModelFormat, info_from_config, loss_name
from mgpu_gui.core.modelfiles.optimizer_state import has_optimizer_state

_SUFFIX_FORMATS: dict[str, ModelFormat] = {
    ".keras": "keras", ".h5": "h5", ".hdf5": "h5", ".py": "py",
}
_ZIP_MAGIC = b"PK\x03\x04"
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def inspect_model_file(path: str | Path) -> ModelFileInfo:
    """Read what `path` holds; raise ModelError saying what is wrong and what to do."""
    path = Path(path).expanduser()
    fmt = _SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ModelError(
            f"{path.name} is not a model file: use a .keras or .h5 file saved by Keras, "
            f"or a .py file defining {BUILDERS_TEXT}."
        )
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "not found"
        raise ModelError(f"model file {what}: {path}. Check the path, or use 'demo'.")
    if fmt == "py":
        return _inspect_py(path)
    info = _inspect_keras(path) if fmt == "keras" else _inspect_h5(path)
    return dataclasses.replace(info, optimizer_state=has_optimizer_state(path))


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
    loss = loss_name(compile_config.get("loss")) if isinstance(compile_config, dict) else None
    return info_from_config(
        path, "keras", config,
        compiled=bool(compile_config), loss=loss,
        keras_version=metadata.get("keras_version"),
        compile=compile_facts(compile_config.get("optimizer"), loss,
                              compile_config.get("metrics"))
        if isinstance(compile_config, dict) else None,
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
    loss = loss_name(training.get("loss")) if isinstance(training, dict) else None
    return info_from_config(
        path, "h5", config,
        compiled=bool(training), loss=loss,
        keras_version=attrs.get("keras_version"),
        compile=compile_facts(training.get("optimizer_config"), loss, training.get("metrics"))
        if isinstance(training, dict) else None,
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
    names = _top_level_names(tree)
    return ModelFileInfo(path=path, format="py", name=path.stem,
                         builder=next((n for n in BUILDER_NAMES if n in names), None),
                         functions=_functions(tree))


def _functions(tree: ast.Module) -> tuple[str, ...]:
    """The top-level functions, in file order: what --builder may name."""
    return tuple(node.name for node in tree.body
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))


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


# -- shared ------------------------------------------------------------------
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
