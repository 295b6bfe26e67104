"""The run history read off the GUI thread: the Runs tab's query grows with the history.

A thread of its own holds its own store connection (`RunStore` is one
connection per thread) and reads every run when asked, with what sets it apart
from the run before it of its name (core/runs/run_differences.py) and each run
folder's size (a walk of every folder: 55 ms for 200 runs of 23 files on 2 busy cores,
cheap beside a 5 s refresh, so nothing is cached). Asking again while a
read is under way folds into one more read after it, and a read that began
before the latest request is not delivered: whoever asks gets rows at least as
new as their request.

It is a plain daemon thread, as the telemetry poller is, with a private queued
signal to the GUI thread and a guard that drops what was queued before
`stop()`: a QThread destroyed while running aborts the whole process (a window
torn down without its shutdown, a failing test), a plain thread cannot.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal

from mgpu_gui.core.runs.disk import measure
from mgpu_gui.core.runs.run_differences import differences, stored_settings
from mgpu_gui.core.runs.store import RunStore

STOP_WAIT_S = 5.0  # a read under way takes milliseconds; a stalled folder walk is left behind


class RunsReader(QObject):
    """Reads the store's runs in a thread of its own; `records` arrive on the GUI thread."""

    # list[RunRecord], newest first; {run id: RunSize | None}; {run id: RunDifference}
    records = Signal(list, object, object)
    failed = Signal(str)  # what went wrong, in words
    _read = Signal(int, object)  # from the thread: (request number, records or message)

    def __init__(self, path: Path, parent: QObject | None = None):
        super().__init__(parent)
        self.path = path
        self._asked = 0  # requests so far; only the GUI thread writes it
        self._stopped = False
        self._wake = threading.Event()
        self._read.connect(self._deliver, Qt.ConnectionType.QueuedConnection)
        self._thread = threading.Thread(target=self._loop, name="runs-reader", daemon=True)
        self._thread.start()

    def request(self) -> None:
        if not self._stopped:
            self._asked += 1
            self._wake.set()

    def stop(self) -> None:
        """End the thread (after the read under way, milliseconds); nothing is delivered
        after this. The GUI thread waits `STOP_WAIT_S` at most: a read stuck in a folder
        walk (a hung network mount) ends on its own, unheard, and closes its connection."""
        self._stopped = True
        self._wake.set()
        self._thread.join(STOP_WAIT_S)

    def _loop(self) -> None:
        store: RunStore | None = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopped:
                    return
                asked = self._asked
                try:
                    store = store or RunStore(self.path)
                    records = store.runs()
                    result: tuple | str = (
                        records, {r.id: measure(r.run_dir) for r in records},
                        differences(records, stored_settings(store.config_texts())))
                except Exception as error:  # a broken or locked store must not break the app
                    result = f"Could not read the run history: {error}"
                # RuntimeError: this object went with its window while the read went on.
                with contextlib.suppress(RuntimeError):
                    self._read.emit(asked, result)
        finally:
            if store is not None:
                store.close()

    def _deliver(self, asked: int, result: tuple | str) -> None:
        if self._stopped or asked != self._asked:  # queued before stop(), or asked again
            return
        if isinstance(result, str):
            self.failed.emit(result)
        else:
            self.records.emit(*result)
