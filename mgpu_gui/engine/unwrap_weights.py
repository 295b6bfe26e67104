"""Set a recovered template's weights from its wrapper file, read by structure with h5py.

`.h5` files store weights by layer name (`model_weights/<group>` with
`weight_names`); `.keras` files by saved object path (`layers/<snake name>/vars/<i>`).
Either way every weight of the recovered model must be found, and every stored
array must be a weight of the recovered model or recognisably no layer's:
a nested model that was compiled and trained before it was wrapped (the
`to_multi_gpu` recipe) carries its optimizer's variables in its own group of a
`.keras` file. Those are skipped and reported (`SkippedState`), never counted
as weights.
"""

from __future__ import annotations

import io
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import keras
import numpy as np
from keras.src.saving import saving_lib
from keras.src.utils.naming import to_snake_case

from mgpu_gui.core.errors import ModelError
from mgpu_gui.core.modelfiles.wrapper import Level, config_layers, layer_name

# A model's group in a .keras weights file: its layers, its own variables, and
# whatever else it carried (its optimizer, when it was compiled and trained).
_LAYERS, _VARS = "layers", "vars"
_MISMATCH = ("the file does not match its own config (damaged or edited): use an intact copy, "
             "or save the model again.")


@dataclass(frozen=True)
class SkippedState:
    """Arrays stored inside the wrapper that are no layer's weights, left out of the model."""

    group: str  # its path in the file's weights
    owner: str  # the model it was stored with
    arrays: int

    def describe(self) -> str:
        kind = self.group.rsplit("/", 1)[-1]
        what = "optimizer variables" if kind == "optimizer" else f"'{kind}' state"
        return f"{what} of {self.owner}, {self.arrays} arrays at '{self.group}'"


@dataclass(frozen=True)
class WeightsSet:
    """How many stored arrays became weights, and what was stored but is no layer's."""

    arrays: int
    skipped: tuple[SkippedState, ...] = ()


def leaf_layers(model: Any) -> list[Any]:
    """The layers that own weights directly: nested models are looked through."""
    leaves: list[Any] = []
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            leaves.extend(leaf_layers(layer))
        else:
            leaves.append(layer)
    return leaves


# -- .h5: weights by layer name ---------------------------------------------
def set_h5_weights(path: Path, model: Any, skip: set[str]) -> WeightsSet:
    """Each stored weight to the layer its name says; `skip`: layers left out on purpose."""
    stored: dict[str, list[tuple[str, np.ndarray]]] = {}
    with h5py.File(path, "r") as h5:
        if "model_weights" not in h5:
            raise ModelError(f"{path.name} has no model_weights group: the weights are missing; "
                             "save the model again with model.save().")
        root = h5["model_weights"]
        layer_names = [attr_text(n) for n in root.attrs.get("layer_names", [])]
        for group_name in layer_names:
            if group_name not in root:
                raise ModelError(f"{path.name}: weight group 'model_weights/{group_name}' is "
                                 "missing; the file is incomplete, save it again.")
            group = root[group_name]
            for full in (attr_text(n) for n in group.attrs.get("weight_names", [])):
                if full not in group:
                    raise ModelError(f"{path.name}: weight 'model_weights/{group_name}/{full}' "
                                     "is listed but missing; the file is incomplete.")
                stored.setdefault(group_name, []).append((full, np.asarray(group[full])))
    leaves = {layer.name: layer for layer in leaf_layers(model)}
    by_layer: dict[str, list[tuple[str, np.ndarray]]] = {}
    for group_name, entries in stored.items():
        for full, value in entries:
            parts = full.split("/")
            owner = next((p for p in parts[:-1] if p in leaves), None)
            if owner is None and group_name in leaves:
                owner = group_name
            if owner is None:
                if group_name in skip or any(p in skip for p in parts):
                    continue
                raise ModelError(f"{path.name}: stored weight 'model_weights/{group_name}/"
                                 f"{full}' belongs to no layer of the recovered model; the "
                                 "file does not match its own config.")
            by_layer.setdefault(owner, []).append((parts[-1].split(":")[0], value))
    count = 0
    for name, layer in leaves.items():
        if not layer.weights:
            continue
        entries = by_layer.get(name)
        if not entries:
            raise ModelError(
                f"{path.name}: no weights stored for layer '{name}' (expected "
                f"{', '.join(v.name for v in layer.weights)}); the weight group is missing, "
                "so the model cannot be recovered. Use a complete copy of the file.")
        layer.set_weights(_match(path.name, layer, entries))
        count += len(entries)
    return WeightsSet(count)


def _match(file: str, layer: Any, entries: list[tuple[str, np.ndarray]]) -> list[np.ndarray]:
    """Stored arrays in the order of `layer.weights`: by variable name, else in stored order."""
    names = [v.name.split("/")[-1].split(":")[0] for v in layer.weights]
    stored = dict(entries)
    if len(stored) == len(entries) and sorted(stored) == sorted(names):
        values = [stored[n] for n in names]
    elif len(entries) == len(names):
        values = [value for _, value in entries]
    else:
        raise ModelError(f"{file}: layer '{layer.name}' has {len(names)} weights "
                         f"({', '.join(names)}) but the file stores {len(entries)} "
                         f"({', '.join(n for n, _ in entries)}).")
    for variable, value in zip(layer.weights, values, strict=True):
        if tuple(variable.shape) != value.shape:
            raise ModelError(f"{file}: weight '{variable.name}' of layer '{layer.name}' has "
                             f"shape {tuple(variable.shape)} but the file stores {value.shape}.")
    return values


