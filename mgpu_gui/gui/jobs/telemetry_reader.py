"""A run's device telemetry read from the store off the GUI thread, and followed while
the run goes on.

Whoever supervises the run (this window, another one, the CLI, the queue runner)
writes its telemetry to the store every few seconds; this reader reads the whole
run once when asked to `watch` it, then what is new every `POLL_S` until the run
has ended and nothing more came (its supervisor writes the last samples just
after the worker exits). The shape is `RunsReader`'s: a plain daemon thread with
its own store connection, a private queued signal, and nothing delivered that was
read for an earlier request or after `stop()`.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal

from mgpu_gui.core.runs.lock import is_live
from mgpu_gui.core.runs.storedb import StoreDatabase
from mgpu_gui.core.runs.telemetry_store import RunTelemetry, read_telemetry
from mgpu_gui.gui.jobs.runs_reader import STOP_WAIT_S

POLL_S = 2.0


class TelemetryReader(QObject):
    """`telemetry(run_telemetry, replace)` arrives on the GUI thread for the watched run:
    replace on the first read of a run, then only the samples new since the last."""

    telemetry = Signal(object, bool)
    _read = Signal(int, object, bool)  # from the thread: (request number, telemetry, replace)

    def __init__(self, path: Path, parent: QObject | None = None):
        super().__init__(parent)
        self.path = path
        self._asked = 0  # requests so far; only the GUI thread writes it
        self._run_id: int | None = None
        self._stopped = False
        self._wake = threading.Event()
        self._read.connect(self._deliver, Qt.ConnectionType.QueuedConnection)
        self._thread = threading.Thread(target=self._loop, name="telemetry-reader",
                                        daemon=True)
        self._thread.start()

    def watch(self, run_id: int | None) -> None:
        """Read `run_id`'s telemetry and follow it while it runs; None: no run."""
        if not self._stopped:
            self._run_id = run_id
            self._asked += 1
            self._wake.set()

    def stop(self) -> None:
        """End the thread (after the read under way); nothing is delivered after this. As
        `RunsReader.stop`: the GUI thread waits `STOP_WAIT_S` at most."""
        self._stopped = True
        self._wake.set()
        self._thread.join(STOP_WAIT_S)

    def _loop(self) -> None:
        database: StoreDatabase | None = None
        request, after, following = 0, None, False
        try:
            while True:
                self._wake.wait(POLL_S if following else None)
                self._wake.clear()
                if self._stopped:
                    return
                if self._asked != request:  # a new watch: read the run from the start
                    request, after = self._asked, None
                run_id = self._run_id
                if run_id is None:
                    following = False
                    continue
                try:
                    database = database or StoreDatabase(self.path)
                    read = read_telemetry(database, run_id, after)
                    row = database.db.execute("SELECT status, run_dir FROM runs WHERE id = ?",
                                              (run_id,)).fetchone()
                except Exception:  # a busy or broken store: try again at the next look
                    following = True
                    continue
                running = row is not None and (row["status"] == "running"
                                               or is_live(Path(row["run_dir"])))
                following = running or (after is not None and len(read) > 0)
                if after is None or len(read):
                    # RuntimeError: this object went with its window while the read went on.
                    with contextlib.suppress(RuntimeError):
                        self._read.emit(request, read, after is None)
                after = read.last_t or after
        finally:
            if database is not None:
                database.close()

    def _deliver(self, request: int, read: RunTelemetry, replace: bool) -> None:
        if not self._stopped and request == self._asked:
            self.telemetry.emit(read, replace)
