"""The worker process as the supervisor sees it: stop, crash, and a dead parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.events import EpochEnd, RunFinished, RunStarted, RunStatus
from mgpu_gui.core.rundir import RunDir
from mgpu_gui.core.supervisor import WorkerProcess, prepare_run

pytestmark = pytest.mark.slow


def long_demo(tmp_path, **changes) -> RunConfig:
    return RunConfig(epochs=200, output_dir=str(tmp_path), batch_per_replica=16,
                     devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2)).replace(**changes)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited; only its parent (gone here) could reap it
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


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
    assert "kept" in outcome.message  # the run folder and what it holds are not deleted
    assert worker.run.run_dir.path.exists()


def test_worker_stops_and_exits_when_its_supervisor_dies(tmp_path):
    supervisor = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from mgpu_gui.core.config import RunConfig
        from mgpu_gui.core.events import EpochEnd
        from mgpu_gui.core.supervisor import WorkerProcess, prepare_run
        config = RunConfig.from_json({long_demo(tmp_path).to_json()!r})
        worker = WorkerProcess(prepare_run(config))
        worker.start()
        for event in worker.events():
            if isinstance(event, EpochEnd):
                print(worker.pid, worker.run.run_dir.path, flush=True)
        """)], stdout=subprocess.PIPE, text=True)
    assert supervisor.stdout is not None
    pid_text, run_path = supervisor.stdout.readline().split()
    supervisor.kill()  # SIGKILL: no cleanup code of the supervisor runs
    supervisor.wait()
    supervisor.stdout.close()
    wait_for(lambda: not alive(int(pid_text)), 20, "the orphaned worker to exit")
    finished = [e for e in RunDir(Path(run_path)).events()
                if isinstance(e, RunFinished)]
    assert finished and finished[0].status is RunStatus.STOPPED
