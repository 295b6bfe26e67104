"""Small QPainter-drawn gauges for the GPU panel: a labelled bar and a sparkline.

Drawn by hand rather than with QProgressBar/pyqtgraph: they look the same
under every Qt style, cost one paint of a few rectangles or ~150 points, and
repaint only when their value changes.
"""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

UTILIZATION_COLOR = QColor("#2f81f7")
MEMORY_COLOR = QColor("#8957e5")
WARN_COLOR = QColor("#d29922")
FULL_COLOR = QColor("#cf222e")
MIN_METER_WIDTH = 52  # "100%" with room: the GPU panel fits beside the run setup
TEXT_PADDING = 4


class Meter(QWidget):
    """A horizontal bar with its value written on it ("97%", "61.0/80.0 GiB").

    `fraction=None` draws an empty bar with the text (e.g. "N/A"). The text is
    also the accessible description, so screen readers read the value.
    """

    def __init__(self, color: QColor = UTILIZATION_COLOR, parent: QWidget | None = None):
        super().__init__(parent)
        self._fraction: float | None = None
        self._text = ""
        self._color = QColor(color)
        self._base_color = QColor(color)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self._text_width = 0  # the widest text shown so far: the bar never cuts it

    def sizeHint(self) -> QSize:
        return QSize(max(140, self.minimumSizeHint().width()), self.fontMetrics().height() + 4)

    def minimumSizeHint(self) -> QSize:
        return QSize(max(MIN_METER_WIDTH, self._text_width + 2 * TEXT_PADDING),
                     self.fontMetrics().height() + 4)

    @property
    def text(self) -> str:
        return self._text

    @property
    def fraction(self) -> float | None:
        return self._fraction

    def set_value(self, fraction: float | None, text: str,
                  color: QColor | None = None) -> None:
        if fraction is not None:
            fraction = min(max(fraction, 0.0), 1.0)
        color = self._base_color if color is None else color
        if (fraction, text, color) == (self._fraction, self._text, self._color):
            return
        self._fraction, self._color = fraction, QColor(color)
        if text != self._text:
            self._text = text
            self.setAccessibleDescription(text)
            width = self.fontMetrics().horizontalAdvance(text)
            if width > self._text_width:  # wider than any before: ask for the room once
                self._text_width = width
                self.updateGeometry()
        self.update()

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        palette = self.palette()
        track = palette.color(QPalette.ColorRole.Base)
        painter.setPen(QPen(palette.color(QPalette.ColorRole.Mid), 1))
        painter.setBrush(track)
        painter.drawRoundedRect(rect, 3, 3)
        text_rect = rect.adjusted(TEXT_PADDING, 0, -TEXT_PADDING, 0)
        align = Qt.AlignmentFlag.AlignCenter
        painter.setPen(palette.color(QPalette.ColorRole.Text))
        painter.drawText(text_rect, align, self._text)
        if self._fraction:
            fill = QRectF(rect.left(), rect.top(), rect.width() * self._fraction, rect.height())
            painter.setPen(Qt.PenStyle.NoPen)
            color = QColor(self._color)
            if not self.isEnabled():
                color.setAlpha(120)
            painter.setBrush(color)
            painter.drawRoundedRect(fill, 3, 3)
            # Over the fill the text turns white, so it stays readable on any value.
            painter.setClipRect(fill)
            painter.setPen(QColor("white"))
            painter.drawText(text_rect, align, self._text)


class Sparkline(QWidget):
    """The last `window_s` seconds of two series: utilization % (0..100, solid)
    and memory fraction (0..1, dashed). NaN values leave a gap."""

    def __init__(self, window_s: float = 120.0, parent: QWidget | None = None):
        super().__init__(parent)
        self.window_s = window_s
        self.caption = f"{window_s / 60:g} min" if window_s >= 60 else f"{window_s:g} s"
        empty = np.empty(0)
        self._t, self._util, self._mem = empty, empty, empty
        # Preferred: a narrow panel may shrink it to its minimum before cutting a text.
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)

    def sizeHint(self) -> QSize:
        return QSize(96, 44)

    def minimumSizeHint(self) -> QSize:
        return QSize(60, 24)

    def set_series(self, times: np.ndarray, utilization: np.ndarray,
                   memory_fraction: np.ndarray) -> None:
        self._t, self._util, self._mem = times, utilization, memory_fraction
        self.update()

    def point_count(self) -> int:
        return int(self._t.size)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        palette = self.palette()
        painter.setPen(QPen(palette.color(QPalette.ColorRole.Mid), 1))
        painter.setBrush(palette.color(QPalette.ColorRole.Base))
        painter.drawRect(rect)
        painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText))
        font = painter.font()
        font.setPointSizeF(max(font.pointSizeF() * 0.75, 6.0))
        painter.setFont(font)
        painter.drawText(rect.adjusted(3, 1, -3, -1),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, self.caption)
        if self._t.size == 0:
            return
        inner = rect.adjusted(1.5, 2, -1.5, -2)
        newest = float(self._t[-1])
        xs = inner.right() - (newest - self._t) / self.window_s * inner.width()
        self._draw(painter, inner, xs, self._mem, QPen(MEMORY_COLOR, 1.2, Qt.PenStyle.DashLine))
        self._draw(painter, inner, xs, self._util / 100.0, QPen(UTILIZATION_COLOR, 1.6))

    @staticmethod
    def _draw(painter: QPainter, inner: QRectF, xs: np.ndarray, values: np.ndarray,
              pen: QPen) -> None:
        path = QPainterPath()
        pen_down = False
        ys = inner.bottom() - np.clip(values, 0.0, 1.0) * inner.height()
        for x, y in zip(xs.tolist(), ys.tolist(), strict=True):
            if math.isnan(y):
                pen_down = False
            elif pen_down:
                path.lineTo(QPointF(x, y))
            else:
                path.moveTo(QPointF(x, y))
                pen_down = True
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPath(path)
