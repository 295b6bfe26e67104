"""The plot of one metric family: train per batch (raw and smoothed), train per epoch,
validation, the best epoch's line and star, and where fine-tuning began (a
transfer-learning run's second stage). What the best epoch was is said in the curve
key above the plots (widgets/curve_key.py): a label on the line covered the curves."""

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
        best_line = pg.InfiniteLine(angle=90)
        best_marker = pg.PlotDataItem(pen=None, symbol="star", symbolSize=18, antialias=True)
        for best_item in (best_line, best_marker):
            best_item.setZValue(10)
            best_item.setVisible(False)
            item.addItem(best_item, ignoreBounds=best_item is best_line)
        stage_line = stage_marker()
        item.addItem(stage_line, ignoreBounds=True)
        plot = cls(widget, best_marker, best_line, stage_line, roles)
        plot.apply_colors(colors)
        return plot

    def bind(self, family: str) -> None:
        """Show `family`'s series: the curves by series name."""
        roles = self.roles
        self.curves = {family: roles["batch"], f"{family}:smoothed": roles["smoothed"],
                       f"{family}:epoch": roles["epoch"], f"val_{family}": roles["val"]}

    def show_best(self, x: float, y: float | None) -> None:
        """The best epoch's line at `x`, and its star at (x, y) unless y is None (not
        drawable: <= 0 on a log axis)."""
        if y is not None:
            self.best_marker.setData([x], [y])
        self.best_marker.setVisible(y is not None)
        self.best_line.setVisible(True)
        self.best_line.setValue(x)

    def show_stage(self, x: float | None, text: str = "") -> None:
        """The line where fine-tuning began, at `x` (None: none)."""
        show_stage(self.stage_line, x, text)

    def hide_best(self) -> None:
        for best_item in (self.best_line, self.best_marker):
            best_item.setVisible(False)

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
        color_stage(self.stage_line, colors)
        self.best_marker.setSymbolBrush(colors.best)
        self.best_marker.setSymbolPen(pg.mkPen(colors.background, width=1))


def stage_marker() -> pg.InfiniteLine:
    """A hidden vertical line for the start of fine-tuning, labelled at the plot's top right
    of the line."""
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
