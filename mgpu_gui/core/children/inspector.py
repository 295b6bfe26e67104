"""Read untrusted model and data files in a warm child, so a crash costs a message.

HDF5 and zip parsers are C code: a damaged `.h5` can crash or hang them, and a zip
bomb can eat the machine's memory. `FileInspector` sends each file to one
long-lived child (`mgpu_gui.processes.inspector`: h5py, numpy and zipfile, never
TensorFlow, memory capped) and gives back what the in-process functions give:
`inspect_model` -> `ModelFileInfo`, `inspect_data` -> `DataInfo`, or the same
`ModelError` / `DataError` with the child's message. A child that crashes or
misses the deadline is replaced on the next request; either way the pending
request gets a message naming the file. Answers are cached by (path, size,
mtime), so as-you-type checks of an unchanged file are instant.

Qt-free and thread-safe (one request at a time goes through the child; cache
hits do not wait for it), for a QThread or a plain thread. This module imports
no h5py: the GUI may import it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mgpu_gui.core.children.launch import Child, module_command
from mgpu_gui.core.children.runner import died_text
from mgpu_gui.core.config import DEMO
from mgpu_gui.core.datasets import inspection as data_inspection
from mgpu_gui.core.datasets.content_request import ContentRequest
from mgpu_gui.core.datasets.inspection import DataInfo
from mgpu_gui.core.errors import DataError, ModelError, UserError
from mgpu_gui.core.events import (
    DataChecked,
    FileInspected,
    InspectFailed,
    InspectorReady,
    parse_event,
)
from mgpu_gui.core.inspect_request import InspectKind, InspectRequest
from mgpu_gui.core.modelfiles.info import ModelFileInfo
from mgpu_gui.core.plain import from_plain

DEADLINE_S = 2.0
# A cold start imports numpy and h5py: ~0.2 s idle, seconds on a busy machine.
START_DEADLINE_S = 30.0
# Memory the child may use beyond its imports. Inflating a zip bomb runs at ~0.5 GB/s here:
# 512 MiB ends in a MemoryError message after ~1 s; 1 GiB took 3 s, past the deadline.
MEMORY_MIB = 512
CACHE_ENTRIES = 256
# One BLAS thread: the child does no maths, and every extra thread reserves address space.
CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_ERRORS: dict[InspectKind, type[UserError]] = {
    InspectKind.MODEL: ModelError, InspectKind.DATA: DataError}
T = TypeVar("T")


class _Timeout(Exception):
    """The child missed its deadline."""


class _Died(Exception):
    """The child's results pipe closed: it died."""


