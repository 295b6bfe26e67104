"""Write a model file in the background: a run's export, or a legacy wrapper unwrapped.

TensorFlow runs in a child (`mgpu-train export` / `mgpu-train unwrap`), never in the GUI.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QProcess, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from mgpu_gui.core.children.launch import module_command

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
    """Runs `mgpu-train export|unwrap SRC -o OUT` as a child and reports its one-line result."""

    finished = Signal(bool, str)  # ok, message for the user

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._process: QProcess | None = None

    def is_running(self) -> bool:
        return self._process is not None

    def export(self, source: Path, target: Path, fmt: str, command: str = "export") -> None:
        if self._process is not None:
            raise RuntimeError("an export is already running")
        process = QProcess(self)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.SeparateChannels)
        process.finished.connect(self._on_finished)
        self._process = process
        program, *args = module_command("mgpu_gui.cli.main", command, str(source),
                                        "-o", str(target), "--format", fmt)
        process.start(program, args)

    def cancel(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.waitForFinished(5000)

    def _on_finished(self, code: int, status: QProcess.ExitStatus) -> None:
        process, self._process = self._process, None
        assert process is not None
        out = bytes(process.readAllStandardOutput()).decode(errors="replace").strip()
        err = bytes(process.readAllStandardError()).decode(errors="replace").strip()
        process.deleteLater()
        if code == 0 and status == QProcess.ExitStatus.NormalExit:
            self.finished.emit(True, out.splitlines()[-1] if out else "Exported.")
        else:
            message = next((line[len("error: "):] for line in err.splitlines()
                            if line.startswith("error: ")), err[-500:] or "The export failed.")
            self.finished.emit(False, message)
