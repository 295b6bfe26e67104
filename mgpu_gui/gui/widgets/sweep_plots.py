"""The Sweep view's plots: each swept setting against the metric, and parallel coordinates.

Both draw core/sweeps/plots.py's data, one point or line per finished trial at its
values: the scatter on the setting's own axis (a log axis for a log range, the
values' names for categories), the parallel coordinates as one line per trial
through every swept setting to the metric, coloured by the metric (the Compare
dialog's colour scale: viridis kept readable on the background). The best trial
is the star, or the thick line. Grouped, the scatter shows each setting's repeats
as their mean and spread instead. Both follow light and dark schemes and have
the plot export menu.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from mgpu_gui.core.runs.compare import setting_text
from mgpu_gui.core.sweeps.plots import Axis, Scatter, parallel_data, scatter_data
from mgpu_gui.core.sweeps.results import SweepResults
from mgpu_gui.core.sweeps.space import Parameter
from mgpu_gui.gui.theme import changed_plot_colors, plot_colors
from mgpu_gui.gui.widgets.plot_export import install_export
from mgpu_gui.gui.widgets.plots import color_plot, keep_edges_whole
from mgpu_gui.gui.widgets.setting_colors import color_by_setting
from mgpu_gui.gui.widgets.setting_names import setting_label

LABEL_STEP = 0.04  # a parallel axis' value labels sit this far right of it (x units)


class _SweepPlot(QWidget):
    """A themed plot with the export menu; subclasses draw in `redraw`."""

    def __init__(self, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.results: SweepResults | None = None
        self.parameters: tuple[Parameter, ...] = ()
        self.plot = pg.PlotWidget()
        self.plot.setAccessibleName(name)
        self.plot.setMinimumSize(260, 200)
        install_export(self.plot)
        self.colors = plot_colors(self.palette())
        self.item = self.plot.getPlotItem()
        for side in ("left", "bottom"):
            self.item.getAxis(side).enableAutoSIPrefix(False)
        keep_edges_whole(self.item)
        self.note = QLabel(wordWrap=True)
        self.note.setProperty("role", "hint")
        self.note.setAccessibleName(f"{name} note")
        self._style()

    def set_data(self, results: SweepResults, parameters: Sequence[Parameter]) -> None:
        self.results, self.parameters = results, tuple(parameters)
        self.redraw()

    def redraw(self) -> None:
        raise NotImplementedError

    def _clear(self) -> None:
        self.item.clear()
        self.say("No trial has finished with a value yet.")

    def say(self, text: str) -> None:
        """The line under the plot: what the marks mean (a legend inside would hide some)."""
        self.note.setText(text)

    def _style(self) -> None:
        color_plot(self.plot, self.colors)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        colors = changed_plot_colors(self, event, self.colors)
        if colors is not None:  # light <-> dark: redraw in the new colours
            self.colors = colors
            self._style()
            self.redraw()


class SweepScatter(_SweepPlot):
    """One swept setting (chosen above the plot) against the trials' best metric."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Sweep scatter plot", parent)
        self.grouped = False
        self.scatters: tuple[Scatter, ...] = ()
        self.points: pg.PlotDataItem | None = None  # the finished trials (not grouped)
        self.setting_combo = QComboBox()
        self.setting_combo.setAccessibleName("Setting on the x axis")
        self.setting_combo.setToolTip("The swept setting the scatter plots the metric against")
        self.setting_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        label = QLabel("&x axis")
        label.setBuddy(self.setting_combo)
        controls = QHBoxLayout()
        controls.addWidget(label)
        controls.addWidget(self.setting_combo)
        controls.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(controls)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.note)
        self.setting_combo.currentIndexChanged.connect(lambda _: self.redraw())

    def set_grouped(self, grouped: bool) -> None:
        self.grouped = grouped
        self.redraw()

    def set_data(self, results: SweepResults, parameters: Sequence[Parameter]) -> None:
        self.scatters = scatter_data(results, parameters)
        shown = self.setting_combo.currentData()
        self.setting_combo.blockSignals(True)
        self.setting_combo.clear()
        for scatter in self.scatters:
            self.setting_combo.addItem(setting_label(scatter.axis.name), scatter.axis.name)
        self.setting_combo.setCurrentIndex(max(0, self.setting_combo.findData(shown)))
        self.setting_combo.blockSignals(False)
        self.setting_combo.setEnabled(len(self.scatters) > 1)
        super().set_data(results, parameters)

    def redraw(self) -> None:
        self._clear()
        self.points = None
        index = self.setting_combo.currentIndex()
        if self.results is None or not 0 <= index < len(self.scatters):
            return
        scatter, results = self.scatters[index], self.results
        axis = scatter.axis
        self.item.setLogMode(x=axis.log)
        self.item.getAxis("bottom").setTicks(_ticks(axis))
        self.item.setLabel("bottom", setting_label(axis.name), color=self.colors.text)
        self.item.setLabel("left", f"best {results.metric}", color=self.colors.text)
        if self.grouped:
            self._draw_groups(axis)
        else:
            self._draw_trials(scatter)
        self._hold_x(axis)
        self.item.enableAutoRange(y=True)

    def _draw_trials(self, scatter: Scatter) -> None:
        assert self.results is not None
        self.points = self.item.plot(
            scatter.xs, scatter.ys, pen=None, symbol="o", symbolSize=8, symbolPen=None,
            symbolBrush=self.colors.val)
        best = self.results.best
        if best is None or best.trial.index not in scatter.trials:
            return
        at = scatter.trials.index(best.trial.index)
        self._star(scatter.xs[at], scatter.ys[at])
        self.say(f"{self._mark('●', self.colors.val)} each finished trial's best "
                 f"{self.results.metric}; {self._mark('★', self.colors.best)} the best, "
                 f"trial #{best.trial.number}")

    def _draw_groups(self, axis: Axis) -> None:
        assert self.results is not None
        groups = [g for g in self.results.groups if g.mean is not None]
        xs = [axis.coordinate(g.values[axis.name]) for g in groups]
        means = [g.mean for g in groups]
        self.item.plot(xs, means, pen=None, symbol="o", symbolSize=10, symbolPen=None,
                       symbolBrush=self.colors.val)
        # Each setting's spread (one sd) as a vertical segment through its mean.
        self.item.plot(np.repeat(xs, 2), [v for g in groups for v in (g.low, g.high)],
                       connect="pairs", pen=pg.mkPen(self.colors.val, width=2))
        best = [i for i, g in enumerate(groups) if g.is_best]
        if best:
            self._star(xs[best[0]], means[best[0]])
        if groups:
            self.say(f"{self._mark('●', self.colors.val)} the mean of a setting's repeats' "
                     f"best {self.results.metric}, the bar ±1 sd"
                     + (f"; {self._mark('★', self.colors.best)} the best setting"
                        if best else ""))

    def _star(self, x: float, y: float) -> None:
        self.item.plot([x], [y], pen=None, symbol="star", symbolSize=18,
                       symbolBrush=self.colors.best, symbolPen=pg.mkPen(self.colors.text))

    @staticmethod
    def _mark(symbol: str, color: str) -> str:
        return f"<span style='color:{color}'>{symbol}</span>"

    def _hold_x(self, axis: Axis) -> None:
        """The setting's declared span, so points do not jump while a sweep fills in."""
        if axis.categories:
            self.item.setXRange(-0.5, len(axis.categories) - 0.5, padding=0)
        elif axis.high > axis.low:
            ends = np.log10([axis.low, axis.high]) if axis.log else (axis.low, axis.high)
            self.item.setXRange(*ends, padding=0.06)
        else:
            self.item.enableAutoRange(x=True)