def attr_text(value: Any) -> str:
    """An HDF5 attribute as text (h5py gives bytes or str by how it was written)."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


# -- .keras: weights by saved object path ------------------------------------
class _ReadingStore(saving_lib.H5IOStore):
    """Keras's own weights reader, noting each path it reads variables from."""

    def __init__(self, data: io.BytesIO):
        super().__init__(data, mode="r")
        self.read: set[str] = set()

    def get(self, path: str) -> Any:
        self.read.add(path)
        return super().get(path)


def set_keras_weights(path: Path, levels: list[Level], template: Any,
                      appended: list[tuple[str, Any]]) -> WeightsSet:
    """Keras loads each object from its group; what no layer read must be non-layer state."""
    with zipfile.ZipFile(path) as archive:
        data = io.BytesIO(archive.read("model.weights.h5"))
    store = _ReadingStore(data)
    count, skipped = 0, []
    try:
        with h5py.File(io.BytesIO(data.getvalue()), "r") as h5:
            for where, obj in _targets(levels, template, appended):
                if where not in h5 and obj.weights:
                    raise ModelError(f"{path.name}: weight group '{where}' is missing; "
                                     "the file is incomplete, save or copy it again.")
                errors: dict[int, Any] = {}
                with warnings.catch_warnings():
                    # A layer that fails here is retried through the model's other
                    # containers, which only warns; its first error is raised below.
                    warnings.filterwarnings("ignore", "Skipping nested container",
                                            UserWarning)
                    saving_lib._load_state(obj, store, None, inner_path=where,
                                           visited_saveables=set(), failed_saveables=set(),
                                           error_msgs=errors)
                if errors:
                    _, exc = next(iter(errors.values()))
                    raise ModelError(f"{path.name}: the weights under '{where}' do not fit "
                                     f"'{obj.name}' ({str(exc).splitlines()[0].rstrip('.')}); "
                                     f"{_MISMATCH}")
                read, left = _read_and_left(h5, where, store.read)
                found, stray = _sort_unread(h5, where, left, obj.name)
                if stray:
                    raise ModelError(
                        f"{path.name}: arrays stored under '{where}' belong to no layer of the "
                        f"recovered '{obj.name}' ({len(stray)}, first '{stray[0]}'); "
                        f"{_MISMATCH}")
                count += read
                skipped.extend(found)
    finally:
        store.close()
    return WeightsSet(count, tuple(skipped))


def _targets(levels: list[Level], template: Any,
             appended: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """(group path in the weights file, object) for the template and each appended layer."""
    placed = dict(appended)
    targets: list[tuple[str, Any]] = []
    prefix = ""
    for level in levels:
        used: dict[str, int] = {}
        paths = {}
        for entry in config_layers(level.config):
            # .keras files are Keras 3's: class names as saved, no Keras 2 'Model'.
            snake = _unique(to_snake_case(str(entry.get("class_name"))), used)
            paths[layer_name(entry)] = f"{prefix}{_LAYERS}/{snake}"
        for entry in level.after:
            if layer_name(entry) in placed:
                targets.append((paths[layer_name(entry)], placed[layer_name(entry)]))
        prefix = paths[layer_name(level.template)] + "/"
    targets.append((prefix.rstrip("/"), template))
    return targets


def _unique(name: str, used: dict[str, int]) -> str:
    if name in used:
        used[name] += 1
        return f"{name}_{used[name]}"
    used[name] = 0
    return name


def _datasets(h5: Any, where: str) -> list[str]:
    """The path of every array stored under `where`."""
    found: list[str] = []
    if where in h5:
        h5[where].visititems(lambda name, obj: found.append(f"{where}/{name}")
                             if isinstance(obj, h5py.Dataset) else None)
    return found


def _read_and_left(h5: Any, where: str, read_paths: set[str]) -> tuple[int, set[str]]:
    """How many arrays under `where` Keras read into layers, and the paths of the rest."""
    read_groups = {f"{p}/{_VARS}" for p in read_paths}
    read, left = 0, set()
    for array in _datasets(h5, where):
        if array.rsplit("/", 1)[0] in read_groups:
            read += 1
        else:
            left.add(array)
    return read, left


def _sort_unread(h5: Any, where: str, left: set[str], owner: str
                 ) -> tuple[list[SkippedState], list[str]]:
    """Unread arrays: grouped by the model state they are (e.g. its optimizer), and strays.

    A model's group holds `layers/`, `vars/` and such state; an unread array
    reached through `layers/<name>/...` alone is a layer's weight the recovered
    model lacks: a stray, which is an error, not something to skip.
    """
    groups: dict[str, int] = {}
    stray: list[str] = []
    for array in sorted(left):
        parts = array[len(where) + 1:].split("/")
        i = 0
        while i + 1 < len(parts) and parts[i] == _LAYERS:
            i += 2
        model = "/".join([where, *parts[:i]])
        if parts[i] in (_LAYERS, _VARS) or not isinstance(h5[model].get(_LAYERS), h5py.Group):
            stray.append(array)
            continue
        group = f"{model}/{parts[i]}"
        groups[group] = groups.get(group, 0) + 1
    skipped = []
    for group, arrays in groups.items():
        model = group.rsplit("/", 1)[0]
        skipped.append(SkippedState(group, f"'{owner}'" if model == where
                                    else f"the model at '{model}'", arrays))
    return skipped, stray
