"""The main window's sweeps: Run ▸ Sweep…, starting a sweep, the Sweeps tab and the views.

A mixin of `MainWindow`, kept apart so the window module holds the panels and the run;
it uses the window's `store`, `log`, `gpu_panel`, `run_setup`, `notifier`, `banner`,
`show_run_curves` and ToolDialogs' `_show_dialog`. Start in the Sweep dialog queues the
trials off the GUI thread with the window's GPU list, then makes sure the queue runner
runs (gui/jobs/sweep_jobs.py), as `mgpu-train sweep start` does; a refusal is said in
the dialog, which stays open. One view window per sweep is open at a time.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction

from mgpu_gui.core.runs.claims import DevicesBusyError
from mgpu_gui.core.sweeps.trials import SweepSpec
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.jobs.sweep_jobs import Refused, StoreJob, past_runs_of, start_and_run
from mgpu_gui.gui.panels.queue import confirm_busy_gpus
from mgpu_gui.gui.panels.sweeps import SweepsPanel
from mgpu_gui.gui.widgets.focus import return_focus_on_close
from mgpu_gui.gui.widgets.notifier import Notice, NoticeKind

# Each dialog's module loads when it first opens: the first window paints sooner.
if TYPE_CHECKING:
    from mgpu_gui.gui.dialogs.sweep import SweepDialog
    from mgpu_gui.gui.dialogs.sweep_view import SweepViewDialog


class SweepActions:
    def _build_sweeps(self) -> None:
        """The Sweeps tab beside Queue, and the background start of a sweep."""
        self.sweeps_panel = SweepsPanel(self.store)
        self.log.addTab(self.sweeps_panel, "Sweeps")
        self.sweeps_panel.open_requested.connect(self.open_sweep)
        self.sweeps_panel.message.connect(self.log.append_message)
        self.sweep_starter = ChildJobRunner(self)
        self.sweep_starter.finished.connect(self._sweep_start_answered)
        self._sweep_request: tuple[SweepDialog, SweepSpec, str, bool] | None = None
        self.sweep_views: dict[int, SweepViewDialog] = {}

    def make_sweep_action(self) -> QAction:
        """The Run menu's "Sweep…"."""
        act = QAction("S&weep…", self)
        act.setStatusTip("Queue many runs of these settings over values of one or more of "
                         "them (grid or random search), and compare them")
        act.triggered.connect(self.show_sweep_dialog)
        self.sweep_action = act
        return act

    def show_sweep_dialog(self) -> SweepDialog:
        """The Sweep dialog over the current settings, timed by the store's past runs."""
        from mgpu_gui.gui.dialogs.sweep import SweepDialog

        def make() -> SweepDialog:
            base = self._current_config()
            dialog = SweepDialog(
                base, compiled_model=self.run_setup.compile_source.facts is not None,
                past_runs=None if self.store is None else past_runs_of(self.store.path, base),
                parent=self)
            dialog.start_requested.connect(
                lambda spec, name: self.start_sweep(dialog, spec, name))
            return dialog

        return self._show_dialog("sweep_dialog", make, fresh=True)

    def start_sweep(self, dialog: SweepDialog, spec: SweepSpec, name: str, *,
                    allow_busy: bool = False) -> None:
        """Queue the sweep in the background; `_sweep_start_answered` hears how it went."""
        inventory = self.gpu_panel.inventory
        if self.store is None:
            dialog.refuse("Sweeps need the run history, which is off: "
                          f"{self.store_problem or 'the run store could not be opened.'}")
            return
        if inventory is None:
            dialog.refuse("The GPUs are not listed yet; try again in a moment.")
            return
        self._sweep_request = (dialog, spec, name, allow_busy)
        self.sweep_starter.start(StoreJob(self.store.path, partial(
            start_and_run, spec=spec, name=name, inventory=inventory, allow_busy=allow_busy,
            compiled_model=dialog.compiled_model)))

    def _sweep_start_answered(self, outcome: int | Refused) -> None:
        assert self._sweep_request is not None
        dialog, spec, name, allow_busy = self._sweep_request
        self._sweep_request = None
        open_dialog = dialog if self.sweep_dialog is dialog else None  # closed meanwhile?
        if isinstance(outcome, Refused):
            error = outcome.error
            if (open_dialog is not None and isinstance(error, DevicesBusyError)
                    and error.outside_only and not allow_busy
                    and confirm_busy_gpus(open_dialog, error)):
                self.start_sweep(open_dialog, spec, name, allow_busy=True)
            elif open_dialog is not None:
                open_dialog.refuse(outcome.message)
            else:
                self.banner.show_error(f"The sweep {name} was not started: {outcome.message}")
            return
        if open_dialog is not None:
            open_dialog.started()
        self.notifier.notify(Notice(
            NoticeKind.INFO, f"Sweep {outcome} started",
            f"{name}: its trials are queued and run as their GPUs free up, also with this "
            f"window closed; the Sweeps tab lists it."))
        self.sweeps_panel.refresh()
        self.open_sweep(outcome, name)

    def open_sweep(self, sweep_id: int, name: str) -> SweepViewDialog | None:
        """The sweep's view window (one per sweep), brought to the front."""
        from mgpu_gui.gui.dialogs.sweep_view import SweepViewDialog

        if self.store is None:
            return None
        dialog = self.sweep_views.get(sweep_id)
        if dialog is None:
            dialog = SweepViewDialog(self.store.path, sweep_id, name,
                                     inventory=lambda: self.gpu_panel.inventory, parent=self)
            dialog.show_curves_requested.connect(self.show_run_curves)
            dialog.changed.connect(self.sweeps_panel.refresh)
            dialog.message.connect(self.log.append_message)
            dialog.finished.connect(lambda _=None, d=dialog: self._forget_sweep_view(sweep_id, d))
            return_focus_on_close(dialog)
            self.sweep_views[sweep_id] = dialog
        dialog.show()
        dialog.raise_()
        return dialog

    def _forget_sweep_view(self, sweep_id: int, dialog: SweepViewDialog) -> None:
        if self.sweep_views.get(sweep_id) is dialog:
            del self.sweep_views[sweep_id]
        dialog.deleteLater()

    def shutdown_sweeps(self) -> None:
        """For the window's close: the sweeps go on in the queue runner."""
        self.sweep_starter.shutdown()
        self.sweeps_panel.shutdown()
        for dialog in list(self.sweep_views.values()):
            dialog.close()