class SweepParallel(_SweepPlot):
    """Parallel coordinates: an axis per swept setting, the metric's last; a line per
    finished trial, coloured by its metric, the best one thick."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Sweep parallel coordinates", parent)
        self.lines: list[pg.PlotDataItem] = []  # one per finished trial, in trial order
        self.item.hideAxis("left")
        self.item.setMouseEnabled(x=False, y=False)  # the axes are fixed; nothing to zoom
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.note)

    def redraw(self) -> None:
        self._clear()
        self.lines = []
        if self.results is None:
            return
        data = parallel_data(self.results, self.parameters)
        count = len(data.axes)
        self.item.getAxis("bottom").setTicks([[
            (i, setting_label(a.name) if i < count - 1 else f"best {a.name}")
            for i, a in enumerate(data.axes)]])
        for i, axis in enumerate(data.axes):
            self.item.plot([i, i], [0.0, 1.0], pen=pg.mkPen(self.colors.axis, width=1))
            for position, text in _axis_labels(axis):
                label = pg.TextItem(text, color=self.colors.text, anchor=(0, 0.5),
                                    fill=pg.mkBrush(*self.colors.fill(200)))
                label.setPos(i + LABEL_STEP, position)
                label.setZValue(10)  # over the lines that cross the axis there
                self.item.addItem(label)
        lines = data.lines
        colors = color_by_setting(self.results.metric, [line.value for line in lines],
                                  self.colors)
        order = sorted(range(len(lines)), key=lambda k: lines[k].is_best)  # the best on top
        drawn: dict[int, pg.PlotDataItem] = {}
        for k in order:
            line = lines[k]
            drawn[k] = self.item.plot(
                list(range(count)), list(line.positions), antialias=True,
                pen=pg.mkPen(colors.colors[k], width=5 if line.is_best else 2))
        self.lines = [drawn[k] for k in range(len(lines))]
        if lines:
            prefix = f"{self.results.metric} = "  # the legend's words, said once here
            self.say(f"Colour by best {html.escape(self.results.metric)}: " + "  ".join(
                f"<span style='color:{color}'>■</span> {html.escape(text.removeprefix(prefix))}"
                for text, color in colors.legend) + "; thick: the best trial")
        self.item.setXRange(-0.35, count - 1 + 0.45, padding=0)
        self.item.setYRange(-0.06, 1.06, padding=0)


def _ticks(axis: Axis) -> list[list[tuple[float, str]]] | None:
    """Categories by name; a log axis at its decades and ends (pyqtgraph labels the minor
    ticks of a short log axis too, and they overlap); None: pyqtgraph's own."""
    if axis.categories:
        return [list(enumerate(axis.categories))]
    if not axis.log or axis.high <= axis.low:
        return None
    low, high = math.log10(axis.low), math.log10(axis.high)
    decades = range(math.ceil(low - 1e-9), math.floor(high + 1e-9) + 1)
    places = sorted({low, high, *decades})
    # An end crowding its neighbouring decade goes unlabelled: the decade says enough.
    shown = [p for p in places if p in decades or all(
        abs(p - d) > 0.3 for d in decades)]
    return [[(p, setting_text(10 ** p)) for p in shown]]


def _axis_labels(axis: Axis) -> list[tuple[float, str]]:
    """Where an axis says its values: each category, or its two ends."""
    if axis.categories:
        return [(axis.position(c), c) for c in axis.categories] if len(axis.categories) > 1 \
            else [(0.5, axis.categories[0])]
    if axis.high <= axis.low:
        return [(0.5, setting_text(axis.low))]
    return [(0.0, setting_text(axis.low)), (1.0, setting_text(axis.high))]
