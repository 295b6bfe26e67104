"""Prepare a run and supervise its worker process: the part the CLI and GUI share.

Qt-free and TensorFlow-free: it checks what can be checked instantly, creates
the run folder, starts `mgpu_gui.processes.training_worker` with its own device environment, and
turns the worker's event pipe back into `Event` objects.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mgpu_gui.core.children.inspector import file_inspector
from mgpu_gui.core.children.launch import CHILD_ENV, Child, module_command
from mgpu_gui.core.children.model_probe import choose_auto_mesh
from mgpu_gui.core.children.runner import pump_output
from mgpu_gui.core.children.telemetry_recorder import TelemetryRecorder
from mgpu_gui.core.children.warm_start import WarmChild, spawn
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, query_inventory
from mgpu_gui.core.devices.plan import DevicePlan, plan_devices
from mgpu_gui.core.engines import backend_env
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import (
    BatchEnd,
    EpochEnd,
    Event,
    Phase,
    RunFailed,
    RunFinished,
    RunStatus,
    parse_event,
)
from mgpu_gui.core.eventtext import best_text, is_noise
from mgpu_gui.core.runs import claims, preflight
from mgpu_gui.core.runs.diagnosis import Diagnostician, InputSettings
from mgpu_gui.core.runs.environment import data_changes
from mgpu_gui.core.runs.finish_hook import FinishedRun, run_finish_command
from mgpu_gui.core.runs.folder import RunDir, create_run_dir
from mgpu_gui.core.runs.lock import RunLock
from mgpu_gui.core.runs.store import RunRecorder, RunStore

OUTPUT_TAIL_LINES = 40
MESSAGE_TAIL_LINES = 12
# A stop before this attempt completed an epoch has nothing to keep: the worker gets this
# long to end by itself, then is killed. Waiting for a batch boundary could take minutes
# (the first step of 64 CPU replicas on 2 cores took 60-80 s to build).
HARD_STOP_GRACE_S = 2.0
# A worker that said its last word (RunFinished or RunFailed: everything is saved and
# flushed) is killed when it has not exited this long after. TensorFlow's teardown can
# deadlock holding Python's lock (freeing the data pipeline of 64 CPU replicas on 2 cores
# did), and then the worker's own exit timer (FINAL_EXIT_GRACE_S) never runs. Well past
# that timer: a worker at nice +10 on a busy machine ran it more than 0.5 s late, and a
# stopped run that had saved everything ended as killed (exit -9; three test workers on
# two cores).
AFTER_LAST_WORD_S = 10.0


@dataclass(frozen=True)
class PreparedRun:
    """A run folder ready for its worker; `lock` marks it live until the worker holds it."""

    config: RunConfig
    plan: DevicePlan
    run_dir: RunDir
    lock: RunLock | None = None
    run_id: int | None = None  # in the run store, when one is used
    resumed: bool = False
    temporary: bool = False  # a cluster's non-chief worker: its folder goes at the end

    def release(self) -> None:
        """Give up a run that will not be started."""
        if self.lock is not None:
            self.lock.release()


@dataclass
class RunOutcome:
    """How a run ended, in words for the user."""

    status: RunStatus
    message: str
    traceback: str = ""
    exit_code: int | None = None
    events: list[Event] = field(default_factory=list)
    resumable: bool = False  # the run folder's backup allows a resume (ResumePoint)
    refused: bool = False  # refused during setup: its folder and row are gone


def prepare_run(config: RunConfig, inventory: GpuInventory | None = None,
                store: RunStore | None = None, *, allow_busy: bool = False) -> PreparedRun:
    """Check everything that needs no TensorFlow, then create the run folder.

    Raises a UserError before any file is written when the input is wrong, and
    a DevicesBusyError when its devices are held by another live run or (unless
    `allow_busy`) run a process outside the app.
    """
    inventory = inventory if inventory is not None else query_inventory()
    config, plan = _checked(config, lambda checked: _plan(checked, inventory, store, allow_busy),
                            disk=True)
    config, plan = choose_auto_mesh(config, plan)  # the model probed: its variables, optimizer
    run_dir = create_run_dir(config)
    run_dir.plan_json.write_text(plan.to_json())
    lock = RunLock.acquire(run_dir.path)  # before the store lists it as running
    run_id = None
    if store is not None:
        try:
            run_id = store.add_run(run_dir, config)
            store.begin_attempt(run_id)
            claims.claim(store.database, run_id, plan, inventory)
        except claims.DevicesBusyError:
            lock.release()  # another app instance took a device a moment ago
            if run_id is not None:
                store.delete(run_id)
            shutil.rmtree(run_dir.path, ignore_errors=True)
            raise
        except BaseException:
            lock.release()
            raise
    return PreparedRun(config=config, plan=plan, run_dir=run_dir, lock=lock, run_id=run_id)


def check_inputs(config: RunConfig, inventory: GpuInventory) -> None:
    """The model and data checked as `prepare_run` checks them, for a run that starts later
    (a queued job, a sweep's trials): refused before it is queued, as `train` refuses it,
    not when it starts. Its devices count as free here (claimed when it starts), and its
    output disk is checked then."""
    _checked(config, lambda checked: plan_devices(checked.devices, inventory), disk=False)


def _checked(config: RunConfig, plan: Callable[[RunConfig], DevicePlan], *, disk: bool
             ) -> tuple[RunConfig, DevicePlan]:
    """The steps every run's inputs go through before anything is written: the settings,
    paths made absolute (the worker, the export verifier, a resume and a queue runner run
    in other folders), the devices planned, the preflight of model, data and disk."""
    config.check()
    config = config.with_absolute_paths()
    planned = plan(config)
    preflight.check_mesh(config, planned)
    preflight.check(config, planned.replicas, file_inspector(), disk=disk)
    return config, planned


def _plan(config: RunConfig, inventory: GpuInventory, store: RunStore | None,
          allow_busy: bool) -> DevicePlan:
    """The devices to use: with a store, only those no other live run holds."""
    if store is None:
        return plan_devices(config.devices, inventory)
    held, busy = claims.in_use(store.database, inventory.gpus)
    return claims.plan_free(config.devices, inventory, held, busy, allow_busy)


def prepare_resume(run_folder: Path, inventory: GpuInventory | None = None,
                   store: RunStore | None = None, *, allow_busy: bool = False) -> PreparedRun:
    """Check that a stopped, failed or interrupted run can go on, and take its lock.

    The worker continues from the run's backup: the last complete epoch.
    """
    run_dir = RunDir(run_folder.absolute())
    point = run_dir.resume_point()
    if point.exists and not run_dir.config_json.exists():
        raise UserError(f"{run_folder} is not a run folder (it has no config.json).")
    if not point.exists:
        raise UserError(point.refusal())
    lock = RunLock.acquire(run_dir.path)  # refuses a run that is still running
    try:
        config = run_dir.read_config()
        ended = run_dir.final_status()
        record = store.find_dir(run_dir.path) if store is not None else None
        if record is not None and record.status.value in (RunStatus.COMPLETED,
                                                          RunStatus.EARLY_STOPPED):
            ended = RunStatus(record.status.value)
        if ended in (RunStatus.COMPLETED, RunStatus.EARLY_STOPPED):
            raise UserError(
                f"The run in {run_dir.path} already {ended.value.replace('_', ' ')} "
                f"({run_dir.backup_epoch()} of {config.epochs} epochs); there is nothing to "
                f"resume. Export its model, or start a new run.")
        if not point.resumable:
            raise UserError(point.refusal())
        if record is not None and not record.resume_helps:
            raise UserError(f"The run in {run_dir.path} failed for a reason a resume would "
                            f"meet again: {record.message}")
        run_dir.check_stored_paths()
        changed = data_changes(run_dir.path)
        if changed:
            raise UserError(
                f"The run in {run_dir.path} cannot go on: its data changed since it started ("
                + "; ".join(changed) + "), and its epochs so far were trained on the data as "
                "it was. Put the data back to resume it, or train a new run on the new data: "
                f"mgpu-train --config {run_dir.config_json}")
        inventory = inventory if inventory is not None else query_inventory()
        plan = _plan(config, inventory, store, allow_busy)
        preflight.check_mesh(config, plan)
        preflight.check(config, plan.replicas, file_inspector())
        run_dir.plan_json.write_text(plan.to_json())
        run_id = None
        if store is not None:
            run_id = store.add_run(run_dir, config)
            claims.claim(store.database, run_id, plan, inventory)
            store.begin_attempt(run_id)
    except BaseException:
        lock.release()
        raise
    return PreparedRun(config=config, plan=plan, run_dir=run_dir, lock=lock, run_id=run_id,
                       resumed=True)


def worker_command(run_dir: RunDir, events_fd: int, control_fd: int, lock_fd: int | None = None,
                   nice: int = 0) -> list[str]:
    return module_command(
        Child.TRAINING_WORKER, str(run_dir.path),
        "--events-fd", str(events_fd), "--control-fd", str(control_fd),
        *(["--lock-fd", str(lock_fd)] if lock_fd is not None else []),
        *(["--nice", str(nice)] if nice else []))


class WorkerProcess:
    """One worker process: its event stream, its output, stop and kill."""

    def __init__(self, run: PreparedRun, *, on_output: Callable[[str], None] | None = None,
                 env: dict[str, str] | None = None, nice: int = 0,
                 store: RunStore | None = None):
        """`nice` lowers the worker's CPU priority: where training saturates the CPU,
        an interactive supervisor (the GUI) still gets a core when it needs one.
        With a `store` (and `run.run_id`), every event is recorded there, and the
        telemetry of the run's devices while the worker runs."""
        self.run = run
        self._recorder: RunRecorder | None = (
            store.recorder(run.run_id) if store is not None and run.run_id is not None else None)
        self._store_path = store.path if self._recorder is not None else None
        self._telemetry: TelemetryRecorder | None = None
        self._diagnosis = Diagnostician(InputSettings.of(run.config), run.plan.replicas,
                                        self._utilization)
        self._outcome: RunOutcome | None = None
        self.nice = nice
        self.on_output = on_output
        self.extra_env = env or {}
        self.output_tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
        self.events_seen: list[Event] = []
        self._proc: subprocess.Popen | WarmChild | None = None
        self._control = None
        self._events = None
        self._output_thread: threading.Thread | None = None
        self._hard_stop: threading.Timer | None = None
        self._last_word: threading.Timer | None = None
        self._killed = False  # by kill(): a stop the user asked for, not a crash

    def start(self) -> None:
        events_r, events_w = os.pipe()
        control_r, control_w = os.pipe()
        env = {**os.environ, **CHILD_ENV, **backend_env(self.run.config.engine),
               **self.run.plan.env, **self.extra_env}
        lock = self.run.lock
        lock_fd = lock.fd if lock is not None and lock.fd >= 0 else None
        try:
            # In its own session: a terminal's Ctrl-C reaches only the supervisor.
            self._proc = spawn(
                worker_command(self.run.run_dir, events_w, control_r, lock_fd, self.nice),
                pass_fds=(events_w, control_r, *([lock_fd] if lock_fd is not None else [])),
                env=env, stdin_pipe=False)
        finally:
            os.close(events_w)
            os.close(control_r)
            if lock is not None:
                lock.release()  # the worker holds it from here (or the run never started)
        if self._store_path is not None and self.run.run_id is not None:
            self._telemetry = TelemetryRecorder(self._store_path, self.run.run_id,
                                                self.run.plan, self._proc.pid)
            self._telemetry.start()
        self._events = os.fdopen(events_r, "r", encoding="utf-8")
        self._control = os.fdopen(control_w, "w", buffering=1, encoding="utf-8")
        self._output_thread = threading.Thread(target=self._pump_output, name="worker-output",
                                               daemon=True)
        self._output_thread.start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def events(self) -> Iterator[Event]:
        """Yield events until the worker closes its channel (it ended or died)."""
        assert self._events is not None, "start() first"
        for line in self._events:
            try:
                event = parse_event(line)
            except (ValueError, KeyError, TypeError):
                continue  # a torn line from a dying worker
            yield self._seen(event)
            verdict = self._diagnosis.seen(event)  # not recorded: derived, and per epoch
            if verdict is not None:
                yield verdict
        self._events.close()
        ended = self._hard_stop_end()
        if ended is not None:
            yield ended
        if self._recorder is not None:
            self._recorder.flush()

    def _utilization(self, since: float) -> float | None:
        return self._telemetry.utilization(since) if self._telemetry is not None else None

    def _seen(self, event: Event) -> Event:
        if not isinstance(event, BatchEnd):  # a long run sends millions of those
            self.events_seen.append(event)
        if isinstance(event, RunFinished | RunFailed) and self._last_word is None:
            self._last_word = threading.Timer(AFTER_LAST_WORD_S, self._end_after_last_word)
            self._last_word.daemon = True
            self._last_word.start()
        if self._recorder is not None:
            self._recorder.handle(event)
        return event

    def request_stop(self) -> bool:
        """Ask for a stop at the next batch boundary; the backup stays resumable.

        Before this attempt completed an epoch there is nothing to keep, and the next
        batch boundary may be minutes away (the first step is still being built): then
        the worker of a one-machine run is killed unless it ends within
        HARD_STOP_GRACE_S. Returns whether that is so.
        """
        if self._control is None:
            return False
        with contextlib.suppress(BrokenPipeError, ValueError):
            self._control.write("stop\n")
        # A run of several machines stops at a step the chief agrees with the others:
        # killing one worker would fail the rest.
        cluster = self.run.run_dir.cluster_json.exists()
        if cluster or self._epoch_completed() or self._hard_stop is not None:
            return self._hard_stop is not None
        self._hard_stop = threading.Timer(HARD_STOP_GRACE_S, self._stop_hard)
        self._hard_stop.daemon = True
        self._hard_stop.start()
        return True

    def _epoch_completed(self) -> bool:
        return any(isinstance(e, EpochEnd) for e in self.events_seen)

    def _stop_hard(self) -> None:
        # An epoch that completed during the grace is kept by the graceful stop under way.
        if not self._epoch_completed():
            self.kill()

    def _hard_stop_end(self) -> RunFinished | None:
        """The RunFinished a worker ended by `kill()` could not send (once), also written
        to its events.jsonl: the run reads as stopped, not as crashed or interrupted."""
        if not self._killed or any(
                isinstance(e, RunFinished | RunFailed) for e in self.events_seen):
            return None
        run_dir = self.run.run_dir
        ended = RunFinished(status=RunStatus.STOPPED, epochs_done=run_dir.backup_epoch(),
                            message="Stopped by request; the training process was ended at "
                                    "once (an epoch in progress is not kept).")
        with contextlib.suppress(OSError):
            _append_line(run_dir.events_jsonl, ended.to_json())
        return self._seen(ended)

    def _end_after_last_word(self) -> None:
        if self._proc and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    def kill(self) -> None:
        """End the worker at once; only ever after a stop request, so the run ends as
        stopped (at its last complete epoch), not as a crash."""
        if self._proc and self._proc.poll() is None:
            self._killed = True
            self._proc.kill()

    def wait(self, timeout: float | None = None) -> int:
        assert self._proc is not None
        code = self._proc.wait(timeout)
        if self._telemetry is not None:
            self._telemetry.stop()
        for timer in (self._hard_stop, self._last_word):
            if timer is not None:
                timer.cancel()
        if self._output_thread is not None:
            self._output_thread.join(timeout=5)
        if self._control is not None:
            with contextlib.suppress(BrokenPipeError):
                self._control.close()
            self._control = None
        return code

    def stop(self, timeout: float = 30.0) -> int:
        """Graceful stop, then a hard kill when the worker does not end in time."""
        self.request_stop()
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.wait()

    def outcome(self) -> RunOutcome:
        """After the worker ended: its final status, or why it died (recorded in the store)."""
        if self._outcome is None:
            outcome = self._find_outcome()
            point = self.run.run_dir.resume_point()
            # A cluster's other workers keep no backup: the chief's decides. A failure
            # whose cause a resume meets again (bad data, NaN loss) offers none either.
            failed = [e for e in outcome.events if isinstance(e, RunFailed)]
            outcome.resumable = ((point.resumable or self.run.temporary)
                                 and all(e.resumable for e in failed))
            if self._recorder is not None:
                if point.exists:
                    self._recorder.finish(outcome.status, outcome.message)
                else:  # a run refused during setup leaves no folder, and no row
                    self._recorder.discard()
                self._recorder = None
            outcome.refused = not point.exists and not self.run.temporary
            self._outcome = outcome
            if point.exists and self.run.config.on_finish and not self.run.temporary:
                said = run_finish_command(self.run.config.on_finish, self._finished(outcome))
                _append_line(self.run.run_dir.worker_log, said)
        return self._outcome

    def _finished(self, outcome: RunOutcome) -> FinishedRun:
        ended = next((e for e in reversed(outcome.events) if isinstance(e, RunFinished)), None)
        best = None if ended is None else best_text(ended.best_metric, ended.best_value,
                                                    ended.best_epoch)
        return FinishedRun(self.run.run_id, self.run.run_dir.path.name, outcome.status,
                           self.run.run_dir.path, best or "")

    def _find_outcome(self) -> RunOutcome:
        code = self.wait()
        if self._events is not None:
            self._events.close()  # the caller may have stopped reading early
        self._hard_stop_end()
        for event in reversed(self.events_seen):
            if isinstance(event, RunFinished):
                return RunOutcome(event.status, event.message, exit_code=code,
                                  events=self.events_seen)
            if isinstance(event, RunFailed):
                run_dir = self.run.run_dir
                if (event.phase is Phase.SETUP and not self.run.resumed
                        and not run_dir.has_progress()):
                    shutil.rmtree(run_dir.path, ignore_errors=True)  # leave no files behind
                return RunOutcome(RunStatus.FAILED, event.message, event.traceback, code,
                                  self.events_seen)
        how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
        said = [line for line in self.output_tail if not is_noise(line)]
        tail = "\n".join(said[-MESSAGE_TAIL_LINES:]) or "(nothing besides TensorFlow's start-up)"
        if self.run.temporary:
            kept = "The chief's run folder keeps the completed epochs."
        else:
            kept = self.run.run_dir.resume_point().kept()
        return RunOutcome(
            RunStatus.FAILED,
            f"The training process {how} without reporting an error (a crash, or killed "
            f"for lack of memory). {kept} Its full output is in "
            f"{self.run.run_dir.worker_log}. Last output lines:\n{tail}",
            exit_code=code, events=self.events_seen,
        )

    def _pump_output(self) -> None:
        """The worker's output goes to worker.log (appended by every attempt of the run)."""
        assert self._proc is not None and self._proc.stdout is not None
        log = open(self.run.run_dir.worker_log, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed by pump_output)
        pump_output(self._proc.stdout, log, self.output_tail, self.on_output)


def _append_line(path: Path, line: str) -> None:
    """Append `line` on a line of its own: a killed writer may have left half a line."""
    with open(path, "ab+") as handle:
        size = handle.seek(0, os.SEEK_END)
        torn = False
        if size:
            handle.seek(size - 1)
            torn = handle.read(1) != b"\n"
        handle.write((("\n" if torn else "") + line + "\n").encode())


def _signal_name(number: int) -> str:
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"
