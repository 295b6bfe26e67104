"""The plot of one metric family: train per batch (raw and smoothed), train per epoch,
validation, the best epoch's line and star, and where fine-tuning began (a
transfer-learning run's second stage)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyqtgraph as pg
from PySide6.QtCore import Qt

from mgpu_gui.gui.theme import PlotColors
from mgpu_gui.gui.widgets.plots import (
    EdgeViewBox,
    batch_curve,
    color_plot,
    style_plot,
    thin_when_dense,
)

# The best-epoch label sits this far (a fraction of its width) from its line.
LABEL_GAP = 0.04
LEFT_OF_LINE, RIGHT_OF_LINE = (1 + LABEL_GAP, 0.5), (-LABEL_GAP, 0.5)


@dataclass
class FamilyPlot:
    """A plot and its curves by role; `curves` names them by series once bound to a family."""

    widget: pg.PlotWidget
    best_marker: pg.PlotDataItem
    best_line: pg.InfiniteLine
    stage_line: pg.InfiniteLine
    roles: dict[str, pg.PlotDataItem]  # batch, smoothed, epoch, val
    curves: dict[str, pg.PlotDataItem] = field(default_factory=dict)  # by series name

    @classmethod
    def build(cls, title: str, x_label: str, colors: PlotColors) -> FamilyPlot:
        """A plot with its four curves and best-epoch items, not yet bound to a family.

        Building a PlotWidget and painting it the first time are the costliest GUI work of
        a run (py-spy): build and show spare ones empty before the run starts.
        """
        widget = pg.PlotWidget(viewBox=EdgeViewBox())
        widget.setAccessibleName(f"{title or 'Metric'} plot")
        style_plot(widget, title.lower())
        widget.setTitle(title, size="11pt")
        widget.setLabel("bottom", x_label)
        item = widget.getPlotItem()
        specs = [  # pens and brushes: apply_colors
            ("batch", batch_curve(None), "train (batch)"),
            ("smoothed", batch_curve(None), "train (smoothed)"),
            ("epoch", pg.PlotDataItem(symbol="o", symbolSize=6, symbolPen=None, antialias=True),
             "train (epoch)"),
            ("val", pg.PlotDataItem(symbol="o", symbolSize=7, symbolPen=None, antialias=True),
             "validation"),
        ]
        roles = {}
        for role, curve, label in specs:
            curve.opts["name"] = label
            item.addItem(curve)
            if role in ("batch", "smoothed"):
                thin_when_dense(curve)
            roles[role] = curve
        # The best epoch is its own one-point item, so no downsampling can thin it away.
        best_line = pg.InfiniteLine(
            angle=90, label="",
            # Left of the line, half-way up: the best epoch is often the newest (right edge),
            # and a converging curve leaves the right half's middle empty.
            labelOpts={"position": 0.5, "anchors": [LEFT_OF_LINE, LEFT_OF_LINE]})
        best_marker = pg.PlotDataItem(pen=None, symbol="star", symbolSize=18, antialias=True)
        for best_item in (best_line, best_marker):
            best_item.setZValue(10)
            best_item.setVisible(False)
            item.addItem(best_item, ignoreBounds=best_item is best_line)
        stage_line = stage_marker()
        item.addItem(stage_line, ignoreBounds=True)
        plot = cls(widget, best_marker, best_line, stage_line, roles)
        plot.apply_colors(colors)
        view = item.getViewBox()
        view.sigXRangeChanged.connect(plot._place_best_label)
        view.sigResized.connect(plot._place_best_label)
        return plot

    def bind(self, family: str) -> None:
        """Show `family`'s series: the curves by series name."""
        roles = self.roles
        self.curves = {family: roles["batch"], f"{family}:smoothed": roles["smoothed"],
                       f"{family}:epoch": roles["epoch"], f"val_{family}": roles["val"]}

    def show_best(self, x: float, y: float | None, text: str) -> None:
        """The best epoch's line at `x` labelled `text`, and its star at (x, y) unless y
        is None (not drawable: <= 0 on a log axis)."""
        if y is not None:
            self.best_marker.setData([x], [y])
        self.best_marker.setVisible(y is not None)
        self.best_line.setVisible(True)  # first: a hidden label ignores its new text
        self.best_line.setValue(x)
        self.best_line.label.setFormat(text)
        self._place_best_label()

    def show_stage(self, x: float | None, text: str = "") -> None:
        """The line where fine-tuning began, at `x` (None: none)."""
        show_stage(self.stage_line, x, text)

    def hide_best(self) -> None:
        for best_item in (self.best_line, self.best_marker):
            best_item.setVisible(False)

    def _place_best_label(self) -> None:
        """Left of the line where the label has room (a converging curve leaves the right
        half's middle empty), else right of it: on the first epoch, left of the line cut
        "best: epoch 1" to "poch 1" at the plot's edge."""
        line, view = self.best_line, self.widget.getPlotItem().getViewBox()
        if not line.isVisible():
            return
        pixel = view.viewPixelSize()[0]
        room = (line.value() - view.viewRange()[0][0]) / pixel if pixel > 0 else 0.0
        needed = line.label.boundingRect().width() * (1 + LABEL_GAP)
        anchor = LEFT_OF_LINE if room >= needed else RIGHT_OF_LINE
        if line.label.anchors[0] != anchor:
            line.label.anchors = [anchor, anchor]
            line.label.updatePosition()

    def clear(self) -> None:
        """No data, no best epoch, no stages, bound to no family."""
        for curve in self.roles.values():
            curve.setData([], [])
        self.hide_best()
        self.show_stage(None)
        self.curves = {}

    def apply_colors(self, colors: PlotColors) -> None:
        color_plot(self.widget, colors)
        train = pg.QtGui.QColor(colors.train)
        faint = pg.QtGui.QColor(train)
        faint.setAlpha(70)
        roles = self.roles
        roles["batch"].setPen(pg.mkPen(faint, width=1))
        roles["smoothed"].setPen(pg.mkPen(train, width=2))
        roles["epoch"].setPen(pg.mkPen(train, width=1, style=Qt.PenStyle.DashLine))
        roles["epoch"].setSymbolBrush(train)
        roles["val"].setPen(pg.mkPen(colors.val, width=2.5))
        roles["val"].setSymbolBrush(colors.val)
        self.best_line.setPen(pg.mkPen(colors.best, width=1, style=Qt.PenStyle.DashLine))
        label = self.best_line.label
        label.setColor(colors.best)
        label.fill = pg.mkBrush(*colors.fill(220))
        label.update()
        color_stage(self.stage_line, colors)
        self.best_marker.setSymbolBrush(colors.best)
        self.best_marker.setSymbolPen(pg.mkPen(colors.background, width=1))


def stage_marker() -> pg.InfiniteLine:
    """A hidden vertical line for the start of fine-tuning, labelled at the plot's top right
    of the line (the best epoch's label sits half-way up, left of its line)."""
    line = pg.InfiniteLine(angle=90, label="",
                           labelOpts={"position": 0.92, "anchors": [(0, 0.5), (0, 0.5)]})
    line.setZValue(9)
    line.setVisible(False)
    return line


def show_stage(line: pg.InfiniteLine, x: float | None, text: str) -> None:
    line.setVisible(x is not None)  # first: a hidden label ignores its new text
    if x is not None:
        line.setValue(x)
        line.label.setFormat(text)


def color_stage(line: pg.InfiniteLine, colors: PlotColors) -> None:
    line.setPen(pg.mkPen(colors.axis, width=1, style=Qt.PenStyle.DotLine))
    line.label.setColor(colors.text)
    line.label.fill = pg.mkBrush(*colors.fill(200))
    line.label.update()
