"""Samples as thumbnails, one row per class: its name, then its samples side by side.

One painted widget rather than a label per picture: a hundred labels cost the GUI
thread tens of milliseconds to create, lay out and paint, this a few. Only the
rows in view are painted; a thumbnail's tooltip names its class and sample, and
the classes with their samples are the accessible description.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QHelpEvent, QImage, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

PAD = 6
NAME_WIDTH = 120  # the most a class name beside its samples takes; elided beyond


@dataclass(frozen=True)
class ThumbnailRow:
    name: str  # the class
    images: tuple[QImage, ...]
    captions: tuple[str, ...]  # per image: what it is (a file name, "sample 17")


class ThumbnailGrid(QWidget):
    def __init__(self, name: str, cell: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName(name)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.cell = cell  # a thumbnail's longer side, in pixels
        self.rows: tuple[ThumbnailRow, ...] = ()
        self.name_width = 0  # the names' column: the longest name, up to NAME_WIDTH

    def set_rows(self, rows: Sequence[ThumbnailRow]) -> None:
        self.rows = tuple(rows)
        metrics = self.fontMetrics()
        self.name_width = min(NAME_WIDTH, max(
            (metrics.horizontalAdvance(row.name) for row in self.rows), default=0))
        self.setAccessibleDescription("; ".join(
            f"{row.name}: {', '.join(row.captions)}" for row in self.rows))
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        columns = max((len(row.images) for row in self.rows), default=0)
        return QSize(self.name_width + PAD + columns * (self.cell + PAD),
                     len(self.rows) * self._row_height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(self.name_width + self.cell + 2 * PAD, self.sizeHint().height())

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        if not self.rows:
            return
        painter = QPainter(self)
        painter.setPen(self.palette().color(QPalette.ColorRole.Text))
        metrics = self.fontMetrics()
        height = self._row_height()
        first = max(0, event.rect().top() // height)
        last = min(len(self.rows), event.rect().bottom() // height + 1)
        for index in range(first, last):
            row, top = self.rows[index], index * height
            name = row.name
            if metrics.horizontalAdvance(name) > self.name_width:
                name = metrics.elidedText(name, Qt.TextElideMode.ElideMiddle, self.name_width)
            painter.drawText(QRect(0, top, self.name_width, height),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, name)
            for column, image in enumerate(row.images):
                x, y = self._cell_origin(index, column)
                # Centred in its cell: samples of different shapes line up by their middles.
                painter.drawImage(QPoint(x + (self.cell - image.width()) // 2,
                                         y + (self.cell - image.height()) // 2), image)
        painter.end()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            found = self._at(event.pos())
            if found is None:
                QToolTip.hideText()
            else:
                row = self.rows[found[0]]
                QToolTip.showText(event.globalPos(),
                                  f"{row.name}: {row.captions[found[1]]}", self)
            return True
        return super().event(event)

    def _row_height(self) -> int:
        return max(self.cell, self.fontMetrics().height()) + PAD

    def _cell_origin(self, row: int, column: int) -> tuple[int, int]:
        return (self.name_width + PAD + column * (self.cell + PAD),
                row * self._row_height() + PAD // 2)

    def _at(self, pos: QPoint) -> tuple[int, int] | None:
        """(row, column) of the thumbnail under `pos`, if any."""
        row = pos.y() // self._row_height()
        column = (pos.x() - self.name_width - PAD) // (self.cell + PAD)
        if not 0 <= row < len(self.rows) or pos.x() < self.name_width + PAD:
            return None
        return (row, column) if 0 <= column < len(self.rows[row].images) else None
