"""A cell of the confusion matrix: its samples as pictures, and one of them larger.

Pictures when the samples are pictures (image files, 2-D or 3-D arrays), drawn
from the user's data in a child as they come, most confident first: in an
off-diagonal cell the worst mistakes lead. A table lists them otherwise, and
when the data can no longer be read. Clicking a picture opens it larger with
the model's five most probable classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLayout,
    QListView,
    QListWidget,
    QListWidgetItem,
    QStackedWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.evaluation.metrics import samples_in_cell, top_classes
from mgpu_gui.core.evaluation.samples import DrawRequest, SampleOrigins
from mgpu_gui.gui.jobs.sample_images import SampleImagesLoader
from mgpu_gui.gui.widgets.probability_bars import ProbabilityBars
from mgpu_gui.gui.widgets.tables import read_only_table

MAX_DRAWN = 200  # pictures per cell; the title says when a cell has more
THUMB_PX = 64
LARGE_PX = 320
SAMPLE_ROLE = Qt.ItemDataRole.UserRole


@dataclass(frozen=True, eq=False)
class Predictions:
    """Every evaluated sample: its label, the model's output, where it came from."""

    file: Path  # the predictions file (its samples' origins are read from it in the child)
    labels: np.ndarray  # a classifier's class ids, else the targets
    outputs: np.ndarray  # one row per sample: a classifier's probabilities
    origins: SampleOrigins | None  # None: evaluated before origins were kept
    names: tuple[str, ...]  # the classes (none for a model that does not classify)
    split: str  # "test" or "validation"

    def caption(self, sample: int) -> str:
        """Sample `sample` in words: its number, and its file or array row when known."""
        where = f" ({self.origins.describe(sample)})" if self.origins is not None else ""
        return f"Sample #{sample}{where}"


class CellSamples(QWidget):
    sample_chosen = Signal(int)  # a listed (table) sample was clicked

    def __init__(self, predictions: Predictions, parent: QWidget | None = None):
        super().__init__(parent)
        self.predictions = predictions
        self.title = QLabel("Click a cell of the matrix to see its samples.", self)
        self.title.setWordWrap(True)
        self.grid = QListWidget(self)
        self.grid.setViewMode(QListView.ViewMode.IconMode)
        self.grid.setResizeMode(QListView.ResizeMode.Adjust)
        self.grid.setMovement(QListView.Movement.Static)
        self.grid.setIconSize(QSize(THUMB_PX, THUMB_PX))
        self.grid.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.grid.setAccessibleName("Samples of the selected cell, most confident first")
        self.grid.itemActivated.connect(self._open)
        self.grid.itemClicked.connect(self._open)
        self.table = read_only_table(("Sample", "True", "Predicted", "Confidence"),
                                     "Samples of the selected cell, most confident first")
        self.table.cellClicked.connect(
            lambda row, _column: self.sample_chosen.emit(int(self.table.item(row, 0).text())))
        self.pages = QStackedWidget(self)
        self.pages.addWidget(self.table)
        self.pages.addWidget(self.grid)
        origins = predictions.origins
        self.pages.setCurrentWidget(  # empty until a cell is clicked: the page it will fill
            self.grid if origins is not None and origins.drawable else self.table)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.pages, 1)
        self.loader = SampleImagesLoader(self)
        self.loader.drawn.connect(self._drawn)
        self.loader.failed.connect(self._not_drawn)
        self.large: SampleDialog | None = None
        self.shown: np.ndarray = np.array([], dtype=np.int64)  # the cell's samples, in order

    def show_cell(self, true: int, predicted: int) -> None:
        p = self.predictions
        self.shown = samples_in_cell(p.labels, p.outputs, true, predicted)
        words = (f"True {p.names[true]}, predicted {p.names[predicted]}: {len(self.shown)} "
                 f"sample(s) of the {p.split} split, most confident first")
        drawn = self.shown[:MAX_DRAWN]
        if p.origins is None or not p.origins.drawable or not len(drawn):
            self.title.setText(words if p.origins is not None or not len(drawn) else
                               f"{words} (evaluate again to see them as pictures)")
            self._fill_table()
            return
        more = len(self.shown) - len(drawn)
        self.title.setText(words + (f"; the first {len(drawn)} drawn, {more:,} more" if more
                                    else ""))
        self.grid.clear()
        for sample in drawn:
            self.grid.addItem(self._item(int(sample), true, predicted))
        self.grid.setGridSize(self._grid_size())
        self.pages.setCurrentWidget(self.grid)
        self.loader.load(DrawRequest(str(p.file), tuple(int(s) for s in drawn),
                                     round(THUMB_PX * self.devicePixelRatioF())))

    def shutdown(self) -> None:
        self.loader.shutdown()
        if self.large is not None:
            self.large.close()

    def _item(self, sample: int, true: int, predicted: int) -> QListWidgetItem:
        p = self.predictions
        confidence = float(p.outputs[sample, predicted])
        item = QListWidgetItem(f"{p.names[true]} → {p.names[predicted]}\n{confidence:.1%}")
        item.setData(SAMPLE_ROLE, sample)
        item.setToolTip(f"{p.caption(sample)}: true {p.names[true]}, predicted "
                        f"{p.names[predicted]} ({confidence:.1%})")
        item.setTextAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        return item

    def _grid_size(self) -> QSize:
        metrics = self.grid.fontMetrics()
        widest = max((metrics.horizontalAdvance(self.grid.item(i).text().split("\n")[0])
                      for i in range(self.grid.count())), default=0)
        width = min(max(THUMB_PX, widest) + 12, 3 * THUMB_PX)
        return QSize(width, THUMB_PX + 2 * metrics.height() + 12)

    def _drawn(self, first: int, images: list[QImage]) -> None:
        for offset, image in enumerate(images):
            item = self.grid.item(first + offset)
            if item is None:
                continue
            if image.isNull():
                item.setText(item.text() + "\n(cannot be decoded)")
                continue
            pixmap = QPixmap.fromImage(image)
            pixmap.setDevicePixelRatio(self.devicePixelRatioF())
            item.setIcon(pixmap)

    def _not_drawn(self, message: str) -> None:
        """The data cannot be read any more: list the samples instead, and say why."""
        self.title.setText(f"{self.title.text()}. Not drawn: {message}")
        self._fill_table()

    def _fill_table(self) -> None:
        p = self.predictions
        self.table.setRowCount(len(self.shown))
        for r, sample in enumerate(self.shown):
            predicted = int(p.outputs[sample].argmax())
            values = (str(int(sample)), p.names[int(p.labels[sample])], p.names[predicted],
                      f"{float(p.outputs[sample, predicted]):.1%}")
            for c, value in enumerate(values):
                self.table.setItem(r, c, QTableWidgetItem(value))
        self.pages.setCurrentWidget(self.table)

    def _open(self, item: QListWidgetItem) -> None:
        sample = int(item.data(SAMPLE_ROLE))
        if self.large is None:
            self.large = SampleDialog(self.predictions, self.window())
            self.large.finished.connect(self._large_closed)
        self.large.show_sample(sample)
        self.large.show()
        self.large.raise_()

    def _large_closed(self) -> None:
        self.large = None


