"""Says when the picked model is a legacy multi-GPU wrapper, and offers to save it unwrapped.

Keras 2's `multi_gpu_model` nested the user's template inside slicing Lambda
towers; such files cannot be reloaded by Keras 3. Training recovers the
template by itself; this notice shows what was found and can write the plain
model (in the export child, verified in a fresh process).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.modelfiles.info import ModelFileInfo
from mgpu_gui.core.tools.export_job import ExportMode
from mgpu_gui.gui.jobs.exporter import ModelExporter, ask_export_target


class WrapperNotice(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Multi-GPU wrapper notice")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        buttons = QHBoxLayout()
        self.label = QLabel(wordWrap=True)
        self.details_button = QPushButton("Details…")
        self.details_button.setAccessibleName("Show the wrapper's structure")
        self.details_button.setToolTip("What was found in the file, and what training will use")
        self.save_button = QPushButton("Save unwrapped model…")
        self.save_button.setAccessibleName("Save unwrapped model")
        self.save_button.setToolTip("Write the plain single-device model (.keras, .h5 or "
                                    "SavedModel), checked by reloading it in a fresh process")
        layout.addWidget(self.label)
        buttons.addWidget(self.details_button)
        buttons.addWidget(self.save_button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        self.exporter = ModelExporter(self)
        self.exporter.finished.connect(self._saved)
        self.details_button.clicked.connect(self.show_details)
        self.save_button.clicked.connect(self.save_unwrapped)
        self.info: ModelFileInfo | None = None
        self.hide()

    def show_for(self, info: ModelFileInfo | None) -> None:
        """Show the notice for a wrapped file; hide it for anything else."""
        self.info = info if info is not None and info.wrapper is not None else None
        if self.info is None:
            self.hide()
            return
        wrapper = self.info.wrapper
        self.label.setText(f"<b>Legacy multi-GPU model</b>: {wrapper.towers[0]} towers around "
                           f"'{wrapper.template_name}'. Training uses the recovered "
                           f"single-device template; no code from the file runs.")
        self.save_button.setEnabled(not self.exporter.is_running())
        self.show()

    def show_details(self) -> None:
        if self.info is None:
            return
        box = QMessageBox(QMessageBox.Icon.Information, "Multi-GPU wrapper",
                          f"{self.info.path.name}: {self.info.wrapper.describe()}.", parent=self)
        box.setInformativeText(
            "Keras 2's multi_gpu_model split each batch over the GPUs with Lambda layers and "
            "joined the results with a Concatenate; the file saved that wrapper, which Keras 3 "
            "cannot load. The template inside is rebuilt from its own config and weights; "
            "optimizer state is not carried over.")
        box.open()

    def save_unwrapped(self, target: tuple[Path, str] | None = None) -> None:
        """Ask where to write the plain model (or take `target`) and write it in a child."""
        if self.info is None or self.exporter.is_running():
            return
        target = target or ask_export_target(self, self.info.path.with_name(
            f"{self.info.path.stem}_unwrapped"), "Save unwrapped model")
        if target is None:
            return
        self.save_button.setEnabled(False)
        self.label.setText(f"Unwrapping to {target[0].name}…")
        self.exporter.export(self.info.path, target[0], target[1], ExportMode.UNWRAP)

    def shutdown(self) -> None:
        self.exporter.cancel()

    def _saved(self, ok: bool, message: str) -> None:
        self.save_button.setEnabled(True)
        prefix = "" if ok else "<b>Could not save the unwrapped model</b>: "
        self.label.setText(prefix + message)
