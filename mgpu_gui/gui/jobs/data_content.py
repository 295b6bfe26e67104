"""The data check (every value and image read), kept in step with the run setup.

Reading a dataset in full takes seconds, so it is no instant check: the run
setup asks `DataContentCheck.follow` after each check whose files were read
without a problem, and the check runs in its child (`core.children.data_check`,
the same one that checks the data when a run starts, which then answers from
its cache) on a `ChildJobRunner` thread. When the data, its files or what makes
the run a classifier change, the running check is killed and its answer
withdrawn at once; a problem it finds becomes the Data field's problem.
"""

from __future__ import annotations

from collections.abc import Hashable

from PySide6.QtCore import QObject, Qt, Signal

from mgpu_gui.core.children.data_check import DataCheckJob, DataCheckOutcome
from mgpu_gui.core.datasets.content_request import ContentRequest
from mgpu_gui.core.events import DataCheckFailed, DataCheckProgress
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.jobs.setup_check import file_stamp


def content_key(request: ContentRequest) -> Hashable:
    """The request and its files' stamps (a folder's own: its listing is the child's job)."""
    return request, tuple(file_stamp(source) for source in request.sources)


class DataContentCheck(QObject):
    """The data check's lifecycle for the run setup."""

    progress = Signal(str)  # "Checking the data: x_train of d.npz, 40%…", or "" when done
    finished = Signal()  # a check answered: check again, `problem()` may have changed
    _progressed = Signal(object, object)  # key, DataCheckProgress: from the job's thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runner = ChildJobRunner(self)
        self._key: Hashable = None  # the request the latest check was started for
        self._result: DataCheckOutcome | None = None
        self.runner.finished.connect(self._finished)
        self._progressed.connect(self._show_progress, Qt.ConnectionType.QueuedConnection)

    def follow(self, request: ContentRequest | None) -> None:
        """Check `request` unless it was checked already (None: nothing to check now); a
        changed request withdraws the answer to the old one at once."""
        if request is not None and not request.reads_files:
            request = None
        key = None if request is None else content_key(request)
        if key == self._key:
            return
        self.runner.cancel()  # a cancelled check's outcome is never reported
        self._key, self._result = key, None
        self.progress.emit("")
        if request is not None:
            self.runner.start(DataCheckJob(
                request, on_progress=lambda event: self._progressed.emit(key, event)))

    def is_running(self) -> bool:
        return self.runner.is_running()

    def problem(self) -> str | None:
        """The Data field's problem the latest check found (None: none, or not known yet)."""
        if isinstance(self._result, DataCheckFailed):
            return self._result.message
        return None

    def shutdown(self) -> None:
        self.runner.shutdown()

    def _show_progress(self, key: Hashable, event: DataCheckProgress) -> None:
        if key == self._key and self.runner.is_running():
            share = f", {event.done * 100 // max(event.total, 1)} %" if event.total else ""
            self.progress.emit(f"Checking the data: {event.what}{share}…")

    def _finished(self, result: DataCheckOutcome) -> None:
        self._result = result
        self.progress.emit("")
        self.finished.emit()
