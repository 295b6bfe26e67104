"""The main window's run history: the store, the Runs tab's requests, followed runs and
the offer to resume interrupted ones.

A mixin of `MainWindow`, kept apart so the window module holds the panels and the
run; it uses the window's `store`, `controller`, `follower`, `run_telemetry`,
`reconciler`, `curves`, `progress`, `log`, `lower_splitter`, `runs_panel`, `resume_offer`,
`banner` and `notifier` (a queued run starting, withdrawn from the status bar when it
ends; a followed run ending). When the store cannot be opened, the app trains without a
history and says why (`store_problem`).
"""

from __future__ import annotations

from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import Event
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.lock import is_live
from mgpu_gui.core.runs.queue import QueuedJob
from mgpu_gui.core.runs.store import RunRecord, RunStore
from mgpu_gui.core.runs.store import RunState as StoreState
from mgpu_gui.core.runs.storedb import StoreError
from mgpu_gui.gui.jobs.run_follower import last_time
from mgpu_gui.gui.run_notices import queued_start_notice, record_end_notice
from mgpu_gui.gui.widgets.runs_table import STATUS_TEXT, best_text, short_name


class RunHistory:
    store_problem = ""  # why there is no run history, when there is none
    _owns_store = False

    def _open_store(self) -> RunStore | None:
        try:
            store = RunStore()
        except StoreError as error:
            self.store_problem = str(error)
            return None
        self._owns_store = True
        return store

    def _report_store(self) -> None:
        if self.store is None:
            message = (f"{self.store_problem or 'There is no run store.'} Training still "
                       f"works, but runs are not recorded in the run history.")
            self.banner.show_error(message)
            self.log.append_message(message)
        elif self.store.note:
            self.log.append_message(self.store.note)
            self.runs_panel.show_message(self.store.note)

    def _close_store(self) -> None:
        if self.run_telemetry is not None:
            self.run_telemetry.stop()
        if self.reconciler is not None:
            self.reconciler.stop(10.0)
        if self._owns_store and self.store is not None:
            self.store.close()

    def show_runs(self) -> None:
        self.log.setCurrentWidget(self.runs_panel)

    def show_run_curves(self, run_id: int) -> None:
        """A stored run's curves in the plots (not while a run trains: they are its)."""
        if self.controller.is_running() or self.store is None:
            return
        self._stop_following()
        try:
            record = self.store.get(run_id)
            events = self.store.series_events(run_id)
        except UserError as error:  # deleted meanwhile (another app instance)
            self.banner.show_error(str(error))
            return
        self.curves.load_events(events)
        self.lower_splitter.expand(False)  # shown from an expanded Runs tab: its curves
        self.curves.run_dir = record.run_dir  # stored curves hold no RunStarted
        self.curves.mark_fine_tuning(fine_tune_epoch(record))
        self._watch_telemetry(run_id)
        self._show_run_note(record)
        if (self.follower is not None and record.status is StoreState.RUNNING
                and is_live(record.run_dir)):  # its curves go on as it trains
            self.follower.follow(run_id, last_time(events))
        if record.folder_exists:
            self.last_run = RunDir(record.run_dir)  # Export exports the run shown
        self._update_actions()

    def _watch_telemetry(self, run_id: int | None) -> None:
        """Show the run's device telemetry under its curves, following it while it runs."""
        if self.run_telemetry is not None:
            self.run_telemetry.watch(run_id)

    def _show_run_note(self, record: RunRecord) -> None:
        """A stored run's progress as it stands (also each time a followed run is read)."""
        state = STATUS_TEXT[record.status][0].lower()
        self.progress.show_past(
            record.epochs_done, record.epochs, state,
            f"Run {short_name(record)}: {state}, {record.epochs_done} of {record.epochs} "
            f"epochs, best {best_text(record)}")

    def _followed_run_ended(self, record: RunRecord) -> None:
        self.curves.stop_updates()
        self.notifier.notify(record_end_notice(record))

    def _queued_run_started(self, job: QueuedJob) -> None:
        self.notifier.notify(queued_start_notice(job))

    def _queued_run_ended(self, job: QueuedJob) -> None:
        self.notifier.withdraw(queued_start_notice(job))

    def _followed_events(self, events: list[Event]) -> None:
        for event in events:
            self.curves.handle_event(event)

    def _stop_following(self) -> None:
        if self.follower is not None and self.follower.following:
            self.follower.stop()
            self.curves.stop_updates()

    def _interrupted_found(self, records: list[RunRecord]) -> None:
        self.runs_panel.refresh()
        for record in records:
            self.log.append_message(record.message or f"Run {record.name} was interrupted.")
        if records:
            self.resume_offer.offer(records + self.resume_offer.records)
            self._update_actions()

    def _check_stale_runs(self, records: list[RunRecord]) -> None:
        """A run marked running whose worker is gone (its app was killed after this one
        started): reconcile again, so it is shown, and offered, as interrupted."""
        if (self.reconciler is None or self.reconciler.is_running()
                or self.controller.is_running()):
            return
        if any(r.status is StoreState.RUNNING and not is_live(r.run_dir) for r in records):
            self.reconciler.start()

    def _runs_deleted(self, records: list[RunRecord]) -> None:
        folders = {r.run_dir for r in records}
        if self.last_run is not None and self.last_run.path in folders:
            self.last_run = None
        self.resume_offer.forget({r.id for r in records})
        self._update_actions()


def fine_tune_epoch(record: RunRecord) -> int | None:
    """A transfer-learning run's first fine-tune epoch, from its config.json (a small file):
    the store's events hold no StageStarted. None for other runs, or a folder gone."""
    try:
        config = RunDir(record.run_dir).read_config()
    except (OSError, ValueError, TypeError, UserError):
        return None
    return config.freeze_epochs or None
