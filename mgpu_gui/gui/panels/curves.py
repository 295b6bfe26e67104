"""Live training curves: one plot per metric family, learning rate and throughput.

The series live in a `SeriesStore` (mgpu_gui.core.series, where the series
names are listed): events only append to its numpy buffers and mark what
changed. A 25 ms timer redraws the changed curves of one plot per tick, so a
burst of events costs one `setData` per curve. The timer runs from RunStarted
to RunFinished/RunFailed (or `shutdown()`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QTimer
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.events import BatchEnd, EpochEnd, Event, RunFailed, RunFinished, RunStarted
from mgpu_gui.core.runs.telemetry_store import RunTelemetry
from mgpu_gui.core.series import SeriesStore, XAxis, family_of
from mgpu_gui.gui.theme import PlotColors, changed_plot_colors, plot_colors
from mgpu_gui.gui.widgets.curve_controls import SMOOTHING, CurveControls
from mgpu_gui.gui.widgets.family_plot import FamilyPlot, color_stage, show_stage, stage_marker
from mgpu_gui.gui.widgets.plot_export import install_export
from mgpu_gui.gui.widgets.plots import (
    EdgeViewBox,
    SparseAxis,
    batch_curve,
    blank_range,
    color_plot,
    fold_title,
    set_title,
    style_plot,
    thin_when_dense,
)
from mgpu_gui.gui.widgets.telemetry_plot import TelemetryPlot

# The timer redraws one plot per tick: a window repaint then paints one plot (~10 ms on
# 2 cores, measured), never all four at once (30-80 ms, a visible stall); every plot still
# catches up within 4 ticks of new data.
REFRESH_MS = 25
WALL_PLOT_MIN_WIDTH = 140
TITLE_ROOM_PX = 190  # a plot row shorter than this shows no title row
X_LABELS = {XAxis.EPOCH: "epoch", XAxis.STEP: "step (batches)", XAxis.WALL: "time (min)"}


def _family_rank(family: str) -> int:
    return 0 if family == "loss" else 1 if "accuracy" in family else 2


def _title(family: str) -> str:
    return family.upper() if len(family) <= 3 else family.replace("_", " ").capitalize()


class CurvesPanel(QWidget):
    """Training curves of one run; feed it with `handle_event` or `load_events`."""

    def __init__(self, parent: QWidget | None = None, *,
                 controls: CurveControls | None = None) -> None:
        """`controls`: the row above the plots, made already (the window shows it before
        the plots are built: widgets/curves_slot.py)."""
        super().__init__(parent)
        self.setAccessibleName("Training curves")
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._refresh_next)
        self._shut_down = False
        self._colors = plot_colors(self.palette())
        self._store = SeriesStore(SMOOTHING)
        self._log_y = False
        self._x_axis = XAxis.EPOCH
        self._rows = 2  # rows of plots (_relayout)
        self._controls = controls or CurveControls(self._colors)
        self._key = self._controls.key
        self._controls.smoothing_changed.connect(self._on_smoothing)
        self._controls.log_y_changed.connect(self._on_log_y)
        self._controls.x_axis_changed.connect(self._on_x_axis)
        self._grid = QGridLayout()
        self._grid.setSpacing(4)
        self._build_fixed_plots()
        # Empty Loss and Accuracy frames until data arrive; the first families take them.
        self._spares = [self._make_shell("Loss"), self._make_shell("Accuracy")]
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self._controls)
        layout.addLayout(self._grid, 1)
        self._plots: dict[str, FamilyPlot] = {}
        self._families: list[str] = []
        self.reset()
        self._apply_colors()

    # -- public API ----------------------------------------------------------------

    def reset(self) -> None:
        """Forget all data (a new run); the controls keep their settings."""
        self._store.reset()
        self._dirty: set[str] = set()  # series to draw again: new data, or a display change
        self._best_dirty = True
        self.run_dir: Path | None = None  # the run shown: exported plots are named after it
        for family in self._families:  # back to the spares: built and painted already
            plot = self._plots[family]
            self._grid.removeWidget(plot.widget)
            plot.widget.setXLink(None)
            plot.clear()
            self._spares.append(plot)
        self._plots, self._families = {}, []
        self._lr_plot.setXLink(None)
        # The empty frames show no range of the run before: a new one holds its own span
        # from its RunStarted (_apply_x_range), a loaded one scales to its data.
        for widget in [s.widget for s in self._spares] + [self._lr_plot, self._rate_plot]:
            blank_range(widget.getPlotItem().getViewBox())
        self._relayout()
        for curve in (self._lr_curve, self._rate_curve):
            curve.setData([], [])
        show_stage(self._lr_stage, None, "")
        self._key.set_best("")
        self._telemetry.clear()
        # Its unit is on its axis: the title fits the half width it shares with the telemetry.
        set_title(self._rate_plot.getPlotItem(), "Throughput", color=self._colors.text,
                  size="10pt")

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

    def show_telemetry(self, telemetry: RunTelemetry, replace: bool) -> None:
        """The run's device telemetry (read from the store), under the curves."""
        self._telemetry.set_origin(self._store.t_origin)
        self._telemetry.add(telemetry, replace)

    @property
    def telemetry_plot(self) -> TelemetryPlot:
        return self._telemetry

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
        return self._store.xy(name, self._x_axis)

    def mark_fine_tuning(self, epoch: int | None) -> None:
        """A past run's first fine-tune epoch (0-based; from its config): its stored events
        hold no StageStarted."""
        self._store.fine_tune_epoch = epoch
        self._best_dirty = True
        self._refresh()

    def fine_tune_x(self) -> float | None:
        """Where the fine-tuning line is drawn on the current x axis (None: not drawn)."""
        return self._store.fine_tune_x(self._x_axis)

    def best_epoch(self) -> int | None:
        """The best validation epoch, 0-based as in the events (drawn at x = epoch + 1)."""
        return self._store.best_epoch

    def families(self) -> list[str]:
        return list(self._families)

    def set_smoothing(self, weight: float) -> None:
        self._controls.set_smoothing(weight)

    def set_log_y(self, on: bool) -> None:
        self._controls.set_log_y(on)

    def set_x_axis(self, mode: XAxis | str) -> None:
        self._controls.set_x_axis(mode)

    def plot_widgets(self) -> list[pg.PlotWidget]:
        """Every plot, shown or spare (their colours follow the palette)."""
        return ([p.widget for p in self._plots.values()] + [s.widget for s in self._spares]
                + [self._lr_plot, self._rate_plot, self._telemetry.widget])

    @property
    def colors(self) -> PlotColors:
        return self._colors

    # -- colours -------------------------------------------------------------------

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        colors = changed_plot_colors(self, event, self._colors)
        if colors is not None:  # light <-> dark: the plots draw explicit colours
            self._colors = colors
            self._apply_colors()

    def _apply_colors(self) -> None:
        colors = self._colors
        self._key.set_colors(colors)
        for plot in [*self._plots.values(), *self._spares]:
            plot.apply_colors(colors)
        for widget in (self._lr_plot, self._rate_plot):
            color_plot(widget, colors, "10pt")
        color_stage(self._lr_stage, colors)
        self._telemetry.apply_colors(colors)
        self._lr_curve.setPen(pg.mkPen(colors.lr, width=2))
        self._rate_curve.setPen(pg.mkPen(colors.rate, width=1.5))

    # -- building ------------------------------------------------------------------

    def _build_fixed_plots(self) -> None:
        colors = self._colors
        self._lr_plot = pg.PlotWidget(viewBox=EdgeViewBox())
        style_plot(self._lr_plot, "learning rate")
        self._lr_plot.setTitle("Learning rate", color=colors.text, size="10pt")
        self._lr_curve = self._lr_plot.plot(pen=pg.mkPen(colors.lr, width=2), antialias=True)
        self._lr_stage = stage_marker()  # the learning rate changes where fine-tuning begins
        self._lr_plot.addItem(self._lr_stage, ignoreBounds=True)
        self._rate_plot = pg.PlotWidget(axisItems={"bottom": SparseAxis()})
        style_plot(self._rate_plot, "samples/s")
        self._rate_plot.setLabel("bottom", X_LABELS[XAxis.WALL], color=colors.text)
        self._rate_curve = batch_curve(pg.mkPen(colors.rate, width=1.5))
        self._rate_plot.addItem(self._rate_curve)
        thin_when_dense(self._rate_curve)
        self._lr_plot.setLabel("bottom", X_LABELS[self._x_axis], color=colors.text)
        # Under the throughput, on its wall-time axis: what the run's devices did meanwhile.
        self._telemetry = TelemetryPlot(colors)
        self._telemetry.widget.setXLink(self._rate_plot)
        self._telemetry.widget.setLabel("bottom", X_LABELS[XAxis.WALL], color=colors.text)
        for widget, name in ((self._lr_plot, "Learning rate plot"),
                             (self._rate_plot, "Throughput plot")):
            widget.setAccessibleName(name)
            install_export(widget, lambda: self.run_dir)
        install_export(self._telemetry.widget, lambda: self.run_dir)
        # The throughput and the telemetry side by side, under the metric plots right of the
        # first: the learning rate stays under the first, as wide, so its linked x axis
        # lines up with it (pyqtgraph aligns linked views that overlap by their pixels).
        self._wall_plots = QWidget()
        row = QHBoxLayout(self._wall_plots)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(self._grid.spacing())
        for widget in (self._rate_plot, self._telemetry.widget):
            widget.setMinimumWidth(WALL_PLOT_MIN_WIDTH)  # two where one metric plot is
            row.addWidget(widget)

    def _make_shell(self, title: str = "") -> FamilyPlot:
        plot = FamilyPlot.build(title, X_LABELS[self._x_axis], self._colors)
        install_export(plot.widget, lambda: self.run_dir)
        return plot

    def _add_family(self, family: str) -> None:
        plot = self._spares.pop(0) if self._spares else self._make_shell()
        widget = plot.widget
        widget.setAccessibleName(f"{_title(family)} plot")
        if widget.getPlotItem().titleLabel.text != _title(family):
            widget.setTitle(_title(family), color=self._colors.text, size="11pt")
            widget.setLabel("left", family, color=self._colors.text)
        widget.getPlotItem().setLogMode(y=self._log_y)
        plot.bind(family)
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

    def readable_height(self) -> int:
        """The height under which a plot would show less than READABLE_DATA_PX of data
        (titles folded, rows equal)."""
        return self._controls.readable_height(self._rows)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit_titles()

    def _fit_titles(self) -> None:
        """Plots shorter than TITLE_ROOM_PX give their title row to the data, and every
        row gets the same height (a laptop screen at 125 %: 1024x576 logical); each y
        axis's title still names its plot. Taller, the metric plots get more height than
        the learning rate and throughput row."""
        available = self.height() - self._controls.sizeHint().height()
        shortest = available * 2 / (3 * (self._rows - 1) + 2)  # the last row, at 3:2
        fold = self.height() > 0 and shortest < TITLE_ROOM_PX
        for widget in self.findChildren(pg.PlotWidget):
            fold_title(widget.getPlotItem(), fold)
        last = self._rows - 1
        for row in range(self._rows):
            self._grid.setRowStretch(row, 1 if fold else (3 if row < last else 2))

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
        self._grid.addWidget(self._wall_plots, last, half, 1, columns - half)
        self._rows = last + 1
        self._fit_titles()
        for column in range(3):  # equal, whatever the wall plots' width hints say
            self._grid.setColumnStretch(column, int(column < columns))

    # -- data --------------------------------------------------------------------

    def _ingest(self, event: Event) -> None:
        if isinstance(event, RunStarted) and event.initial_epoch == 0 and self._store.has_data():
            self.reset()  # a new run, not a resume: start clean
        for family in self._store.ingest(event):
            self._add_family(family)
        if isinstance(event, RunStarted):
            self.run_dir = Path(event.run_dir)
            self._apply_x_range()

    # -- drawing -------------------------------------------------------------------

    def _refresh_next(self) -> None:
        self._refresh(plots=1)

    def _refresh(self, *, plots: int | None = None) -> None:
        """Redraw the curves whose data or display changed since the last redraw, in at most
        `plots` plots (all by default); the rest stay dirty for the next call."""
        budget = math.inf if plots is None else plots
        dirty = self._dirty
        dirty |= self._store.take_changed()
        self._best_dirty |= self._store.take_best_changed()
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
            self._set_curve(self._rate_curve, *self._store.xy("samples_per_s", XAxis.WALL),
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
        """The best epoch's marks, and the line where fine-tuning began."""
        stage_x = self.fine_tune_x()
        stage_text = ("" if self._store.fine_tune_epoch is None else
                      f"fine-tuning from epoch {self._store.fine_tune_epoch + 1}")
        show_stage(self._lr_stage, stage_x, stage_text)
        for plot in self._plots.values():
            plot.show_stage(stage_x, stage_text)
        epoch = self._store.best_epoch
        monitored = family_of(self._store.best_metric or "val_loss")
        best = "" if epoch is None else f"epoch {epoch + 1}"
        for family, plot in self._plots.items():
            point = None if epoch is None else self._store.epoch_point(family, epoch, self._x_axis)
            if point is None:
                plot.hide_best()
                continue
            x, y, name = point
            if family == monitored:
                best += f", {name} {y:.4g}"
            plot.show_best(x, None if self._log_y and y <= 0 else y)
        self._key.set_best(best)

    # -- controls ------------------------------------------------------------------

    def _on_smoothing(self, weight: float) -> None:
        self._store.set_smoothing(weight)
        self._refresh()

    def _on_log_y(self, on: bool) -> None:
        self._log_y = on
        for plot in self._plots.values():
            plot.widget.getPlotItem().setLogMode(y=on)
        self._redraw_all()

    def _on_x_axis(self, mode: XAxis) -> None:
        self._x_axis = mode
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
        epochs, steps = self._store.epochs, max(self._store.steps, 1)
        span = {XAxis.EPOCH: epochs, XAxis.STEP: epochs * steps}.get(
            self._x_axis)
        # The spares too: the empty frames a new run shows until its first batch.
        plots = [*self._plots.values(), *self._spares]
        for widget in [p.widget for p in plots] + [self._lr_plot]:
            widget.getPlotItem().getViewBox().hold_x_span((0, span) if span else None)

    def _redraw_all(self) -> None:
        self._dirty.update(self._store.names())
        self._best_dirty = True
        self._refresh()
