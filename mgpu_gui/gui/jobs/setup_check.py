"""The run setup's instant checks of a RunConfig against its files; no Qt, no TensorFlow.

Reading a model file or listing an image folder (an rglob over every image) is
slow enough to be felt on the GUI thread, and the checks run after every edit.
So each read is cached by what it depends on: the path, its size and mtime, and
for an image folder the image size. Everything else (the global batch, the
validation split, whether model and data fit) is recomputed from the cached
results on every check without touching a file. The files themselves are
parsed in the file inspector child (core.children.inspector): a damaged or
hostile file costs a message, not the window.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from mgpu_gui.core.children.inspector import file_inspector
from mgpu_gui.core.config import RunConfig, is_model_file
from mgpu_gui.core.datasets.inspection import DataInfo, DataKind
from mgpu_gui.core.errors import DataError, ModelError, UserError
from mgpu_gui.core.modelfiles.builtins import keras_cache_dir
from mgpu_gui.core.modelfiles.info import ModelFileInfo
from mgpu_gui.core.runs import preflight

GENERAL = ""  # problems that belong to no field of the form
WEIGHTS_RECHECK_S = 30.0  # how long whether ImageNet weights can be downloaded is believed
# Problems that make the model-vs-data and batch checks meaningless.
BLOCKS_FIT = frozenset({"data", "image_size", "validation_split"})

T = TypeVar("T")
_UNREAD = object()


@dataclass(frozen=True)
class SetupCheck:
    """What one check found: problems by field, and what was read (for the hints)."""

    problems: dict[str, str]
    data: DataInfo | None
    model: ModelFileInfo | None


class _LastRead(Generic[T]):
    """The last read's result (or its failure's message), kept while its key stays the same."""

    def __init__(self) -> None:
        self._key: Hashable = _UNREAD
        self._value: T | None = None
        self._message: str | None = None

    def get(self, key: Hashable, read: Callable[[], T], path: str) -> tuple[T | None, str | None]:
        if key != self._key:
            self._key = key
            try:
                self._value, self._message = read(), None
            except UserError as exc:
                self._value, self._message = None, str(exc)
            except Exception as exc:  # an unreadable file must not break the panel
                self._value = None
                self._message = f"cannot read {path}: {type(exc).__name__}: {exc}"
        return self._value, self._message


class SetupChecker:
    """Checks configs as they are edited; reads each file again only when it changed."""

    def __init__(self) -> None:
        self._model = _LastRead[ModelFileInfo]()
        self._data = _LastRead[DataInfo]()
        self._weights = _LastRead[dict[str, str]]()

    def check(self, config: RunConfig, replicas: int, known: Mapping[str, str]) -> SetupCheck:
        """`known`: problems the caller found already (their fields' files are not read).

        Returns those and what the files and the output folder tell, in that order.
        """
        problems = dict(known)
        output = config.output_path
        if output.exists() and not output.is_dir():
            problems["output_dir"] = f"{output} is a file; choose a folder."
        model, data, file_problems = self._file_problems(config, replicas, problems)
        for field, message in file_problems.items():
            problems.setdefault(field, message)
        if "pretrained" not in problems:  # again when the cache changes, or the network may
            problems.update(self._weights.get(
                (config.model, config.pretrained, file_stamp(str(keras_cache_dir())),
                 time.monotonic() // WEIGHTS_RECHECK_S),
                lambda: attempt("pretrained", lambda: preflight.check_weights(config)),
                "the weights")[0] or {})
        if "output_dir" not in problems:  # writable, and room for the run's checkpoints
            problems.update(attempt("output_dir",
                                    lambda: preflight.check_output_disk(config, model)))
        return SetupCheck(problems, data, model)

    def _file_problems(self, config: RunConfig, replicas: int, known: Mapping[str, str]
                       ) -> tuple[ModelFileInfo | None, DataInfo | None, dict[str, str]]:
        problems: dict[str, str] = {}
        model = data = None
        if "model" not in known and is_model_file(config.model):
            model, message = self._read_model(config.model)
            if message is not None:
                problems["model"] = message
            elif model is not None:
                problems.update(attempt("model", lambda: preflight.check_builder(config, model)))
        if "data" not in known:
            data, message = self._read_data(config.data, config.image_size)
            if message is not None:
                problems["data"] = message
        if data is not None and not BLOCKS_FIT & set(known):
            # Model-vs-data first, then the batch alone, so that failure can only be the
            # batch, even when the model file is wrong.
            if model is not None:
                problems.update(attempt(None, lambda: preflight.check_model_fits(
                    config, model, data)))
            # A built-in's refusal of small images is fixed in the image size.
            problems.update(attempt("image_size" if data.kind is DataKind.IMAGES else "data",
                                    lambda: preflight.check_builtin_fits(config, data)))
            if not problems.keys() - {"model"}:
                problems.update(attempt("batch_per_replica", lambda: preflight.check_batch_fits(
                    config, replicas, data)))
        return model, data, problems

    def _read_model(self, path: str) -> tuple[ModelFileInfo | None, str | None]:
        key = (path, file_stamp(path))
        return self._model.get(key, lambda: file_inspector().inspect_model(path), path)

    def _read_data(self, path: str, image_size: Sequence[int]
                   ) -> tuple[DataInfo | None, str | None]:
        stamp = file_stamp(path)
        folder = stamp is not None and stamp[2]
        key = (path, stamp, tuple(image_size) if folder else None)
        return self._data.get(
            key, lambda: file_inspector().inspect_data(path, image_size=image_size), path)


def attempt(field: str | None, check: Callable[[], object]) -> dict[str, str]:
    """Run a check; {field: message} for a UserError (field None: ModelError/DataError decide)."""
    try:
        check()
    except UserError as exc:
        if field is None:
            field = ("model" if isinstance(exc, ModelError)
                     else "data" if isinstance(exc, DataError) else GENERAL)
        return {field: str(exc)}
    except Exception as exc:  # an unreadable file must not break the panel
        return {field or GENERAL: f"{type(exc).__name__}: {exc}"}
    return {}


def file_stamp(path: str) -> tuple[float, int, bool] | None:
    """mtime, size and whether it is a folder, so an edited file is read again; None when
    there is no such file."""
    try:
        info = os.stat(os.path.expanduser(path))
    except OSError:
        return None
    return info.st_mtime, info.st_size, stat.S_ISDIR(info.st_mode)
