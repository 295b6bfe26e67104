"""A sweep's results: the trials' table, a scatter per swept setting, parallel coordinates.

Given the sweep's spec and what the store knows of each trial (`TrialOutcome`),
`show_sweep` ranks them with core/sweeps/results.py (the best trial, repeats
grouped by seed_bands) and draws core/sweeps/plots.py's data: one point or line
per finished trial. Call it again as trials end; the table keeps its sort order.
"Cancel sweep" and "Extend…" only ask (`cancel_requested`, `extend_requested`).
`SweepViewDialog` is the view of one stored sweep: it reads it off the GUI thread
(gui/jobs/sweep_jobs.py), again every few seconds until every trial has ended, and
does the store's side of Cancel (asked first) and Extend… (gui/dialogs/sweep_extend.py),
then starts the queue runner, as `mgpu-train sweep cancel|extend` do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from PySide6.QtCore import QModelIndex, QSize, QSortFilterProxyModel, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.devices.nvml import GpuInventory
from mgpu_gui.core.runs.compare import setting_text
from mgpu_gui.core.sweeps.results import SweepResults, TrialOutcome, TrialStatus, sweep_results
from mgpu_gui.core.sweeps.space import Parameter
from mgpu_gui.core.sweeps.store import CancelledSweep, SweepRecord, cancel_sweep, load_sweep
from mgpu_gui.core.sweeps.store import SweepView as StoredSweep
from mgpu_gui.core.sweeps.trials import SweepSpec
from mgpu_gui.gui.dialogs.sweep_extend import SweepExtendDialog
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.jobs.sweep_jobs import Refused, StoreJob, extend_and_run
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen
from mgpu_gui.gui.widgets.setting_names import setting_label
from mgpu_gui.gui.widgets.sweep_plots import SweepParallel, SweepScatter
from mgpu_gui.gui.widgets.sweep_table import SweepTableModel, sweep_table_view

UNDER_WAY = (TrialStatus.WAITING, TrialStatus.RUNNING)
TABLE_ROWS = 8  # trials the table shows before it scrolls, at first
REFRESH_MS = 3_000  # while trials wait or run: their epochs and states change


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
    return (f"{text} Best: trial #{best.trial.number} ({values}), {results.metric} "
            f"{best.best.best:.4g} at epoch {best.best.best_epoch + 1}.")


def confirm_cancel(parent: QWidget, record: SweepRecord) -> bool:
    """Ask before cancelling, naming what it drops and stops."""
    waiting = record.counts.get(TrialStatus.WAITING, 0)
    running = record.counts.get(TrialStatus.RUNNING, 0)
    answer = QMessageBox.question(
        parent, "Cancel sweep",
        f"Cancel the sweep {record.name}? {_trials(waiting)} waiting will be dropped and "
        f"{_trials(running)} running will stop at the next batch (resumable from the Runs "
        f"tab). Finished trials keep their runs.",
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        QMessageBox.StandardButton.No)
    return answer == QMessageBox.StandardButton.Yes


def cancelled_text(sweep_id: int, done: CancelledSweep) -> str:
    """What a cancel did, in `mgpu-train sweep cancel`'s words."""
    return (f"Sweep {sweep_id}: {len(done.dropped)} waiting trial(s) dropped, "
            f"{len(done.stopping)} running trial(s) stopping at the next batch (resumable).")


def _trials(count: int) -> str:
    return f"{count} trial{'s' if count != 1 else ''}"


