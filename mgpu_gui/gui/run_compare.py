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
from PySide6.QtCore import Qt
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
from mgpu_gui.gui.curves_panel import LR_NAMES

# Okabe-Ito, then Tableau: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000",
           "#8c564b", "#7f7f7f", "#bcbd22")
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
        self.plot.setBackground("w")
        item = self.plot.getPlotItem()
        for side in ("left", "bottom"):
            item.getAxis(side).setPen(pg.mkPen("#444"))
            item.getAxis(side).setTextPen(pg.mkPen("#222"))
            item.getAxis(side).enableAutoSIPrefix(False)
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setLabel("bottom", "epoch", color="#222")
        self.legend = item.addLegend(offset=(-10, 10), labelTextColor="#222",
                                     brush=pg.mkBrush(255, 255, 255, 220), pen=pg.mkPen("#bbb"))

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
        self.log_check.toggled.connect(lambda _: self.show_metric(self.metric()))
        self.show_metric(self.metric())

    def metric(self) -> str:
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
        item.setLabel("left", name, color="#222")
        item.setTitle(f"{name} per epoch" if name else "", color="#222", size="11pt")
        missing = []
        for index, run in enumerate(self.runs):
            values = run.metrics.get(name)
            if values is None:
                missing.append(run.label)
                continue
            x = np.asarray(run.epochs, dtype=float) + 1.0  # epoch 1 is the first, as in Keras
            y = np.asarray(values, dtype=float)
            keep = np.isfinite(y) & (y > 0 if log else True)
            color = PALETTE[index % len(PALETTE)]
            curve = item.plot(x[keep], y[keep], name=run.label, pen=pg.mkPen(color, width=2),
                              symbol="o", symbolSize=6, symbolBrush=color, symbolPen=None)
            self.curves.append(curve)
        self.note.setText(f"Not in {', '.join(missing)}: no {name} was recorded there."
                          if missing else "")
        self.note.setVisible(bool(missing))
        item.enableAutoRange()


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
        self.resize(760, 480)
