"""A QThread supervises the training worker process and turns its events into signals.

The worker is a child process (TensorFlow never loads in the GUI process); a
reader object living in a QThread blocks on the worker's event pipe and
re-emits each event, in order, as a queued signal to the GUI thread.

Starting is asynchronous: the run is prepared (GPUs listed, claims, preflight, the
run folder) by a `RunPreparer` in a thread of its own, then the worker starts from
the GUI thread; a refusal comes back as `refused`.

With a run store, every run it starts or resumes is recorded there: the worker
supervisor writes the events on a connection of its own, in the reader thread.
"""

from __future__ import annotations

import contextlib
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QThread, QTimer, Signal, Slot

from mgpu_gui.core.config import DeviceKind, RunConfig
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import RunStatus
from mgpu_gui.core.runs.cluster import ClusterSpec
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.store import RunState as StoreState
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.gui.jobs.run_start import RunPreparer, StartKind, StartRequest
from mgpu_gui.gui.jobs.thread_end import end_in_thread

if TYPE_CHECKING:  # the supervisor loads with the first run: the window paints sooner
    from mgpu_gui.core.children.supervisor import PreparedRun, RunOutcome, WorkerProcess

STOP_TIMEOUT_MS = 30_000  # a graceful stop ends at the next batch; after this, kill
# A run on CPU replicas saturates every core by design: at nice +10 the window still gets
# a core at once (measured on 2 cores: tests/benchmarks/gui_responsiveness.py). A GPU
# run's CPU work (its first step's build, its input pipeline, its kernel launches) feeds
# the GPUs and leaves cores free for the window: lowered, any other job on the machine
# starved it (a first step at 15-19 % of a core for minutes, issue 30), so it keeps the
# window's priority. Either way the progress area says when other processes leave a run
# little CPU (core/devices/cpu_share.py).
CPU_RUN_NICE = 10


class RunState(StrEnum):
    IDLE = "idle"
    PREPARING = "preparing"  # off the GUI thread: GPUs, claims, preflight, the run folder
    RUNNING = "running"
    STOPPING = "stopping"


class _EventReader(QObject):
    """Lives in the supervising QThread; blocks on the pipe, never on the GUI."""

    event = Signal(object)
    finished = Signal(object)  # RunOutcome

    def __init__(self, worker: WorkerProcess):
        super().__init__()
        self.worker = worker

    @Slot()
    def run(self) -> None:
        for event in self.worker.events():
            self.event.emit(event)
        self.finished.emit(self.worker.outcome())
        end_in_thread(self)  # from here: the controller's wait() must not deadlock