class SampleDialog(QDialog):
    """One sample, larger, with the model's five most probable classes."""

    def __init__(self, predictions: Predictions, parent: QWidget | None = None):
        super().__init__(parent)
        self.predictions = predictions
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.picture = QLabel(self)
        self.picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.picture.setMinimumSize(LARGE_PX, LARGE_PX)
        self.picture.setAccessibleName("The sample, larger")
        self.top = ProbabilityBars("", self)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.close)
        self.top.setMinimumWidth(LARGE_PX * 3 // 4)
        side = QVBoxLayout()
        side.addWidget(self.top)
        side.addStretch(1)
        side.addWidget(buttons)
        layout = QHBoxLayout(self)  # side by side: the whole picture fits a 720-pixel screen
        layout.setSizeConstraint(QLayout.SizeConstraint.SetMinimumSize)
        layout.addWidget(self.picture, 1)
        layout.addLayout(side)
        self.loader = SampleImagesLoader(self)
        self.loader.drawn.connect(self._drawn)
        self.loader.failed.connect(self.picture.setText)
        self.sample = -1

    def show_sample(self, sample: int) -> None:
        p = self.predictions
        self.sample = sample
        self.setWindowTitle(p.caption(sample))
        self.picture.setPixmap(QPixmap())
        self.picture.setText("Drawing…")
        true = p.names[int(p.labels[sample])]
        self.top.show_top(f"{p.caption(sample)} of the {p.split} split: true {true}; the "
                          "model's most probable classes:",
                          top_classes(p.outputs[sample], p.names))
        self.loader.load(DrawRequest(str(p.file), (sample,),
                                     round(LARGE_PX * self.devicePixelRatioF())))

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.loader.shutdown()
        super().closeEvent(event)

    def _drawn(self, _first: int, images: list[QImage]) -> None:
        if images[0].isNull():
            self.picture.setText("This sample's file cannot be decoded any more.")
            return
        pixmap = QPixmap.fromImage(images[0])
        pixmap.setDevicePixelRatio(self.devicePixelRatioF())
        self.picture.setPixmap(pixmap)


__all__ = ["CellSamples", "Predictions", "SampleDialog"]
