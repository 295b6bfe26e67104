"""The run setup's instant checks of a RunConfig against its files; no Qt, no TensorFlow.

Reading a model file or listing an image folder (an rglob over every image) is
slow enough to be felt on the GUI thread, and the checks run after every edit.
So each read is cached by what it depends on: the path, its size and mtime, and
for an image folder the image size. Everything else (the global batch, the
validation split, whether model and data fit) is recomputed from the cached
results on every check without touching a file. The files themselves are
parsed in the file inspector child (core.children.inspector): a damaged or
hostile file costs a message, not the window.

Two reads take long on the GUI thread even once: listing an image folder (231 ms for
20,000 images on a busy machine, `tests/benchmarks/gui_responsiveness.py batch`) and
asking whether ImageNet weights can be downloaded (a DNS lookup and a connection, up to
seconds offline). They run on a thread; a check waits `READ_WAIT_S` for them, and
without an answer by then it says what is still being read (`SetupCheck.reading`) and
`on_ready` asks for another check once it is there.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as ReadTimeout
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
READ_WAIT_S = 0.05  # what a check waits for a slow read before answering without it

T = TypeVar("T")
_UNREAD = object()


@dataclass(frozen=True)
class SetupCheck:
    """What one check found: problems by field, and what was read (for the hints);
    `reading` names the reads not answered yet (another check follows them)."""

    problems: dict[str, str]
    data: DataInfo | None
    model: ModelFileInfo | None
    reading: tuple[str, ...] = ()


class _LastRead(Generic[T]):
    """The last read's result (or its failure's message), kept while its key stays the same.

    With a `background` pool the read runs there: `get` waits `READ_WAIT_S` for it, then
    answers (None, None) with `pending` set, and `on_ready` is called (from the pool's
    thread) once it ends.
    """

    def __init__(self, background: Callable[[], ThreadPoolExecutor] | None = None,
                 on_ready: Callable[[], None] | None = None,
                 still_true: Callable[[Hashable, Hashable], bool] | None = None) -> None:
        """`still_true(old_key, new_key)`: the old answer stands while the new is read."""
        self._key: Hashable = _UNREAD
        self._value: T | None = None
        self._message: str | None = None
        self._background = background
        self._on_ready = on_ready
        self._still_true = still_true
        self._stale_ok = False
        self._pending: Future[T] | None = None

    @property
    def pending(self) -> bool:
        return self._pending is not None and not self._stale_ok

    def get(self, key: Hashable, read: Callable[[], T], path: str) -> tuple[T | None, str | None]:
        if key != self._key:
            self._stale_ok = (self._still_true is not None and self._key is not _UNREAD
                              and self._pending is None and self._still_true(self._key, key))
            self._key = key
            if self._pending is not None:
                self._pending.cancel()
            if self._background is None:
                self._keep(read, path)
            else:
                self._pending = self._background().submit(read)
                try:
                    self._pending.exception(timeout=READ_WAIT_S)
                except ReadTimeout:
                    if self._on_ready is not None:
                        self._pending.add_done_callback(lambda _: self._on_ready())
        if self._pending is not None and self._pending.done():
            self._keep(self._pending.result, path)
            self._pending = None
        if self.pending:
            return None, None
        return self._value, self._message

    def _keep(self, read: Callable[[], T], path: str) -> None:
        try:
            self._value, self._message = read(), None
        except UserError as exc:
            self._value, self._message = None, str(exc)
        except Exception as exc:  # an unreadable file must not break the panel
            self._value = None
            self._message = f"cannot read {path}: {type(exc).__name__}: {exc}"


class SetupChecker:
    """Checks configs as they are edited; reads each file again only when it changed.

    `on_ready`: called from a reading thread when a read a check could not wait for has
    ended; check again then (through a queued signal: never from that thread).
    """

    def __init__(self, on_ready: Callable[[], None] | None = None) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        if on_ready is not None:  # not after `shutdown`: its receiver may be gone
            on_ready = self._unless_closed(on_ready)
        self._model = _LastRead[ModelFileInfo]()
        self._data = _LastRead[DataInfo]()  # in the inspector child: a warm process answers
        self._folder = _LastRead[DataInfo](self._reader, on_ready)
        # Asked again every WEIGHTS_RECHECK_S: the last answer stands while it is.
        self._weights = _LastRead[dict[str, str]](self._reader, on_ready,
                                                  lambda old, new: old[:3] == new[:3])
        self._folder_asked = False  # whether this check wanted the folder's listing

    def shutdown(self) -> None:
        """Drop the reads not started; one running ends on its own (a listing, a socket
        with its timeout)."""
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _unless_closed(self, call: Callable[[], None]) -> Callable[[], None]:
        return lambda: None if self._closed else call()

    def check(self, config: RunConfig, replicas: int, known: Mapping[str, str]) -> SetupCheck:
        """`known`: problems the caller found already (their fields' files are not read).

        Returns those and what the files and the output folder tell, in that order.
        """
        problems = dict(known)
        self._folder_asked = False
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
        reading = (("the image folder",) if self._folder.pending and self._folder_asked
                   else ()) + (("where the weights come from",) if self._weights.pending
                               and "pretrained" not in problems else ())
        return SetupCheck(problems, data, model, reading)

    def _reader(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="setup read")
        return self._pool

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
        self._folder_asked = folder
        return (self._folder if folder else self._data).get(
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
