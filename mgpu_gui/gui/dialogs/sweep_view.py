"""A sweep's results: the trials' table, a scatter per swept setting, parallel coordinates.

Given the sweep's spec and what the store knows of each trial (`TrialOutcome`),
`show_sweep` ranks them with core/sweeps/results.py (the best trial, repeats
grouped by seed_bands) and draws core/sweeps/plots.py's data: one point or line
per finished trial. Call it again as trials end; the table keeps its sort order.
"Cancel sweep" and "Extend…" only ask (`cancel_requested`, `extend_requested`):
the store's side is the caller's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.runs.compare import setting_text
from mgpu_gui.core.sweeps.results import SweepResults, TrialOutcome, TrialStatus, sweep_results
from mgpu_gui.core.sweeps.trials import SweepSpec
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen
from mgpu_gui.gui.widgets.setting_names import setting_label
from mgpu_gui.gui.widgets.sweep_plots import SweepParallel, SweepScatter
from mgpu_gui.gui.widgets.sweep_table import SweepTableModel, sweep_table_view

UNDER_WAY = (TrialStatus.WAITING, TrialStatus.RUNNING)
TABLE_ROWS = 8  # trials the table shows before it scrolls, at first


class SweepView(QWidget):
    """The table over the two plots, with the sweep's state and its two actions above."""

    cancel_requested = Signal()
    extend_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Sweep results")
        self.spec: SweepSpec | None = None
        self.results: SweepResults | None = None
        self.summary = QLabel(wordWrap=True)
        self.summary.setAccessibleName("Sweep summary")
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.group_check = QCheckBox("&Group repeats")
        self.group_check.setToolTip("One row and point per setting: the mean of its repeats' "
                                    "best values and their spread (±1 sd)")
        self.cancel_button = QPushButton("&Cancel sweep")
        self.cancel_button.setAccessibleName("Cancel sweep")
        self.cancel_button.setToolTip("Drop the waiting trials and stop the running ones (they "
                                      "stay resumable)")
        self.extend_button = QPushButton("E&xtend…")
        self.extend_button.setAccessibleName("Extend the sweep")
        self.extend_button.setToolTip("Add values, random draws or repeats to this sweep")
        self.table_model = SweepTableModel(self)
        self.table = sweep_table_view(self.table_model)
        self.scatter = SweepScatter()
        self.parallel = SweepParallel()

        top = QHBoxLayout()
        top.addWidget(self.summary, 1)
        top.addWidget(self.group_check)
        top.addWidget(self.cancel_button)
        top.addWidget(self.extend_button)
        plots = QSplitter(Qt.Orientation.Horizontal)
        plots.addWidget(self.scatter)
        plots.addWidget(self.parallel)
        plots.setChildrenCollapsible(False)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(plots)
        rows = self.table.verticalHeader().defaultSectionSize()
        self.splitter.setSizes([rows * TABLE_ROWS + 2 * rows, 400])  # the plots get the rest
        self.splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.splitter, 1)

        self.group_check.toggled.connect(self._grouping_toggled)
        self.cancel_button.clicked.connect(self.cancel_requested)
        self.extend_button.clicked.connect(self.extend_requested)
        self.group_check.setEnabled(False)
        self.cancel_button.setEnabled(False)
        self.extend_button.setEnabled(False)

    def show_sweep(self, spec: SweepSpec, outcomes: Sequence[TrialOutcome]) -> None:
        self.spec = spec
        self.results = sweep_results(outcomes, spec.metric)
        repeats = len(self.results.groups) < len(self.results.rows)
        self.group_check.setEnabled(repeats)
        if not repeats:
            self.group_check.setChecked(False)
        self.cancel_button.setEnabled(any(o.status in UNDER_WAY for o in outcomes))
        self.extend_button.setEnabled(True)
        self.summary.setText(summary_text(self.results))
        self._fill_table()
        self.scatter.grouped = self.grouped()
        self.scatter.set_data(self.results, spec.parameters)
        self.parallel.set_data(self.results, spec.parameters)

    def grouped(self) -> bool:
        return self.group_check.isChecked() and self.group_check.isEnabled()

    def _grouping_toggled(self) -> None:
        if self.results is not None:
            self._fill_table()
            self.scatter.set_grouped(self.grouped())

    def _fill_table(self) -> None:
        assert self.results is not None
        self.table_model.set_results(self.results, grouped=self.grouped())


def summary_text(results: SweepResults) -> str:
    """How many trials are where, and the best one so far."""
    counts = Counter(row.status for row in results.rows)
    total = len(results.rows)
    states = ", ".join(f"{counts[s]} {s.text}" for s in TrialStatus if counts[s])
    text = f"{total} trial{'s' if total != 1 else ''}: {states}."
    best = results.best
    if best is None or best.best is None:
        return text + " No trial has finished with a value yet."
    values = ", ".join(f"{setting_label(name)} {setting_text(value)}"
                       for name, value in best.trial.values.items())
    return (f"{text} Best: trial #{best.trial.index + 1} ({values}), {results.metric} "
            f"{best.best.best:.4g} at epoch {best.best.best_epoch + 1}.")


class SweepViewDialog(QDialog):
    """A non-modal window around a SweepView."""

    def __init__(self, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(f"Sweep: {name}")
        self.view = SweepView(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.view)
        fit_to_screen(self, QSize(1200, 720))
