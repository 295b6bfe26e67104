"""The Runs tab: the run history from the store, and what can be done with past runs.

The table lists every run the store knows (newest first): its state, when it
started, its name, tags, model, data, devices, epochs, best epoch and size (the table
view fits the columns: widgets/runs_view.py). A search box above narrows it by
tag, state and text (core/runs/search.py). For the selected runs it offers:
show one run's curves, compare several, evaluate one, edit its note and tags,
resume one that was stopped, failed or interrupted, reveal its folder, prune
old checkpoints (runs_prune.py), delete runs (folder and row). Showing curves
and resuming are the main window's to do: the panel asks by signal. The history
is read in a thread of its own (it grows with every run: never on the GUI
thread), on run events and, while the tab is visible, on a slow timer (runs
started from a terminal show up); `refreshed` says when the rows are in.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import (
    QItemSelection,
    QItemSelectionModel,
    Qt,
    QTimer,
    QUrl,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QDesktopServices,
    QHideEvent,
    QKeySequence,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.errors import UserError
from mgpu_gui.core.runs.lock import is_live
from mgpu_gui.core.runs.search import RunQuery
from mgpu_gui.core.runs.store import RunRecord, RunState, RunStore
from mgpu_gui.gui.jobs.runs_reader import RunsReader
from mgpu_gui.gui.panels.runs_csv import CSV_TIP, RunsCsvExport
from mgpu_gui.gui.panels.runs_prune import PRUNE_TIP, RunsPruner
from mgpu_gui.gui.widgets.action_column import action_column
from mgpu_gui.gui.widgets.focus import return_focus_on_close
from mgpu_gui.gui.widgets.runs_table import (
    COLUMNS,
    ID_ROLE,
    RunsFilter,
    RunsTableModel,
    short_name,
)
from mgpu_gui.gui.widgets.runs_view import RunsSearchBar, RunsTableView

if TYPE_CHECKING:  # each dialog (the plots' pyqtgraph) loads when it first opens
    from mgpu_gui.gui.dialogs.evaluation import EvaluationDialog
    from mgpu_gui.gui.dialogs.run_compare import RunCompareDialog
    from mgpu_gui.gui.dialogs.run_notes import RunNotesDialog

REFRESH_MS = 5_000  # while visible: runs started elsewhere (the CLI) appear
DELETE_JOIN_S = 10.0  # on shutdown, how long unfinished folder deletions may hold the exit
MORE_ACTIONS = ("csv", "reveal", "prune")  # under More: seven buttons fit 1280x720 at 1.25


class RunsPanel(QWidget):
    """The run history table and its actions; the main window feeds it the run state."""

    show_curves_requested = Signal(int)  # run id: load its stored curves
    resume_requested = Signal(int)  # run id: continue it from its last complete epoch
    runs_deleted = Signal(list)  # the RunRecords whose folder and row were deleted
    refreshed = Signal(list)  # the RunRecords now shown

    def __init__(self, store: RunStore | None, parent: QWidget | None = None, *,
                 unavailable: str = ""):
        """`store` None: the history is off; `unavailable` says why."""
        super().__init__(parent)
        self.setAccessibleName("Runs")
        self.store = store
        # Opens a folder in the file manager; replaceable (tests, or another opener).
        self.open_url: Callable[[QUrl], object] = QDesktopServices.openUrl
        self._run_active = False
        self._deletions: list[threading.Thread] = []
        self._dialogs: list[QWidget] = []
        self._shut_down = False

        self.model = RunsTableModel(self)
        self.proxy = RunsFilter(self.model, self)
        self.table = RunsTableView(self.proxy)
        self.empty_label = QLabel(wordWrap=True)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setAccessibleName("No runs")
        self.empty_label.setStyleSheet("color: palette(placeholder-text); padding: 12px;")
        self.empty_label.setText(
            "No runs yet. Every run you train is listed here with its state, best epoch and "
            "folder; select runs to show their curves, compare them or resume one."
            if store is not None else
            f"The run history is off: {unavailable or 'the run store could not be opened.'} "
            f"Training still works; runs are not listed here.")
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty_label)
        self.stack.addWidget(self.table)
        if store is None:
            self.stack.setCurrentWidget(self.empty_label)
        else:  # until the first read: no "No runs yet" flashing over a full history
            self.stack.setCurrentWidget(self.table)
        self.search_bar = RunsSearchBar()
        self.search_bar.query_changed.connect(self._search_changed)
        self.search_bar.hide()  # until there are runs to search
        self.message = QLabel(wordWrap=True)
        self.message.setAccessibleName("Runs message")
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.hide()

        self.pruner = RunsPruner(self, lambda: self.model.sizes)
        self.pruner.finished.connect(lambda text: (self.show_message(text), self.refresh()))
        self._build_actions()
        buttons, self.buttons = action_column(self, self.actions_by_key, MORE_ACTIONS)
        table = QVBoxLayout()
        table.setSpacing(2)
        table.addWidget(self.search_bar)
        table.addWidget(self.stack, 1)
        body = QHBoxLayout()
        body.setContentsMargins(0, 0, 0, 0)
        body.addLayout(table, 1)
        body.addLayout(buttons)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.message)
        layout.addLayout(body, 1)
        find = QAction(self)
        find.setShortcut(QKeySequence.StandardKey.Find)
        find.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        find.triggered.connect(lambda _=False: self.search_bar.edit.setFocus())
        self.addAction(find)

        self.reader = None if store is None else RunsReader(store.path, self)
        self.csv_export = None if store is None else RunsCsvExport(self, store.path)
        if self.reader is not None:
            self.reader.records.connect(self._show_records)
            self.reader.failed.connect(self.show_message)

        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self.table.selectionModel().selectionChanged.connect(self._update_actions)
        self.table.doubleClicked.connect(lambda _: self.show_curves())
        self._update_actions()  # nothing selected yet: each says what it needs
        self.refresh()

    # -- construction ------------------------------------------------------------------

    def _build_actions(self) -> None:
        def action(text: str, tip: str, slot, shortcut=None) -> QAction:
            act = QAction(text, self)
            act.setToolTip(tip)
            act.setStatusTip(tip)
            act.setData(tip)  # the tooltip when enabled; a disabled one says why
            if shortcut is not None:
                act.setShortcut(QKeySequence(shortcut))
                act.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            act.triggered.connect(lambda _=False: slot())
            self.table.addAction(act)  # the table's context menu
            return act

        self.show_curves_action = action(
            "Show curves", "Show the selected run's curves in the plots (or double-click it)",
            self.show_curves)
        self.compare_action = action(
            "Compare…", "The selected runs side by side in a new window: the settings that "
            "differ, each metric's best and final value, their curves (repeated seeds as a "
            "band)",
            self.compare)
        self.evaluate_action = action(
            "Evaluate…", "How good the selected run's model is: per-class figures, the "
            "confusion matrix and the samples of each cell, on its test (else validation) "
            "samples", self.evaluate)
        self.notes_action = action(
            "Note and tags…", "Write a note on the selected run and tag it; search the "
            "runs by tag and note above the table", self.edit_notes)
        self.resume_action = action(
            "Resume", "Continue the selected run from its last complete epoch, up to the "
            "epochs it asked for", self.request_resume)
        self.csv_action = action(  # enabled only with a store (runs selected)
            "Export CSV…", CSV_TIP, lambda: self.csv_export.ask_and_export(self.selected_records()))
        self.reveal_action = action(
            "Reveal folder", "Open the run's folder (checkpoints, logs, exports) in the file "
            "manager", self.reveal_folder)
        self.prune_action = action("Prune checkpoints…", PRUNE_TIP, lambda: (
            self.pruner.ask(self.selected_records()), self._update_actions()))
        self.delete_action = action(
            "Delete…", "Delete the selected runs: their folders and history (asks first)",
            self.delete_selected, QKeySequence.StandardKey.Delete)
        self.actions_by_key = {"show": self.show_curves_action, "compare": self.compare_action,
                               "evaluate": self.evaluate_action, "notes": self.notes_action,
                               "resume": self.resume_action, "csv": self.csv_action,
                               "reveal": self.reveal_action, "prune": self.prune_action,
                               "delete": self.delete_action}

    # -- state from the window -------------------------------------------------------------

    def set_run_active(self, active: bool) -> None:
        """While a run trains, the plots are its: no other curves, no second run."""
        if active != self._run_active:
            self._run_active = active
            self._update_actions()

    def refresh(self) -> None:
        """Read the history again, in the background; `refreshed` comes with the rows."""
        if self.reader is None or self._shut_down:
            self._update_actions()
            return
        self.reader.request()

    def _show_records(self, records: list[RunRecord], sizes: dict, differences: dict) -> None:
        self.table.measure_columns(changed=self.model.set_records(records, sizes, differences))
        self.stack.setCurrentWidget(self.table if records else self.empty_label)
        self._show_matches()
        self._update_actions()
        self.refreshed.emit(records)

    def _search_changed(self, query: RunQuery) -> None:
        self.proxy.set_query(query)
        self._show_matches()
        self._update_actions()  # rows hidden by the search are no longer selected

    def _show_matches(self) -> None:
        self.search_bar.show_counts(self.proxy.rowCount(), len(self.model.records))

    def show_message(self, text: str) -> None:
        self.message.setText(text)
        self.message.setVisible(bool(text))

    def shutdown(self) -> None:
        """For the window's close: stop the timer, close comparisons, finish deletions."""
        self._shut_down = True
        self._timer.stop()
        if self.reader is not None:
            self.reader.stop()
        self.pruner.shutdown()
        if self.csv_export is not None:
            self.csv_export.shutdown()
        for dialog in list(self._dialogs):
            dialog.close()
        self.wait_for_deletions(DELETE_JOIN_S)

    def wait_for_deletions(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        for thread in self._deletions:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._deletions = [t for t in self._deletions if t.is_alive()]
        return not self._deletions

    # -- selection -------------------------------------------------------------------------

    def records(self) -> list[RunRecord]:
        return list(self.model.records)

    def selected_records(self) -> list[RunRecord]:
        rows = sorted({self.proxy.mapToSource(i).row()
                       for i in self.table.selectionModel().selectedRows()})
        return [self.model.records[r] for r in rows]

    def select_runs(self, run_ids: Sequence[int]) -> None:
        wanted = set(run_ids)
        selection = QItemSelection()
        for row in range(self.proxy.rowCount()):
            index = self.proxy.index(row, 0)
            if index.data(ID_ROLE) in wanted:
                selection.select(index, self.proxy.index(row, len(COLUMNS) - 1))
        self.table.selectionModel().select(
            selection, QItemSelectionModel.SelectionFlag.ClearAndSelect)

    # -- actions ---------------------------------------------------------------------------

    def show_curves(self) -> None:
        selected = self.selected_records()
        if len(selected) == 1 and not self._run_active:
            self.show_curves_requested.emit(selected[0].id)

    def compare(self) -> RunCompareDialog | None:
        selected = self.selected_records()
        if len(selected) < 2 or self.store is None:
            return None
        from mgpu_gui.gui.dialogs.run_compare import RunCompareDialog
        from mgpu_gui.gui.jobs.compare_reader import CompareRequest

        names = [short_name(r) for r in selected]
        labels = [name if names.count(name) == 1 else f"{name} (run {r.id})"
                  for name, r in zip(names, selected, strict=True)]
        dialog = RunCompareDialog.reading(
            [CompareRequest(r, label) for label, r in zip(labels, selected, strict=True)],
            self.store.path, self)
        self._keep(dialog)
        dialog.show()
        return dialog

    def evaluate(self) -> EvaluationDialog | None:
        selected = self.selected_records()
        if len(selected) != 1 or not selected[0].folder_exists:
            return None
        return self.evaluate_run(selected[0])

    def evaluate_run(self, record: RunRecord) -> EvaluationDialog | None:
        """The run's Evaluation view: its kept evaluation, else a fresh one."""
        if self.store is None:
            return None
        from mgpu_gui.gui.dialogs.evaluation import EvaluationDialog, Subject

        dialog = EvaluationDialog(Subject.of_run(record), self.store, self)
        self._keep(dialog)
        dialog.show()
        return dialog

    def edit_notes(self) -> RunNotesDialog | None:
        """The selected run's note and tags, in a dialog; saved when the user says so."""
        selected = self.selected_records()
        if len(selected) != 1 or self.store is None:
            return None
        from mgpu_gui.gui.dialogs.run_notes import RunNotesDialog, known_tags

        dialog = RunNotesDialog(selected[0], known_tags(self.model.records), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._save_notes(dialog))
        self._keep(dialog)
        dialog.open()
        return dialog

    def _save_notes(self, dialog: RunNotesDialog) -> None:
        # Two one-row writes on the GUI thread: small, and the user just asked for them;
        # only the reads, which grow with the history, go to the reader's thread.
        assert self.store is not None
        try:
            self.store.set_note(dialog.record.id, dialog.note_text())
            self.store.set_tags(dialog.record.id, dialog.tag_list())
        except UserError as error:  # deleted meanwhile (another window, the CLI)
            self.show_message(str(error))
        self.refresh()

    def request_resume(self) -> None:
        selected = self.selected_records()
        if len(selected) == 1 and self._resume_blocker(selected) is None:
            self.resume_requested.emit(selected[0].id)

    def reveal_folder(self) -> None:
        selected = [r for r in self.selected_records() if r.folder_exists]
        if selected:
            self.open_url(QUrl.fromLocalFile(str(selected[0].run_dir)))

    def delete_selected(self) -> None:
        selected = self.selected_records()
        if not selected or self.store is None:
            return
        live = [r for r in selected if r.folder_exists and is_live(r.run_dir)]
        if live:
            self.show_message(
                f"{short_name(live[0])} is still running: stop it first (Run ▸ Stop), then "
                f"delete it." if len(live) == 1 else
                f"{len(live)} of the selected runs are still running: stop them first.")
            return
        if not self.confirm_delete(selected):
            return
        deleted, problems = [], []
        for record in selected:
            try:
                self._delete_folder(record.run_dir)
            except OSError as error:
                problems.append(f"{record.run_dir}: {error.strerror or error}")
                continue
            self.store.delete(record.id)
            deleted.append(record)
        self.show_message(("Could not delete " + "; ".join(problems) + ". Check its "
                           "permissions, or delete it in the file manager.") if problems else "")
        self.refresh()
        if deleted:
            self.runs_deleted.emit(deleted)

    def confirm_delete(self, records: Sequence[RunRecord]) -> bool:
        folders = [str(r.run_dir) for r in records if r.folder_exists]
        if len(records) == 1:
            text = f"Delete the run “{short_name(records[0])}”"
        else:
            text = f"Delete these {len(records)} runs"
        if folders:
            shown = "\n".join(folders[:8]) + (f"\n… and {len(folders) - 8} more"
                                             if len(folders) > 8 else "")
            text += (f" and {'its folder' if len(folders) == 1 else 'their folders'}?\n\n"
                     f"{shown}\n\nCheckpoints, exported models and logs in "
                     f"{'it' if len(folders) == 1 else 'them'} are deleted for good.")
        else:
            text += " from the history? Its folder is already gone."
        answer = QMessageBox.question(
            self, "Delete runs", text,
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel)
        return answer == QMessageBox.StandardButton.Yes

    def _delete_folder(self, folder: Path) -> None:
        """Move the folder out of the way at once (a rename), then delete it in the
        background: checkpoints can be gigabytes, and the window must not wait for them."""
        if not folder.exists():
            return
        trash = folder.with_name(f".{folder.name}.deleting")
        folder.rename(trash)
        thread = threading.Thread(target=shutil.rmtree, args=(trash,),
                                  kwargs={"ignore_errors": True}, name="delete-run",
                                  daemon=True)
        thread.start()
        self._deletions = [t for t in self._deletions if t.is_alive()] + [thread]

    def _keep(self, dialog: QDialog) -> None:
        """Held while open (the window's close closes it); focus returns here after."""
        self._dialogs.append(dialog)
        dialog.destroyed.connect(lambda _=None, d=dialog: self._forget_dialog(d))
        return_focus_on_close(dialog)

    def _forget_dialog(self, dialog: QWidget) -> None:
        with contextlib.suppress(ValueError):
            self._dialogs.remove(dialog)

    # -- enabling --------------------------------------------------------------------------

    def _resume_blocker(self, selected: Sequence[RunRecord]) -> str | None:
        """Why the selection cannot be resumed, in words (None: it can)."""
        if len(selected) != 1:
            return "Select one run to resume"
        record = selected[0]
        if self._run_active:
            return "A run is in progress: one run trains at a time"
        if record.status is RunState.RUNNING:
            return "This run is still running"
        if record.status is RunState.COMPLETED:
            return "This run completed: there is nothing to resume"
        if not record.status.resumable:
            return "Early stopping ended this run: there is nothing to resume"
        if not record.resume_helps:
            return "A resume would meet the same failure: fix its cause, then start a new run"
        if not record.folder_exists:
            return "Its folder was deleted: nothing to resume; Delete removes the run"
        if not record.epochs_done:  # as ResumePoint says, read from the store's record
            return "No epoch was completed: nothing to resume"
        if is_live(record.run_dir):
            return "Its training process is still running"
        return None

    def _update_actions(self, *_args) -> None:
        selected = self.selected_records() if self.store is not None else []
        one = len(selected) == 1
        resume_blocker = self._resume_blocker(selected)
        states = {
            "show": (one and not self._run_active,
                     "Select one run" if not one else
                     "A run is in progress: the plots show it"),
            "compare": (len(selected) >= 2, "Select two or more runs to compare"),
            "evaluate": (one and selected[0].folder_exists and selected[0].epochs_done > 0,
                         "Select one run, with its folder and at least one complete epoch"),
            "notes": (one, "Select one run"),
            "resume": (resume_blocker is None, resume_blocker or ""),
            "csv": (bool(selected), "Select the runs to export"),
            "reveal": (one and selected[0].folder_exists,
                       "Select one run whose folder exists"),
            "prune": self.pruner.state(selected),
            "delete": (bool(selected), "Select the runs to delete"),
        }
        for key, (enabled, reason) in states.items():
            action = self.actions_by_key[key]
            action.setEnabled(enabled)
            action.setToolTip(action.data() if enabled else f"{action.data()}. ({reason}.)")

    # -- visibility ------------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if self.store is not None and not self._shut_down:
            self.refresh()
            self._timer.start()

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802 (Qt's name)
        self._timer.stop()
        super().hideEvent(event)
