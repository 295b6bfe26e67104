"""Which devices each live run holds, so runs on a shared workstation never share a GPU.

A run claims its devices when it is prepared (a column of its store row) and
holds them while it is live: status running and its run lock held. Nothing has
to give a claim back: a worker that dies drops its lock, and its claim with it.
The claim is checked and written in one store transaction, so two app
instances (or the queue runner and a Train button) cannot take one GPU at once.

A GPU that runs a process outside the app's runs (another user's job, a
notebook) is not claimed unless the user confirmed it (`allow_busy`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.config import DeviceKind, DeviceSelection
from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, default_session, format_bytes
from mgpu_gui.core.devices.plan import DevicePlan, plan_devices
from mgpu_gui.core.devices.telemetry import ProcessInfo, take_snapshots
from mgpu_gui.core.errors import DeviceError, UserError
from mgpu_gui.core.runs.lock import is_live
from mgpu_gui.core.runs.storedb import StoreDatabase, retry

CPU_KEY = "cpu"  # CPU runs take the whole CPU: two at once would only slow each other


@dataclass(frozen=True)
class Claim:
    key: str
    run_id: int
    run_name: str

    @property
    def holder(self) -> str:
        return f"run {self.run_name!r} (id {self.run_id})"


@dataclass(frozen=True)
class DeviceUse:
    """What the app's runs and queue do with one GPU, for the GPU panel."""

    holder: str = ""  # the live run holding it
    waiting: tuple[int, ...] = ()  # queued jobs that wait for it by name

    @property
    def text(self) -> str:
        parts = [f"in use by {self.holder}"] if self.holder else []
        if self.waiting:
            jobs = ", ".join(f"job {job}" for job in self.waiting)
            parts.append(f"{jobs} {'waits' if len(self.waiting) == 1 else 'wait'} for it")
        return " · ".join(parts)


class DevicesBusyError(UserError):
    """The devices a run needs are held by other runs, or busy outside the app."""

    def __init__(self, reason: str, advice: str, keys: tuple[str, ...] = (),
                 outside_only: bool = False):
        super().__init__(f"{reason} {advice}".strip())
        self.reason = reason
        self.keys = keys  # the named devices it waits for
        self.outside_only = outside_only  # only processes outside the app stand in the way


def device_key(gpu: GpuInfo) -> str:
    return gpu.uuid or f"gpu{gpu.index}"


def plan_keys(plan: DevicePlan) -> tuple[str, ...]:
    if plan.kind is DeviceKind.CPU:
        return (CPU_KEY,)
    return tuple(device_key(gpu) for gpu in plan.gpus)


def key_name(key: str, gpus: Sequence[GpuInfo]) -> str:
    if key == CPU_KEY:
        return "the CPU"
    for gpu in gpus:
        if device_key(gpu) == key:
            return f"GPU {gpu.index}"
    return key


# -- claims in the store ----------------------------------------------------------------------


_LIVE_RUNS = ("SELECT id, name, run_dir, claims FROM runs WHERE status = 'running' "
              "AND claims != '[]'")  # and their locks held: `_live`


def live_claims(database: StoreDatabase) -> dict[str, Claim]:
    """Every device a live run holds."""
    return _live(database.db.execute(_LIVE_RUNS).fetchall())


def in_use(database: StoreDatabase, gpus: Sequence[GpuInfo]
           ) -> tuple[dict[str, str], dict[str, tuple[ProcessInfo, ...]]]:
    """What stands in the way now, for `plan_free`: who holds each held device, and the
    GPUs no run holds that run processes outside the app."""
    held = live_claims(database)
    return {key: c.holder for key, c in held.items()}, busy_outside(gpus, held)


def claim(database: StoreDatabase, run_id: int, plan: DevicePlan,
          inventory: GpuInventory) -> None:
    """Record the run's devices; DevicesBusyError when a live run got one first.

    The caller holds the run's lock, so the run counts as live from this commit on.
    """
    keys = plan_keys(plan)

    def write() -> None:
        with database.write() as db:
            held = {key: c.holder for key, c in
                    _live(db.execute(f"{_LIVE_RUNS} AND id != ?", (run_id,)).fetchall()).items()}
            taken = [key for key in keys if key in held]
            if taken:
                raise DevicesBusyError(_held_text(taken, held, inventory.gpus), QUEUE_ADVICE,
                                       keys)
            # Marked running in the same step: from here on every other claim sees it.
            db.execute("UPDATE runs SET claims = ?, status = 'running' WHERE id = ?",
                       (json.dumps(keys), run_id))

    retry(write)


