"""Run a core child job (export, model probe, TensorFlow facts) off the GUI thread.

A job (`core.tools`: `ExportJob`, `ModelProbeJob`, `TfFactsJob`) runs one child
through `ChildProcesses` and returns its typed outcome, never raising for what
the child does: a child that cannot start or dies already ends in a failure
outcome there. This adapter runs the job in a QThread and hands the outcome to
the GUI thread (`finished`, queued). A newer `start` cancels the older job (its
child is killed); a cancelled job's outcome is dropped, so only the latest
request is ever answered. A job that reports partial results as it goes (the Data
view's stages, a cell's pictures, the augmentation preview's rows) is started with
`start_reporting`: its results arrive as `reported`, in order and before
`finished`, and a cancelled job's are dropped the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import QObject, Qt, QThread, Signal

SHUTDOWN_WAIT_MS = 5000  # a killed child's thread ends within milliseconds


class ChildJob(Protocol):
    def run(self) -> object: ...

    def cancel(self) -> None: ...


class _JobThread(QThread):
    ended = Signal(object, object)  # this thread, the job's outcome

    def __init__(self, job: ChildJob, token: object, parent: QObject):
        super().__init__(parent)
        self.job = job
        self.token = token  # what its partial results carry

    def run(self) -> None:
        self.ended.emit(self, self.job.run())


class ChildJobRunner(QObject):
    """One child job at a time; `finished(outcome)` for the latest, uncancelled one."""

    started = Signal()
    reported = Signal(object)  # a partial result of the latest job (`start_reporting`)
    finished = Signal(object)  # the job's typed outcome
    _partial = Signal(object, object)  # the job's token, a partial result: from its thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread: _JobThread | None = None
        self._retired: list[_JobThread] = []  # cancelled, their threads not yet ended
        self._partial.connect(self._report, Qt.ConnectionType.QueuedConnection)

    def is_running(self) -> bool:
        return self._thread is not None

    def start(self, job: ChildJob) -> None:
        """Run `job`; a job still running is cancelled and its outcome dropped."""
        self._start(job, None)

    def start_reporting(self, make_job: Callable[[Callable[[object], None]], ChildJob]) -> None:
        """Like `start`, for a job built by `make_job(report)` whose thread calls `report`
        with each partial result: each arrives as `reported` on the GUI thread while the
        job is the latest, uncancelled one."""
        token = object()
        self._start(make_job(lambda part: self._partial.emit(token, part)), token)

    def _start(self, job: ChildJob, token: object) -> None:
        self.cancel()
        thread = _JobThread(job, token, self)
        thread.ended.connect(self._ended, Qt.ConnectionType.QueuedConnection)
        self._thread = thread
        thread.start()
        self.started.emit()

    def cancel(self) -> None:
        """Kill the running job's child without waiting; its outcome is never reported."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._retired.append(thread)
            thread.job.cancel()

    def shutdown(self) -> None:
        """Cancel, and wait (bounded) for every job's thread: the window is closing."""
        self.cancel()
        for thread in self._retired:
            thread.wait(SHUTDOWN_WAIT_MS)

    def _report(self, token: object, part: object) -> None:
        if self._thread is not None and token is self._thread.token:
            self.reported.emit(part)

    def _ended(self, thread: _JobThread, outcome: object) -> None:
        thread.wait()
        thread.deleteLater()
        if thread is not self._thread:  # cancelled: stale
            if thread in self._retired:
                self._retired.remove(thread)
            return
        self._thread = None
        self.finished.emit(outcome)
