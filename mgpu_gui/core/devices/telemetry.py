"""Live GPU telemetry through NVML: snapshots, a short history, a background poller.

Qt-free and TensorFlow-free, so the GUI and the CLI share it. The shape follows
nvitop: every value is read in one batch per GPU (`take_snapshots`), NVML
errors become `None` ("not available") instead of exceptions, a GPU that falls
off the bus becomes a `lost` snapshot rather than an error, and one background
thread (`TelemetryPoller`) hands finished snapshots to whoever shows them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from mgpu_gui.core.devices.nvml import (
    GpuInfo,
    GpuInventory,
    NvmlSession,
    NvmlState,
    query_inventory,
)

log = logging.getLogger(__name__)

HISTORY_WINDOW_S = 120.0  # what the sparklines show
DEFAULT_INTERVAL_S = 1.0
_PSTATE_UNKNOWN = 32  # NVML_PSTATE_UNKNOWN
_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
# pynvml's process queries: the unversioned name first (pynvml picks the newest
# struct it knows), then explicit versions for a pynvml/driver pair that differ.
_PROCESS_QUERIES = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
)


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    used_memory: int | None  # bytes; None where NVML cannot say (e.g. Windows WDDM)


@dataclass(frozen=True)
class GpuSnapshot:
    """One GPU at one moment. Every value NVML cannot give is None.

    A lost GPU (NVML says GpuIsLost, or its handle cannot be had) keeps the
    identity the inventory knew (index, uuid, name) and has `lost=True`, every
    measurement None and `processes` None.
    """

    index: int
    uuid: str | None
    name: str | None
    timestamp: float  # time.time() of the pass that read it
    utilization_gpu: int | None = None  # % of time a kernel ran
    memory_used: int | None = None  # bytes
    memory_total: int | None = None  # bytes
    # NVML's "memory utilization": % of time the memory controller was busy,
    # NOT how full the memory is (that is memory_used / memory_total).
    memory_busy: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    fan_percent: int | None = None
    performance_state: str | None = None  # "P0" (fastest) … "P15"
    processes: tuple[ProcessInfo, ...] | None = None  # compute processes; None: unknown
    lost: bool = False

    @property
    def memory_fraction(self) -> float | None:
        """How full the memory is, 0..1."""
        if self.memory_used is None or not self.memory_total:
            return None
        return self.memory_used / self.memory_total


class _Reader:
    """Calls NVML for one GPU pass: errors become None, GpuIsLost is remembered."""

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        self.lost = False
        self._lost_error = getattr(nvml, "NVMLError_GpuIsLost", None)
        # pynvml raises this (not an NVMLError) when an unversioned function is
        # missing from an older driver.
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        self._errors: tuple[type[BaseException], ...] = tuple(
            e for e in (getattr(nvml, "NVMLError", None), mismatch) if isinstance(e, type)
        )

    def __call__(self, function: str, *args: Any) -> Any:
        if self.lost:
            return None
        func = getattr(self.nvml, function, None)
        if func is None:
            return None
        try:
            return func(*args)
        except self._errors as exc:
            if self._lost_error is not None and isinstance(exc, self._lost_error):
                self.lost = True
            return None


def take_snapshots(session: NvmlSession, gpus: Iterable[GpuInfo]) -> list[GpuSnapshot]:
    """Read every GPU once, all with one timestamp; never raises for NVML trouble."""
    gpus = list(gpus)
    timestamp = time.time()
    if session.start() is not None or session.module is None:  # NVML went away
        return [_lost(gpu, timestamp) for gpu in gpus]
    return [_snapshot(_Reader(session.module), gpu, timestamp) for gpu in gpus]


def _lost(gpu: GpuInfo, timestamp: float) -> GpuSnapshot:
    return GpuSnapshot(gpu.index, gpu.uuid, gpu.name, timestamp, lost=True)


def _snapshot(q: _Reader, gpu: GpuInfo, timestamp: float) -> GpuSnapshot:
    handle = q("nvmlDeviceGetHandleByIndex", gpu.index)
    if handle is None:
        return _lost(gpu, timestamp)
    utilization = q("nvmlDeviceGetUtilizationRates", handle)
    memory = q("nvmlDeviceGetMemoryInfo", handle)
    temperature = q("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU)
    power_mw = q("nvmlDeviceGetPowerUsage", handle)
    limit_mw = q("nvmlDeviceGetEnforcedPowerLimit", handle)
    if limit_mw is None:
        limit_mw = q("nvmlDeviceGetPowerManagementLimit", handle)
    fan = q("nvmlDeviceGetFanSpeed", handle)
    pstate = q("nvmlDeviceGetPerformanceState", handle)
    processes = _processes(q, handle)
    if q.lost:
        return _lost(gpu, timestamp)
    return GpuSnapshot(
        index=gpu.index,
        uuid=gpu.uuid,
        name=gpu.name,
        timestamp=timestamp,
        utilization_gpu=_int(getattr(utilization, "gpu", None)),
        memory_used=_int(getattr(memory, "used", None)),
        memory_total=_int(getattr(memory, "total", None)) or gpu.memory_total,
        memory_busy=_int(getattr(utilization, "memory", None)),
        temperature_c=_int(temperature),
        power_w=power_mw / 1000.0 if isinstance(power_mw, int | float) else None,
        power_limit_w=limit_mw / 1000.0 if isinstance(limit_mw, int | float) and limit_mw
        else None,
        fan_percent=_int(fan),
        performance_state=f"P{pstate}" if isinstance(pstate, int) and
        0 <= pstate < _PSTATE_UNKNOWN else None,
        processes=processes,
    )


def _processes(q: _Reader, handle: Any) -> tuple[ProcessInfo, ...] | None:
    for function in _PROCESS_QUERIES:
        found = q(function, handle)
        if q.lost:
            return None
        if found is not None:
            return tuple(
                ProcessInfo(int(p.pid), _int(getattr(p, "usedGpuMemory", None)))
                for p in found
            )
    return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# -- history -------------------------------------------------------------------


class _Ring:
    """Preallocated columns (time, utilization %, memory fraction) written in a circle."""

    def __init__(self, capacity: int) -> None:
        self.data = np.full((3, capacity), np.nan)
        self.next = 0
        self.count = 0

    def add(self, t: float, utilization: float, memory: float) -> None:
        self.data[:, self.next] = (t, utilization, memory)
        self.next = (self.next + 1) % self.data.shape[1]
        self.count = min(self.count + 1, self.data.shape[1])

    def ordered(self) -> np.ndarray:
        if self.count < self.data.shape[1]:
            return self.data[:, : self.count]
        return np.roll(self.data, -self.next, axis=1)


class TelemetryHistory:
    """The last `window_s` seconds of utilization and memory use, per GPU index.

    Each GPU gets ring buffers preallocated for `window_s / interval_s` samples
    (plus headroom for jitter); values NVML could not give are stored as NaN,
    so a sparkline shows a gap there.
    """

    def __init__(self, window_s: float = HISTORY_WINDOW_S,
                 interval_s: float = DEFAULT_INTERVAL_S) -> None:
        if window_s <= 0 or interval_s <= 0:
            raise ValueError("window_s and interval_s must be positive")
        self.window_s = window_s
        self.capacity = math.ceil(window_s / interval_s * 1.25) + 2
        self._rings: dict[int, _Ring] = {}

    def add(self, snapshots: Iterable[GpuSnapshot]) -> None:
        for snap in snapshots:
            ring = self._rings.get(snap.index)
            if ring is None:
                ring = self._rings[snap.index] = _Ring(self.capacity)
            utilization = np.nan if snap.utilization_gpu is None else snap.utilization_gpu
            fraction = snap.memory_fraction
            ring.add(snap.timestamp, utilization, np.nan if fraction is None else fraction)

    def series(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(timestamps, utilization %, memory fraction 0..1), oldest first, within the
        window that ends at this GPU's newest sample."""
        ring = self._rings.get(index)
        if ring is None or ring.count == 0:
            empty = np.empty(0)
            return empty, empty, empty
        data = ring.ordered()
        keep = data[0] >= data[0, -1] - self.window_s
        return data[0, keep], data[1, keep], data[2, keep]

    def indices(self) -> list[int]:
        return sorted(self._rings)

    def clear(self) -> None:
        self._rings.clear()


