"""The model probe: checks that need TensorFlow, run in a short-lived child process.

A `.py` builder's shapes or a model summary need TensorFlow, which never loads
in the GUI process; `python -m mgpu_gui.processes.model_probe` does the work and writes its
result to a file, so user code printing to stdout cannot corrupt it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.tools.model_probe import probe_command, read_result


class ModelProbe(QObject):
    """Runs `python -m mgpu_gui.processes.model_probe` in a QProcess; one at a time.

    `start` kills a probe still running; `finished` carries the probe's result
    dict (or an `ok: False` dict saying why the probe itself failed).
    """

    started = Signal()
    finished = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._process: QProcess | None = None
        self._result_path: Path | None = None
        self._output = bytearray()
        self._retired: list[QProcess] = []  # killed, not yet reaped
        self._count = 0
        self._folder: Path | None = None

    def is_running(self) -> bool:
        return self._process is not None

    def start(self, config: RunConfig) -> None:
        self.cancel()
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="mgpu-probe-"))
        self._count += 1
        config_path = self._folder / f"config-{self._count}.json"
        self._result_path = self._folder / f"result-{self._count}.json"
        config_path.write_text(config.to_json(), encoding="utf-8")
        program, *args = probe_command(config_path, self._result_path)
        process = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("CUDA_VISIBLE_DEVICES", "")  # the probe must never take GPU memory
        env.insert("TF_CPP_MIN_LOG_LEVEL", "2")
        process.setProcessEnvironment(env)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        process.readyReadStandardOutput.connect(lambda: self._read(process))
        process.finished.connect(lambda code, _status: self._finished(process, code))
        process.errorOccurred.connect(lambda error: self._error(process, error))
        self._output = bytearray()
        self._process = process
        process.start(program, args)
        self.started.emit()

    def cancel(self) -> None:
        """Kill a running probe without waiting; its result is never reported."""
        process, self._process = self._process, None
        if process is None:
            return
        self._retired.append(process)
        process.finished.connect(lambda *_: self._reaped(process))
        process.kill()

    def _reaped(self, process: QProcess) -> None:
        if process in self._retired:
            self._retired.remove(process)
        process.deleteLater()

    def shutdown(self) -> None:
        """Kill a running probe and wait for it (bounded), then remove the temp files."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            self._retired.append(process)
        for old in self._retired:
            old.kill()
            old.waitForFinished(3000)  # SIGKILL: returns within milliseconds
            old.deleteLater()
        self._retired.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _read(self, process: QProcess) -> None:
        # Always drained: a full pipe would stall the child. Only the tail is kept.
        self._output += bytes(process.readAllStandardOutput().data())
        del self._output[:-4000]

    def _error(self, process: QProcess, error: QProcess.ProcessError) -> None:
        if error is QProcess.ProcessError.FailedToStart and process is self._process:
            self._process = None
            process.deleteLater()
            self.finished.emit({"ok": False, "error_type": "FailedToStart",
                                "message": f"The model check could not start: "
                                           f"{process.errorString()}"})

    def _finished(self, process: QProcess, exit_code: int) -> None:
        if process is not self._process:
            return
        self._read(process)
        self._process = None
        process.deleteLater()
        result = self._load_result(exit_code)
        self.finished.emit(result)

    def _load_result(self, exit_code: int) -> dict[str, Any]:
        return read_result(self._result_path, exit_code,
                           self._output.decode("utf-8", "replace"))
