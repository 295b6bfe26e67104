"""How many GPU rows the GPU panel shows whole, unscrolled (issue 30: all eight of an
8-GPU machine at 1920x1080, at least four in the smallest window)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QWidget

from mgpu_gui.gui.panels.gpus import GpuPanel


def rows_in_view(panel: GpuPanel) -> int:
    """The rows whose every shown widget lies inside the panel's scroll viewport, scrolled to
    the top, and inside the window."""
    top = panel.window()
    panel._scroll.verticalScrollBar().setValue(0)
    viewport = panel._scroll.viewport()
    seen = _rect_in(viewport, top) & top.rect()
    whole = 0
    for row in panel._rows:
        rects = [_rect_in(widget, top) for widget in row.widgets() if widget.isVisible()]
        whole += bool(rects) and all(seen.contains(rect) for rect in rects)
    return whole


def _rect_in(widget: QWidget, top: QWidget) -> QRect:
    return QRect(widget.mapTo(top, QPoint(0, 0)), widget.size())
