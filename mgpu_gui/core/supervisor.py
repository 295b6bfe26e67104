"""Prepare a run and supervise its worker process: the part the CLI and GUI share.

Qt-free and TensorFlow-free: it checks what can be checked instantly, creates
the run folder, starts `mgpu_gui.worker` with its own device environment, and
turns the worker's event pipe back into `Event` objects.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mgpu_gui.core import preflight
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.device_plan import DevicePlan, plan_devices
from mgpu_gui.core.devices import GpuInventory, query_inventory
from mgpu_gui.core.events import Event, Phase, RunFailed, RunFinished, RunStatus, parse_event
from mgpu_gui.core.rundir import RunDir, create_run_dir

OUTPUT_TAIL_LINES = 40


@dataclass(frozen=True)
class PreparedRun:
    config: RunConfig
    plan: DevicePlan
    run_dir: RunDir


@dataclass
class RunOutcome:
    """How a run ended, in words for the user."""

    status: RunStatus
    message: str
    traceback: str = ""
    exit_code: int | None = None
    events: list[Event] = field(default_factory=list)


def prepare_run(config: RunConfig, inventory: GpuInventory | None = None) -> PreparedRun:
    """Check everything that needs no TensorFlow, then create the run folder.

    Raises a UserError before any file is written when the input is wrong.
    """
    config.check()
    # Absolute: the worker and the export verifier run in other folders.
    config = config.replace(output_dir=str(config.output_path.absolute()))
    plan = plan_devices(config.devices, inventory if inventory is not None else query_inventory())
    preflight.check(config, plan.replicas)
    run_dir = create_run_dir(config)
    run_dir.plan_json.write_text(plan.to_json())
    return PreparedRun(config=config, plan=plan, run_dir=run_dir)


def worker_command(run_dir: RunDir, events_fd: int, control_fd: int,
                   nice: int = 0) -> list[str]:
    return [sys.executable, "-m", "mgpu_gui.worker", str(run_dir.path),
            "--events-fd", str(events_fd), "--control-fd", str(control_fd),
            *(["--nice", str(nice)] if nice else [])]


class WorkerProcess:
    """One worker process: its event stream, its output, stop and kill."""

    def __init__(self, run: PreparedRun, *, on_output: Callable[[str], None] | None = None,
                 env: dict[str, str] | None = None, nice: int = 0):
        """`nice` lowers the worker's CPU priority: where training saturates the CPU,
        an interactive supervisor (the GUI) still gets a core when it needs one."""
        self.run = run
        self.nice = nice
        self.on_output = on_output
        self.extra_env = env or {}
        self.output_tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
        self.events_seen: list[Event] = []
        self._proc: subprocess.Popen | None = None
        self._control = None
        self._events = None
        self._output_thread: threading.Thread | None = None

    def start(self) -> None:
        events_r, events_w = os.pipe()
        control_r, control_w = os.pipe()
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1",
               **self.run.plan.env, **self.extra_env}
        try:
            self._proc = subprocess.Popen(
                worker_command(self.run.run_dir, events_w, control_r, self.nice),
                pass_fds=(events_w, control_r), env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C reaches only the supervisor
            )
        finally:
            os.close(events_w)
            os.close(control_r)
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
            self.events_seen.append(event)
            yield event
        self._events.close()

    def request_stop(self) -> None:
        """Ask for a stop at the next batch boundary; the backup stays resumable."""
        if self._control is None:
            return
        with contextlib.suppress(BrokenPipeError, ValueError):
            self._control.write("stop\n")

    def kill(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.kill()

    def wait(self, timeout: float | None = None) -> int:
        assert self._proc is not None
        code = self._proc.wait(timeout)
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
        """After the worker ended: its final status, or why it died."""
        code = self.wait()
        for event in reversed(self.events_seen):
            if isinstance(event, RunFinished):
                return RunOutcome(event.status, event.message, exit_code=code,
                                  events=self.events_seen)
            if isinstance(event, RunFailed):
                run_dir = self.run.run_dir
                if event.phase is Phase.SETUP and not run_dir.has_progress():
                    shutil.rmtree(run_dir.path, ignore_errors=True)  # leave no files behind
                return RunOutcome(RunStatus.FAILED, event.message, event.traceback, code,
                                  self.events_seen)
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        tail = "\n".join(self.output_tail) or "(no output)"
        return RunOutcome(
            RunStatus.FAILED,
            f"The training process {how} without reporting an error (a crash, or killed "
            f"for lack of memory). Its checkpoints and backup in {self.run.run_dir.path} are "
            f"kept. Last output lines:\n{tail}",
            exit_code=code, events=self.events_seen,
        )

    def _pump_output(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        log_path: Path = self.run.run_dir.worker_log
        with self._proc.stdout, open(log_path, "a", encoding="utf-8", errors="replace") as log:
            for raw in self._proc.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                log.write(line + "\n")
                log.flush()
                self.output_tail.append(line)
                if self.on_output is not None:
                    self.on_output(line)
