"""The scaling test's plots: samples/s and efficiency against the device count.

`ScalingPlot` draws a `ScalingReport`: measured throughput with the ideal
(linear from the baseline) line, and efficiency with the 100 % line and the
threshold; the recommended count is marked in both. `render_png` draws a
report, with a title and the recommendation, into a PNG at a fixed size, the
same from the dialog as from `mgpu-train scale --png` (offscreen there).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QtMsgType, qInstallMessageHandler
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from mgpu_gui.core.tools.scaling import ScalingReport, describe, device_word
from mgpu_gui.gui.theme import PlotColors, changed_plot_colors, on_background, plot_colors
from mgpu_gui.gui.widgets.plot_export import install_export
from mgpu_gui.gui.widgets.plots import EDGE_PX, color_plot, keep_edges_whole

MEASURED, IDEAL, GOOD, WARN, FAILED = "#1f77b4", "#8a8a8a", "#2e7d32", "#c62828", "#c62828"
PNG_SIZE = (1100, 520)
X_PAD = 0.3  # devices left and right of the first and last count: room for the markers
MAX_EMPTY_TICKS = 16  # an empty plot labels every count up to this many


def _style(widget: pg.PlotWidget, title: str, left: str) -> pg.PlotItem:
    """Layout only; the colours come from `_apply_colors`."""
    item = widget.getPlotItem()
    for side in ("left", "bottom"):
        item.getAxis(side).enableAutoSIPrefix(False)
    item.setTitle(title, size="11pt")
    item.setLabel("left", left)
    item.setLabel("bottom", "devices")
    item.showGrid(x=True, y=True, alpha=0.15)
    item.getAxis("left").setWidth(64)  # room for "100000" beside the label, known up front
    keep_edges_whole(item)
    install_export(widget)
    widget.setMinimumSize(260, 200)
    return item


class ScalingPlot(QWidget):
    """Throughput and efficiency against devices, side by side."""

    def __init__(self, parent: QWidget | None = None, colors: PlotColors | None = None) -> None:
        """`colors` fixes the colours (a PNG is always light); by default they follow the
        palette, light or dark."""
        super().__init__(parent)
        self._fixed_colors = colors is not None
        self.setAccessibleName("Scaling plots")
        self.report: ScalingReport | None = None
        self._rate_top = 1.0  # the throughput plot's y range is 0 (or a little under) to this
        self.throughput = pg.PlotWidget()
        self.throughput.setAccessibleName("Samples per second against devices")
        self.throughput.setToolTip("Measured throughput (median step) and the ideal: the "
                                   "baseline's throughput per device times the devices")
        self.efficiency = pg.PlotWidget()
        self.efficiency.setAccessibleName("Efficiency against devices")
        self.efficiency.setToolTip("Speed-up divided by the devices: 100 % is linear scaling")
        rate = _style(self.throughput, "Throughput", "samples/s")
        eff = _style(self.efficiency, "Efficiency vs linear", "efficiency (%)")
        legend = dict(offset=(10, 10), labelTextColor="#222", brush=pg.mkBrush(255, 255, 255, 220),
                      pen=pg.mkPen("#bbb"))
        self._legend = rate.addLegend(**legend)
        # No legend on the right: low efficiencies fill its corners. The lines say what they are.

        dash = Qt.PenStyle.DashLine
        self.ideal_curve = pg.PlotDataItem(pen=pg.mkPen(IDEAL, width=2, style=dash),
                                           name="ideal (linear)")
        self.throughput_curve = pg.PlotDataItem(
            pen=pg.mkPen(MEASURED, width=2.5), symbol="o", symbolSize=9,
            symbolBrush=MEASURED, symbolPen=pg.mkPen("w", width=1), name="measured")
        self.failed_marks = pg.PlotDataItem(pen=None, symbol="x", symbolSize=12,
                                            symbolBrush=FAILED, symbolPen=pg.mkPen(FAILED, width=2),
                                            name="failed / skipped")
        self.ideal_efficiency = pg.InfiniteLine(
            100.0, angle=0, pen=pg.mkPen(IDEAL, width=2, style=dash), label="ideal (linear)",
            labelOpts={"position": 0.97, "color": "#555", "anchors": [(1, 1), (1, 1)]})
        self.efficiency_curve = pg.PlotDataItem(
            pen=pg.mkPen(MEASURED, width=2.5), symbol="o", symbolSize=9,
            symbolBrush=MEASURED, symbolPen=pg.mkPen("w", width=1), name="measured")
        # p10-p90 of the step times, as throughput: the spread behind each point.
        self.spread_bars = pg.ErrorBarItem(x=np.zeros(0), y=np.zeros(0), beam=0.08,
                                           pen=pg.mkPen(MEASURED, width=1.5))
        self.threshold_line = pg.InfiniteLine(
            angle=0, pen=pg.mkPen(WARN, width=1.5, style=Qt.PenStyle.DotLine),
            label="", labelOpts={"position": 0.97, "color": WARN, "anchors": [(1, 1), (1, 1)]})
        self.recommended_lines = [
            pg.InfiniteLine(angle=90, pen=pg.mkPen(GOOD, width=1.5, style=dash), label="",
                            labelOpts={"position": 0.06, "color": GOOD})
            for _ in range(2)]
        for item in (self.ideal_curve, self.spread_bars, self.throughput_curve,
                     self.failed_marks):
            rate.addItem(item)
        self._legend.removeItem(self.failed_marks)  # listed only when a count failed
        rate.addItem(self.recommended_lines[0], ignoreBounds=True)
        eff.addItem(self.ideal_efficiency, ignoreBounds=True)
        eff.addItem(self.efficiency_curve)
        eff.addItem(self.threshold_line, ignoreBounds=True)
        eff.addItem(self.recommended_lines[1], ignoreBounds=True)

        rate.getViewBox().sigResized.connect(self._fit_rate_range)

        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.throughput, 1)
        layout.addWidget(self.efficiency, 1)
        self._colors = colors or plot_colors(self.palette())
        self._apply_colors()
        self.clear()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        colors = None if self._fixed_colors else changed_plot_colors(self, event, self._colors)
        if colors is not None:
            self._colors = colors
            self._apply_colors()

    def _apply_colors(self) -> None:
        colors = self._colors
        background = QColor(colors.background)

        def role(color: str) -> str:
            return on_background(color, background).name()

        measured, good, warn = colors.train, role(GOOD), role(WARN)
        for widget in (self.throughput, self.efficiency):
            color_plot(widget, colors)
        self._legend.setLabelTextColor(colors.text)
        for _, label in self._legend.items:  # labels made earlier keep their colour otherwise
            label.setText(label.text, color=colors.text)
        self._legend.setBrush(pg.mkBrush(*colors.fill(220)))
        self._legend.setPen(pg.mkPen(colors.axis))
        for curve in (self.throughput_curve, self.efficiency_curve):
            curve.setPen(pg.mkPen(measured, width=2.5))
            curve.setSymbolBrush(measured)
            curve.setSymbolPen(pg.mkPen(colors.background, width=1))
        self.spread_bars.setData(pen=pg.mkPen(measured, width=1.5))
        self.threshold_line.setPen(pg.mkPen(warn, width=1.5, style=Qt.PenStyle.DotLine))
        self.threshold_line.label.setColor(warn)
        for line in self.recommended_lines:
            line.setPen(pg.mkPen(good, width=1.5, style=Qt.PenStyle.DashLine))
            line.label.setColor(good)
        self.ideal_efficiency.label.setColor(colors.axis)

    def clear(self, devices: int = 1) -> None:
        """No figures: devices 1..`devices` (the count the test will go up to), samples/s
        and efficiency from 0, not pyqtgraph's empty -0.5..0.5."""
        self.report = None
        for curve in (self.ideal_curve, self.throughput_curve, self.failed_marks,
                      self.efficiency_curve):
            curve.setData([], [])
        self.spread_bars.setData(x=np.zeros(0), y=np.zeros(0))
        self.threshold_line.setVisible(False)
        self.ideal_efficiency.setVisible(False)
        for line in self.recommended_lines:
            line.setVisible(False)
        devices = max(1, devices)
        ticks = ([[(k, str(k)) for k in range(1, devices + 1)]]
                 if devices <= MAX_EMPTY_TICKS else None)
        for widget, top in ((self.throughput, 1.0), (self.efficiency, 110.0)):
            item = widget.getPlotItem()
            item.getAxis("bottom").setTicks(ticks)
            item.setXRange(1 - X_PAD, devices + X_PAD, padding=0)
            item.setYRange(0, top, padding=0)

    def _fit_rate_range(self) -> None:
        """Samples/s from 0 up; with failed counts (marked at 0) from `EDGE_PX` pixels
        under 0, at any height, so their marks are whole rather than cut in half."""
        if self.report is None:
            return  # the empty plot's range is `clear`'s
        bottom = 0.0
        if self.failed_marks.xData is not None and len(self.failed_marks.xData):
            room = max(self.throughput.getPlotItem().getViewBox().height() - EDGE_PX, EDGE_PX)
            bottom = -EDGE_PX * self._rate_top / room
        self.throughput.getPlotItem().setYRange(bottom, self._rate_top, padding=0)

    def set_report(self, report: ScalingReport) -> None:
        self.report = report
        counts = [p.devices for p in report.points]
        ran = report.ok_points()
        x = [p.devices for p in ran]
        rates = [p.samples_per_s or 0.0 for p in ran]
        self.throughput_curve.setData(x, rates)
        fast = [p.global_batch / (p.step_p10_s or 1.0) for p in ran]  # p10 step: the fast end
        slow = [p.global_batch / (p.step_p90_s or 1.0) for p in ran]
        self.spread_bars.setData(x=np.array(x, float), y=np.array(rates, float),
                                 top=np.array(fast) - np.array(rates),
                                 bottom=np.array(rates) - np.array(slow))
        self.efficiency_curve.setData(x, [100 * (p.efficiency or 0.0) for p in ran])
        if ran and report.baseline_devices:
            base = ran[0]
            per_device = (base.samples_per_s or 0.0) / base.devices
            span = [min(counts), max(counts)]
            self.ideal_curve.setData(span, [per_device * k for k in span])
            self.ideal_efficiency.setVisible(True)
        else:
            self.ideal_curve.setData([], [])
            self.ideal_efficiency.setVisible(False)
        lost = [p.devices for p in report.points if not p.ok]
        self.failed_marks.setData(lost, [0.0] * len(lost))
        self._legend.removeItem(self.failed_marks)
        if lost:
            self._legend.addItem(self.failed_marks, "failed / skipped")
        self.threshold_line.setVisible(bool(ran))  # first: a hidden label ignores its text
        self.threshold_line.setValue(100 * report.threshold)
        self.threshold_line.label.setFormat(f"threshold {report.threshold:.0%}")
        rec = report.recommendation
        for line in self.recommended_lines:
            line.setVisible(rec is not None)
            if rec is not None:
                line.setValue(rec.devices)
                line.label.setFormat(f" recommended: {rec.devices} ")
                # The label reads on the side with room: left of the line at the last count.
                side = 1 if counts and rec.devices == max(counts) and len(counts) > 1 else 0
                line.label.anchors = [(side, 1), (side, 1)]
                line.label.updatePosition()
        ticks = [[(k, str(k)) for k in counts]]
        for widget in (self.throughput, self.efficiency):
            item = widget.getPlotItem()
            item.getAxis("bottom").setTicks(ticks)
            item.getAxis("bottom").setLabel(report.unit, color=self._colors.text)
            if counts:
                item.setXRange(min(counts) - X_PAD, max(counts) + X_PAD, padding=0)
        ideal = self.ideal_curve.yData if self.ideal_curve.yData is not None else []
        self._rate_top = max([*rates, *fast, *ideal], default=1.0) * 1.08
        self._fit_rate_range()
        top_eff = max([100.0, *[100 * (p.efficiency or 0.0) for p in ran]])
        self.efficiency.getPlotItem().setYRange(0, top_eff * 1.1, padding=0)


