"""Runs the app did not see end: found at start-up, offered for a resume in a banner.

`StoreReconciler` runs `RunStore.reconcile()` on a plain thread with a
connection of its own (replaying a long run's events.jsonl takes a while), and
reports the interrupted runs back on the GUI thread, through a private queued signal
that drops what arrives after `stop()` (the window closed while a long replay went on:
the thread may outlive the window, and must neither reach it nor raise). `ResumeOffer` is the
non-modal banner over the plots that offers to resume the most recent one.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from mgpu_gui.core.runs.store import RunRecord, RunStore
from mgpu_gui.gui.widgets.runs_table import short_name


class StoreReconciler(QObject):
    """`RunStore(path).reconcile()` in the background; one pass per `start()`."""

    done = Signal(list)  # the RunRecords found interrupted, on the GUI thread
    failed = Signal(str)
    _result = Signal(object)  # from the thread: the records, or what went wrong

    def __init__(self, path: Path, parent: QObject | None = None):
        super().__init__(parent)
        self.path = path
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._result.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.is_running() or self._stopped:
            return
        self._thread = threading.Thread(target=self._run, name="store-reconcile", daemon=True)
        self._thread.start()

    def wait(self, timeout_s: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout_s)
        return not self.is_running()

    def stop(self, timeout_s: float) -> bool:
        """Nothing is delivered after this; waits up to `timeout_s` for the pass under way
        (a pass still going after that ends on its own connection, unheard)."""
        self._stopped = True
        return self.wait(timeout_s)

    def _run(self) -> None:
        result: list[RunRecord] | str
        try:
            with RunStore(self.path) as store:
                result = store.reconcile()
        except Exception as error:  # reported, never raised in a thread nobody watches
            result = f"Could not check the run history for interrupted runs: {error}"
        # RuntimeError: this object went with its window (closed during a long replay).
        with contextlib.suppress(RuntimeError):
            self._result.emit(result)

    def _deliver(self, result: list[RunRecord] | str) -> None:
        if self._stopped:  # queued before stop(): the window is closing
            return
        if isinstance(result, str):
            self.failed.emit(result)
        else:
            self.done.emit(result)


def offer_text(records: list[RunRecord]) -> str:
    latest = records[0]
    text = (f"<b>Run “{short_name(latest)}” was interrupted</b> after {latest.epochs_done} of "
            f"{latest.epochs} epochs: the app closed before it ended. Resume continues it at "
            f"epoch {latest.epochs_done + 1}.")
    others = len(records) - 1
    if others:
        text += (f" {others} other interrupted run{'s are' if others > 1 else ' is'} "
                 f"in the Runs tab.")
    return text


class ResumeOffer(QFrame):
    """A banner: 'run X was interrupted' with Resume, Show runs and Dismiss."""

    resume_requested = Signal(int)  # run id
    show_runs_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("resumeOffer")
        self.setStyleSheet("#resumeOffer { background: #e8f0fe; border: 1px solid #aecbfa; "
                           "border-radius: 4px; } #resumeOffer QLabel { color: #174ea6; }")
        self.setAccessibleName("Interrupted run")
        self.message = QLabel(wordWrap=True)
        self.resume_button = QPushButton("Resume")
        self.resume_button.setAccessibleName("Resume the interrupted run")
        self.resume_button.setToolTip("Continue the run from its last complete epoch")
        self.runs_button = QPushButton("Show runs")
        self.runs_button.setAccessibleName("Show the Runs tab")
        self.runs_button.setToolTip("All runs, to resume, compare or delete them")
        dismiss = QPushButton("Dismiss")
        dismiss.setAccessibleName("Dismiss the interrupted-run notice")
        dismiss.setToolTip("Hide this notice; the run stays resumable from the Runs tab")
        layout = QHBoxLayout(self)
        layout.addWidget(self.message, 1)
        for button in (self.resume_button, self.runs_button, dismiss):
            layout.addWidget(button)
        self.resume_button.clicked.connect(self._resume)
        self.runs_button.clicked.connect(self.show_runs_requested)
        dismiss.clicked.connect(self.dismiss)
        self.records: list[RunRecord] = []
        self.hide()

    def offer(self, records: list[RunRecord]) -> None:
        """Offer the most recent of `records` (hidden when there are none)."""
        self.records = sorted(records, key=lambda r: r.started or r.created, reverse=True)
        if not self.records:
            self.dismiss()
            return
        self.message.setText(offer_text(self.records))
        self.resume_button.setEnabled(self.records[0].folder_exists)
        self.show()

    def run_id(self) -> int | None:
        return self.records[0].id if self.records else None

    def set_resume_enabled(self, enabled: bool) -> None:
        self.resume_button.setEnabled(enabled and bool(self.records)
                                      and self.records[0].folder_exists)

    def forget(self, run_ids: set[int]) -> None:
        """These runs were resumed or deleted: offer the next one, if any."""
        if self.records and any(r.id in run_ids for r in self.records):
            self.offer([r for r in self.records if r.id not in run_ids])

    def dismiss(self) -> None:
        self.records = []
        self.hide()

    def _resume(self) -> None:
        if self.records:
            self.resume_requested.emit(self.records[0].id)
