"""Live training curves: one plot per metric family, learning rate and throughput.

Events only append to numpy buffers and mark what changed; a ~10 Hz timer
redraws the changed curves, so a burst of events costs one `setData` per curve.
The timer runs from RunStarted to RunFinished/RunFailed (or `shutdown()`).

Series names (see `CurvesPanel.series`):
- ``"loss"``: train per batch (raw), ``"loss:smoothed"``: its EMA,
  ``"loss:epoch"``: train per epoch, ``"val_loss"``: validation per epoch;
  the same for every other metric family (``"accuracy"``, ``"auc"``, ...).
- ``"learning_rate"`` and ``"samples_per_s"``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.events import BatchEnd, EpochEnd, Event, RunFailed, RunFinished, RunStarted
from mgpu_gui.gui.theme import PlotColors, plot_colors

# The timer redraws one plot per tick: a window repaint then paints one plot (~10 ms on
# 2 cores, measured), never all four at once (30-80 ms, a visible stall); every plot still
# catches up within 4 ticks of new data.
REFRESH_MS = 25
LR_NAMES = ("learning_rate", "lr")  # Keras may log the LR as a metric: not a metric family
X_EPOCH, X_STEP, X_WALL, Y = range(4)


class XAxis(StrEnum):
    EPOCH = "epoch"
    STEP = "step"
    WALL = "time"


X_LABELS = {XAxis.EPOCH: "epoch", XAxis.STEP: "step (batches)", XAxis.WALL: "time (min)"}


class SeriesBuffer:
    """Rows of (x by epoch, x by step, x by wall time, y) in a preallocated array that
    grows by doubling, so appending is amortised O(1) and reading is a view.

    float32 halves the memory of long runs (a million batch points in a handful of
    series stay under 100 MB) and is finer than any screen: wall time resolves a
    quarter second after a month, the step count is exact up to 16 million.
    """

    def __init__(self, capacity: int = 256) -> None:
        self._data = np.empty((capacity, 4), dtype=np.float32)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def capacity(self) -> int:
        return len(self._data)

    def append(self, x_epoch: float, x_step: float, x_wall: float, y: float) -> None:
        if self._n == len(self._data):
            grown = np.empty((2 * len(self._data), 4), dtype=np.float32)
            grown[: self._n] = self._data
            self._data = grown  # views handed out earlier keep the old array alive
        self._data[self._n] = (x_epoch, x_step, x_wall, y)
        self._n += 1

    def column(self, index: int) -> np.ndarray:
        return self._data[: self._n, index]

    def truncate(self, n: int) -> None:
        self._n = max(0, min(n, self._n))


def ema(values: np.ndarray, weight: float) -> tuple[np.ndarray, float, int]:
    """TensorBoard's debiased exponential moving average; non-finite values stay NaN
    and do not disturb the average. Also returns the running state (sum, count)."""
    out = np.full(len(values), np.nan)
    last, count = 0.0, 0
    for i, value in enumerate(values.tolist()):
        if math.isfinite(value):
            last, count = last * weight + (1 - weight) * value, count + 1
            out[i] = last / (1 - weight**count)
    return out, last, count


@dataclass
class _FamilyPlot:
    """The plot of one metric family and its curves, by series name."""

    widget: pg.PlotWidget
    curves: dict[str, pg.PlotDataItem] = field(default_factory=dict)  # by series name
    roles: dict[str, pg.PlotDataItem] = field(default_factory=dict)  # batch, smoothed, ...
    best_marker: pg.PlotDataItem | None = None
    best_line: pg.InfiniteLine | None = None


def _without_lr(metrics: dict[str, float], lr: float | None) -> tuple[dict[str, float],
                                                                     float | None]:
    """Keras puts the learning rate among the metrics: it gets its own plot, not a family."""
    if lr is None:
        lr = next((v for n, v in metrics.items() if n in LR_NAMES), None)
    return {n: v for n, v in metrics.items() if n not in LR_NAMES}, lr


def family_of(name: str) -> str:
    return name.removeprefix("val_")


def _family_rank(family: str) -> int:
    return 0 if family == "loss" else 1 if "accuracy" in family else 2


def _title(family: str) -> str:
    return family.upper() if len(family) <= 3 else family.replace("_", " ").capitalize()


def _style_plot(widget: pg.PlotWidget, left: str) -> None:
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


def _batch_curve(pen) -> pg.PlotDataItem:
    # Antialiased: at 2x device pixels a curve drawn without it looks jagged.
    return pg.PlotDataItem(pen=pen, antialias=True)


def _thin_when_dense(curve: pg.PlotDataItem) -> None:
    """Per-batch curves: draw only the visible part, min/max-downsampled to the pixels.
    Called after `PlotItem.addItem`, which applies the plot's (off) settings."""
    curve.setClipToView(True)
    curve.setDownsampling(auto=True, method="peak")


