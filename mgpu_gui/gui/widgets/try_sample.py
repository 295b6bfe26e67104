"""Try a sample: drop or pick an image file, or give a sample's number, and see the
model's most probable classes as bars."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.datasets.inspection import IMAGE_SUFFIXES
from mgpu_gui.gui.widgets.probability_bars import ProbabilityBars


class TrySample(QGroupBox):
    file_chosen = Signal(Path)  # an image file to predict
    sample_chosen = Signal(int)  # a sample of the evaluated split, by its number

    def __init__(self, samples: int, parent: QWidget | None = None):
        super().__init__("Try a sample", parent)
        self.setAcceptDrops(True)
        self.setToolTip("Drop an image file here, pick one, or give the number of a sample "
                        "of the evaluated split")
        pick = QPushButton("Pick an image…", self)
        pick.clicked.connect(self._pick)
        self.number = QSpinBox(self)
        self.number.setRange(0, max(samples - 1, 0))
        self.number.setAccessibleName("Sample number")
        show = QPushButton("Show sample", self)
        show.clicked.connect(lambda: self.sample_chosen.emit(self.number.value()))
        self.top = ProbabilityBars("Drop an image file here, or:", self)
        row = QHBoxLayout()
        row.addWidget(pick)
        row.addStretch(1)
        row.addWidget(QLabel("or sample #", self))
        row.addWidget(self.number)
        row.addWidget(show)
        layout = QVBoxLayout(self)
        layout.addWidget(self.top)
        layout.addLayout(row)

    def _pick(self) -> None:
        patterns = " ".join(f"*{suffix}" for suffix in IMAGE_SUFFIXES)
        path, _ = QFileDialog.getOpenFileName(self, "Try an image", "",
                                              f"Images ({patterns})")
        if path:
            self.file_chosen.emit(Path(path))

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 (Qt's name)
        if _image_of(event) is not None:
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        path = _image_of(event)
        if path is not None:
            event.acceptProposedAction()
            self.file_chosen.emit(path)


def _image_of(event: QDragEnterEvent | QDropEvent) -> Path | None:
    urls = event.mimeData().urls()
    if len(urls) == 1 and urls[0].isLocalFile():
        path = Path(urls[0].toLocalFile())
        if path.suffix.lower() in IMAGE_SUFFIXES:
            return path
    return None


__all__ = ["TrySample"]
