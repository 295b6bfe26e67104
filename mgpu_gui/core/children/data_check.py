"""Check a dataset's values in a short-lived child, before a run's folder exists.

`check_data_content` sends a `ContentRequest` to `mgpu_gui.processes.data_check`
(numpy and Pillow, memory capped) and returns its `DataChecked`, or raises the
DataError it found. The child reports progress as it reads; a child silent for
`STALL_S` (a hung drive, a decoder in a loop) is killed and named in the
message, so a check may take as long as the data needs, never forever. Results
are cached by the files' identity (an image folder's by every file's size and
mtime), so the run setup's check and the start of the run read the data once.

Qt-free and thread-safe; `DataCheckJob` is the cancellable form for the GUI's
child-job runner.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from mgpu_gui.core.children.launch import Child, command_log, module_command
from mgpu_gui.core.children.runner import ChildProcesses, died_text
from mgpu_gui.core.datasets.content_request import ContentRequest
from mgpu_gui.core.errors import DataError
from mgpu_gui.core.events import DataChecked, DataCheckFailed, DataCheckProgress, parse_event

STALL_S = 15.0  # the child reports at least every 0.25 s while it reads
MEMORY_MIB = 1024  # beyond the imports: label arrays, one chunk, a flag per sample
CACHE_ENTRIES = 64
CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

DataCheckOutcome = DataChecked | DataCheckFailed


class DataCheckJob:
    """One check child, run to its end; `cancel()` (any thread) kills it.

    `on_progress` gets each `DataCheckProgress` (on the job's thread).
    """

    def __init__(self, request: ContentRequest,
                 on_progress: Callable[[DataCheckProgress], None] | None = None,
                 stall_s: float = STALL_S, memory_mib: int = MEMORY_MIB):
        self.request = request
        self.on_progress = on_progress
        self.stall_s = stall_s
        self.memory_mib = memory_mib
        self._children = ChildProcesses("data-check-output", command_log("data-check"))
        self._heard = time.monotonic()
        self._stalled = False

    def cancel(self) -> None:
        self._children.cancel()

    def run(self) -> DataCheckOutcome:
        done = threading.Event()
        watchdog = threading.Thread(target=self._watch, args=(done,), daemon=True,
                                    name="data-check-watchdog")
        self._heard = time.monotonic()
        watchdog.start()
        try:
            ended = self._children.run(self._command, dataclasses.asdict(self.request),
                                       CHILD_ENV, self._message)
        except OSError as error:
            return DataCheckFailed(f"the data check could not start: {error}",
                                   "FailedToStart", user_error=False)
        except BaseException:
            self._children.cancel()  # an interrupted parent (Ctrl-C) leaves no child behind
            raise
        finally:
            done.set()
        if ended is not None and ended.result is not None:
            return ended.result
        if self._stalled:
            return DataCheckFailed(
                f"the data check read nothing for {self.stall_s:g} s and was stopped: "
                f"{_names(self.request)} may be on a slow or unreachable drive, or hold a "
                "damaged file.", "Stalled", user_error=True)
        if ended is None or self._children.cancelled:
            return DataCheckFailed("the data check was cancelled.", "Cancelled",
                                   user_error=False)
        how, last = died_text(ended.code, ended.tail, ended.log)
        return DataCheckFailed(f"the data check {how} while reading {_names(self.request)}; "
                               f"a file is probably damaged.{last}", "ChildDied",
                               user_error=True)

    def _command(self, events_fd: int) -> list[str]:
        return module_command(Child.DATA_CHECK, "--events-fd", str(events_fd),
                              "--memory-mib", str(self.memory_mib))

    def _message(self, message: dict[str, Any]) -> DataCheckOutcome | None:
        self._heard = time.monotonic()
        event = parse_event(json.dumps(message))
        if isinstance(event, DataCheckProgress):
            if self.on_progress is not None:
                self.on_progress(event)
            return None
        return event if isinstance(event, DataChecked | DataCheckFailed) else None

    def _watch(self, done: threading.Event) -> None:
        while not done.wait(min(1.0, self.stall_s / 4)):
            if time.monotonic() - self._heard > self.stall_s:
                self._stalled = True
                self._children.cancel()
                return


_cache: OrderedDict[Hashable, DataChecked] = OrderedDict()
_cache_lock = threading.Lock()


def check_data_content(request: ContentRequest) -> DataChecked:
    """Check in a child (or answer from the cache); raise DataError for a problem."""
    if not request.reads_files:
        return DataChecked(values=0, images_decoded=0, images_header_only=0, seconds=0.0)
    key = (request, tuple(_identity(source) for source in request.sources))
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    outcome = DataCheckJob(request).run()
    if isinstance(outcome, DataCheckFailed):
        raise DataError(outcome.message if outcome.user_error else
                        f"could not check {_names(request)}: unexpected {outcome.message}; "
                        "a file is probably damaged.")
    with _cache_lock:
        _cache[key] = outcome
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return outcome


def _identity(source: str) -> Hashable:
    """What changes when the data does: a file's stat, every file's in a folder."""
    path = os.path.expanduser(source)
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not os.path.isdir(path):
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
    files = []
    for root, _, names in os.walk(path):
        for name in names:
            try:
                info = os.stat(os.path.join(root, name))
            except OSError:
                continue
            files.append((root, name, info.st_size, info.st_mtime_ns))
    return hash(tuple(sorted(files)))


def _names(request: ContentRequest) -> str:
    return " and ".join(os.path.basename(os.path.normpath(s)) or s for s in request.sources)


__all__ = ["DataCheckJob", "check_data_content"]