# -- poller --------------------------------------------------------------------


def every(interval_s: float, stop: threading.Event, tick: Callable[[], None]) -> None:
    """Call `tick` every `interval_s` seconds until `stop` is set.

    A fixed cadence; after a pass slower than the interval (a waking driver), the
    missed ticks are skipped instead of polling back to back.
    """
    deadline = time.monotonic()
    while not stop.is_set():
        tick()
        deadline += interval_s
        now = time.monotonic()
        if deadline <= now:
            deadline = now + interval_s
        stop.wait(deadline - now)


class TelemetryPoller:
    """Polls NVML on a background thread and hands each snapshot list to `callback`.

    With `gpus=None` the thread first lists the GPUs itself (`query_inventory`,
    which can take seconds while the driver wakes up) and hands the inventory
    to `on_inventory`; without an OK inventory it stops there. Callbacks run on
    the poller's thread. `stop()` wakes the thread and joins it.
    """

    def __init__(
        self,
        session: NvmlSession,
        callback: Callable[[list[GpuSnapshot]], None],
        gpus: Sequence[GpuInfo] | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        on_inventory: Callable[[GpuInventory], None] | None = None,
        name: str = "mgpu-telemetry",
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.session = session
        self.callback = callback
        self.gpus = None if gpus is None else tuple(gpus)
        self.interval_s = interval_s
        self.on_inventory = on_inventory
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Ask the thread to end and wait for it; False if it is still stuck in NVML.

        The thread is a daemon, so even a driver call that hangs cannot keep the
        process from exiting.
        """
        self._stop.set()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        gpus = self.gpus
        if gpus is None:
            inventory = self._guard(query_inventory, self.session)
            if inventory is None:
                return
            self._guard(self.on_inventory, inventory)
            if inventory.state is not NvmlState.OK:
                return
            gpus = inventory.gpus

        def poll() -> None:
            snapshots = self._guard(take_snapshots, self.session, gpus)
            if snapshots is not None and not self._stop.is_set():
                self._guard(self.callback, snapshots)

        every(self.interval_s, self._stop, poll)

    @staticmethod
    def _guard(func: Callable[..., Any] | None, *args: Any) -> Any:
        # A bug in one poll or one receiver must not end the telemetry for good.
        if func is None:
            return None
        try:
            return func(*args)
        except Exception:
            log.exception("telemetry: %s failed", getattr(func, "__name__", func))
            return None
