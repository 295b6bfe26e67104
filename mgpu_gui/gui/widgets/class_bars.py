"""Horizontal bars, one row per class: its name, a bar scaled to the largest, the count.

Painted with QPainter from the palette (it follows light and dark at once), only
the rows in view: a thousand classes cost what the visible twenty do. Rows keep
their height and the widget grows downwards, so it goes in a scroll area. The
counts are also its accessible description, and a row's tooltip gives its share.
Counts that are estimates are marked "≈", in the text, description and tooltip.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QRect, QSize, Qt
from PySide6.QtGui import QHelpEvent, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

NAME_WIDTH_MAX = 160  # longer class names are elided
BAR_WIDTH_MIN = 80
PAD = 6
DESCRIBED = 100  # classes named in the accessible description


class ClassBars(QWidget):
    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName(name)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.names: tuple[str, ...] = ()
        self.counts: tuple[int, ...] = ()
        self.exact = 0  # the first `exact` counts are counted, the rest estimated
        self._widest: tuple[str, tuple[str, ...], int] = ("", (), 0)  # font, names, pixels

    def set_counts(self, names: Sequence[str], counts: Sequence[int],
                   exact: int | None = None) -> None:
        """`exact`: how many of the first counts are counted (None: all); the rest are
        estimates."""
        self.names, self.counts = tuple(names), tuple(int(c) for c in counts)
        self.exact = len(self.counts) if exact is None else exact
        shown = ", ".join(f"{n}: {self._count_text(i)}"
                          for i, n in enumerate(self.names[:DESCRIBED]) if i < len(self.counts))
        more = f", and {len(self.names) - DESCRIBED} more" if len(self.names) > DESCRIBED else ""
        self.setAccessibleDescription(shown + more)
        self.updateGeometry()
        self.update()

    def row_height(self) -> int:
        return self.fontMetrics().height() + 6

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        width = self._name_width() + BAR_WIDTH_MIN + self._count_width() + 4 * PAD
        return QSize(width, max(1, len(self.names)) * self.row_height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(self.sizeHint().width(), self.sizeHint().height())

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        if not self.names:
            return
        painter = QPainter(self)
        metrics = self.fontMetrics()
        palette = self.palette()
        height = self.row_height()
        name_w, count_w = self._name_width(), self._count_width()
        bar_x = name_w + 2 * PAD
        bar_span = max(1, self.width() - bar_x - count_w - 2 * PAD)
        largest = max(max(self.counts, default=0), 1)
        first = max(0, event.rect().top() // height)
        last = min(len(self.names), event.rect().bottom() // height + 1)
        bar = palette.color(QPalette.ColorRole.Highlight)
        text = palette.color(QPalette.ColorRole.Text)
        for index in range(first, last):
            top = index * height
            painter.setPen(text)
            name = self.names[index]
            if metrics.horizontalAdvance(name) > name_w:  # elidedText cuts at exact fits too
                name = metrics.elidedText(name, Qt.TextElideMode.ElideMiddle, name_w)
            painter.drawText(QRect(PAD, top, name_w, height),
                             Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, name)
            count = self.counts[index] if index < len(self.counts) else 0
            width = round(bar_span * count / largest)
            painter.fillRect(QRect(bar_x, top + 3, max(width, 1 if count else 0), height - 6), bar)
            painter.drawText(QRect(bar_x + width + PAD, top, count_w + PAD, height),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                             self._count_text(index))
        painter.end()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            index = event.pos().y() // self.row_height()
            if 0 <= index < min(len(self.names), len(self.counts)):
                total = max(sum(self.counts), 1)
                count = self.counts[index]
                QToolTip.showText(event.globalPos(), f"{self.names[index]}: "
                                  f"{self._count_text(index)} samples "
                                  f"({100 * count / total:.1f} %)", self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)

    def _name_width(self) -> int:
        """The longest name's width in the font in use now (measured once per font)."""
        font, names, widest = self._widest
        if (font, names) != (self.font().key(), self.names):
            metrics = self.fontMetrics()
            widest = max((metrics.horizontalAdvance(n) for n in self.names), default=0)
            self._widest = (self.font().key(), self.names, widest)
        return min(widest, NAME_WIDTH_MAX)

    def _count_text(self, index: int) -> str:
        count = self.counts[index] if index < len(self.counts) else 0
        return f"{count:,}" if index < self.exact else f"≈{count:,}"

    def _count_width(self) -> int:
        widest = f"≈{max(self.counts, default=0):,}"
        return self.fontMetrics().horizontalAdvance(widest) + PAD
