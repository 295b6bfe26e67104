"""The plot of one metric family: train per batch (raw and smoothed), train per epoch,
validation, and the best epoch's line and star."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyqtgraph as pg
from PySide6.QtCore import Qt

from mgpu_gui.gui.theme import PlotColors
from mgpu_gui.gui.widgets.plots import batch_curve, color_plot, style_plot, thin_when_dense


@dataclass
class FamilyPlot:
    """A plot and its curves by role; `curves` names them by series once bound to a family."""

    widget: pg.PlotWidget
    best_marker: pg.PlotDataItem
    best_line: pg.InfiniteLine
    roles: dict[str, pg.PlotDataItem]  # batch, smoothed, epoch, val
    curves: dict[str, pg.PlotDataItem] = field(default_factory=dict)  # by series name

    @classmethod
    def build(cls, title: str, x_label: str, colors: PlotColors) -> FamilyPlot:
        """A plot with its four curves and best-epoch items, not yet bound to a family.

        Building a PlotWidget and painting it the first time are the costliest GUI work of
        a run (py-spy): build and show spare ones empty before the run starts.
        """
        widget = pg.PlotWidget()
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
            labelOpts={"position": 0.5, "anchors": [(1.04, 0.5), (1.04, 0.5)]})
        best_marker = pg.PlotDataItem(pen=None, symbol="star", symbolSize=18, antialias=True)
        for best_item in (best_line, best_marker):
            best_item.setZValue(10)
            best_item.setVisible(False)
            item.addItem(best_item, ignoreBounds=best_item is best_line)
        plot = cls(widget, best_marker, best_line, roles)
        plot.apply_colors(colors)
        return plot

    def bind(self, family: str) -> None:
        """Show `family`'s series: the curves by series name."""
        roles = self.roles
        self.curves = {family: roles["batch"], f"{family}:smoothed": roles["smoothed"],
                       f"{family}:epoch": roles["epoch"], f"val_{family}": roles["val"]}

    def clear(self) -> None:
        """No data, no best epoch, bound to no family."""
        for curve in self.roles.values():
            curve.setData([], [])
        for best_item in (self.best_line, self.best_marker):
            best_item.setVisible(False)
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
        self.best_marker.setSymbolBrush(colors.best)
        self.best_marker.setSymbolPen(pg.mkPen(colors.background, width=1))