class FileInspector:
    """One warm inspector child, started on the first request and after each loss.

    `watchdog_kills` and `crashes` count children lost to the deadline and to
    crashes; `starts` counts children started; `unexpected_errors` counts files
    that failed with an exception the parsers do not turn into a user message
    (each one a damage the inspection code could describe better).
    """

    def __init__(self, deadline_s: float = DEADLINE_S, memory_mib: int = MEMORY_MIB,
                 start_deadline_s: float = START_DEADLINE_S):
        self.deadline_s = deadline_s
        self.memory_mib = memory_mib
        self.start_deadline_s = start_deadline_s
        self.watchdog_kills = 0
        self.crashes = 0
        self.starts = 0
        self.unexpected_errors = 0
        self.memory_limit: int | None = None  # the running child's address-space cap, bytes
        self._lock = threading.Lock()  # the child: one request at a time
        self._cache_lock = threading.Lock()
        self._cache: OrderedDict[Hashable, Any] = OrderedDict()  # info or InspectFailed
        self._proc: subprocess.Popen | None = None
        self._results = -1
        self._pending = b""

    @property
    def pid(self) -> int | None:
        """The running child's process id (None when none runs)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def inspect_model(self, path: str | os.PathLike[str]) -> ModelFileInfo:
        """`inspect_model_file(path)`, read in the child; raises ModelError."""
        return self._inspect(InspectRequest(InspectKind.MODEL, str(path)), ModelFileInfo)

    def inspect_data(self, source: str | os.PathLike[str], *,
                     image_size: Sequence[int] | None = None) -> DataInfo:
        """`inspect_data(source, image_size=...)`; raises DataError.

        Only `.npz` files go to the child (`image_size` only matters for folders).
        The demo (a file of the app's own) and image folders (a listing: nothing
        is parsed) are read here, and folders are not cached: adding an image
        deep inside one does not change the folder's own mtime.
        """
        if str(source) == DEMO or Path(os.path.expanduser(str(source))).is_dir():
            return data_inspection.inspect_data(source, image_size=image_size)
        return self._inspect(InspectRequest(InspectKind.DATA, str(source)), DataInfo)

    def check_content(self, request: ContentRequest) -> DataChecked:
        """Every value and image of the data, read in a short-lived child of its own
        (`core.children.data_check`): it takes seconds, which the warm child's
        as-you-type answers must not wait behind. Raises DataError."""
        from mgpu_gui.core.children.data_check import check_data_content

        return check_data_content(request)

    def close(self) -> None:
        """End the child (EOF on its stdin, a kill if it does not go); reusable after."""
        with self._lock:
            self._stop(kill=False)

    def __enter__(self) -> FileInspector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one request ---------------------------------------------------------------------
    def _inspect(self, request: InspectRequest, info_class: type[T]) -> T:
        key = _cache_key(request)
        with self._cache_lock:
            answer = self._cache.get(key) if key is not None else None
            if answer is not None:
                self._cache.move_to_end(key)
        if answer is None:
            event = self._ask(request)  # raises for a crash or a missed deadline (not cached)
            answer = (event if isinstance(event, InspectFailed)
                      else from_plain(info_class, event.info))
            if key is not None:
                with self._cache_lock:
                    self._cache[key] = answer
                    while len(self._cache) > CACHE_ENTRIES:
                        self._cache.popitem(last=False)
        if isinstance(answer, InspectFailed):
            message = answer.message if answer.user_error else (
                f"could not read {_name(request)}: unexpected {answer.message}; "
                "the file is probably damaged.")
            raise _ERRORS[request.kind](message)
        return answer

    def _ask(self, request: InspectRequest) -> FileInspected | InspectFailed:
        error = _ERRORS[request.kind]
        with self._lock:
            if self._proc is not None and self._proc.poll() is not None:
                self._stop(kill=True)  # died while idle (the OOM killer?): not this file's fault
            if self._proc is None:
                self._start(error)
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write((request.to_json() + "\n").encode())
                self._proc.stdin.flush()
                event = self._read(self.deadline_s)
            except _Timeout:
                self.watchdog_kills += 1
                self._stop(kill=True)
                raise error(f"could not read {_name(request)} within {self.deadline_s:g} s: "
                            "the file reader was stopped. The file may be damaged, or on a "
                            "slow or unreachable drive.") from None
            except (_Died, BrokenPipeError):
                self.crashes += 1
                how = died_text(self._stop(kill=True), ())[0]
                raise error(f"the file reader crashed while reading {_name(request)} (it {how}); "
                            "the file is probably damaged.") from None
            if isinstance(event, InspectFailed) and not event.user_error:
                self.unexpected_errors += 1
        if not isinstance(event, FileInspected | InspectFailed):
            raise TypeError(f"the inspector child answered {event!r}")
        return event

    # -- the child -----------------------------------------------------------------------
    def _start(self, error: type[UserError]) -> None:
        results, results_w = os.pipe()
        command = module_command(Child.INSPECTOR, "--results-fd", str(results_w),
                                 "--memory-mib", str(self.memory_mib))
        try:
            self._proc = subprocess.Popen(
                command, pass_fds=(results_w,), env={**os.environ, **CHILD_ENV},
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)  # a terminal's Ctrl-C reaches only the parent
        except BaseException:
            os.close(results)
            raise
        finally:
            os.close(results_w)
        self._results, self._pending = results, b""
        self.starts += 1
        try:
            ready = self._read(self.start_deadline_s)
        except (_Timeout, _Died):
            how = died_text(self._stop(kill=True), ())[0]
            raise error(f"the file reader could not start (it {how}); check the installation "
                        f"with: {' '.join(command[:3])}") from None
        if not isinstance(ready, InspectorReady):
            self._stop(kill=True)
            raise TypeError(f"the inspector child started with {ready!r}")
        self.memory_limit = ready.memory_limit

    def _read(self, timeout_s: float):
        """The child's next event, or _Timeout / _Died."""
        end = time.monotonic() + timeout_s
        poller = select.poll()
        poller.register(self._results, select.POLLIN)
        while b"\n" not in self._pending:
            left = end - time.monotonic()
            if left <= 0:
                raise _Timeout
            if not poller.poll(left * 1000):
                continue
            chunk = os.read(self._results, 1 << 16)
            if not chunk:
                raise _Died
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return parse_event(line.decode("utf-8"))

    def _stop(self, kill: bool) -> int:
        """End the child (under `_lock`) and return its exit code; 0 when none ran."""
        proc, self._proc, self.memory_limit = self._proc, None, None
        if proc is None:
            return 0
        if kill:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        assert proc.stdin is not None
        with contextlib.suppress(OSError):
            proc.stdin.close()  # EOF: a healthy child ends its loop
        try:
            code = proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        os.close(self._results)
        self._results = -1
        return code


def _cache_key(request: InspectRequest) -> Hashable | None:
    """(request, file identity); None when the file cannot be stat'ed (not cached)."""
    try:
        st = os.stat(os.path.expanduser(request.path))
    except OSError:
        return None
    return request, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _name(request: InspectRequest) -> str:
    return os.path.basename(request.path) or request.path


_shared: FileInspector | None = None
_shared_lock = threading.Lock()


def file_inspector() -> FileInspector:
    """The app's one inspector (started on its first request, closed at exit)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = FileInspector()
            atexit.register(_shared.close)
        return _shared


__all__ = ["DEADLINE_S", "FileInspector", "file_inspector"]
