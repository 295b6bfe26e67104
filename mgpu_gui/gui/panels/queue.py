"""The Queue tab: runs waiting for their GPUs, the runs the queue started, and the claims.

The queue lives in the run store and a queue runner process (see
`mgpu_gui.processes.queue_runner`) starts its jobs, so closing the window stops neither.
This panel adds jobs, cancels them, and every few seconds reads the queue and
the devices live runs hold; the GPU panel shows those claims (`claims_changed`).
A job it sees started since the panel opened is announced once (`job_started`), and
again when its run ends (`job_ended`), so the window can take the news back.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidgetItem,
    QWidget,
)

from mgpu_gui.core.children.queue_runner import ensure_runner
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.runs import claims
from mgpu_gui.core.runs.queue import (
    JobQueue,
    JobState,
    QueuedJob,
    config_summary,
    runner_pid,
)
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.gui.widgets.action_column import lay_out_panel
from mgpu_gui.gui.widgets.tables import read_only_table

REFRESH_MS = 2_000  # claims and job states change when runs start and end elsewhere
COLUMNS = ("Job", "Name", "Queued", "What", "State")


def confirm_busy_gpus(parent: QWidget, error: claims.DevicesBusyError) -> bool:
    """Ask before taking GPUs that run processes outside the app."""
    answer = QMessageBox.warning(
        parent, "GPU in use outside mgpu-gui",
        f"{error.reason}\n\nTraining there shares that GPU's compute and memory with the "
        f"other process; either may run out of memory. Use it anyway?",
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        QMessageBox.StandardButton.No)
    return answer == QMessageBox.StandardButton.Yes


def offer_queue(parent: QWidget, error: claims.DevicesBusyError) -> bool:
    """The devices are another run's: offer to queue this one instead."""
    box = QMessageBox(QMessageBox.Icon.Information, "Devices in use",
                      f"{error.reason}\n\nAdd this run to the queue? It starts by itself when "
                      f"its devices are free, even if this window is closed.",
                      QMessageBox.StandardButton.Cancel, parent)
    queue = box.addButton("Add to queue", QMessageBox.ButtonRole.AcceptRole)
    box.setDefaultButton(queue)
    box.exec()
    return box.clickedButton() is queue


