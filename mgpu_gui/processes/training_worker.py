"""Child-process entry that runs one training job.

    python -m mgpu_gui.processes.training_worker RUN_DIR --events-fd N --control-fd M \
        [--lock-fd L] [--nice K]

Events go as JSON lines to the inherited pipe `N` (stdout and stderr belong to
Keras, TensorFlow and user code) and into RUN_DIR/events.jsonl. Lines read from
pipe `M` are commands ("stop"); end-of-file there means the supervisor is gone,
and the worker then stops at the next batch boundary and exits. The device
environment is applied before TensorFlow is imported; once it is loaded, the
run's environment record (versions, file hashes: RUN_DIR/environment.json) is
written. The engine's environment (KERAS_BACKEND, JAX's XLA settings) is set
here too, before anything imports Keras. The run's lock (inherited as `L` from
the supervisor, else taken here) is held until the process ends: it tells every
app instance that this run is live.

This entry is also the test hooks' selection point: fake GPUs
(MGPU_GUI_FAKE_GPUS) train on as many CPU replicas, and an injected fault
(MGPU_GUI_FAULT) becomes one more callback for the engine; `mgpu_gui.testing`
is imported only when one of them is set.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from mgpu_gui.core.config import DeviceKind
from mgpu_gui.core.devices.nvml import FAKE_GPUS_VAR
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.engines import CLUSTER_REFUSAL, Engine, InputPipeline
from mgpu_gui.core.errors import ConfigError, ExportError, RehearsalError, UserError
from mgpu_gui.core.events import (
    EpochEnd,
    Event,
    LogMessage,
    Phase,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
)
from mgpu_gui.core.mesh.settings import mesh_request
from mgpu_gui.core.runs.cluster import ClusterSpec
from mgpu_gui.core.runs.environment import record_environment
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.lock import RunBusyError, RunLock

PARENT_GONE_GRACE_S = 10.0  # after the supervisor dies: time to stop cleanly, then exit hard
# After the run's last event: time for TensorFlow's teardown, then exit hard. Destroying
# the tf.data iterators of 64 CPU replicas on 2 cores deadlocked here (0 % CPU, minutes).
FINAL_EXIT_GRACE_S = 3.0
EXIT_FAILED = 1
FAULT_VAR = "MGPU_GUI_FAULT"  # test-only fault injection (mgpu_gui.testing.faults)


class EventChannel:
    """Writes each event to the supervisor's pipe and to the run's events.jsonl.

    `on_final` is called with the exit code the run's last event (RunFinished or
    RunFailed) means, once it is written.
    """

    def __init__(self, pipe: TextIO | None, log_path: Path,
                 on_final: Callable[[int], None] | None = None):
        self._pipe = pipe
        self._log = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()
        self._on_final = on_final
        self.started = False

    def emit(self, event: Event) -> None:
        line = event.to_json() + "\n"
        with self._lock:
            self.started |= isinstance(event, RunStarted)
            self._log.write(line)
            if isinstance(event, (EpochEnd, RunFinished, RunFailed)):
                self._log.flush()
                os.fsync(self._log.fileno())  # a power cut keeps every finished epoch
            if self._pipe is not None:
                try:
                    self._pipe.write(line)
                except (BrokenPipeError, ValueError):
                    self._pipe = None  # the supervisor is gone; the file still records
        if self._on_final is not None and isinstance(event, RunFinished | RunFailed):
            failed = isinstance(event, RunFailed) or event.status is RunStatus.FAILED
            self._on_final(EXIT_FAILED if failed else 0)

    def close(self) -> None:
        """Close the run's log; the pipe belongs to whoever opened it."""
        with self._lock:
            self._log.close()


def exit_after_grace(code: int) -> None:
    """The run has said its last word: exit with `code` in FINAL_EXIT_GRACE_S even if
    TensorFlow's teardown hangs (nothing is left to save; every file is flushed)."""
    def leave() -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(FINAL_EXIT_GRACE_S, leave)
    timer.daemon = True
    timer.start()


