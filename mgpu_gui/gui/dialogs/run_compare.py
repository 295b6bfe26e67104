"""Several stored runs side by side: a table of what sets them apart, and their curves.

The Runs tab opens it for two or more selected runs. The table (one row per
run, sortable) shows the settings that differ between them ("Show all
settings": every one), the best and final value of each metric, and the
environment facts that differ (core/runs/compare.py). The plot draws one
per-epoch metric (per-epoch values are comparable whatever the batch size or
number of replicas), coloured per run or by a chosen setting; "Group seeds"
draws runs that differ only by seed as their mean with a band
(core/runs/seed_bands.py). The runs are read off the GUI thread
(gui/jobs/compare_reader.py); the dialog says so meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.runs.compare import (
    ComparedRun,
    comparison_table,
    differing_settings,
    metric_choices,
)
from mgpu_gui.core.runs.seed_bands import BandKind, seed_band, seed_groups
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.jobs.compare_reader import CompareReadJob, CompareRequest
from mgpu_gui.gui.theme import changed_plot_colors, plot_colors
from mgpu_gui.gui.widgets.compare_table import ComparisonModel, comparison_view
from mgpu_gui.gui.widgets.plot_export import install_export
from mgpu_gui.gui.widgets.plots import color_plot
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen
from mgpu_gui.gui.widgets.setting_colors import color_by_setting

BY_RUN = "run"  # the colour combo's first choice: one palette colour per run
BAND_ALPHA = 60


class RunCompareView(QWidget):
    """The comparison table over a metric chooser and a plot with one curve per run (or per
    group of seeds) that has that metric."""

    def __init__(self, runs: Sequence[ComparedRun] = (), parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Run comparison")
        self.runs: list[ComparedRun] = []
        self.curves: list[pg.PlotDataItem] = []  # one per drawn run or group mean
        self.bands: list[pg.FillBetweenItem] = []  # one per group of seeds
        self._band_edges: list[pg.PlotDataItem] = []
        self.groups: list[list[int]] = []  # runs that differ only by seed, two or more

        self.all_settings = QCheckBox("Show &all settings")
        self.all_settings.setToolTip("Every setting and environment fact, not only those that "
                                     "differ between these runs (those are bold)")
        self.table_model = ComparisonModel(self)
        self.table = comparison_view(self.table_model)

        self.metric_combo = self._combo("Metric to compare",
                                        "The per-epoch metric drawn for every run")
        self.color_combo = self._combo("Colour by", "Colour the curves per run, or by one of "
                                       "the settings that differ (a scale for numbers)")
        self.log_check = QCheckBox("Log scale")
        self.log_check.setToolTip("Logarithmic y axis; values <= 0 are left out")
        self.group_check = QCheckBox("&Group seeds")
        self.band_combo = self._combo("Band", "The band around the seeds' mean")
        for kind in BandKind:
            self.band_combo.addItem(kind.words, kind)
        self.note = QLabel(wordWrap=True)
        self.note.setAccessibleName("Comparison note")
        self.plot = pg.PlotWidget()
        self.plot.setAccessibleName("Comparison plot")
        install_export(self.plot)
        self.colors = plot_colors(self.palette())
        item = self.plot.getPlotItem()
        for side in ("left", "bottom"):
            item.getAxis(side).enableAutoSIPrefix(False)
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setLabel("bottom", "epoch")
        self.legend = item.addLegend(offset=(-10, 10))
        self._color_legend()
        color_plot(self.plot, self.colors)

        controls = QHBoxLayout()
        for text, widget in (("&Metric", self.metric_combo), ("&Colour by", self.color_combo)):
            label = QLabel(text)
            label.setBuddy(widget)
            controls.addWidget(label)
            controls.addWidget(widget)
            controls.addSpacing(8)
        controls.addWidget(self.log_check)
        controls.addSpacing(8)
        controls.addWidget(self.group_check)
        controls.addWidget(self.band_combo)
        controls.addStretch(1)
        plot_part = QWidget()
        plot_layout = QVBoxLayout(plot_part)
        plot_layout.setContentsMargins(0, 0, 0, 0)
        plot_layout.addLayout(controls)
        plot_layout.addWidget(self.plot, 1)
        plot_layout.addWidget(self.note)
        table_part = QWidget()
        table_layout = QVBoxLayout(table_part)
        table_layout.setContentsMargins(0, 0, 0, 0)
        table_layout.addWidget(self.all_settings)
        table_layout.addWidget(self.table, 1)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(table_part)
        self.splitter.addWidget(plot_part)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.splitter)

        self.all_settings.toggled.connect(lambda _: self._fill_table())
        self.metric_combo.currentTextChanged.connect(lambda _: self.redraw())
        self.color_combo.currentTextChanged.connect(lambda _: self.redraw())
        self.log_check.toggled.connect(lambda _: self.redraw())
        self.group_check.toggled.connect(self._grouping_toggled)
        self.band_combo.currentIndexChanged.connect(lambda _: self.redraw())
        self.set_runs(runs)

    @staticmethod
    def _combo(name: str, tip: str) -> QComboBox:
        combo = QComboBox()
        combo.setAccessibleName(name)
        combo.setToolTip(tip)
        combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        return combo

    def set_runs(self, runs: Sequence[ComparedRun]) -> None:
        self.runs = list(runs)
        self.groups = [g for g in seed_groups([r.settings for r in self.runs]) if len(g) > 1]
        for combo, items in (
                (self.metric_combo, metric_choices(self.runs)),
                (self.color_combo, [BY_RUN] + differing_settings(
                    [r.settings for r in self.runs]))):
            combo.blockSignals(True)
            combo.clear()
            combo.addItems(items)
            combo.blockSignals(False)
        self.group_check.setEnabled(bool(self.groups))
        self.group_check.setToolTip(
            "Draw runs that differ only by seed as their mean with a band" if self.groups else
            "No two of these runs differ only by seed")
        self._grouping_toggled(self.group_check.isChecked())
        self._fill_table()

    # -- table -----------------------------------------------------------------------------

    def _fill_table(self) -> None:
        everything = self.all_settings.isChecked()
        self.table_model.set_table(comparison_table(self.runs, everything=everything),
                                   highlight_differences=everything)

    # -- plot ------------------------------------------------------------------------------

    def metric_name(self) -> str:
        # Not `metric()`: that name would override QWidget.metric(PaintDeviceMetric), which
        # Qt calls (with an argument) when it needs the widget's DPI.
        return self.metric_combo.currentText()

    def set_metric(self, name: str) -> None:
        self.metric_combo.setCurrentText(name)

    def set_color_by(self, setting: str) -> None:
        self.color_combo.setCurrentText(setting)

    def band_kind(self) -> BandKind:
        return BandKind(self.band_combo.currentData())  # Qt hands a StrEnum back as str

    def _grouping_toggled(self, on: bool) -> None:
        self.band_combo.setEnabled(on and self.group_check.isEnabled())
        self.redraw()

    def _run_colors(self) -> tuple[list[str], list[tuple[str, str]]]:
        """A colour per run, and the legend of the setting's values (none: per run)."""
        setting = self.color_combo.currentText()
        if setting in ("", BY_RUN):
            series = self.colors.series
            return [series[i % len(series)] for i in range(len(self.runs))], []
        colors = color_by_setting(setting, [r.settings.get(setting) for r in self.runs],
                                  self.colors)
        return list(colors.colors), list(colors.legend)

    def redraw(self) -> None:
        name = self.metric_name()
        item = self.plot.getPlotItem()
        for drawn in self.curves + self.bands + self._band_edges:
            item.removeItem(drawn)  # also takes it out of the legend
        self.legend.clear()
        self.curves, self.bands, self._band_edges = [], [], []
        log = self.log_check.isChecked()
        item.setLogMode(y=log)
        item.setLabel("left", name, color=self.colors.text)
        item.setTitle(f"{name} per epoch" if name else "", color=self.colors.text, size="11pt")
        colors, legend = self._run_colors()
        grouped = self.group_check.isChecked() and self.group_check.isEnabled()
        members = {i for group in self.groups for i in group} if grouped else set()
        missing = []
        for index, run in enumerate(self.runs):
            if index in members:
                continue
            values = run.metrics.get(name)
            if values is None:
                missing.append(run.label)
                continue
            self._curve(run.epochs, values, colors[index], run.label if not legend else None)
        for group in self.groups if grouped else ():
            self._group(group, name, colors[group[0]], bool(legend))
        for text, color in legend:  # by setting: one entry per value, not per curve
            self.legend.addItem(pg.PlotDataItem(pen=pg.mkPen(color, width=3)), text)
        self.note.setText(f"Not in {', '.join(missing)}: no {name} was recorded there."
                          if missing else "")
        self.note.setVisible(bool(missing))
        item.enableAutoRange()

    def _curve(self, epochs: Sequence[float], values: Sequence[float], color: str,
               label: str | None, symbols: bool = True) -> pg.PlotDataItem:
        x = np.asarray(epochs, dtype=float) + 1.0  # epoch 1 is the first, as in Keras
        y = np.asarray(values, dtype=float)
        keep = np.isfinite(y) & (y > 0 if self.log_check.isChecked() else True)
        style = {"symbol": "o", "symbolSize": 6, "symbolBrush": color, "symbolPen": None}
        curve = self.plot.getPlotItem().plot(
            x[keep], y[keep], name=label, pen=pg.mkPen(color, width=2), antialias=True,
            **(style if symbols else {}))
        self.curves.append(curve)
        return curve

    def _group(self, group: Sequence[int], name: str, color: str, by_setting: bool) -> None:
        """The group's mean as a curve, its band as a filled area between two edges."""
        runs = [self.runs[i] for i in group if name in self.runs[i].metrics]
        if not runs:
            return
        band = seed_band([(r.epochs, r.metrics[name]) for r in runs], self.band_kind())
        label = None if by_setting else (
            f"{runs[0].label}: mean of {len(runs)} seeds, {self.band_kind().words}")
        self._curve(band.epochs, band.mean, color, label, symbols=False)
        x = band.epochs.astype(float) + 1.0
        keep = np.isfinite(band.low) & np.isfinite(band.high)
        if self.log_check.isChecked():
            keep &= band.low > 0
        edges = [pg.PlotDataItem(x[keep], edge[keep], pen=pg.mkPen(None))
                 for edge in (band.low, band.high)]
        fill = pg.mkColor(color)
        fill.setAlpha(BAND_ALPHA)
        area = pg.FillBetweenItem(edges[0], edges[1], brush=pg.mkBrush(fill))
        item = self.plot.getPlotItem()
        for edge in edges:
            item.addItem(edge)
        item.addItem(area)
        self._band_edges += edges
        self.bands.append(area)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        colors = changed_plot_colors(self, event, self.colors)
        if colors is not None:  # light <-> dark: redraw in the new colours
            self.colors = colors
            self._color_legend()
            color_plot(self.plot, colors)
            self.redraw()

    def _color_legend(self) -> None:
        self.legend.setLabelTextColor(self.colors.text)
        self.legend.setBrush(pg.mkBrush(*self.colors.fill(220)))
        self.legend.setPen(pg.mkPen(self.colors.axis))


