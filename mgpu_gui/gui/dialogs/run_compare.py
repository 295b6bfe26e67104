"""Several stored runs on one plot: one metric per epoch, one colour and legend entry per run.

The Runs tab opens it for two or more selected runs. It draws per-epoch values
only (the stored EpochEnd rows): those are comparable across runs whatever
their batch size or number of replicas.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.events import EpochEnd, Event
from mgpu_gui.core.series import LR_NAMES
from mgpu_gui.gui.theme import plot_colors
from mgpu_gui.gui.widgets.plots import color_plot
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen

PREFERRED = ("val_loss", "loss", "val_accuracy", "accuracy")


@dataclass(frozen=True)
class ComparedRun:
    """One run's per-epoch metrics: `epochs[i]` is 0-based, `metrics[name][i]` its value."""

    label: str
    epochs: tuple[int, ...]
    metrics: dict[str, tuple[float, ...]]

    @classmethod
    def from_events(cls, label: str, events: Iterable[Event]) -> ComparedRun:
        ends = [e for e in events if isinstance(e, EpochEnd)]
        names = sorted({n for e in ends for n in e.metrics if n not in LR_NAMES})
        return cls(label=label, epochs=tuple(e.epoch for e in ends),
                   metrics={n: tuple(float(e.metrics.get(n, np.nan)) for e in ends)
                            for n in names})


def metric_choices(runs: Sequence[ComparedRun]) -> list[str]:
    """Every metric some run has: the common ones first (val_loss, loss, ...)."""
    names = {n for run in runs for n in run.metrics}
    first = [n for n in PREFERRED if n in names]
    rest = sorted(names - set(first), key=lambda n: (n.startswith("val_"), n))
    return first + rest


class RunCompareView(QWidget):
    """A metric chooser and a plot with one curve per run that has that metric."""

    def __init__(self, runs: Sequence[ComparedRun], parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Run comparison")
        self.runs = list(runs)
        self.curves: list[pg.PlotDataItem] = []  # one per run that has the chosen metric

        self.metric_combo = QComboBox()
        self.metric_combo.setAccessibleName("Metric to compare")
        self.metric_combo.setToolTip("The per-epoch metric drawn for every run")
        self.metric_combo.addItems(metric_choices(self.runs))
        self.log_check = QCheckBox("Log scale")
        self.log_check.setToolTip("Logarithmic y axis; values <= 0 are left out")
        self.note = QLabel(wordWrap=True)
        self.note.setAccessibleName("Comparison note")
        self.plot = pg.PlotWidget()
        self.plot.setAccessibleName("Comparison plot")
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
        label = QLabel("&Metric")
        label.setBuddy(self.metric_combo)
        controls.addWidget(label)
        controls.addWidget(self.metric_combo)
        controls.addSpacing(12)
        controls.addWidget(self.log_check)
        controls.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.note)

        self.metric_combo.currentTextChanged.connect(self.show_metric)
        self.log_check.toggled.connect(lambda _: self.show_metric(self.metric_name()))
        self.show_metric(self.metric_name())

    def metric_name(self) -> str:
        # Not `metric()`: that name would override QWidget.metric(PaintDeviceMetric), which
        # Qt calls (with an argument) when it needs the widget's DPI.
        return self.metric_combo.currentText()

    def set_metric(self, name: str) -> None:
        self.metric_combo.setCurrentText(name)

    def show_metric(self, name: str) -> None:
        item = self.plot.getPlotItem()
        for curve in self.curves:
            item.removeItem(curve)  # also takes it out of the legend
        self.curves = []
        log = self.log_check.isChecked()
        item.setLogMode(y=log)
        item.setLabel("left", name, color=self.colors.text)
        item.setTitle(f"{name} per epoch" if name else "", color=self.colors.text, size="11pt")
        missing = []
        for index, run in enumerate(self.runs):
            values = run.metrics.get(name)
            if values is None:
                missing.append(run.label)
                continue
            x = np.asarray(run.epochs, dtype=float) + 1.0  # epoch 1 is the first, as in Keras
            y = np.asarray(values, dtype=float)
            keep = np.isfinite(y) & (y > 0 if log else True)
            color = self.colors.series[index % len(self.colors.series)]
            curve = item.plot(x[keep], y[keep], name=run.label, pen=pg.mkPen(color, width=2),
                              symbol="o", symbolSize=6, symbolBrush=color, symbolPen=None,
                              antialias=True)
            self.curves.append(curve)
        self.note.setText(f"Not in {', '.join(missing)}: no {name} was recorded there."
                          if missing else "")
        self.note.setVisible(bool(missing))
        item.enableAutoRange()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            colors = plot_colors(self.palette())
            if colors != self.colors:  # light <-> dark: redraw in the new colours
                self.colors = colors
                self._color_legend()
                color_plot(self.plot, colors)
                self.show_metric(self.metric_name())

    def _color_legend(self) -> None:
        self.legend.setLabelTextColor(self.colors.text)
        self.legend.setBrush(pg.mkBrush(*self.colors.fill(220)))
        self.legend.setPen(pg.mkPen(self.colors.axis))


class RunCompareDialog(QDialog):
    """A non-modal window around a RunCompareView; several may be open at once."""

    def __init__(self, runs: Sequence[ComparedRun], parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Compare runs: " + ", ".join(run.label for run in runs))
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.view = RunCompareView(runs, self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.view)
        fit_to_screen(self, QSize(760, 480))