def _live(rows: Sequence) -> dict[str, Claim]:
    held: dict[str, Claim] = {}
    for row in rows:
        if is_live(Path(row["run_dir"])):
            for key in json.loads(row["claims"]):
                held[key] = Claim(key, row["id"], row["name"])
    return held


# -- processes outside the app ----------------------------------------------------------------


def busy_outside(gpus: Sequence[GpuInfo], claimed: Collection[str]
                 ) -> dict[str, tuple[ProcessInfo, ...]]:
    """GPUs no run of the app holds that still run compute processes."""
    if not gpus:
        return {}
    by_index = {s.index: s.processes or () for s in take_snapshots(default_session(), gpus)}
    return {device_key(g): by_index[g.index] for g in gpus
            if by_index.get(g.index) and device_key(g) not in claimed}


def process_text(process: ProcessInfo) -> str:
    try:
        name = Path(f"/proc/{process.pid}/comm").read_text().strip()
    except OSError:
        name = ""
    memory = (f", {format_bytes(process.used_memory)}" if process.used_memory is not None
              else "")
    return f"{name} (pid {process.pid}{memory})" if name else f"pid {process.pid}{memory}"


def busy_text(busy: Mapping[str, tuple[ProcessInfo, ...]], gpus: Sequence[GpuInfo]) -> str:
    parts = [f"{key_name(key, gpus)} runs {', '.join(process_text(p) for p in processes)}"
             for key, processes in busy.items()]
    return "; ".join(parts)


# -- planning on free devices -----------------------------------------------------------------

QUEUE_ADVICE = ("Choose other devices, or add the run to the queue: it starts when they are "
                "free (Run ▸ Add to queue, or `mgpu-train queue add` with the same options).")
OUTSIDE_ADVICE = ("Use it anyway only if you know that process can share the GPU: confirm in "
                  "the app, or add --allow-busy.")


def plan_free(selection: DeviceSelection, inventory: GpuInventory, held: Mapping[str, str],
              busy: Mapping[str, tuple[ProcessInfo, ...]], allow_busy: bool) -> DevicePlan:
    """A plan on devices no live run holds (`held`: key -> who holds it).

    DeviceError when the machine can never satisfy the choice; DevicesBusyError
    (with `reason` alone for the queue) when other work is in the way now.
    """
    full = plan_devices(selection, inventory)
    blocking = {} if allow_busy else busy
    if full.kind is DeviceKind.CPU or selection.gpus:
        keys = plan_keys(full)
        taken = [key for key in keys if key in held]
        if taken:
            raise DevicesBusyError(_held_text(taken, held, inventory.gpus), QUEUE_ADVICE, keys)
        outside = {key: blocking[key] for key in keys if key in blocking}
        if outside:
            raise DevicesBusyError(f"Not free: {busy_text(outside, inventory.gpus)} (not a run "
                                   f"of this app).", OUTSIDE_ADVICE, keys, outside_only=True)
        return full
    # Any N GPUs: take free ones, wherever they are.
    free = tuple(g for g in inventory.gpus
                 if device_key(g) not in held and device_key(g) not in blocking)
    try:
        return plan_devices(DeviceSelection(kind=DeviceKind.GPU, replicas=full.replicas),
                            dataclasses.replace(inventory, gpus=free))
    except DeviceError:
        pass
    in_use = [key for key in plan_keys(full) if key in held] or [
        device_key(g) for g in inventory.gpus if device_key(g) in held]
    reason = f"{full.replicas} GPU{'s' if full.replicas != 1 else ''} needed, {len(free)} free"
    parts = []
    if in_use:
        parts.append(_held_text(in_use, held, inventory.gpus))
    if blocking:
        parts.append(f"{busy_text(blocking, inventory.gpus)} (not a run of this app)")
    advice = QUEUE_ADVICE if in_use else OUTSIDE_ADVICE
    raise DevicesBusyError(f"{reason}: {'; '.join(parts)}.", advice,
                           outside_only=not in_use)


def _held_text(keys: Sequence[str], held: Mapping[str, str], gpus: Sequence[GpuInfo]) -> str:
    by_holder: dict[str, list[str]] = {}
    for key in keys:
        by_holder.setdefault(held[key], []).append(key_name(key, gpus))
    return "; ".join(f"{' and '.join(names)} {'is' if len(names) == 1 else 'are'} in use by "
                     f"{holder}" for holder, names in by_holder.items())
