"""Plot helpers shared by the curves panel, the run comparison and the scaling plots."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtGui import QPen

from mgpu_gui.gui.theme import PlotColors

# Pixels kept free inside a view at each end of a held x span, so a marker on the last
# epoch and the end tick labels are whole: the best-epoch star's bounds as pyqtgraph
# reckons them ((18 px + 1 px outline) x 0.707 each side of its centre), rounded up.
EDGE_PX = 14
# Room right of a plot for half of its last tick label ("1000" at the right end).
RIGHT_MARGIN_PX = 10
TITLE_ROW_PX = 30  # pyqtgraph's title row


class EdgeViewBox(pg.ViewBox):
    """A view that can hold its x axis on a span with `EDGE_PX` pixels to spare at each
    end, at any width: a span padded by a fraction cut the star on the last epoch in half
    in a narrow plot (autoscaling pads by the markers' size itself; a held span does not)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._span: tuple[float, float] | None = None
        self._held: tuple[float, float] | None = None  # the range last set for the span
        self.sigResized.connect(self._follow_width)

    def hold_x_span(self, span: tuple[float, float] | None) -> None:
        """Hold x on `span` (padded in pixels); None: autoscale x again."""
        self._span = span
        if span is None:
            self._held = None
            self.enableAutoRange(x=True)
        else:
            self.enableAutoRange(x=False)
            self._apply_span()

    def _apply_span(self) -> None:
        lo, hi = self._span  # type: ignore[misc]
        room = max(self.width() - 2 * EDGE_PX, EDGE_PX)
        pad = EDGE_PX * (hi - lo) / room
        self._held = (lo - pad, hi + pad)
        self.setXRange(*self._held, padding=0)

    def _follow_width(self) -> None:
        # Only while the user has not zoomed or panned away from the held span.
        if self._span is not None and self._held is not None and all(
                abs(a - b) <= 1e-9 * max(1.0, abs(b))
                for a, b in zip(self.viewRange()[0], self._held, strict=True)):
            self._apply_span()


def style_plot(widget: pg.PlotWidget, left: str) -> None:
    """A metric plot's layout: plain axis numbers, the y label, a faint grid, and 0..1 on
    both axes until there are data (not pyqtgraph's bare 0.2..0.8)."""
    item = widget.getPlotItem()
    for side in ("left", "bottom"):
        item.getAxis(side).enableAutoSIPrefix(False)  # "(x0.001)" confuses more than it helps
    item.setLabel("left", left)
    item.showGrid(x=True, y=True, alpha=0.15)
    keep_edges_whole(item)
    view = item.getViewBox()
    blank_range(view)
    view.setAutoVisible(y=True)  # y fits the visible x range when zoomed
    # Short enough that opened tabs (the Runs table) fit under the plots on a 1024x576
    # screen; folded, the tabs leave the plots their room (widgets/plots_first.py).
    widget.setMinimumSize(220, 90)


def blank_range(view: pg.ViewBox) -> None:
    """0..1 on both axes, autoscaling again: a plot with no data yet shows whole ticks,
    not pyqtgraph's bare 0.2..0.8, nor the range (or zoom) of the run it showed before."""
    if isinstance(view, EdgeViewBox):
        view.hold_x_span(None)  # else a resize would bring the old run's span back
    view.setRange(xRange=(0, 1), yRange=(0, 1), padding=0.04)
    view.enableAutoRange()  # no data: the range stays until the first curve


def keep_edges_whole(item: pg.PlotItem) -> None:
    """Room right of the view for the last tick label, which the widget's edge cut."""
    left, top, right, bottom = item.layout.getContentsMargins()
    item.layout.setContentsMargins(left, top, max(right, RIGHT_MARGIN_PX), bottom)


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
        set_title(item, title, color=colors.text, size=title_size)


def fold_title(item: pg.PlotItem, fold: bool) -> None:
    """Hide the title row of a plot too short to spare it (its y axis's title names it
    too), or show it again: the text is kept either way."""
    if fold == (not item.titleLabel.isVisible()):
        return
    height = 0 if fold else TITLE_ROW_PX
    item.titleLabel.setVisible(not fold)
    item.titleLabel.setMaximumHeight(height)
    item.layout.setRowFixedHeight(0, height)


def set_title(item: pg.PlotItem, text: str, **style) -> None:
    """A plot's title changed (its legend, say) without showing a title `fold_title` hid."""
    if item.titleLabel.isVisible():
        item.setTitle(text, **style)
    else:
        item.titleLabel.setText(text, **style)


def batch_curve(pen: QPen | None) -> pg.PlotDataItem:
    """A curve for many points (one per batch)."""
    # Antialiased: at 2x device pixels a curve drawn without it looks jagged.
    return pg.PlotDataItem(pen=pen, antialias=True)


def thin_when_dense(curve: pg.PlotDataItem) -> None:
    """Per-batch curves: draw only the visible part, min/max-downsampled to the pixels.
    Called after `PlotItem.addItem`, which applies the plot's (off) settings."""
    curve.setClipToView(True)
    curve.setDownsampling(auto=True, method="peak")


MIN_LABEL_PX = 40  # a time label ("12.5") and the gap after it


class SparseAxis(pg.AxisItem):
    """An axis whose labelled ticks lie at least MIN_LABEL_PX apart: on the narrow
    throughput and device plots (1024x576) pyqtgraph's ran together ("0.20.40.60.8")."""

    def __init__(self, orientation: str = "bottom") -> None:
        super().__init__(orientation)
        self.setStyle(maxTextLevel=0)  # labels on the major ticks only

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph's names)
        levels = super().tickSpacing(minVal, maxVal, size)
        span = maxVal - minVal
        if not levels or span <= 0 or size <= 0:
            return levels
        major = levels[0][0]
        while span / major * MIN_LABEL_PX > size:
            mantissa = major / 10 ** math.floor(math.log10(major))
            major *= 2.5 if 2 <= mantissa < 5 else 2  # 1, 2, 5, 10, ...
        return [(major, 0), *((step, offset) for step, offset in levels[1:] if step < major)]
