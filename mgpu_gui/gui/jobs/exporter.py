"""Write a model file in the background: a run's export, or a legacy wrapper unwrapped.

TensorFlow runs in the export child (core/tools/export_job.py), never in the GUI;
a `ChildJobRunner` (gui/jobs/child_job.py) waits on it in a QThread and hands
its typed outcome back to the GUI thread. A child that cannot start or dies
ends the same way: `finished` with a message, and the exporter is free for the
next export. `cancel()` (the window is closing) reports nothing.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from mgpu_gui.core.events import ExportDone
from mgpu_gui.core.tools.export_job import (
    ExportJob,
    ExportMode,
    ExportOutcome,
    ExportRequest,
    done_line,
    failed_text,
)
from mgpu_gui.gui.jobs.child_job import ChildJobRunner

FILTERS = {
    "Keras model (*.keras)": "keras",
    "Legacy HDF5 model (*.h5)": "h5",
    "TensorFlow SavedModel (folder)": "savedmodel",
}
SUFFIXES = {"keras": ".keras", "h5": ".h5", "savedmodel": ""}


def ask_export_target(parent: QWidget, suggested: Path,
                      title: str = "Export model") -> tuple[Path, str] | None:
    """The file (or SavedModel folder) to write and its format, or None when cancelled."""
    path, chosen = QFileDialog.getSaveFileName(
        parent, title, str(suggested.with_suffix(".keras")),
        ";;".join(FILTERS), options=QFileDialog.Option.DontUseNativeDialog)
    if not path:
        return None
    fmt = FILTERS.get(chosen, "keras")
    target = Path(path)
    if fmt == "savedmodel":
        target = target.with_suffix("")
    elif target.suffix.lower() != SUFFIXES[fmt]:
        target = target.with_name(target.name + SUFFIXES[fmt])
    return target, fmt


class ModelExporter(QObject):
    """Runs one export child at a time and reports its one-line result."""

    finished = Signal(bool, str)  # ok, message for the user

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._jobs = ChildJobRunner(self)
        self._jobs.finished.connect(self._ended)
        self._job: ExportJob | None = None  # the running one

    def is_running(self) -> bool:
        return self._jobs.is_running()

    def export(self, source: Path, target: Path, fmt: str,
               mode: ExportMode = ExportMode.EXPORT) -> None:
        if self.is_running():
            raise RuntimeError("an export is already running")
        request = ExportRequest(mode, Path(source).absolute(), Path(target).absolute(), fmt)
        self._job = ExportJob(request)
        self._jobs.start(self._job)

    def cancel(self) -> None:
        """Kill the running child and wait for its thread (the window is closing)."""
        self._jobs.shutdown()

    def _ended(self, outcome: ExportOutcome) -> None:
        assert self._job is not None
        if isinstance(outcome, ExportDone):
            self.finished.emit(True, done_line(self._job.request.mode, outcome))
        else:
            # The input at fault says all in its message; the app's own failure needs the log.
            log = None if outcome.user_error else self._job.log
            self.finished.emit(False, failed_text(outcome, log))
