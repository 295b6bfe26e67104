"""The worker process as the supervisor sees it: stop and crash (a dead parent: test_resume)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from mgpu_gui.core.children.supervisor import WorkerProcess, prepare_run
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.plan import usable_cores
from mgpu_gui.core.events import (
    EpochEnd,
    LogMessage,
    Phase,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
)
from mgpu_gui.core.runs.environment import WHOLE, read_environment
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.store import RunState as StoreState
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.processes.training_worker import EXIT_FAILED, EventChannel

pytestmark = pytest.mark.slow


def long_demo(tmp_path, **changes) -> RunConfig:
    # No export: a run stopped or killed makes none, and its rehearsal is a TensorFlow start.
    return RunConfig(epochs=200, output_dir=str(tmp_path), batch_per_replica=16,
                     devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2),
                     export_formats=()).replace(**changes)


def test_stop_request_ends_at_a_batch_boundary(tmp_path):
    worker = WorkerProcess(prepare_run(long_demo(tmp_path)))
    worker.start()
    for event in worker.events():
        if isinstance(event, EpochEnd):
            worker.request_stop()
    outcome = worker.outcome()
    assert outcome.status is RunStatus.STOPPED and outcome.exit_code == 0
    finished = [e for e in outcome.events if isinstance(e, RunFinished)][0]
    assert 1 <= finished.epochs_done < 200
    assert RunDir(worker.run.run_dir.path).backup_epoch() == finished.epochs_done


def test_a_killed_worker_is_reported_with_its_last_output(tmp_path):
    worker = WorkerProcess(prepare_run(long_demo(tmp_path)))
    worker.start()
    for event in worker.events():
        if isinstance(event, RunStarted):
            os.kill(worker.pid, signal.SIGKILL)
    outcome = worker.outcome()
    assert outcome.status is RunStatus.FAILED
    assert "killed by signal 9" in outcome.message
    assert "no backup to resume from" in outcome.message and not outcome.resumable
    assert str(worker.run.run_dir.worker_log) in outcome.message  # where its output went
    assert worker.run.run_dir.path.exists()
    # Written before the run starts, with TensorFlow loaded: versions and the data's hash.
    environment = read_environment(worker.run.run_dir.path)
    assert environment is not None and environment.tensorflow and environment.keras
    (data,) = environment.files
    assert data.role == "data" and data.sha256 and data.method == WHOLE


def test_the_last_event_arms_the_exit_with_its_code(tmp_path):
    """The worker exits FINAL_EXIT_GRACE_S after its last event even if TensorFlow's
    teardown hangs (that of 64 CPU replicas deadlocked): the channel says when, and how."""
    codes: list[int] = []
    channel = EventChannel(None, tmp_path / "events.jsonl", on_final=codes.append)
    channel.emit(LogMessage(message="not the last"))
    channel.emit(RunFinished(status=RunStatus.STOPPED, epochs_done=1))
    channel.emit(RunFinished(status=RunStatus.FAILED, epochs_done=1))
    channel.emit(RunFailed(message="boom", phase=Phase.TRAINING, error_type="ValueError"))
    channel.close()
    assert codes == [0, EXIT_FAILED, EXIT_FAILED]


def test_a_worker_that_hangs_after_its_last_word_is_ended(tmp_path, monkeypatch):
    """TensorFlow's teardown can deadlock holding Python's lock (freeing 64 CPU replicas'
    data pipeline did), so the worker's own exit timer never runs: the supervisor ends
    it AFTER_LAST_WORD_S after the final event, and the run reads as that event says."""
    from mgpu_gui.core.children import supervisor

    final = RunFinished(status=RunStatus.STOPPED, epochs_done=1, message="Stopped by request.")
    hangs = (f"import os, sys, time; os.write(int(sys.argv[1]), {final.to_json()!r}.encode() "
             "+ b'\\n'); time.sleep(600)")
    monkeypatch.setattr(supervisor, "worker_command",
                        lambda run_dir, events_fd, *a, **k: [sys.executable, "-c", hangs,
                                                             str(events_fd)])
    worker = WorkerProcess(prepare_run(long_demo(tmp_path)))
    began = time.monotonic()
    worker.start()
    assert [type(e) for e in worker.events()] == [RunFinished]
    outcome = worker.outcome()
    took = time.monotonic() - began
    assert supervisor.AFTER_LAST_WORD_S <= took < supervisor.AFTER_LAST_WORD_S + 1.5, took
    assert outcome.status is RunStatus.STOPPED and outcome.message == "Stopped by request."
    assert "crash" not in outcome.message and outcome.resumable is False  # no backup here


def test_ctrl_c_while_64_cpu_replicas_build_their_first_step_stops_within_5_s(tmp_path):
    """Building the first step of 64 CPU replicas takes a minute on 2 cores, with no batch
    boundary to stop at: with no epoch to keep, the supervisor ends the worker at once, and
    the run ends as stopped (not as a crash), with nothing to resume."""
    command = [sys.executable, "-m", "mgpu_gui.cli.main", "train", "--cpu", "--replicas", "64",
               "--batch-per-replica", "1", "--epochs", "1", "--json", "-o", str(tmp_path)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if json.loads(line)["type"] == "run_started":  # fit starts tracing the first step
                break
        asked = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - asked
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and took < 5, (took, err[-2000:])
    finished = json.loads(out.splitlines()[-1])
    assert finished["type"] == "run_finished" and finished["status"] == "stopped"
    assert "Stopped before the first epoch; nothing to resume." in err
    assert "Traceback" not in err and "crash" not in err and "resume " not in err
    if usable_cores() < 64:
        assert f"warning: 64 CPU replicas on {usable_cores()} cores" in err
    run_dir = RunDir(next(tmp_path.iterdir()))  # kept, as after any stop
    assert run_dir.final_status() is RunStatus.STOPPED
    with RunStore() as store:
        assert [(r.status, r.epochs_done) for r in store.runs()] == [(StoreState.STOPPED, 0)]