def listen_for_stop(control_fd: int | None, stop: threading.Event) -> None:
    """Stop on "stop" from the supervisor, on SIGTERM/SIGINT, and when the supervisor dies."""

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if control_fd is None:
        return

    def read() -> None:
        with os.fdopen(control_fd, "r", encoding="utf-8") as control:
            for line in control:
                if line.strip() == "stop":
                    stop.set()
        stop.set()  # end of file: the supervisor died or closed the channel
        timer = threading.Timer(PARENT_GONE_GRACE_S, os._exit, args=(EXIT_FAILED,))
        timer.daemon = True
        timer.start()

    threading.Thread(target=read, name="control", daemon=True).start()


def run_job(run_dir: RunDir, plan: DevicePlan, strategy, cross_device_ops: str,
            channel: EventChannel, stop: threading.Event, cluster: ClusterSpec | None = None,
            extra_callbacks: list[Any] | None = None) -> int:
    """Run one job and report any failure as an event; returns the process exit code."""
    extra = extra_callbacks or []
    try:
        config = run_dir.read_config()
        if cluster is None:
            from mgpu_gui.engine.training import run_training

            status = run_training(config, run_dir, plan, strategy, cross_device_ops, channel,
                                  stop, extra_callbacks=extra)
        else:
            from mgpu_gui.engine.multiworker import run_cluster_training

            status = run_cluster_training(config, run_dir, plan, strategy, cross_device_ops,
                                          channel, stop, cluster, extra_callbacks=extra)
    except Exception as error:  # every failure must reach the user as an event
        channel.emit(failure_event(error, channel.started))
        return EXIT_FAILED
    return 0 if status is not RunStatus.FAILED else EXIT_FAILED


def failure_event(error: BaseException, started: bool) -> RunFailed:
    phase = Phase.EXPORT if isinstance(error, ExportError) else (
        Phase.TRAINING if started and not isinstance(error, RehearsalError) else Phase.SETUP)
    if isinstance(error, UserError):
        message = str(error)
    else:
        message = (f"Training failed with an unexpected error: {type(error).__name__}: {error}. "
                   f"This is likely a bug in mgpu-gui or in the model code; the traceback "
                   f"and worker.log in the run folder help to report it.")
    return RunFailed(message=message, phase=phase, error_type=type(error).__name__,
                     traceback="".join(traceback.format_exception(error)),
                     resumable=getattr(error, "resumable", True),
                     user_error=isinstance(error, UserError))


def device_plan(run_dir: RunDir) -> DevicePlan:
    """The run's plan; fake GPUs (test-only, MGPU_GUI_FAKE_GPUS) become as many CPU replicas,
    so a test trains for real on the devices it faked. The plan keeps the GPUs they stand
    in for: their memory is what the memory plan is judged against (memory_check.py)."""
    plan = DevicePlan.from_json(run_dir.plan_json.read_text())
    if not os.environ.get(FAKE_GPUS_VAR) or plan.kind is not DeviceKind.GPU:
        return plan
    # Set here, not by apply_device_env's check: forked by the warm starter (which takes
    # fake GPUs for none: core/children/warm_server.py), this process has TensorFlow
    # imported already, as it would with this setting.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    return dataclasses.replace(
        plan, kind=DeviceKind.CPU, env={"CUDA_VISIBLE_DEVICES": ""},
        names=[f"CPU replica {i} (standing in for {name})" for i, name in enumerate(plan.names)])


def fault_callbacks(run_dir: RunDir, channel: EventChannel) -> list[Any]:
    """The test-only fault MGPU_GUI_FAULT asks for, as a Keras callback; none when unset.

    Call once TensorFlow may load (the callback is a Keras one).
    """
    spec = os.environ.get(FAULT_VAR, "")
    if not spec.strip():
        return []
    from mgpu_gui.testing import faults

    try:
        fault = faults.from_env(run_name=run_dir.path.name)
    except faults.FaultSpecError as error:
        raise UserError(str(error)) from error
    if fault is None:  # meant for another run
        return []
    channel.emit(LogMessage(message=f"Test-only fault injection is on: {FAULT_VAR}={fault}.",
                            level="warning"))
    return [faults.fault_callback(fault, run_dir.path)]