class CurvesPanel(QWidget):
    """Training curves of one run; feed it with `handle_event` or `load_events`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Training curves")
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._refresh_next)
        self._shut_down = False
        self._colors = plot_colors(self.palette())
        self._smoothing = 0.6
        self._log_y = False
        self._x_axis = XAxis.EPOCH
        self._build_controls()
        self._grid = QGridLayout()
        self._grid.setSpacing(4)
        self._build_fixed_plots()
        # Empty Loss and Accuracy frames until data arrive; the first families take them.
        self._spares = [self._make_shell("Loss"), self._make_shell("Accuracy")]
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self._controls)
        layout.addLayout(self._grid, 1)
        self._plots: dict[str, _FamilyPlot] = {}
        self._families: list[str] = []
        self.reset()
        self._apply_colors()

    # -- public API ----------------------------------------------------------------

    def reset(self) -> None:
        """Forget all data (a new run); the controls keep their settings."""
        self._series: dict[str, SeriesBuffer] = {}
        self._ema_state: dict[str, tuple[float, int]] = {}
        self._dirty: set[str] = set()
        self._steps = 0
        self._epochs = 0  # known from RunStarted: fixes the x range by epoch or step
        self._t_origin: float | None = None
        self._last_wall = 0.0
        self._best_epoch: int | None = None
        self._best_metric: str | None = None
        self._best_dirty = True
        for family in self._families:  # back to the spares: built and painted already
            plot = self._plots[family]
            self._grid.removeWidget(plot.widget)
            plot.widget.setXLink(None)
            for curve in plot.roles.values():
                curve.setData([], [])
            for best_item in (plot.best_line, plot.best_marker):
                best_item.setVisible(False)
            plot.curves = {}
            self._spares.append(plot)
        self._plots, self._families = {}, []
        self._lr_plot.setXLink(None)
        self._relayout()
        for curve in (self._lr_curve, self._rate_curve):
            curve.setData([], [])
        self._rate_plot.setTitle("Throughput (samples/s)", color=self._colors.text, size="10pt")

    def handle_event(self, event: Event) -> None:
        """One event from the run controller; data events start the redraw timer."""
        if self._shut_down:
            return
        self._ingest(event)
        if isinstance(event, RunStarted | BatchEnd | EpochEnd):
            if not self._timer.isActive():
                self._timer.start()
        elif isinstance(event, RunFinished | RunFailed):
            self.stop_updates()

    def load_events(self, events: Iterable[Event]) -> None:
        """Show a past run (its events.jsonl, parsed), drawn once; no timer runs."""
        self.reset()
        for event in events:
            self._ingest(event)
        self._refresh()

    def start_updates(self) -> None:
        if not self._shut_down:
            self._timer.start()

    def stop_updates(self) -> None:
        """Draw what is pending and stop the timer."""
        self._timer.stop()
        self._refresh()

    def shutdown(self) -> None:
        """For the main window's close: stop for good; later events are ignored."""
        self._shut_down = True
        self._timer.stop()

    def series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of a series in the current x-axis mode (time in minutes); empty if none."""
        buffer = self._series.get(name)
        if buffer is None:
            return np.empty(0), np.empty(0)
        column = {XAxis.EPOCH: X_EPOCH, XAxis.STEP: X_STEP, XAxis.WALL: X_WALL}[self._x_axis]
        x = buffer.column(column)
        return (x / 60.0 if self._x_axis is XAxis.WALL else x), buffer.column(Y)

    def best_epoch(self) -> int | None:
        """The best validation epoch, 0-based as in the events (drawn at x = epoch + 1)."""
        return self._best_epoch

    def families(self) -> list[str]:
        return list(self._families)

    def set_smoothing(self, weight: float) -> None:
        self._smoothing_slider.setValue(round(weight * 100))

    def set_log_y(self, on: bool) -> None:
        self._log_check.setChecked(on)

    def set_x_axis(self, mode: XAxis | str) -> None:
        self._x_combo.setCurrentIndex(list(XAxis).index(XAxis(mode)))

    def plot_widgets(self) -> list[pg.PlotWidget]:
        """Every plot, shown or spare (their colours follow the palette)."""
        return ([p.widget for p in self._plots.values()] + [s.widget for s in self._spares]
                + [self._lr_plot, self._rate_plot])

    @property
    def colors(self) -> PlotColors:
        return self._colors

    # -- colours -------------------------------------------------------------------

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            colors = plot_colors(self.palette())
            if colors != self._colors:  # light <-> dark: the plots draw explicit colours
                self._colors = colors
                self._apply_colors()

    def _apply_colors(self) -> None:
        colors = self._colors
        self._key.setText(
            f'<span style="color:{colors.train}">━ train (smoothed; raw faint)</span>'
            f'&nbsp;&nbsp;<span style="color:{colors.train}">┄● train (epoch)</span>'
            f'&nbsp;&nbsp;<span style="color:{colors.val}">━● validation</span>&nbsp;&nbsp;'
            f'<span style="color:{colors.best}">★ best epoch</span>')
        for plot in [*self._plots.values(), *self._spares]:
            color_plot(plot.widget, colors)
            self._color_shell(plot)
        for widget in (self._lr_plot, self._rate_plot):
            color_plot(widget, colors, "10pt")
        self._lr_curve.setPen(pg.mkPen(colors.lr, width=2))
        self._rate_curve.setPen(pg.mkPen(colors.rate, width=1.5))

    def _color_shell(self, plot: _FamilyPlot) -> None:
        colors = self._colors
        train = pg.QtGui.QColor(colors.train)
        faint = pg.QtGui.QColor(train)
        faint.setAlpha(70)
        roles = plot.roles
        roles["batch"].setPen(pg.mkPen(faint, width=1))
        roles["smoothed"].setPen(pg.mkPen(train, width=2))
        roles["epoch"].setPen(pg.mkPen(train, width=1, style=Qt.PenStyle.DashLine))
        roles["epoch"].setSymbolBrush(train)
        roles["val"].setPen(pg.mkPen(colors.val, width=2.5))
        roles["val"].setSymbolBrush(colors.val)
        plot.best_line.setPen(pg.mkPen(colors.best, width=1, style=Qt.PenStyle.DashLine))
        label = plot.best_line.label
        label.setColor(colors.best)
        label.fill = pg.mkBrush(*colors.fill(220))
        label.update()
        plot.best_marker.setSymbolBrush(colors.best)
        plot.best_marker.setSymbolPen(pg.mkPen(colors.background, width=1))

    # -- building ------------------------------------------------------------------

    def _build_controls(self) -> None:
        self._controls = row = QHBoxLayout()
        row.addWidget(QLabel("Smoothing"))
        self._smoothing_slider = slider = QSlider(Qt.Orientation.Horizontal)
        slider.setRange(0, 99)
        slider.setValue(round(self._smoothing * 100))
        slider.setMaximumWidth(160)
        # In characters, not pixels: stays usable when the row is crowded, at any font size.
        slider.setMinimumWidth(slider.fontMetrics().horizontalAdvance("0") * 8)
        slider.setAccessibleName("Smoothing")
        slider.setToolTip("Exponential moving average of the per-batch train curve; "
                          "the raw curve stays visible, faint")
        slider.valueChanged.connect(self._on_smoothing)
        row.addWidget(slider)
        self._smoothing_label = QLabel(f"{self._smoothing:.2f}")
        self._smoothing_label.setMinimumWidth(32)
        row.addWidget(self._smoothing_label)
        row.addSpacing(12)
        self._log_check = QCheckBox("Log scale")
        self._log_check.setToolTip("Logarithmic y axis on the metric plots; values <= 0 "
                                   "are left out")
        self._log_check.toggled.connect(self._on_log_y)
        row.addWidget(self._log_check)
        row.addSpacing(12)
        row.addWidget(QLabel("X axis"))
        self._x_combo = QComboBox()
        self._x_combo.addItems(["Epoch", "Step", "Wall time"])
        self._x_combo.setAccessibleName("X axis")
        self._x_combo.currentIndexChanged.connect(self._on_x_axis)
        row.addWidget(self._x_combo)
        row.addStretch(1)
        # The key sits outside the plots, so it never hides a curve or the best point.
        self._key = key = QLabel()  # its text is coloured with the curves (_apply_colors)
        key.setAccessibleName("Curve key")
        row.addWidget(key)

    def _build_fixed_plots(self) -> None:
        colors = self._colors
        self._lr_plot = pg.PlotWidget()
        _style_plot(self._lr_plot, "learning rate")
        self._lr_plot.setTitle("Learning rate", color=colors.text, size="10pt")
        self._lr_curve = self._lr_plot.plot(pen=pg.mkPen(colors.lr, width=2), antialias=True)
        self._rate_plot = pg.PlotWidget()
        _style_plot(self._rate_plot, "samples/s")
        self._rate_plot.setLabel("bottom", X_LABELS[XAxis.WALL], color=colors.text)
        self._rate_curve = _batch_curve(pg.mkPen(colors.rate, width=1.5))
        self._rate_plot.addItem(self._rate_curve)
        _thin_when_dense(self._rate_curve)
        self._lr_plot.setLabel("bottom", X_LABELS[self._x_axis], color=colors.text)
        for widget, name in ((self._lr_plot, "Learning rate plot"),
                             (self._rate_plot, "Throughput plot")):
            widget.setAccessibleName(name)
            widget.setMaximumHeight(220)

    def _make_shell(self, title: str = "") -> _FamilyPlot:
        """A plot with its four curves and best-epoch items, not yet bound to a family.

        Building a PlotWidget and painting it the first time are the costliest GUI work of
        a run (py-spy); spare shells are built and shown empty before the run starts.
        """
        widget = pg.PlotWidget()
        widget.setAccessibleName(f"{title or 'Metric'} plot")
        _style_plot(widget, title.lower())
        widget.setTitle(title, size="11pt")
        widget.setLabel("bottom", X_LABELS[self._x_axis])
        item = widget.getPlotItem()
        plot = _FamilyPlot(widget)
        specs = [  # pens and brushes: _color_shell
            ("batch", _batch_curve(None), "train (batch)"),
            ("smoothed", _batch_curve(None), "train (smoothed)"),
            ("epoch", pg.PlotDataItem(symbol="o", symbolSize=6, symbolPen=None, antialias=True),
             "train (epoch)"),
            ("val", pg.PlotDataItem(symbol="o", symbolSize=7, symbolPen=None, antialias=True),
             "validation"),
        ]
        for role, curve, label in specs:
            curve.opts["name"] = label
            item.addItem(curve)
            if role in ("batch", "smoothed"):
                _thin_when_dense(curve)
            plot.roles[role] = curve
        # The best epoch is its own one-point item, so no downsampling can thin it away.
        plot.best_line = pg.InfiniteLine(
            angle=90, label="",
            # Left of the line, half-way up: the best epoch is often the newest (right edge),
            # and a converging curve leaves the right half's middle empty.
            labelOpts={"position": 0.5, "anchors": [(1.04, 0.5), (1.04, 0.5)]})
        plot.best_marker = pg.PlotDataItem(pen=None, symbol="star", symbolSize=18,
                                           antialias=True)
        for best_item in (plot.best_line, plot.best_marker):
            best_item.setZValue(10)
            best_item.setVisible(False)
            item.addItem(best_item, ignoreBounds=best_item is plot.best_line)
        color_plot(widget, self._colors)
        self._color_shell(plot)
        return plot

    def _add_family(self, family: str) -> None:
        plot = self._spares.pop(0) if self._spares else self._make_shell()
        widget = plot.widget
        widget.setAccessibleName(f"{_title(family)} plot")
        if widget.getPlotItem().titleLabel.text != _title(family):
            widget.setTitle(_title(family), color=self._colors.text, size="11pt")
            widget.setLabel("left", family, color=self._colors.text)
        widget.getPlotItem().setLogMode(y=self._log_y)
        plot.curves = {family: plot.roles["batch"], f"{family}:smoothed": plot.roles["smoothed"],
                       f"{family}:epoch": plot.roles["epoch"], f"val_{family}": plot.roles["val"]}
        self._dirty.update(plot.curves)
        if self._plots:
            widget.setXLink(next(iter(self._plots.values())).widget)
        else:
            self._lr_plot.setXLink(widget)
        self._plots[family] = plot
        self._apply_x_range()
        self._families.append(family)  # sorted is stable: first seen first within a rank
        self._families.sort(key=_family_rank)
        self._relayout()
        self._best_dirty = True

    def _relayout(self) -> None:
        shown = [self._plots[f].widget for f in self._families] or [
            spare.widget for spare in self._spares[:2]]
        for spare in self._spares:
            if spare.widget not in shown:
                self._grid.removeWidget(spare.widget)
                spare.widget.hide()
        columns = max(2, min(3, len(shown)))
        for index, widget in enumerate(shown):
            self._grid.addWidget(widget, index // columns, index % columns)
            widget.show()
        last = (len(shown) - 1) // columns + 1
        half = columns // 2
        self._grid.addWidget(self._lr_plot, last, 0, 1, half)
        self._grid.addWidget(self._rate_plot, last, half, 1, columns - half)
        for row in range(last + 1):
            self._grid.setRowStretch(row, 3 if row < last else 2)

    # -- data --------------------------------------------------------------------

    def _append(self, name: str, x_epoch: float, x_step: float, x_wall: float,
                y: float) -> None:
        buffer = self._series.get(name)
        if buffer is None:
            buffer = self._series[name] = SeriesBuffer()
        buffer.append(x_epoch, x_step, x_wall, y)
        self._dirty.add(name)

    def _ensure_family(self, family: str) -> None:
        if family not in self._plots:
            self._add_family(family)

    def _wall(self, t: float) -> float:
        if self._t_origin is None:
            self._t_origin = t
        self._last_wall = max(self._last_wall, t - self._t_origin)
        return t - self._t_origin

    def _ingest(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self._on_run_started(event)
        elif isinstance(event, BatchEnd):
            self._steps = event.steps or self._steps
            steps = max(self._steps, 1)
            xs = (event.epoch + (event.batch + 1) / steps, event.epoch * steps + event.batch + 1,
                  self._wall(event.t))
            metrics, lr = _without_lr(event.metrics, event.learning_rate)
            for name, value in metrics.items():
                self._ensure_family(family_of(name))
                self._append(name, *xs, value)
                self._append_smoothed(name, xs, value)
            if lr is not None:
                self._append("learning_rate", *xs, lr)
            self._append("samples_per_s", *xs, event.samples_per_s)
        elif isinstance(event, EpochEnd):
            steps = max(self._steps, 1)
            xs = (event.epoch + 1.0, (event.epoch + 1.0) * steps, self._wall(event.t))
            metrics, lr = _without_lr(event.metrics, event.learning_rate)
            for name, value in metrics.items():
                self._ensure_family(family_of(name))
                key = name if name.startswith("val_") else f"{name}:epoch"
                self._append(key, *xs, value)
            if lr is not None:
                self._append("learning_rate", *xs, lr)
            if event.best:
                self._best_epoch, self._best_dirty = event.epoch, True
        elif isinstance(event, RunFinished) and event.best_epoch is not None:
            self._best_epoch, self._best_metric = event.best_epoch, event.best_metric
            self._best_dirty = True

    def _on_run_started(self, event: RunStarted) -> None:
        has_data = any(len(b) for b in self._series.values())
        if has_data and event.initial_epoch == 0:
            self.reset()  # a new run, not a resume: start clean
            has_data = False
        self._steps = event.steps_per_epoch or self._steps
        self._epochs = event.epochs
        self._apply_x_range()
        if not has_data:
            self._t_origin = event.t
            return
        # A resume continues the curves: drop what the stopped session did of the epoch
        # it did not finish, and let wall time go on from where it stopped.
        for name, buffer in self._series.items():
            keep = int(np.searchsorted(buffer.column(X_EPOCH), event.initial_epoch + 1e-9))
            if keep < len(buffer):
                buffer.truncate(keep)
                self._dirty.add(name)
                if name.endswith(":smoothed"):
                    self._recompute_smoothing(name.removesuffix(":smoothed"))
        if self._best_epoch is not None and self._best_epoch >= event.initial_epoch:
            self._best_epoch = None
        self._best_dirty = True
        self._t_origin = event.t - self._last_wall

    def _append_smoothed(self, name: str, xs: tuple[float, float, float], value: float) -> None:
        last, count = self._ema_state.get(name, (0.0, 0))
        weight = self._smoothing
        smoothed = math.nan
        if math.isfinite(value):
            last, count = last * weight + (1 - weight) * value, count + 1
            smoothed = last / (1 - weight**count)
        self._ema_state[name] = (last, count)
        self._append(f"{name}:smoothed", *xs, smoothed)

    def _recompute_smoothing(self, name: str) -> None:
        raw, smooth = self._series.get(name), self._series.get(f"{name}:smoothed")
        if raw is None or smooth is None:
            return
        values = raw.column(Y)
        smooth.truncate(len(values))
        smooth.column(Y)[:], last, count = ema(values, self._smoothing)
        self._ema_state[name] = (last, count)
        self._dirty.add(f"{name}:smoothed")

    # -- drawing -------------------------------------------------------------------

    def _refresh_next(self) -> None:
        self._refresh(plots=1)

    def _refresh(self, *, plots: int | None = None) -> None:
        """Redraw the curves whose data or display changed since the last redraw, in at most
        `plots` plots (all by default); the rest stay dirty for the next call."""
        budget = math.inf if plots is None else plots
        dirty = self._dirty
        for plot in self._plots.values():
            names = dirty.intersection(plot.curves)
            if not names:
                continue
            if budget <= 0:
                return
            for name in names:
                self._set_curve(plot.curves[name], *self.series(name), log=self._log_y)
            dirty -= names
            budget -= 1
        if "learning_rate" in dirty and budget > 0:
            dirty.discard("learning_rate")
            budget -= 1
            x, y = self.series("learning_rate")
            self._set_curve(self._lr_curve, x, y, log=False)
            top = float(np.nanmax(y)) if len(y) and np.isfinite(y).any() else 0.0
            # From zero up: a constant rate otherwise autoscales to a meaningless band.
            self._lr_plot.setYRange(0.0, top * 1.15 if top > 0 else 1.0, padding=0)
        if "samples_per_s" in dirty and budget > 0:
            dirty.discard("samples_per_s")
            budget -= 1
            buffer = self._series["samples_per_s"]
            self._set_curve(self._rate_curve, buffer.column(X_WALL) / 60.0, buffer.column(Y),
                            log=False)
        if budget <= 0:
            return
        dirty.clear()  # what is left is shown by no plot
        if self._best_dirty:
            self._best_dirty = False
            self._draw_best()

    @staticmethod
    def _set_curve(curve: pg.PlotDataItem, x: np.ndarray, y: np.ndarray, *, log: bool) -> None:
        # Non-finite values (and non-positive ones on a log axis) are left out: a NaN
        # would blank a whole bucket of the peak downsampling.
        keep = np.isfinite(y) & np.isfinite(x)
        if log:
            keep &= y > 0
        if not keep.all():
            x, y = x[keep], y[keep]
        curve.setData(x, y)

    def _draw_best(self) -> None:
        epoch = self._best_epoch
        monitored = family_of(self._best_metric or "val_loss")
        for family, plot in self._plots.items():
            point = None if epoch is None else self._epoch_point(family, epoch)
            if point is None or (self._log_y and point[1] <= 0):
                plot.best_marker.setVisible(False)
                plot.best_line.setVisible(point is not None)
                if point is not None:
                    plot.best_line.setValue(point[0])
                continue
            x, y, name = point
            plot.best_marker.setData([x], [y])
            plot.best_marker.setVisible(True)
            plot.best_line.setVisible(True)  # first: a hidden label ignores its new text
            plot.best_line.setValue(x)
            text = f"best: epoch {epoch + 1}"
            if family == monitored:
                text += f"  {name} {y:.4g}"
            plot.best_line.label.setFormat(text)

    def _epoch_point(self, family: str, epoch: int) -> tuple[float, float, str] | None:
        """Where epoch `epoch` ended on the validation curve (else the train epoch curve)."""
        for name in (f"val_{family}", f"{family}:epoch"):
            buffer = self._series.get(name)
            if buffer is None or not len(buffer):
                continue
            hits = np.flatnonzero(buffer.column(X_EPOCH) == epoch + 1.0)
            if len(hits):
                x, y = self.series(name)
                return float(x[hits[-1]]), float(y[hits[-1]]), name.removesuffix(":epoch")
        return None

    # -- controls ------------------------------------------------------------------

    def _on_smoothing(self, value: int) -> None:
        self._smoothing = value / 100
        self._smoothing_label.setText(f"{self._smoothing:.2f}")
        for name in list(self._series):
            if name.endswith(":smoothed"):
                self._recompute_smoothing(name.removesuffix(":smoothed"))
        self._refresh()

    def _on_log_y(self, on: bool) -> None:
        self._log_y = on
        for plot in self._plots.values():
            plot.widget.getPlotItem().setLogMode(y=on)
        self._redraw_all()

    def _on_x_axis(self, index: int) -> None:
        self._x_axis = list(XAxis)[index]
        for plot in [*self._plots.values()]:
            plot.widget.setLabel("bottom", X_LABELS[self._x_axis], color=self._colors.text)
        self._lr_plot.setLabel("bottom", X_LABELS[self._x_axis], color=self._colors.text)
        self._redraw_all()
        for widget in [p.widget for p in self._plots.values()] + [self._lr_plot]:
            widget.getPlotItem().enableAutoRange()
        self._apply_x_range()

    def _apply_x_range(self) -> None:
        """By epoch or step the run's whole x range is known from the start: fix it, so
        the x axes are not re-rendered on every redraw (axis text is the costliest paint,
        measured with py-spy during a run). Wall time keeps autoscaling."""
        span = {XAxis.EPOCH: self._epochs, XAxis.STEP: self._epochs * max(self._steps, 1)}.get(
            self._x_axis)
        for widget in [p.widget for p in self._plots.values()] + [self._lr_plot]:
            item = widget.getPlotItem()
            if span:
                item.enableAutoRange(x=False)
                item.setXRange(0, span, padding=0.02)
            else:
                item.enableAutoRange(x=True)

    def _redraw_all(self) -> None:
        self._dirty.update(self._series)
        self._best_dirty = True
        self._refresh()
