"""Resume after the worker or its supervisor was killed with SIGKILL.

Real runs on 2 CPU replicas with a small model: the history must hold every
completed epoch exactly once, the requested epoch count must be trained, and
the store must tell one consistent story of the run. The killed worker trains on
an image folder cached on disk: the resumed run reads that cache again.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mgpu_gui.core.children.supervisor import WorkerProcess, prepare_resume, prepare_run
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.events import (
    BatchEnd,
    EpochEnd,
    LogMessage,
    RunFinished,
    RunStarted,
    RunStatus,
)
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.lock import is_live
from mgpu_gui.core.runs.store import RunState, RunStore
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.slow

EPOCHS = 3
NO_GPU = GpuInventory(NvmlState.NO_DRIVER)


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> RunConfig:
    """About 120 steps per epoch: long enough to be killed in the middle of one."""
    root = tmp_path_factory.mktemp("resume")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, 32)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0).astype("int64")
    np.savez(root / "data.npz", x_train=x, y_train=y)
    (root / "mlp.py").write_text(textwrap.dedent("""
        import keras

        def build_model(input_shape, num_classes):
            return keras.Sequential([
                keras.Input(input_shape),
                keras.layers.Flatten(),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(num_classes, activation="softmax"),
            ])
    """))
    return RunConfig(model=str(root / "mlp.py"), data=str(root / "data.npz"), epochs=EPOCHS,
                     batch_per_replica=8, batch_event_interval_s=0.0,
                     devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2))


def finish(worker: WorkerProcess) -> list:
    worker.start()
    events = list(worker.events())
    assert worker.outcome().status is RunStatus.COMPLETED, worker.outcome().message
    return events


def assert_one_consistent_run(store: RunStore, run_dir: RunDir, attempts: int) -> None:
    """Every epoch once in the history, in the store and in the event log's last word."""
    (record,) = store.runs()
    assert record.run_dir == run_dir.path
    assert record.status is RunState.COMPLETED and record.epochs_done == EPOCHS
    assert record.attempts == attempts
    assert store.epoch_numbers(record.id) == list(range(EPOCHS))
    with open(run_dir.history_csv, newline="") as f:
        assert [int(row["epoch"]) for row in csv.DictReader(f)] == list(range(EPOCHS))
    finished = [e for e in run_dir.events() if isinstance(e, RunFinished)][-1]
    assert finished.status is RunStatus.COMPLETED and finished.epochs_done == EPOCHS
    # The redone epoch's batch curve comes from the attempt that finished it, once.
    started = [e for e in run_dir.events() if isinstance(e, RunStarted)][-1]
    batches = [e for e in store.series_events(record.id) if isinstance(e, BatchEnd)]
    for epoch in range(EPOCHS):
        steps = [e.batch for e in batches if e.epoch == epoch]
        assert steps == sorted(set(steps)), f"epoch {epoch} has batches twice"
        assert steps[-1] == started.steps_per_epoch - 1
    assert run_dir.export_path("keras").exists()


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> Path:
    """1,000 8x8 pictures of 3 classes: 100 steps of 8 per epoch."""
    from PIL import Image

    root = tmp_path_factory.mktemp("pictures")
    rng = np.random.default_rng(2)
    for i in range(1000):
        folder = root / f"class{i % 3}"
        folder.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return root


def test_sigkill_of_the_worker_mid_epoch_then_resume(config, image_folder, tmp_path):
    store = RunStore()
    cached = config.replace(output_dir=str(tmp_path), data=str(image_folder), image_size=(8, 8),
                            batch_per_replica=4, cache="disk")
    run = prepare_run(cached, NO_GPU, store)
    worker = WorkerProcess(run, store=store)
    worker.start()
    for event in worker.events():
        if isinstance(event, BatchEnd) and event.epoch == 1 and event.batch >= 5:
            os.kill(worker.pid, signal.SIGKILL)
            break
    outcome = worker.outcome()
    assert outcome.status is RunStatus.FAILED
    assert "killed by signal 9 (SIGKILL)" in outcome.message
    assert "1 completed epoch is kept" in outcome.message
    assert "a resume continues with epoch 2" in outcome.message
    run_dir = run.run_dir
    assert run_dir.backup_epoch() == 1
    (record,) = store.runs()
    assert record.status is RunState.FAILED and record.status.resumable
    assert store.epoch_numbers(record.id) == [0]
    assert not is_live(run_dir.path)
    (index,) = run_dir.cache.glob("train-*.index")  # the pass the killed worker completed
    made = index.stat().st_mtime_ns

    resumed = prepare_resume(run_dir.path, NO_GPU, store)
    assert resumed.run_id == record.id
    events = finish(WorkerProcess(resumed, store=store))
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.initial_epoch == 1
    assert [e.epoch for e in events if isinstance(e, EpochEnd)] == [1, 2]
    assert_one_consistent_run(store, run_dir, attempts=2)
    assert index.stat().st_mtime_ns == made  # read again, not decoded again
    assert not list(run_dir.cache.glob("*.lockfile"))
    assert any(isinstance(e, LogMessage) and "cached on local disk" in e.message
               for e in events)
    store.close()


