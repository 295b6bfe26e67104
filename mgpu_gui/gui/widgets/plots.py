"""Plot helpers shared by the curves panel, the run comparison and the scaling plots."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QPen

from mgpu_gui.gui.theme import PlotColors


def style_plot(widget: pg.PlotWidget, left: str) -> None:
    """A metric plot's layout: plain axis numbers, the y label, a faint grid."""
    item = widget.getPlotItem()
    for side in ("left", "bottom"):
        item.getAxis(side).enableAutoSIPrefix(False)  # "(x0.001)" confuses more than it helps
    item.setLabel("left", left)
    item.showGrid(x=True, y=True, alpha=0.15)
    item.getViewBox().setAutoVisible(y=True)  # y fits the visible x range when zoomed
    widget.setMinimumSize(220, 150)


def color_plot(widget: pg.PlotWidget, colors: PlotColors, title_size: str = "11pt") -> None:
    """Background, axes, grid, labels and title of a plot in the palette's colours (the
    curves are their owners' to colour)."""
    widget.setBackground(colors.background)
    item = widget.getPlotItem()
    for side in ("left", "bottom"):
        axis = item.getAxis(side)
        axis.setPen(pg.mkPen(colors.axis))  # the grid is drawn with the axis pen
        axis.setTextPen(pg.mkPen(colors.text))
        if axis.labelText:
            item.setLabel(side, axis.labelText, units=axis.labelUnits, color=colors.text)
    title = item.titleLabel.text
    if title:
        widget.setTitle(title, color=colors.text, size=title_size)


def batch_curve(pen: QPen | None) -> pg.PlotDataItem:
    """A curve for many points (one per batch)."""
    # Antialiased: at 2x device pixels a curve drawn without it looks jagged.
    return pg.PlotDataItem(pen=pen, antialias=True)


def thin_when_dense(curve: pg.PlotDataItem) -> None:
    """Per-batch curves: draw only the visible part, min/max-downsampled to the pixels.
    Called after `PlotItem.addItem`, which applies the plot's (off) settings."""
    curve.setClipToView(True)
    curve.setDownsampling(auto=True, method="peak")