class SweepViewDialog(QDialog):
    """A non-modal window around a SweepView of one stored sweep: read off the GUI thread
    when shown and every few seconds while trials wait or run; its Cancel and Extend…
    act on the store, and a trial double-clicked asks for its run's curves."""

    show_curves_requested = Signal(int)  # the trial's run id
    changed = Signal()  # cancelled or extended here: the Sweeps tab reads again
    message = Signal(str)  # what a cancel or an extension did, for the log

    def __init__(self, store: Path, sweep_id: int, name: str, *,
                 inventory: Callable[[], GpuInventory | None] = lambda: None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(f"Sweep {sweep_id}: {name}")
        self.store, self.sweep_id, self.inventory = store, sweep_id, inventory
        self.stored: StoredSweep | None = None
        self.extend_dialog: SweepExtendDialog | None = None
        self.view = SweepView(self)
        self.view.summary.setText("Reading the sweep…")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.view)
        self.reader = ChildJobRunner(self)
        self.reader.finished.connect(self._loaded)
        self.writer = ChildJobRunner(self)
        self.writer.finished.connect(self._written)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self._tick)
        self.view.cancel_requested.connect(self.cancel)
        self.view.extend_requested.connect(self.extend)
        self.view.table.doubleClicked.connect(self._trial_clicked)
        self.view.table.setToolTip("Double-click a trial to show its run's curves in the "
                                   "main window")
        fit_to_screen(self, QSize(1200, 720))

    def refresh(self) -> None:
        """Read the sweep again in the background (a read under way is dropped)."""
        self.reader.start(StoreJob(self.store, lambda store, i=self.sweep_id:
                                   load_sweep(store, i)))

    def _tick(self) -> None:
        if not self.reader.is_running():  # a slow store: no reads piling up
            self.refresh()

    def _loaded(self, outcome: StoredSweep | Refused) -> None:
        if isinstance(outcome, Refused):  # deleted with the store, or the store is locked
            self.view.summary.setText(outcome.message)
            return
        self.stored = outcome
        self.view.show_sweep(outcome.spec, outcome.outcomes)
        if outcome.record.ended:
            self.timer.stop()
        elif self.isVisible():
            self.timer.start()

    # -- cancel and extend ---------------------------------------------------------------

    def cancel(self) -> None:
        if self.stored is None or self.writer.is_running():
            return
        if confirm_cancel(self, self.stored.record):
            self.writer.start(StoreJob(self.store, lambda store, i=self.sweep_id:
                                       cancel_sweep(store, i)))

    def extend(self) -> SweepExtendDialog | None:
        """The Extend dialog over the sweep as last read."""
        if self.stored is None:
            return None
        if self.extend_dialog is not None:
            self.extend_dialog.close()
        dialog = SweepExtendDialog(self.stored.spec,
                                   [o.trial for o in self.stored.outcomes], self)
        dialog.extend_requested.connect(self._extend_requested)
        dialog.finished.connect(lambda _=None, d=dialog: self._forget_extend(d))
        self.extend_dialog = dialog
        dialog.open()
        return dialog

    def _extend_requested(self, more: tuple[Parameter, ...], samples: int,
                          repeats: int) -> None:
        self.writer.start(StoreJob(self.store, partial(
            extend_and_run, sweep_id=self.sweep_id, more=more, samples=samples,
            repeats=repeats, inventory=self.inventory())))

    def _forget_extend(self, dialog: SweepExtendDialog) -> None:
        if self.extend_dialog is dialog:
            self.extend_dialog = None
        dialog.deleteLater()

    def _written(self, outcome: CancelledSweep | list[int] | Refused) -> None:
        if isinstance(outcome, Refused):
            if self.extend_dialog is not None:
                self.extend_dialog.refuse(outcome.message)
            else:
                self.message.emit(outcome.message)
            return
        if isinstance(outcome, CancelledSweep):
            self.message.emit(cancelled_text(self.sweep_id, outcome))
        else:
            if self.extend_dialog is not None:
                self.extend_dialog.started()
            self.message.emit(f"Sweep {self.sweep_id}: {len(outcome)} more trial(s) queued "
                              f"({', '.join(str(i + 1) for i in outcome)}).")
        self.changed.emit()
        self.refresh()

    # -- a trial's curves ----------------------------------------------------------------

    def _trial_clicked(self, index: QModelIndex) -> None:
        results = self.view.results
        if self.stored is None or results is None or self.view.grouped():
            return
        proxy = self.view.table.model()
        assert isinstance(proxy, QSortFilterProxyModel)
        trial = results.rows[proxy.mapToSource(index).row()].trial.index
        job = self.stored.jobs.get(trial)
        if job is not None and job.run_id is not None:
            self.show_curves_requested.emit(job.run_id)

    # -- visibility and closing ----------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        self.refresh()  # its timer starts once the read says trials wait or run

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802 (Qt's name)
        self.timer.stop()
        super().hideEvent(event)

    def done(self, result: int) -> None:  # Escape, and every other way a dialog ends
        self._shutdown()
        super().done(result)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        self._shutdown()
        super().closeEvent(event)

    def _shutdown(self) -> None:
        self.timer.stop()
        if self.extend_dialog is not None:
            self.extend_dialog.close()
        self.reader.shutdown()
        self.writer.shutdown()
