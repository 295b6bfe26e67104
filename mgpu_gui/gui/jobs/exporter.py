"""Write a model file in the background: a run's export, or a legacy wrapper unwrapped.

TensorFlow runs in the export child (core/tools/export_job.py), never in the GUI;
a QThread waits on it and hands its typed outcome back to the GUI thread. A
child that cannot start, dies or is cancelled ends the same way: `finished`
with a message, and the exporter is free for the next export.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal
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


class _ExportThread(QThread):
    """Runs one export job; `ended` reaches the GUI thread queued."""

    ended = Signal(object)  # the job's ExportOutcome

    def __init__(self, job: ExportJob, parent: QObject):
        super().__init__(parent)
        self.job = job

    def run(self) -> None:
        self.ended.emit(self.job.run())


class ModelExporter(QObject):
    """Runs one export child at a time and reports its one-line result."""

    finished = Signal(bool, str)  # ok, message for the user

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._thread: _ExportThread | None = None

    def is_running(self) -> bool:
        return self._thread is not None

    def export(self, source: Path, target: Path, fmt: str,
               mode: ExportMode = ExportMode.EXPORT) -> None:
        if self._thread is not None:
            raise RuntimeError("an export is already running")
        request = ExportRequest(mode, Path(source).absolute(), Path(target).absolute(), fmt)
        thread = _ExportThread(ExportJob(request), self)
        thread.ended.connect(self._ended)
        self._thread = thread
        thread.start()

    def cancel(self) -> None:
        """Kill the running child and wait for its thread (the window is closing)."""
        if self._thread is not None:
            self._thread.job.cancel()
            self._thread.wait(5000)

    def _ended(self, outcome: ExportOutcome) -> None:
        thread, self._thread = self._thread, None
        assert thread is not None
        thread.wait()
        thread.deleteLater()
        if isinstance(outcome, ExportDone):
            self.finished.emit(True, done_line(thread.job.request.mode, outcome))
        else:
            self.finished.emit(False, failed_text(outcome))
