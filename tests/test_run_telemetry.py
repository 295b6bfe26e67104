"""Each run's device telemetry: sampled by its supervisor, kept in the run store.

The supervisor is the app's own (`prepare_run`, `WorkerProcess` with a store); the
worker is a child that keeps busy a moment and reports the end of its run, so no
TensorFlow starts. GPUs are faked (a `MGPU_GUI_FAKE_GPUS` file), sampled faster
than once a second.
"""

from __future__ import annotations

import json
import sys
import time
from types import SimpleNamespace

import pytest

from mgpu_gui.core.children import supervisor, telemetry_recorder
from mgpu_gui.core.children.supervisor import WorkerProcess, prepare_run
from mgpu_gui.core.children.telemetry_recorder import ProcessSampler
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import FAKE_GPUS_VAR, GpuInventory, NvmlState, query_inventory
from mgpu_gui.core.devices.plan import usable_cores
from mgpu_gui.core.events import RunFinished, RunStatus
from mgpu_gui.core.runs.store import RunState, RunStore
from mgpu_gui.core.runs.telemetry_store import (
    CPU_DEVICE,
    MEMORY,
    POWER,
    UTILIZATION,
    TelemetryDevice,
    TelemetrySample,
    read_telemetry,
    record_devices,
    record_samples,
)

GiB = 2**30
BUSY_S = 0.6


@pytest.fixture(autouse=True)
def fast_sampling(monkeypatch):
    monkeypatch.setattr(telemetry_recorder, "INTERVAL_S", 0.05)
    monkeypatch.setattr(telemetry_recorder, "FLUSH_S", 0.2)


@pytest.fixture
def busy_worker(monkeypatch):
    """The training worker replaced by a child that spins for BUSY_S, then reports a
    completed run."""
    line = RunFinished(status=RunStatus.COMPLETED, epochs_done=1, message="").to_json() + "\n"
    code = (f"import os, sys, time\nend = time.time() + {BUSY_S!r}\n"
            f"while time.time() < end: pass\nos.write(int(sys.argv[1]), {line.encode()!r})")
    monkeypatch.setattr(supervisor, "worker_command",
                        lambda run_dir, events_fd, *args, **kw: [sys.executable, "-c", code,
                                                                 str(events_fd)])


def supervise(config: RunConfig, inventory: GpuInventory, store: RunStore) -> int:
    run = prepare_run(config, inventory, store)
    worker = WorkerProcess(run, store=store)
    worker.start()
    list(worker.events())
    assert worker.outcome().status is RunStatus.COMPLETED
    assert store.get(run.run_id).status is RunState.COMPLETED
    return run.run_id


def test_a_run_on_four_gpus_claiming_two_records_those_two_only(busy_worker, tmp_path,
                                                                 monkeypatch):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"gpus": [
        {"index": i, "uuid": f"GPU-fake-{i}", "name": f"Fake GPU {i}",
         "memory_total": 8 * GiB} for i in range(4)]}))
    monkeypatch.setenv(FAKE_GPUS_VAR, str(path))
    # What the worker sees is no guide: NVML numbers the GPUs its own way.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with RunStore() as store:
        run_id = supervise(RunConfig(output_dir=str(tmp_path / "runs"),
                                     devices=DeviceSelection(gpus=("GPU-fake-2", "1"))),
                           query_inventory(), store)
        telemetry = read_telemetry(store.database, run_id)
    assert {d: (dev.uuid, dev.name, dev.memory_total) for d, dev in telemetry.devices.items()
            } == {1: ("GPU-fake-1", "Fake GPU 1", 8192), 2: ("GPU-fake-2", "Fake GPU 2", 8192)}
    assert set(telemetry.samples) == {1, 2}
    for rows in telemetry.samples.values():
        assert len(rows) >= 3  # sampled from the worker's start to its end, all written
        assert (rows[:, POWER] == 70).all()  # the fake's readings, in whole watts


def test_a_run_on_cpu_replicas_records_its_worker_process(busy_worker, tmp_path):
    with RunStore() as store:
        run_id = supervise(RunConfig(output_dir=str(tmp_path / "runs"),
                                     devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2)),
                           GpuInventory(NvmlState.NO_DRIVER), store)
        telemetry = read_telemetry(store.database, run_id)
    assert list(telemetry.devices) == [CPU_DEVICE]
    assert telemetry.devices[CPU_DEVICE].memory_total > 0  # the machine's, for a scale
    rows = telemetry.samples[CPU_DEVICE]
    # Resident MiB: from just after exec (under 1) to a started Python's (the last sample
    # may come after its exit: 0, seen on a loaded machine).
    assert len(rows) >= 3 and (rows[:, MEMORY] >= 0).all() and rows[:, MEMORY].max() > 5
    # The first sample has no interval to measure over; the spinning worker used CPU (a
    # share of all the cores: 100 % is every one busy).
    assert 10 / usable_cores() < rows[1:, UTILIZATION].max() <= 100


def test_a_process_s_cpu_use_is_a_share_of_all_its_cores(tmp_path, monkeypatch):
    """/proc counts a process's CPU time summed over its threads: 3 busy cores for 2 s are
    6 s. Divided by the 4 cores it may use, that is 75 %, not 300 % (issue 30, item 9);
    ticks counted in steps that overshoot the interval read 100 %."""
    now = [100.0]
    monkeypatch.setattr(telemetry_recorder, "time",
                        SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    sampler = ProcessSampler(1, cores=4)
    sampler.proc = tmp_path
    (tmp_path / "statm").write_text("5000 2560 0 0 0 0 0\n")
    per_s = sampler._ticks_per_s

    def read(cpu_s: float, at: float) -> float | None:
        # After the command name: state, 10 fields, then utime and stime (in ticks).
        utime, stime = round(cpu_s * per_s * 0.8), round(cpu_s * per_s * 0.2)
        (tmp_path / "stat").write_text(f"42 (python -c x) R {'0 ' * 10}{utime} {stime} 0 0\n")
        now[0] = at
        (sample,) = sampler.sample()
        return sample.utilization

    assert read(10.0, 100.0) is None  # nothing to measure over yet
    assert read(16.0, 102.0) == 75
    assert read(25.0, 104.0) == 100  # 9 s in 2 s on 4 cores: no more than all of them


def test_telemetry_goes_with_its_run(tmp_path):
    with RunStore() as store:
        run = prepare_run(RunConfig(output_dir=str(tmp_path)),
                          GpuInventory(NvmlState.NO_DRIVER), store)
        run.release()
        record_devices(store.database, run.run_id, [TelemetryDevice(CPU_DEVICE)])
        record_samples(store.database, run.run_id,
                       [TelemetrySample(CPU_DEVICE, 10.0 + s, 100, 300) for s in range(3)])
        assert len(read_telemetry(store.database, run.run_id, after=10.5)) == 2
        store.delete(run.run_id)
        assert store.database.db.execute("SELECT COUNT(*) FROM telemetry").fetchone()[0] == 0
        assert read_telemetry(store.database, run.run_id).devices == {}
