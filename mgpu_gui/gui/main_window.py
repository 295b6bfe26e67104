"""The main window: assembles the panels and wires them through signals.

Panels do not know each other; this window connects the GPU panel's choice to
the run setup, the run controller's events to the plots, progress and log, and
errors to the banner. Nothing here blocks: NVML is polled on a thread, training
and exports run in child processes.

The run history (the store) is opened here and shared with the run controller
(which records runs in it) and the Runs tab (which lists them). At start-up, runs
that an earlier session did not see end are found in the background and offered
for a resume; when the store cannot be opened, the app trains without a history.
What the window does with the history lives in run_history.py.

Train only asks the run controller: the run is prepared (GPUs, claims, preflight,
the run folder) off the GUI thread, and the window hears back `started` or
`refused`; while it prepares, Train says so and cannot be clicked again.

The Queue tab (queue_panel.py) queues runs for a queue runner process and
feeds the GPU panel the devices live runs hold; Train on a held GPU offers the
queue. The tool dialogs (About, Check my setup, scaling test, batch finder,
Train across machines) live in tool_dialogs.py, the sweeps (Run ▸ Sweep…, the
Sweeps tab and each sweep's view) in sweep_actions.py, the actions, menus and
toolbar in window_actions.py. The window follows the system's light or dark scheme
(`theme.follow_system_scheme`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QEvent, QObject, QSettings, QSize, Qt
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QApplication,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import ClusterFormed, EpochEnd, Event, RunFailed, RunStarted, RunStatus
from mgpu_gui.core.runs.claims import DevicesBusyError
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.gui.desktop_notify import DesktopAlerts
from mgpu_gui.gui.export_actions import ExportActions
from mgpu_gui.gui.jobs.exporter import ModelExporter
from mgpu_gui.gui.jobs.preload import preload
from mgpu_gui.gui.jobs.run_controller import RunController, RunState
from mgpu_gui.gui.jobs.run_follower import RunFollower
from mgpu_gui.gui.jobs.run_start import StartKind, StartRequest
from mgpu_gui.gui.jobs.telemetry_reader import TelemetryReader
from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
from mgpu_gui.gui.panels.cluster import ClusterPanel
from mgpu_gui.gui.panels.curves_slot import CurvesSlot
from mgpu_gui.gui.panels.gpus import GpuPanel
from mgpu_gui.gui.panels.log import LogPanel
from mgpu_gui.gui.panels.progress import ProgressPanel, status_text
from mgpu_gui.gui.panels.queue import QueuePanel, confirm_busy_gpus, offer_queue
from mgpu_gui.gui.panels.run_setup import RunSetupPanel
from mgpu_gui.gui.panels.runs import RunsPanel
from mgpu_gui.gui.run_history import RunHistory
from mgpu_gui.gui.run_notices import outcome_notice
from mgpu_gui.gui.sweep_actions import SweepActions
from mgpu_gui.gui.theme import follow_system_scheme, is_palette_change, refresh_style_sheets
from mgpu_gui.gui.tool_dialogs import ToolDialogs
from mgpu_gui.gui.widgets import wheel_guard
from mgpu_gui.gui.widgets.error_banner import ErrorBanner
from mgpu_gui.gui.widgets.form_scroll import FormScrollArea
from mgpu_gui.gui.widgets.next_paint import after_next_paint
from mgpu_gui.gui.widgets.notifier import Notifier
from mgpu_gui.gui.widgets.plots_first import PlotsFirstSplitter
from mgpu_gui.gui.widgets.resume_offer import ResumeOffer, StoreReconciler
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen, room_on_screen
from mgpu_gui.gui.window_actions import WindowActions

if TYPE_CHECKING:  # the supervisor (and what it imports) loads at the first Train
    from mgpu_gui.core.children.supervisor import PreparedRun, RunOutcome
    from mgpu_gui.gui.panels.curves import CurvesPanel

# Everything stays usable down to MIN_SIZE; both sizes shrink to fit a smaller screen
# (1280x720 at 125 % scaling is 1024x576 in Qt's units).
MIN_SIZE, DEFAULT_SIZE = QSize(1024, 576), QSize(1280, 820)
SETUP_WIDTH = 400  # the run setup's first width; the splitter gives it more on request
# Of the left column, the most the GPU panel takes unless the user drags the splitter: the
# run setup keeps the rest (the panel's minimum, four GPU rows, wins in a small window).
GPU_SHARE = 0.6


class MainWindow(WindowActions, ToolDialogs, SweepActions, RunHistory, ExportActions,
                 QMainWindow):
    def __init__(self, *, telemetry: TelemetrySource | None = None,
                 controller: RunController | None = None):
        super().__init__()
        # As main() does, for an app made elsewhere (tests); first, so every field is guarded.
        wheel_guard.install(QApplication.instance())
        self.setWindowTitle("mgpu-gui")
        follow_system_scheme()  # light or dark as the system says, plots included
        self.telemetry = telemetry or TelemetrySource(parent=self)
        self.controller = controller or RunController(self)
        if self.controller.store is None:
            self.controller.store = self._open_store()
        self.store: RunStore | None = self.controller.store
        self.exporter = ModelExporter(self)
        self.desktop_alerts = DesktopAlerts(self)  # run ends, while the window is behind
        self.last_run: RunDir | None = None
        self._quit_after_run = False

        self.gpu_panel = GpuPanel(self.telemetry.inventory)
        self.run_setup = RunSetupPanel()
        self.banner = ErrorBanner()
        self.curves_slot = CurvesSlot()  # the plots: built after the first paint
        self.progress = ProgressPanel()
        self.log = LogPanel()
        self.runs_panel = RunsPanel(self.store, unavailable=self.store_problem)
        self.log.addTab(self.runs_panel, "Runs")
        self.queue_panel = QueuePanel(self.store, self.telemetry.inventory)
        self.log.addTab(self.queue_panel, "Queue")
        self._build_sweeps()  # the Sweeps tab, beside Queue
        self.cluster_panel = ClusterPanel()  # a tab once a multi-worker run reports
        # Live curves of a run another process supervises (a queued job, a terminal).
        self.follower = RunFollower(self.store, self) if self.store is not None else None
        # The device telemetry under the curves, of the run shown (live or past).
        self.run_telemetry = (TelemetryReader(self.store.path, self)
                              if self.store is not None else None)
        self.resume_offer = ResumeOffer()
        self.reconciler = (StoreReconciler(self.store.path, self)
                           if self.store is not None else None)
        self._build_actions()
        self._build_layout()
        self.notifier = Notifier(self, self.curves_slot)  # exports, queued starts, run ends
        self._connect()
        self._restore_settings()
        self._devices_to_setup()
        self._update_actions()
        self.telemetry.start()
        self._report_store()
        if self.reconciler is not None:
            self.reconciler.start()

    # -- construction --------------------------------------------------------
    def _build_layout(self) -> None:
        setup_scroll = FormScrollArea(self.run_setup)
        self.run_setup.train_button.setDefaultAction(self.train_action)
        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.gpu_panel)
        left.addWidget(setup_scroll)
        left.setStretchFactor(1, 1)
        left.setSizes([self.gpu_panel.sizeHint().height(), 520])
        self.left_splitter = left
        # The GPU panel grows after start (rows, processes, a busy warning): keep it whole
        # until the user drags the splitter (setSizes does not count as a drag).
        self._gpu_split_by_user = False
        left.splitterMoved.connect(self._gpu_split_moved)
        self.gpu_panel.installEventFilter(self)
        left.installEventFilter(self)  # a taller column: room for more GPU rows

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.banner)
        right_layout.addWidget(self.resume_offer)
        self.lower_splitter = PlotsFirstSplitter(self.curves_slot, self.progress, self.log,
                                                 self.curves_slot.readable_height)
        right_layout.addWidget(self.lower_splitter)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setCollapsible(0, False)
        self.splitter.setSizes([SETUP_WIDTH, DEFAULT_SIZE.width() - SETUP_WIDTH])
        self.setCentralWidget(self.splitter)
        self.setMinimumSize(MIN_SIZE.boundedTo(room_on_screen(self)))
        self.statusBar().showMessage("Looking for GPUs…")

    def _connect(self) -> None:
        self.telemetry.inventory_changed.connect(self._inventory_ready)
        self.telemetry.inventory_changed.connect(self._forward_inventory)
        self.telemetry.snapshots.connect(self.gpu_panel.update_snapshots)
        self.telemetry.inventory_changed.connect(self.queue_panel.set_inventory)
        self.queue_panel.claims_changed.connect(self.gpu_panel.set_claims)
        self.queue_panel.message.connect(self.log.append_message)
        self.queue_panel.job_started.connect(self._queued_run_started)
        self.queue_panel.job_ended.connect(self._queued_run_ended)
        self.gpu_panel.selection_changed.connect(self._devices_to_setup)
        self.run_setup.validity_changed.connect(lambda ok: self._update_actions())
        self.run_setup.summary_ready.connect(self.log.set_summary)
        self.controller.started.connect(self._run_started)
        self.controller.refused.connect(self._start_refused)
        self.controller.event.connect(self._run_event)
        self.controller.output.connect(self.log.append_output)
        self.controller.finished.connect(self._run_finished)
        self.controller.state_changed.connect(lambda state: self._update_actions())
        self.exporter.finished.connect(self._export_finished)
        self.notifier.noticed.connect(self.desktop_alerts.hear)
        self.runs_panel.show_curves_requested.connect(self.show_run_curves)
        self.runs_panel.resume_requested.connect(self.resume_run)
        self.runs_panel.runs_deleted.connect(self._runs_deleted)
        self.runs_panel.refreshed.connect(self._check_stale_runs)
        self.resume_offer.resume_requested.connect(self.resume_run)
        if self.run_telemetry is not None:
            self.run_telemetry.telemetry.connect(
                lambda telemetry, replace: self.curves.show_telemetry(telemetry, replace))
        if self.follower is not None:
            self.follower.events.connect(self._followed_events)
            self.follower.updated.connect(self._show_run_note)
            self.follower.ended.connect(self._followed_run_ended)
        self.resume_offer.show_runs_requested.connect(self.show_runs)
        if self.reconciler is not None:
            self.reconciler.done.connect(self._interrupted_found)
            self.reconciler.failed.connect(self.log.append_message)

    @property
    def curves(self) -> CurvesPanel:
        """The training curves, built now if the first paint has not been followed yet."""
        return self.curves_slot.panel()

    # -- running -------------------------------------------------------------
    def start_training(self) -> None:
        if self.controller.is_running():
            return
        self.banner.clear()
        self.controller.start(self._current_config())

    def _start_refused(self, request: StartRequest, error: UserError) -> None:
        """Devices in use: confirm GPUs busy outside the app, or offer the queue when a run
        holds them; any other refusal is said in the banner."""
        if isinstance(error, DevicesBusyError) and request.kind is StartKind.TRAIN:
            if error.outside_only and confirm_busy_gpus(self, error):
                self.controller.prepare(request.allowing_busy())
            elif not error.outside_only and offer_queue(self, error):
                self.add_to_queue()
            return
        self.banner.show_error(str(error))  # bad input: said before anything started
        if request.kind is StartKind.RESUME:
            self.runs_panel.refresh()  # completed, still running elsewhere, folder gone, ...

    def add_to_queue(self) -> None:
        self.banner.clear()
        inventory = self.gpu_panel.inventory
        try:
            if inventory is None:
                raise UserError("The GPUs are not listed yet; try again in a moment.")
            if self.queue_panel.add(self._current_config(), inventory) is not None:
                self.log.setCurrentWidget(self.queue_panel)
        except UserError as error:
            self.banner.show_error(str(error))

    def stop_training(self) -> None:
        self.controller.stop()

    def resume_run(self, run_id: int) -> None:
        """Continue a stored run from its last complete epoch; its curves continue too."""
        if self.controller.is_running():
            return
        self.banner.clear()
        try:
            self.controller.resume(run_id)
        except UserError as error:  # no such run (deleted meanwhile)
            self.banner.show_error(str(error))
            self.runs_panel.refresh()

    def _run_started(self, run: PreparedRun) -> None:
        self._stop_following()
        self.lower_splitter.expand(False)  # the run's curves, over an expanded Runs tab
        if run.resumed:
            self._continue_curves(run)
        else:
            self.curves.reset()
            self.progress.reset()
            self.progress.starting()
            self.log.append_message(f"Starting a run in {run.run_dir.path}")
        self.gpu_panel.set_own_pids({self.controller.worker_pid} - {None})
        self.progress.follow_cpu(self.controller.worker_pid)
        self._watch_telemetry(run.run_id)
        self.last_run = run.run_dir
        self.statusBar().showMessage(run.plan.note or ", ".join(run.plan.names))
        if run.run_id is not None:
            self.resume_offer.forget({run.run_id})
        self.runs_panel.refresh()

    def _continue_curves(self, run: PreparedRun) -> None:
        """Before the resumed worker reports: the curves so far, so the new epochs extend
        them (the worker's RunStarted drops the unfinished epoch's batches)."""
        if self.store is not None and run.run_id is not None:
            events = self.store.series_events(run.run_id)
        else:  # no history: the run's own event log has the same curves
            events = run.run_dir.events()
        self.curves.load_events(events)
        self.progress.reset()
        done, total = run.run_dir.backup_epoch(), run.config.epochs
        self.progress.starting(f"Resuming {run.run_dir.path.name} ({done} of {total} epochs "
                               f"done) at epoch {done + 1}")
        self.log.append_message(f"Resuming the run in {run.run_dir.path} at epoch {done + 1} "
                                f"of {total}")

    def _run_event(self, event: Event) -> None:
        if isinstance(event, ClusterFormed) and self.log.indexOf(self.cluster_panel) < 0:
            self.log.addTab(self.cluster_panel, "Cluster")
        self.cluster_panel.handle_event(event)
        self.curves.handle_event(event)
        self.progress.handle_event(event)
        self.log.append_event(event)
        if isinstance(event, RunStarted):
            self.statusBar().showMessage(status_text(event, None))
        if isinstance(event, RunFailed):
            self.banner.show_error(event.message, event.traceback,
                                   self.run_setup.failure_offer(event, self.start_training))
        if isinstance(event, RunStarted | EpochEnd):
            self.runs_panel.refresh()  # recorded before it was emitted: the table is current

    def _run_finished(self, outcome: RunOutcome) -> None:
        self.runs_panel.refresh()
        self.gpu_panel.set_own_pids(set())
        self.progress.run_ended()  # a worker killed before its first batch said nothing
        if outcome.status is RunStatus.FAILED and not any(
                isinstance(e, RunFailed) for e in outcome.events):
            self.banner.show_error(outcome.message)  # the worker died without a word
        notice, evaluation = outcome_notice(self.last_run, outcome), (
            self.evaluation_of_finished_run(outcome))
        if evaluation is not None and self.evaluate_finished_action.isChecked():
            evaluation()  # the Run menu's switch: opened at once
        elif evaluation is not None:
            notice = dataclasses.replace(notice, action="View evaluation")
        self.notifier.notify(notice, evaluation)
        if self.last_run is not None and not self.last_run.path.exists():
            self.last_run = None  # a run refused during setup leaves no folder
        self._update_actions()
        if self._quit_after_run:
            self.close()

    def _update_actions(self) -> None:
        state = self.controller.state
        idle = state is RunState.IDLE
        self.train_action.setEnabled(idle and self.run_setup.is_valid())
        preparing = state is RunState.PREPARING
        self.train_action.setText("Preparing…" if preparing else "&Train")
        if preparing:
            self.statusBar().showMessage("Preparing the run: devices, files, run folder…")
        self.queue_action.setEnabled(self.run_setup.is_valid() and self.store is not None)
        self.stop_action.setEnabled(state is RunState.RUNNING)
        # A scaling test beside a training run would time the two competing for devices.
        self.scaling_action.setEnabled(idle and self.run_setup.is_valid())
        self.batch_action.setEnabled(idle and self.run_setup.is_valid())
        self.cluster_action.setEnabled(idle and self.run_setup.is_valid())
        self.export_action.setEnabled(idle and not self.exporter.is_running()
                                      and self._export_source() is not None)
        self.run_setup.set_enabled_for_run(idle)
        self.gpu_panel.set_enabled_for_run(idle)
        self.runs_panel.set_run_active(not idle)
        self.resume_offer.set_resume_enabled(idle)

    # -- devices -------------------------------------------------------------
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        # New content, or a new width: its wrapped notices take more or fewer lines; a new
        # column height: a new share of it.
        if (watched is self.gpu_panel and event.type() in (QEvent.Type.LayoutRequest,
                                                           QEvent.Type.Resize)) or (
                watched is self.left_splitter and event.type() == QEvent.Type.Resize):
            self._fit_gpu_panel()
        return super().eventFilter(watched, event)

    def _gpu_split_moved(self) -> None:
        self._gpu_split_by_user = True

    def _fit_gpu_panel(self) -> None:
        if self._gpu_split_by_user:
            return
        sizes = self.left_splitter.sizes()
        panel = self.gpu_panel
        # At the panel's real width: its size hint wraps text at a narrower one (wasted lines).
        wanted = (panel.heightForWidth(panel.width()) if panel.hasHeightForWidth()
                  else panel.sizeHint().height())
        total = sum(sizes)
        wanted = max(min(wanted, round(total * GPU_SHARE)), panel.minimumSizeHint().height())
        if sizes[0] != wanted:
            self.left_splitter.setSizes([wanted, max(total - wanted, 0)])

    def _devices_to_setup(self) -> None:
        """The run setup's global batch, scaled LR and precision hint follow the devices."""
        self.run_setup.set_replicas(self.gpu_panel.replicas(), gpus=self.gpu_panel.checked_gpus())

    def _inventory_ready(self, inventory: GpuInventory) -> None:
        self.gpu_panel.set_inventory(inventory)
        if not self.curves_slot.is_built():  # the window is whole once the GPUs show
            after_next_paint(self.gpu_panel, self._window_whole)
        self._fit_gpu_panel()  # rows exist now: make room for them
        self._devices_to_setup()
        if inventory.state is NvmlState.OK:
            self.statusBar().showMessage(f"{len(inventory.gpus)} GPU(s), driver "
                                         f"{inventory.driver_version or 'N/A'}")
        else:
            self.statusBar().showMessage(inventory.message)

    def _window_whole(self) -> None:
        """What waited for the window's first complete paint: the plots, built here, and
        the run supervisor's modules, imported on a thread (the first Train's preparing
        thread importing them held the GIL against the click: 20 ms, not 3)."""
        preload(_load_supervisor, "run supervisor")
        self.curves_slot.panel()

    # -- settings and closing ------------------------------------------------
    def _restore_settings(self) -> None:
        settings = QSettings()
        geometry = settings.value("window/geometry")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        else:
            fit_to_screen(self, DEFAULT_SIZE)
        state = settings.value("window/splitter")
        if isinstance(state, QByteArray):
            self.splitter.restoreState(state)
        self.lower_splitter.restore_state(settings.value("window/lower_splitter"))
        self.run_setup.restore_settings(settings)

    def _save_settings(self) -> None:
        settings = QSettings()
        settings.setValue("window/geometry", self.saveGeometry())
        settings.setValue("window/splitter", self.splitter.saveState())
        settings.setValue("window/lower_splitter", self.lower_splitter.save_state())
        self.run_setup.save_settings(settings)

    def confirm_stop_on_close(self) -> bool:
        answer = QMessageBox.question(
            self, "Training in progress",
            "A run is in progress. Stop it (at the next batch, keeping it resumable) and quit?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if is_palette_change(event):
            refresh_style_sheets(self)  # light <-> dark: styled widgets keep old palettes

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        if self.controller.is_running():
            event.ignore()
            if self._quit_after_run or self.confirm_stop_on_close():
                self._quit_after_run = True
                self.controller.stop()  # the window closes when the run has ended
            return
        self._save_settings()
        self.telemetry.stop()
        self._stop_following()
        if self.curves_slot.is_built():
            self.curves.shutdown()
        self.notifier.shutdown()
        self.run_setup.shutdown()
        self.exporter.cancel()
        self.runs_panel.shutdown()
        self.queue_panel.shutdown()
        self.shutdown_sweeps()
        self.close_dialogs()
        self._close_store()
        event.accept()


def _load_supervisor() -> None:
    """The run supervisor's modules, imported ahead of the first Train (gui/jobs/preload.py)."""
    import mgpu_gui.core.children.supervisor  # noqa: F401