class RunCompareDialog(QDialog):
    """A non-modal window around a RunCompareView; several may be open at once.

    Given `runs`, it shows them; `RunCompareDialog.reading()` opens at once and reads
    the runs in the background."""

    def __init__(self, runs: Sequence[ComparedRun], parent: QWidget | None = None, *,
                 title: str = ""):
        super().__init__(parent)
        self.setWindowTitle("Compare runs: " + (title or ", ".join(r.label for r in runs)))
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.view = RunCompareView(runs, self)
        self.status = QLabel(wordWrap=True)
        self.status.setAccessibleName("Comparison status")
        self.status.hide()
        self.reader = ChildJobRunner(self)
        self.reader.finished.connect(self._read)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.status)
        layout.addWidget(self.view, 1)
        fit_to_screen(self, QSize(1200, 720))

    @classmethod
    def reading(cls, requests: Sequence[CompareRequest], store: Path,
                parent: QWidget | None = None) -> RunCompareDialog:
        dialog = cls((), parent, title=", ".join(r.label for r in requests))
        dialog.status.setText(f"Reading {len(requests)} runs…")
        dialog.status.show()
        dialog.reader.start(CompareReadJob(store, requests))
        return dialog

    def _read(self, outcome: list[ComparedRun] | str) -> None:
        if isinstance(outcome, str):
            self.status.setText(outcome)
            return
        self.status.hide()
        self.view.set_runs(outcome)

    def done(self, result: int) -> None:  # Escape, and every other way a dialog ends
        self.reader.shutdown()
        super().done(result)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        self.reader.shutdown()
        super().closeEvent(event)
