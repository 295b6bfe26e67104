"""Run a scaling test in the background: a QThread around `ScaleRunner`.

The runner (core/scale_runner.py) starts one worker process per device count
and blocks on it; here it runs in a QThread, and its callbacks become queued
signals to the GUI thread. `cancel()` kills the running count's process, so
the thread ends within moments.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QThread, Signal, Slot

from mgpu_gui.core.errors import UserError
from mgpu_gui.core.scale_runner import ScaleRequest, ScaleRunner
from mgpu_gui.core.scaling import ScalingReport


class _ScaleJob(QObject):
    """Lives in the controller's QThread; blocks on the runner, never on the GUI."""

    progress = Signal(object)  # ScaleProgress
    report = Signal(object)  # ScalingReport so far, after each count
    failed = Signal(str)  # why the test could not start (bad settings, no such GPU)
    finished = Signal(object)  # the final ScalingReport, or None after `failed`

    def __init__(self, runner: ScaleRunner):
        super().__init__()
        self.runner = runner
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
            self.failed.emit(f"The scaling test failed unexpectedly: {type(error).__name__}: "
                             f"{error}")
        self.finished.emit(report)
        QThread.currentThread().quit()


class ScalingController(QObject):
    """Runs one scaling test at a time in the background."""

    progress = Signal(object)
    report = Signal(object)
    failed = Signal(str)
    finished = Signal(object)

    def __init__(self, parent: QObject | None = None, *, runner_factory=ScaleRunner):
        super().__init__(parent)
        self.runner_factory = runner_factory  # tests pass one that starts a fake child
        self._runner: ScaleRunner | None = None
        self._thread: QThread | None = None
        self._job: _ScaleJob | None = None

    def is_running(self) -> bool:
        return self._thread is not None

    def start(self, request: ScaleRequest) -> None:
        if self.is_running():
            raise RuntimeError("a scaling test is already running")
        self._runner = self.runner_factory(request)
        self._job = _ScaleJob(self._runner)
        self._thread = QThread(self)
        self._job.moveToThread(self._thread)
        self._job.progress.connect(self.progress)
        self._job.report.connect(self.report)
        self._job.failed.connect(self.failed)
        self._job.finished.connect(self._on_finished)
        self._thread.started.connect(self._job.run)
        self._thread.start()

    def cancel(self) -> None:
        """Kill the running count's process; the counts after it do not start."""
        if self._runner is not None:
            self._runner.cancel()

    def shutdown(self) -> None:
        """Cancel and wait for the thread (closing the dialog): the running child is
        killed, so the wait is short (at most the planning, which reads file headers)."""
        if self._thread is None:
            return
        self.cancel()
        self._release()

    def _on_finished(self, report: ScalingReport | None) -> None:
        self._release()
        self.finished.emit(report)

    def _release(self) -> None:
        if self._thread is not None:
            self._thread.wait()  # the job quit it (or the cancel ends it): returns soon
            self._thread.deleteLater()
        if self._job is not None:
            self._job.deleteLater()
        self._thread = self._job = self._runner = None