class RunController(QObject):
    """Starts, stops and watches one training run at a time."""

    event = Signal(object)  # a core Event, in order, on the GUI thread
    output = Signal(str)  # a line the worker printed (Keras, TensorFlow, user code)
    started = Signal(object)  # PreparedRun
    refused = Signal(object, object)  # StartRequest, UserError: nothing started
    finished = Signal(object)  # RunOutcome
    state_changed = Signal(str)  # RunState

    def __init__(self, parent: QObject | None = None, *, stop_timeout_ms: int = STOP_TIMEOUT_MS,
                 store: RunStore | None = None):
        """`store`: the run history to record runs in (opened in the GUI thread; None: no
        history). Its owner closes it."""
        super().__init__(parent)
        self.stop_timeout_ms = stop_timeout_ms
        self.state = RunState.IDLE
        self.run: PreparedRun | None = None
        self._worker: WorkerProcess | None = None
        self._thread: QThread | None = None
        self._reader: _EventReader | None = None
        self._preparer = RunPreparer(store, self)
        self._preparer.prepared.connect(self._launch)
        self._preparer.refused.connect(self._refused)
        self._preparer.cancelled.connect(self._cancelled)
        self._kill_timer = QTimer(self)
        self._kill_timer.setSingleShot(True)
        self._kill_timer.timeout.connect(self._kill)

    @property
    def store(self) -> RunStore | None:
        return self._preparer.store

    @store.setter
    def store(self, store: RunStore | None) -> None:
        self._preparer.store = store

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker else None

    def is_running(self) -> bool:
        """Preparing, running or stopping: no other run may start."""
        return self.state is not RunState.IDLE

    def start(self, config: RunConfig, *, allow_busy: bool = False) -> None:
        """Prepare and start a run: `started`, or `refused` with the UserError (bad input,
        devices in use) when nothing started."""
        self.prepare(StartRequest(StartKind.TRAIN, config, allow_busy=allow_busy))

    def start_cluster(self, config: RunConfig, spec: ClusterSpec, *,
                      resume: RunDir | None = None) -> None:
        """Start this machine as the chief of a multi-worker run (or resume one); the
        other workers join with `mgpu-train worker`. Signals as for `start`."""
        self.prepare(StartRequest(StartKind.CHIEF, config, spec=spec,
                                  run_folder=resume.path if resume is not None else None))

    def resume(self, run: int | str | Path) -> None:
        """Continue a stopped, failed or interrupted run (a store id, or its folder) from its
        last complete epoch. An unknown id raises its UserError at once; what the folder
        says comes back as `refused`."""
        self.prepare(StartRequest(StartKind.RESUME, run_folder=self._run_folder(run)))

    def prepare(self, request: StartRequest) -> None:
        """Start what `request` asks (a refused request again, when the user agreed)."""
        if self.is_running():
            raise RuntimeError("a run is already in progress")
        self._preparer.start(request)
        self._set_state(RunState.PREPARING)

    def _run_folder(self, run: int | str | Path) -> Path:
        if isinstance(run, int) or (isinstance(run, str) and run.isdigit()):
            if self.store is None:
                raise UserError(f"Cannot find run {run}: the run history is off. "
                                f"Resume the run by its folder instead.")
            return self.store.get(int(run)).run_dir
        return Path(run)

    @Slot(object)
    def _launch(self, run: PreparedRun) -> None:
        from mgpu_gui.core.children.supervisor import RunOutcome, WorkerProcess

        try:
            nice = CPU_RUN_NICE if run.plan.kind is DeviceKind.CPU else 0
            worker = WorkerProcess(run, on_output=self.output.emit,  # emitted from a pump thread
                                   nice=nice, store=self.store)
            worker.start()
        except Exception as error:  # said as the run's failure
            run.release()  # the run never started: it must not look live
            message = f"The training process could not start: {error}"
            if self.store is not None and run.run_id is not None:
                with contextlib.suppress(Exception):  # the history must not hide the error
                    self.store.set_status(run.run_id, StoreState.FAILED, message)
            self._set_state(RunState.IDLE)
            self.finished.emit(RunOutcome(RunStatus.FAILED, message))
            return
        thread = QThread(self)
        reader = _EventReader(worker)
        reader.moveToThread(thread)
        thread.started.connect(reader.run)
        reader.event.connect(self.event)
        reader.finished.connect(self._on_finished)
        thread.finished.connect(reader.deleteLater)
        self.run, self._worker, self._thread, self._reader = run, worker, thread, reader
        thread.start()
        self._set_state(RunState.RUNNING)
        self.started.emit(run)

    @Slot(object, object)
    def _refused(self, request: StartRequest, error: UserError) -> None:
        self._set_state(RunState.IDLE)  # first: the receiver may start it again
        self.refused.emit(request, error)

    @Slot()
    def _cancelled(self) -> None:
        from mgpu_gui.core.children.supervisor import RunOutcome

        self._set_state(RunState.IDLE)
        self.finished.emit(RunOutcome(RunStatus.STOPPED, "Stopped before it started."))

    def stop(self) -> None:
        """Graceful stop at the next batch boundary; a hard kill after the timeout. A run
        still being prepared is discarded when its preparation ends."""
        if self.state is RunState.PREPARING:
            self._preparer.cancel()
            self._set_state(RunState.STOPPING)
            return
        if self.state is not RunState.RUNNING or self._worker is None:
            return
        self._worker.request_stop()
        self._set_state(RunState.STOPPING)
        self._kill_timer.start(self.stop_timeout_ms)

    def wait(self, timeout_ms: int) -> bool:
        """Block until the supervising thread ended (tests, and quitting the app)."""
        return self._preparer.wait(timeout_ms) and (
            self._thread is None or self._thread.wait(timeout_ms))

    @Slot()
    def _kill(self) -> None:
        if self._worker is not None:
            self._worker.kill()

    @Slot(object)
    def _on_finished(self, outcome: RunOutcome) -> None:
        self._kill_timer.stop()
        if self._thread is not None:
            self._thread.wait()
            self._thread.deleteLater()
        self._worker, self._thread, self._reader = None, None, None
        self._set_state(RunState.IDLE)
        self.finished.emit(outcome)

    def _set_state(self, state: RunState) -> None:
        self.state = state
        self.state_changed.emit(state.value)
