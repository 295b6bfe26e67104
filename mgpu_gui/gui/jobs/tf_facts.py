"""Asks TensorFlow about this machine in a child process, for the About and doctor dialogs.

`python -m mgpu_gui.processes.tf_facts` imports TensorFlow (a few seconds), lists
what it sees and prints one JSON line; this QObject runs it with QProcess, so
the window never waits and never imports TensorFlow itself.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QProcess, Signal

from mgpu_gui.core.tools.doctor import TfFacts
from mgpu_gui.core.tools.tf_facts import tf_facts_command

STDERR_TAIL = 4000


class TfFactsProbe(QObject):
    """One facts child at a time; `finished(TfFacts)` when it has answered (or failed)."""

    finished = Signal(object)  # TfFacts

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._process: QProcess | None = None
        self._stdout = bytearray()
        self._stderr = bytearray()

    def is_running(self) -> bool:
        return self._process is not None

    def start(self) -> None:
        if self._process is not None:
            return
        program, *args = tf_facts_command()
        process = QProcess(self)
        self._stdout, self._stderr = bytearray(), bytearray()
        # Both pipes drained as data arrive: TensorFlow can log a lot to stderr.
        process.readyReadStandardOutput.connect(
            lambda: self._stdout.extend(bytes(process.readAllStandardOutput().data())))
        process.readyReadStandardError.connect(lambda: self._read_stderr(process))
        process.finished.connect(lambda code, _status: self._finished(process, code))
        process.errorOccurred.connect(lambda error: self._error(process, error))
        self._process = process
        process.start(program, args)

    def shutdown(self) -> None:
        """Kill a running child and wait for it (SIGKILL: milliseconds); nothing is reported."""
        process, self._process = self._process, None
        if process is None:
            return
        process.kill()
        process.waitForFinished(3000)
        process.deleteLater()

    def _read_stderr(self, process: QProcess) -> None:
        self._stderr.extend(bytes(process.readAllStandardError().data()))
        del self._stderr[:-STDERR_TAIL]

    def _error(self, process: QProcess, error: QProcess.ProcessError) -> None:
        if error is QProcess.ProcessError.FailedToStart and process is self._process:
            self._process = None
            process.deleteLater()
            self.finished.emit(TfFacts(error=f"the TensorFlow check could not start: "
                                             f"{process.errorString()}"))

    def _finished(self, process: QProcess, exit_code: int) -> None:
        if process is not self._process:
            return
        self._process = None
        self._stdout.extend(bytes(process.readAllStandardOutput().data()))
        self._read_stderr(process)
        process.deleteLater()
        self.finished.emit(TfFacts.from_output(self._stdout.decode("utf-8", "replace"),
                                               exit_code,
                                               self._stderr.decode("utf-8", "replace")))
