"""Each run's device telemetry in the run store: what its devices did, once a second.

Rows are small on purpose (an hour of 8 GPUs is 28,800 of them): whole units in
integers (%, MiB, W, °C), the time in milliseconds, and the devices' names and
sizes once per run in `telemetry_devices`. A device is its NVML index, or
`CPU_DEVICE` for a run on CPU replicas, whose row holds the worker process's CPU
use (% of the cores it may run on: 100 is all of them busy; runs recorded before issue
30 hold % of one core, as `top` shows it) and resident memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mgpu_gui.core.runs.storedb import StoreDatabase, retry

CPU_DEVICE = -1
MIB = 2**20
# The columns of `RunTelemetry.samples` arrays, in this order; NaN where a value is unknown.
T, UTILIZATION, MEMORY, POWER, TEMPERATURE = range(5)


@dataclass(frozen=True)
class TelemetryDevice:
    """One device a run's telemetry covers."""

    device: int  # NVML index, or CPU_DEVICE
    uuid: str = ""
    name: str = ""
    memory_total: int | None = None  # MiB: the GPU's memory, or the machine's for the CPU

    @property
    def label(self) -> str:
        return "CPU" if self.device == CPU_DEVICE else f"GPU {self.device}"


@dataclass(frozen=True)
class TelemetrySample:
    """One device at one moment; None where it could not be read."""

    device: int
    t: float  # time.time()
    utilization: int | None = None  # %
    memory: int | None = None  # MiB used (resident, for the CPU)
    power: int | None = None  # W
    temperature: int | None = None  # °C


@dataclass
class RunTelemetry:
    """A run's telemetry as read: per device, an (n, 5) float array in time order (the
    columns T, UTILIZATION, MEMORY, POWER, TEMPERATURE; T in seconds)."""

    devices: dict[int, TelemetryDevice] = field(default_factory=dict)
    samples: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def last_t(self) -> float | None:
        ends = [float(rows[-1, T]) for rows in self.samples.values() if len(rows)]
        return max(ends) if ends else None

    def __len__(self) -> int:
        return sum(len(rows) for rows in self.samples.values())


def record_devices(database: StoreDatabase, run_id: int,
                   devices: Sequence[TelemetryDevice]) -> None:
    """The devices a run's telemetry covers (a resume may add or rename some)."""
    def write() -> None:
        with database.write() as db:
            db.executemany(
                "INSERT OR REPLACE INTO telemetry_devices (run_id, device, uuid, name, "
                "memory_total) VALUES (?, ?, ?, ?, ?)",
                [(run_id, d.device, d.uuid, d.name, d.memory_total) for d in devices])

    retry(write)


def record_samples(database: StoreDatabase, run_id: int,
                   samples: Iterable[TelemetrySample]) -> None:
    """Many samples in one transaction (the recorder batches them)."""
    rows = [(run_id, round(s.t * 1000), s.device, s.utilization, s.memory, s.power,
             s.temperature) for s in samples]
    if not rows:
        return

    def write() -> None:
        with database.write() as db:
            db.executemany(
                "INSERT OR REPLACE INTO telemetry (run_id, t, device, utilization, memory, "
                "power, temperature) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    retry(write)


def read_telemetry(database: StoreDatabase, run_id: int,
                   after: float | None = None) -> RunTelemetry:
    """A run's devices and its samples later than `after` (all by default)."""
    db = database.db
    devices = {row["device"]: TelemetryDevice(row["device"], row["uuid"], row["name"],
                                              row["memory_total"])
               for row in db.execute("SELECT * FROM telemetry_devices WHERE run_id = ?",
                                     (run_id,))}
    since = -1 if after is None else round(after * 1000)
    rows = db.execute(
        "SELECT device, t / 1000.0, utilization, memory, power, temperature FROM telemetry "
        "WHERE run_id = ? AND t > ? ORDER BY t, device", (run_id, since)).fetchall()
    if not rows:
        return RunTelemetry(devices)
    table = np.array([tuple(row) for row in rows], dtype=float)  # None -> NaN
    return RunTelemetry(devices, {int(device): table[table[:, 0] == device, 1:]
                                  for device in np.unique(table[:, 0])})