def record_run_environment(run_dir: RunDir, channel: EventChannel, engine: Engine,
                          pipeline: InputPipeline) -> None:
    """environment.json: versions and the run's files' fingerprints. Call once the engine
    is loaded (the strategy is made); a record that cannot be written is a warning.
    TensorFlow's versions only where the run loaded it: a JAX run on the Python pipeline
    records none, and its JAX's instead."""
    try:
        if "tensorflow" in sys.modules:
            from mgpu_gui.engine.tf_facts import environment_versions

            versions = environment_versions()
        else:
            import keras

            versions = {"keras": keras.__version__}
        versions.update(engine=engine.value, input_pipeline=pipeline.value)
        if engine is Engine.JAX:
            from mgpu_gui.engine.jax_strategy import jax_versions

            versions.update(jax_versions())
        record_environment(run_dir.path, run_dir.read_config(), versions)
    except Exception as error:  # a missing record must never cost the run
        channel.emit(LogMessage(message=f"The run's environment record (versions, file "
                                        f"hashes) could not be written: {error}",
                                level="warning"))


def lower_priority(increment: int) -> None:
    """Yield the CPU to the GUI; call before TensorFlow starts its threads (they inherit it).

    The worker runs in a session of its own, and with Linux's autogroup scheduling
    a session is a group whose members' nice values do not count against other
    groups: the group's own nice value (/proc/self/autogroup) must be raised too.
    """
    os.nice(increment)
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text(f"{increment}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.training_worker")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--events-fd", type=int)
    parser.add_argument("--control-fd", type=int)
    parser.add_argument("--lock-fd", type=int,
                        help="the run's lock, already taken by the supervisor")
    parser.add_argument("--nice", type=int, default=0,
                        help="lower this process's CPU priority (the GUI asks for it)")
    args = parser.parse_args(argv)
    if args.nice:
        lower_priority(args.nice)

    run_dir = RunDir(args.run_dir)
    if args.lock_fd is None:
        try:
            lock = RunLock.acquire(run_dir.path)  # noqa: F841 (held until the process exits)
        except RunBusyError as error:
            print(f"error: {error}", file=sys.stderr)  # not an event: the run is another's
            return EXIT_FAILED
    # Inherited fds are inheritable: a grandchild started by a plain fork/exec (anything a
    # library spawns) would keep the run "live" and the supervisor's pipes open after us.
    for fd in (args.lock_fd, args.events_fd, args.control_fd):
        if fd is not None:
            os.set_inheritable(fd, False)
    pipe = os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8") if (
        args.events_fd is not None) else None
    channel = EventChannel(pipe, run_dir.events_jsonl, on_final=exit_after_grace)
    stop = threading.Event()
    listen_for_stop(args.control_fd, stop)
    cluster = None
    try:
        plan = device_plan(run_dir)
        config = run_dir.read_config()
        engine = Engine(config.engine)
        from mgpu_gui.engine.inputs import pipeline_for
        from mgpu_gui.engine.strategy import apply_device_env, make_strategy

        pipeline = pipeline_for(config)  # what this machine cannot do is refused here
        apply_device_env(plan, engine=engine)  # before TensorFlow, Keras or JAX is imported
        if run_dir.cluster_json.exists():  # one worker of a multi-machine run
            if engine is not Engine.TENSORFLOW:
                raise ConfigError([CLUSTER_REFUSAL])
            from mgpu_gui.engine.multiworker import make_cluster_strategy

            cluster = ClusterSpec.from_json(run_dir.cluster_json.read_text())
            strategy, cross_device_ops = make_cluster_strategy(plan, cluster)
        else:
            strategy, cross_device_ops = make_strategy(
                plan, engine, pipeline, mesh_request(config.mesh, config.layout))
        record_run_environment(run_dir, channel, engine, pipeline)
        extra_callbacks = fault_callbacks(run_dir, channel)
    except Exception as error:
        channel.emit(failure_event(error, started=False))
        channel.close()
        return EXIT_FAILED
    code = run_job(run_dir, plan, strategy, cross_device_ops, channel, stop, cluster,
                   extra_callbacks)
    channel.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