class QueuePanel(QWidget):
    """The job queue of one store, and the claims of its live runs."""

    claims_changed = Signal(object)  # dict[int, claims.DeviceUse], by GPU index
    message = Signal(str)  # for the log
    job_started = Signal(object)  # a QueuedJob whose run the queue runner has started
    job_ended = Signal(object)  # a QueuedJob announced by job_started whose run has ended

    def __init__(self, store: RunStore | None, inventory: GpuInventory | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Queue")
        self.store = store
        self.queue = JobQueue(store) if store is not None else None
        self.inventory = inventory
        self.jobs: list[QueuedJob] = []
        self._claims: dict[int, claims.DeviceUse] = {}
        # Jobs started before the panel opened are old news; later ones are announced once.
        self._opened = time.time()
        self._announced: set[int] = set()
        self._running: dict[int, QueuedJob] = {}  # announced jobs whose run still runs

        self.table = read_only_table(COLUMNS, "Queued jobs")
        self.note = QLabel(self, wordWrap=True)
        self.note.setAccessibleName("Queue state")
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.cancel_button = QPushButton("Cancel job", self)
        self.cancel_button.setAccessibleName("Cancel job")
        self.cancel_button.setToolTip("Take the selected waiting jobs off the queue; for a "
                                      "started job, stop its run at the next batch (it stays "
                                      "resumable)")
        self.cancel_button.clicked.connect(self.cancel_selected)
        lay_out_panel(self, self.note, self.table, [self.cancel_button])

        self.table.itemSelectionChanged.connect(self._update_buttons)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        if self.queue is not None:
            self._timer.start()
            if self.queue.waiting():  # the queue outlived the last runner (a reboot)
                ensure_runner(self.store.path)
        self.refresh()

    def set_inventory(self, inventory: GpuInventory) -> None:
        self.inventory = inventory
        self.refresh()

    def shutdown(self) -> None:
        """For the window's close: the queue and its runner go on without the window."""
        self._timer.stop()

    # -- adding and cancelling -------------------------------------------------------------

    def add(self, config: RunConfig, inventory: GpuInventory) -> QueuedJob | None:
        """Queue a run (asking before it may take a GPU busy outside the app)."""
        if self.queue is None or self.store is None:
            raise UserError("The queue needs the run history, which is off: "
                            "start the run now instead.")
        try:
            job = self.queue.add(config, inventory)
        except claims.DevicesBusyError as busy:
            if not confirm_busy_gpus(self, busy):
                return None
            job = self.queue.add(config, inventory, allow_busy=True)
        ensure_runner(self.store.path)
        self.message.emit(f"Queued job {job.id} ({job.name}): {config_summary(job.config)}. "
                          f"It starts when its devices are free.")
        self.refresh()
        return job

    def cancel_selected(self) -> None:
        if self.queue is None:
            return
        rows = sorted({index.row() for index in self.table.selectedIndexes()})
        for row in rows:
            job = self.jobs[row]
            try:
                job = self.queue.cancel(job.id)
            except UserError as error:
                self.message.emit(str(error))
                continue
            self.message.emit(f"Job {job.id} ({job.name}): " + (
                "stopping its run at the next batch; it stays resumable in the Runs tab."
                if job.cancel_requested else "cancelled."))
        self.refresh()

    # -- display ---------------------------------------------------------------------------

    def refresh(self) -> None:
        if self.queue is None or self.store is None:
            self.note.setText("The queue needs the run history, which is off.")
            self._update_buttons()
            return
        try:
            jobs = self.queue.jobs()
            held = claims.live_claims(self.store.database)
        except Exception as error:  # a locked or broken store must not break the window
            self.note.setText(f"Could not read the queue: {error}")
            return
        self.jobs = jobs
        self._fill(jobs)
        self._announce_started(jobs)
        waiting = sum(job.waiting for job in jobs)
        pid = runner_pid(self.store.path)
        if not jobs:
            self.note.setText("No queued runs. Run ▸ Add to queue (Ctrl+Shift+Return) queues "
                              "the current settings: the run starts when its devices are free.")
        else:
            runner = (f"the queue runner (pid {pid}) starts them" if pid is not None else
                      "no queue runner is running")
            self.note.setText(f"{waiting} waiting, {len(jobs) - waiting} started; {runner}. "
                              f"The queue goes on when this window closes.")
        self._publish_claims(held)
        self._update_buttons()

    def _fill(self, jobs: list[QueuedJob]) -> None:
        assert self.queue is not None
        self.table.setRowCount(len(jobs))
        for row, job in enumerate(jobs):
            values = (str(job.id), job.name,
                      time.strftime("%m-%d %H:%M", time.localtime(job.created)),
                      config_summary(job.config), self.queue.describe(job))
            for column, text in enumerate(values):
                item = self.table.item(row, column)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(row, column, item)
                if item.text() != text:
                    item.setText(text)
                    item.setToolTip(text)

    def _announce_started(self, jobs: list[QueuedJob]) -> None:
        """Announce the jobs started since the last look, and the end of those announced
        that are gone from `jobs` (its run ended), so their start stops being news."""
        for job in jobs:
            if (job.state is JobState.STARTED and job.id not in self._announced
                    and (job.started or 0.0) >= self._opened):
                self._announced.add(job.id)
                self._running[job.id] = job
                self.job_started.emit(job)
        listed = {job.id for job in jobs}
        for job_id in [i for i in self._running if i not in listed]:
            self.job_ended.emit(self._running.pop(job_id))

    def _publish_claims(self, held: dict[str, claims.Claim]) -> None:
        uses = {}
        for gpu in self.inventory.gpus if self.inventory is not None else ():
            claim = held.get(claims.device_key(gpu))
            use = claims.DeviceUse(
                holder=claim.holder if claim is not None else "",
                waiting=tuple(job.id for job in self.jobs
                              if job.waiting and _wants(job, gpu.index, gpu.uuid)))
            if use != claims.DeviceUse():
                uses[gpu.index] = use
        if uses != self._claims:
            self._claims = uses
            self.claims_changed.emit(dict(uses))

    def _update_buttons(self) -> None:
        rows = {index.row() for index in self.table.selectedIndexes()}
        self.cancel_button.setEnabled(any(
            row < len(self.jobs) and self.jobs[row].state in (JobState.QUEUED, JobState.STARTED)
            for row in rows))


def _wants(job: QueuedJob, index: int, uuid: str | None) -> bool:
    return any(name == str(index) or (uuid and name.lower() == uuid.lower())
               for name in job.config.devices.gpus)
