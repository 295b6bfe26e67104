"""A model's most probable classes as labelled bars, under a line saying for what."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QGridLayout, QLabel, QProgressBar, QVBoxLayout, QWidget

BAR_STEPS = 1000


class ProbabilityBars(QWidget):
    def __init__(self, title: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = QLabel(title, self)
        self.title.setWordWrap(True)
        self.bars = QGridLayout()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addLayout(self.bars)

    def show_top(self, title: str, top: Sequence[tuple[str, float]]) -> None:
        """`top`: (class, probability), most probable first."""
        self.title.setText(title)
        while self.bars.count():
            item = self.bars.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        for r, (name, probability) in enumerate(top):
            bar = QProgressBar(self)
            bar.setRange(0, BAR_STEPS)
            bar.setValue(round(probability * BAR_STEPS))
            bar.setFormat(f"{probability:.1%}")
            bar.setAccessibleName(f"{name}: {probability:.1%}")
            self.bars.addWidget(QLabel(name, self), r, 0)
            self.bars.addWidget(bar, r, 1)

    def show_message(self, text: str) -> None:
        self.show_top(text, [])


__all__ = ["ProbabilityBars"]
