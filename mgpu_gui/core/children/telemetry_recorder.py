"""A run's device telemetry, sampled by the process that supervises its worker.

The supervisor (the GUI, the CLI or the queue runner) is the one process every
run has, so every run gets its telemetry, whoever started it. It samples only
the GPUs the run claims, found by UUID in NVML's own list: NVML ignores
`CUDA_VISIBLE_DEVICES`, so the worker's device numbers mean nothing here. A run
on CPU replicas records its worker process's CPU use and resident memory
instead (from /proc: psutil is no dependency; elsewhere nothing is recorded), its CPU
use as a share of the cores it may run on, so 100 % means all of them busy.
Samples are written in one transaction every `FLUSH_S` and when the run ends.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from pathlib import Path

from mgpu_gui.core.config import DeviceKind
from mgpu_gui.core.devices.cpu_share import process_cpu_ticks
from mgpu_gui.core.devices.nvml import GpuInfo, NvmlState, default_session, query_inventory
from mgpu_gui.core.devices.plan import DevicePlan, usable_cores
from mgpu_gui.core.devices.telemetry import GpuSnapshot, every, take_snapshots
from mgpu_gui.core.runs.claims import device_key, plan_keys
from mgpu_gui.core.runs.storedb import StoreDatabase
from mgpu_gui.core.runs.telemetry_store import (
    CPU_DEVICE,
    MIB,
    TelemetryDevice,
    TelemetrySample,
    record_devices,
    record_samples,
)

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
FLUSH_S = 5.0  # how far the store (and a window following the run) lags behind at most
RECENT_SAMPLES = 1024  # GPU utilization kept for the diagnosis (core/runs/diagnosis.py)


class TelemetryRecorder:
    """Samples one run's devices on a thread of its own, from `start()` to `stop()`."""

    def __init__(self, store_path: Path, run_id: int, plan: DevicePlan, pid: int):
        self.store_path = store_path
        self.run_id = run_id
        self.plan = plan
        self.pid = pid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="run-telemetry", daemon=True)
        self._recent: deque[TelemetrySample] = deque(maxlen=RECENT_SAMPLES)
        self._recent_lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End sampling and write what is buffered (idempotent)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(10.0)

    def utilization(self, since: float) -> float | None:
        """The claimed GPUs' mean utilization (%) in the samples since `since` (time.time()),
        and the one just before (it covers the start); None on CPU replicas or before a
        sample."""
        with self._recent_lock:
            values = [s.utilization for s in self._recent
                      if s.t >= since - INTERVAL_S and s.utilization is not None]
        return sum(values) / len(values) if values else None

    def _run(self) -> None:
        try:
            database = StoreDatabase(self.store_path)
        except Exception:  # the run goes on without telemetry
            log.exception("telemetry: cannot open the run store")
            return
        try:
            self._record(database)
        except Exception:
            log.exception("telemetry of run %s failed", self.run_id)
        finally:
            database.close()

    def _record(self, database: StoreDatabase) -> None:
        if self.plan.kind is DeviceKind.CPU:
            process = ProcessSampler(self.pid)
            devices = [TelemetryDevice(CPU_DEVICE, name="training process",
                                       memory_total=machine_memory_mib())]
            sample = process.sample
        else:
            session = default_session()
            gpus = claimed_gpus(self.plan)
            devices = [TelemetryDevice(g.index, g.uuid or "", g.name or "",
                                       g.memory_total // MIB if g.memory_total else None)
                       for g in gpus]

            def sample() -> list[TelemetrySample]:
                return [gpu_sample(s) for s in take_snapshots(session, gpus) if not s.lost]

        if not devices:
            return
        record_devices(database, self.run_id, devices)
        buffer: list[TelemetrySample] = []
        flushed = time.monotonic()

        def tick() -> None:
            nonlocal flushed
            taken = sample()
            buffer.extend(taken)
            if self.plan.kind is not DeviceKind.CPU:
                with self._recent_lock:
                    self._recent.extend(taken)
            if time.monotonic() - flushed >= FLUSH_S:
                record_samples(database, self.run_id, buffer)
                buffer.clear()
                flushed = time.monotonic()

        every(INTERVAL_S, self._stop, tick)
        record_samples(database, self.run_id, buffer)


def claimed_gpus(plan: DevicePlan) -> list[GpuInfo]:
    """The run's GPUs as NVML lists them now, matched by UUID (its claim keys)."""
    keys = set(plan_keys(plan))
    inventory = query_inventory(default_session())
    if inventory.state is not NvmlState.OK:
        return []
    return [gpu for gpu in inventory.gpus if device_key(gpu) in keys]


def gpu_sample(snap: GpuSnapshot) -> TelemetrySample:
    return TelemetrySample(
        device=snap.index, t=snap.timestamp, utilization=snap.utilization_gpu,
        memory=None if snap.memory_used is None else snap.memory_used // MIB,
        power=None if snap.power_w is None else round(snap.power_w),
        temperature=snap.temperature_c)


class ProcessSampler:
    """One process's CPU use since the last sample (% of `cores` cores: its busy time summed
    over its threads, divided by them) and resident memory. `cores` None: the cores this
    process may run on, which the worker inherits."""

    def __init__(self, pid: int, cores: int | None = None):
        self.proc = Path(f"/proc/{pid}")
        self.cores = cores or usable_cores()
        self._ticks_per_s = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._last: tuple[float, int] | None = None  # (monotonic time, CPU ticks)

    def sample(self) -> list[TelemetrySample]:
        try:
            ticks = process_cpu_ticks(self.proc)
            resident = int((self.proc / "statm").read_text().split()[1]) * self._page
        except (OSError, IndexError, ValueError):  # ended, or no /proc here
            return []
        now = time.monotonic()
        utilization = None
        if self._last is not None and now > self._last[0]:
            used_s = (ticks - self._last[1]) / self._ticks_per_s
            # At most 100: ticks counted in 10 ms steps can overshoot a short interval.
            utilization = min(100, round(100 * used_s / ((now - self._last[0]) * self.cores)))
        self._last = (now, ticks)
        return [TelemetrySample(CPU_DEVICE, time.time(), utilization, resident // MIB)]


def machine_memory_mib() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB
    except (AttributeError, ValueError, OSError):
        return None
