"""The worker process as the supervisor sees it: stop and crash (a dead parent: test_resume)."""

from __future__ import annotations

import os
import signal

import pytest

from mgpu_gui.core.children.supervisor import WorkerProcess, prepare_run
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.events import EpochEnd, RunFinished, RunStarted, RunStatus
from mgpu_gui.core.runs.folder import RunDir

pytestmark = pytest.mark.slow


def long_demo(tmp_path, **changes) -> RunConfig:
    return RunConfig(epochs=200, output_dir=str(tmp_path), batch_per_replica=16,
                     devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2)).replace(**changes)


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