class ScalingFigure(QWidget):
    """What a PNG shows: a title line, the plots, and the recommendation."""

    def __init__(self, report: ScalingReport, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setStyleSheet("background: white; color: #222;")
        light = plot_colors(QPalette(QColor("#efefef"), QColor("#ffffff")))
        title = QLabel(f"<b>Scaling test</b> &mdash; {describe(report)}")
        devices = QLabel(devices_text(report))
        devices.setStyleSheet("color: #555;")
        self.plot = ScalingPlot(colors=light)
        self.plot.set_report(report)
        rec = report.recommendation.sentence if report.recommendation else "No count was measured."
        footer = QLabel(" ".join([rec, *report.notes]), wordWrap=True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 10, 14, 10)
        layout.addWidget(title)
        if devices.text():
            layout.addWidget(devices)
        layout.addWidget(self.plot, 1)
        layout.addWidget(footer)


def devices_text(report: ScalingReport) -> str:
    """The devices measured, in a line: the GPUs by name, CPU replicas by count."""
    names = report.device_names
    if not names:
        return ""
    if report.device_kind == "cpu":
        return (f"Up to {len(names)} {device_word('cpu', len(names))}: logical devices of one "
                f"CPU (real data parallelism; they share the CPU's cores)")
    shown = "; ".join(names[:4]) + (f"; ... ({len(names)} in all)" if len(names) > 4 else "")
    return f"GPUs: {shown}"


def render_png(report: ScalingReport, path: Path, size: tuple[int, int] = PNG_SIZE) -> Path:
    """Draw `report` into a PNG; needs a QApplication (see `save_report_png`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure = ScalingFigure(report)
    figure.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
    figure.resize(*size)
    figure.show()  # lays out and sizes the plots; never appears on screen
    try:
        image = figure.grab()
        tmp = path.with_name(path.name + ".tmp.png")
        if not image.save(str(tmp), "PNG"):
            raise OSError(f"could not write {path}")
        tmp.replace(path)
    finally:
        figure.close()
        figure.deleteLater()
    return path


def save_report_png(report: ScalingReport, path: Path, size: tuple[int, int] = PNG_SIZE) -> Path:
    """`render_png` from a process without a GUI (the CLI): Qt offscreen, no display needed."""
    app = QApplication.instance()
    if app is None:
        # A terminal (maybe over SSH) must not open a connection to a display for a file.
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QApplication([])
    previous = qInstallMessageHandler(_quiet_offscreen)
    try:
        return render_png(report, path, size)
    finally:
        qInstallMessageHandler(previous)


def _quiet_offscreen(mode: QtMsgType, context, message: str) -> None:
    # The offscreen platform warns that it cannot propagate size hints: noise in a terminal.
    if "propagateSizeHints" not in message:
        sys.stderr.write(message + "\n")
