"""Run a blocking core runner in the background: a QThread around `runner.run()`.

A runner (core/tools/scaling_runner.py's `ScaleRunner`, core/tools/batch_finder.py's
`BatchFinder`) starts one worker process at a time and blocks on it; here it
runs in a QThread, and its `on_progress` / `on_report` callbacks become queued
signals to the GUI thread. `cancel()` calls the runner's `cancel()`, which kills
its running process, so the thread ends within moments.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QWidget,
)

from mgpu_gui.core.config import DEMO
from mgpu_gui.core.errors import UserError
from mgpu_gui.gui.jobs.thread_end import end_in_thread


class _RunnerJob(QObject):
    """Lives in the controller's QThread; blocks on the runner, never on the GUI."""

    progress = Signal(object)  # the runner's progress object
    report = Signal(object)  # the report so far, after each step
    failed = Signal(str)  # why it could not start (bad settings, no such GPU)
    finished = Signal(object)  # the final report, or None after `failed`

    def __init__(self, runner: Any, what: str):
        super().__init__()
        self.runner = runner
        self.what = what
        runner.on_progress = self.progress.emit
        runner.on_report = self.report.emit

    @Slot()
    def run(self) -> None:
        report = None
        try:
            report = self.runner.run()
        except UserError as error:
            self.failed.emit(str(error))
        except Exception as error:  # reported, never lost in a thread nobody watches
            self.failed.emit(f"The {self.what} failed unexpectedly: {type(error).__name__}: "
                             f"{error}")
        self.finished.emit(report)
        end_in_thread(self)


class BackgroundJob(QObject):
    """Runs one runner at a time in the background.

    `factory(request)` makes the runner (tests pass one that starts a fake child);
    `what` names the job in messages ("scaling test").
    """

    progress = Signal(object)
    report = Signal(object)
    failed = Signal(str)
    finished = Signal(object)

    def __init__(self, parent: QObject | None = None, *, factory: Callable[[Any], Any],
                 what: str):
        super().__init__(parent)
        self.factory = factory
        self.what = what
        self._runner: Any = None
        self._thread: QThread | None = None
        self._job: _RunnerJob | None = None

    def is_running(self) -> bool:
        return self._thread is not None

    def start(self, request: Any) -> None:
        if self.is_running():
            raise RuntimeError(f"a {self.what} is already running")
        self._runner = self.factory(request)
        self._job = _RunnerJob(self._runner, self.what)
        self._thread = QThread(self)
        self._job.moveToThread(self._thread)
        self._job.progress.connect(self.progress)
        self._job.report.connect(self.report)
        self._job.failed.connect(self.failed)
        self._job.finished.connect(self._on_finished)
        self._thread.started.connect(self._job.run)
        self._thread.start()

    def cancel(self) -> None:
        """Kill the runner's running process; nothing after it starts."""
        if self._runner is not None:
            self._runner.cancel()

    def shutdown(self) -> None:
        """Cancel and wait for the thread (closing a dialog): the running child is
        killed, so the wait is short (at most the planning, which reads file headers)."""
        if self._thread is None:
            return
        self.cancel()
        self._release()

    def _on_finished(self, report: Any) -> None:
        self._release()
        self.finished.emit(report)

    def _release(self) -> None:
        if self._thread is not None:
            self._thread.wait()  # the job quit it (or the cancel ends it): returns soon
            self._thread.deleteLater()
        if self._job is not None:
            self._job.deleteLater()
        self._thread = self._job = self._runner = None


class JobDialog(QDialog):
    """A dialog that runs one `BackgroundJob`: its signals go to the subclass's
    `_on_progress`, `show_report`, `_on_failed` and `_on_finished`, and closing the
    dialog (or Escape) shuts the job down (kills its running process)."""

    def __init__(self, parent: QWidget | None, title: str, controller: BackgroundJob):
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setAccessibleName(title)
        self.controller = controller
        controller.setParent(self)
        controller.progress.connect(self._on_progress)
        controller.report.connect(self.show_report)
        controller.failed.connect(self._on_failed)
        controller.finished.connect(self._on_finished)

    CANCELLING = "Cancelling: the running process is being stopped…"  # the status meanwhile

    def start(self) -> None:
        raise NotImplementedError

    def cancel(self) -> None:
        if self.controller.is_running():
            self.status.setText(self.CANCELLING)
            self.controller.cancel()

    def is_running(self) -> bool:
        return self.controller.is_running()

    def _run_row(self, start: str, start_name: str, start_tip: str, cancel: str,
                 cancel_name: str, cancel_tip: str, progress_name: str) -> QHBoxLayout:
        """Start and Cancel buttons and a progress bar, as `start_button`, `cancel_button`
        and `progress_bar` (its range is the subclass's)."""
        self.start_button = QPushButton(start)
        self.start_button.setAccessibleName(start_name)
        self.start_button.setToolTip(start_tip)
        self.start_button.setDefault(True)
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton(cancel)
        self.cancel_button.setAccessibleName(cancel_name)
        self.cancel_button.setToolTip(cancel_tip)
        self.cancel_button.clicked.connect(self.cancel)
        self.progress_bar = QProgressBar()
        self.progress_bar.setAccessibleName(progress_name)
        self.progress_bar.setTextVisible(False)
        row = QHBoxLayout()
        row.addWidget(self.start_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.progress_bar, 1)
        return row

    def _on_progress(self, progress: Any) -> None:
        raise NotImplementedError

    def show_report(self, report: Any) -> None:
        raise NotImplementedError

    def _on_failed(self, message: str) -> None:
        raise NotImplementedError

    def _on_finished(self, report: Any) -> None:
        raise NotImplementedError

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        self.controller.shutdown()
        super().closeEvent(event)

    def reject(self) -> None:  # Escape
        self.controller.shutdown()
        super().reject()


# -- widgets both job dialogs build the same way -----------------------------------------
def spin_box(low: int, high: int, value: int, name: str, tip: str) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(low, high)
    spin.setValue(max(low, min(high, value)))
    spin.setAccessibleName(name)
    spin.setToolTip(tip)
    return spin


def labelled_grid(grid: QGridLayout, rows: Sequence[Sequence[tuple[str, QWidget]]],
                  first_row: int = 0) -> None:
    """(label text, widget) pairs, several to a grid row; each label is its widget's buddy
    (its & key focuses the widget), and the widget columns share the spare width."""
    for r, row in enumerate(rows, start=first_row):
        for c, (text, widget) in enumerate(row):
            label = QLabel(text)
            label.setBuddy(widget)
            grid.addWidget(label, r, 2 * c)
            grid.addWidget(widget, r, 2 * c + 1)
    for c in range(max(len(row) for row in rows)):
        grid.setColumnStretch(2 * c + 1, 1)


def source_name(source: str) -> str:
    """A model or data source as a title shows it: the file's name, or 'demo'."""
    return source if source == DEMO else Path(source).name


def error_html(message: str) -> str:
    return f"<span style='color:#b71c1c'>{html.escape(message, quote=False)}</span>"
