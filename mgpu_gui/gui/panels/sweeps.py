"""The Sweeps tab: every sweep in the store, how far it is and its best trial so far.

A row per sweep (newest first): its name, when it was created, its trials' states,
how many have ended of how many, and the best value of its metric. The rows are read
off the GUI thread (gui/jobs/sweep_jobs.py: a sweep's best reads its trials' epochs)
when the tab is shown and, while it is visible, every few seconds: sweeps run in the
queue runner and change with the window closed. Open (or a double-click) asks the
window for the sweep's view (`open_requested`); Cancel sweep asks first, then drops
its waiting trials and stops its running ones, as `mgpu-train sweep cancel` does.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QLabel,
    QPushButton,
    QStackedWidget,
    QTableWidgetItem,
    QWidget,
)

from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.core.sweeps.results import TrialStatus
from mgpu_gui.core.sweeps.store import CancelledSweep, cancel_sweep
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.jobs.sweep_jobs import Refused, StoreJob, SweepSummary, sweep_summaries
from mgpu_gui.gui.widgets.action_column import lay_out_panel
from mgpu_gui.gui.widgets.tables import read_only_table

REFRESH_MS = 5_000  # while visible, as the Runs tab: trials start and end elsewhere
COLUMNS = ("Sweep", "Name", "Created", "State", "Ended", "Best")
EMPTY = ("No sweeps yet. A sweep trains the current setup over several values of some "
         "settings (grid or random search) and compares the runs; its trials are queued. "
         "To start one: Run ▸ Sweep…")


class SweepsPanel(QWidget):
    """The store's sweeps; opening one is the window's (`open_requested`)."""

    open_requested = Signal(int, str)  # sweep id, its name
    message = Signal(str)  # what a cancel did, for the log

    def __init__(self, store: RunStore | None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Sweeps")
        self.store = store
        self.sweeps: list[SweepSummary] = []
        self.table = read_only_table(COLUMNS, "Sweeps")
        self.table.setToolTip("Double-click a sweep to open its trials and plots")
        self.empty_label = QLabel(EMPTY if store is not None else
                                  "Sweeps need the run history, which is off.", wordWrap=True)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setAccessibleName("No sweeps")
        self.empty_label.setStyleSheet("color: palette(placeholder-text); padding: 12px;")
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty_label)
        self.stack.addWidget(self.table)
        self.note = QLabel(wordWrap=True)
        self.note.setAccessibleName("Sweeps message")
        self.note.hide()
        self.open_button = QPushButton("&Open")
        self.open_button.setAccessibleName("Open sweep")
        self.open_button.setToolTip("The selected sweep's trials, best and plots")
        self.open_button.clicked.connect(self.open_selected)
        self.cancel_button = QPushButton("Cancel s&weep")
        self.cancel_button.setAccessibleName("Cancel sweep")
        self.cancel_button.setToolTip("Drop the selected sweep's waiting trials and stop its "
                                      "running ones (they stay resumable); asks first")
        self.cancel_button.clicked.connect(self.cancel_selected)
        lay_out_panel(self, self.note, self.stack, [self.open_button, self.cancel_button])

        self.reader = ChildJobRunner(self)
        self.reader.finished.connect(self._read)
        self.writer = ChildJobRunner(self)
        self.writer.finished.connect(self._cancelled)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._tick)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.doubleClicked.connect(lambda _: self.open_selected())
        self.stack.setCurrentWidget(self.empty_label if store is None else self.table)
        self._update_buttons()

    def refresh(self) -> None:
        """Read the sweeps again in the background (a read under way is dropped)."""
        if self.store is None:
            return
        known = {summary.record.id: summary for summary in self.sweeps}
        self.reader.start(StoreJob(self.store.path,
                                   lambda store: sweep_summaries(store, known)))

    def _tick(self) -> None:
        if not self.reader.is_running():  # a slow store: no reads piling up
            self.refresh()

    def shutdown(self) -> None:
        """For the window's close: the sweeps go on in the queue runner."""
        self._timer.stop()
        self.reader.shutdown()
        self.writer.shutdown()

    def selected(self) -> SweepSummary | None:
        rows = {index.row() for index in self.table.selectedIndexes()}
        return self.sweeps[rows.pop()] if len(rows) == 1 else None

    def open_selected(self) -> None:
        summary = self.selected()
        if summary is not None:
            self.open_requested.emit(summary.record.id, summary.record.name)

    def cancel_selected(self) -> None:
        from mgpu_gui.gui.dialogs.sweep_view import confirm_cancel

        summary = self.selected()
        if (summary is None or self.store is None or self.writer.is_running()
                or not confirm_cancel(self, summary.record)):
            return
        self.writer.start(StoreJob(self.store.path, lambda store, i=summary.record.id:
                                   (i, cancel_sweep(store, i))))

    def _cancelled(self, outcome: tuple[int, CancelledSweep] | Refused) -> None:
        from mgpu_gui.gui.dialogs.sweep_view import cancelled_text

        self.message.emit(outcome.message if isinstance(outcome, Refused)
                          else cancelled_text(*outcome))
        self.refresh()

    def _read(self, outcome: list[SweepSummary] | Refused) -> None:
        if isinstance(outcome, Refused):
            self.note.setText(outcome.message)
            self.note.show()
            return
        self.note.hide()
        selected = self.selected()
        self.sweeps = outcome
        self._fill(outcome)
        self.stack.setCurrentWidget(self.table if outcome else self.empty_label)
        if selected is not None:  # the same sweep stays selected as rows come and go
            ids = [summary.record.id for summary in outcome]
            if selected.record.id in ids:
                self.table.selectRow(ids.index(selected.record.id))
        self._update_buttons()

    def _fill(self, sweeps: list[SweepSummary]) -> None:
        self.table.setRowCount(len(sweeps))
        for row, summary in enumerate(sweeps):
            record = summary.record
            ended = record.trials - sum(record.counts.get(s, 0) for s in
                                        (TrialStatus.WAITING, TrialStatus.RUNNING))
            values = (str(record.id), record.name,
                      time.strftime("%Y-%m-%d %H:%M", time.localtime(record.created)),
                      record.state_text, f"{ended} of {record.trials}", summary.best_text)
            for column, text in enumerate(values):
                item = self.table.item(row, column)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(row, column, item)
                if item.text() != text:
                    item.setText(text)
                    item.setToolTip(text)

    def _update_buttons(self) -> None:
        summary = self.selected()
        self.open_button.setEnabled(summary is not None)
        self.cancel_button.setEnabled(summary is not None and not summary.record.ended)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if self.store is not None:
            self.refresh()
            self._timer.start()

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802 (Qt's name)
        self._timer.stop()
        super().hideEvent(event)