SUPERVISOR = """
import sys
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.events import BatchEnd
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.core.children.supervisor import WorkerProcess, prepare_run

store = RunStore()
config = RunConfig.from_json(sys.argv[1])
run = prepare_run(config, GpuInventory(NvmlState.NO_DRIVER), store)
worker = WorkerProcess(run, store=store)
worker.start()
print(worker.pid, run.run_dir.path, flush=True)
for event in worker.events():
    if isinstance(event, BatchEnd) and event.epoch == 1 and event.batch >= 5:
        print("mid-epoch", flush=True)
"""


def lock_holders(folder: Path) -> list[str]:
    """Processes with the run's lock file open: what to look at when it stays held."""
    holders = []
    target = str(folder / "run.lock")
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) == target:
                pid = fd.parent.parent.name
                holders.append(f"{pid} {Path(f'/proc/{pid}/cmdline').read_text()[:120]!r}")
        except OSError:
            continue
    return holders


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has exited; its dead parent can't reap it
        return f.read().split()[2] != "Z"


def test_sigkill_of_the_supervisor_then_replay_and_resume(config, tmp_path):
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, config.replace(output_dir=str(tmp_path)).to_json()],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    assert supervisor.stdout is not None
    pid_text, run_path = supervisor.stdout.readline().split()
    assert supervisor.stdout.readline().strip() == "mid-epoch"
    supervisor.kill()  # SIGKILL: none of the supervisor's own cleanup runs
    supervisor.wait()
    supervisor.stdout.close()
    run_dir = RunDir(Path(run_path))

    wait_for(lambda: not alive(int(pid_text)), 20, "the orphaned worker to exit")
    # The kernel drops the lock when the last process holding it is gone.
    try:
        wait_for(lambda: not is_live(run_dir.path), 20, "the run's lock to be free")
    except AssertionError as error:
        raise AssertionError(f"{error}; held by {lock_holders(run_dir.path)}") from None
    store = RunStore()
    (before,) = store.runs()
    assert before.status is RunState.RUNNING  # nobody told the store how it ended

    # The next start: replay events.jsonl, mark the run interrupted, offer it.
    (interrupted,) = store.reconcile()
    assert interrupted.id == before.id and interrupted.status is RunState.INTERRUPTED
    done = run_dir.backup_epoch()
    assert done >= 1 and interrupted.epochs_done == done
    assert store.epoch_numbers(before.id) == list(range(done))
    assert f"Resume to continue at epoch {done + 1}" in interrupted.message

    events = finish(WorkerProcess(prepare_resume(run_dir.path, NO_GPU, store), store=store))
    assert [e.epoch for e in events if isinstance(e, EpochEnd)] == list(range(done, EPOCHS))
    assert_one_consistent_run(store, run_dir, attempts=2)
    store.close()


def test_a_run_that_is_still_running_or_completed_is_not_resumed(config, tmp_path):
    from mgpu_gui.core.errors import UserError
    from mgpu_gui.core.runs.lock import RunBusyError

    store = RunStore()
    run = prepare_run(config.replace(output_dir=str(tmp_path), epochs=1), NO_GPU, store)
    with pytest.raises(RunBusyError, match="still running"):
        prepare_resume(run.run_dir.path, NO_GPU, store)
    finish(WorkerProcess(run, store=store))
    with pytest.raises(UserError, match="already completed .1 of 1 epochs.; there is nothing"):
        prepare_resume(run.run_dir.path, NO_GPU, store)
    store.close()
