"""The GPU panel's data on a real GPU: what mgpu_gui.core.devices gives the panel (the
inventory, and the snapshots its TelemetryPoller takes) against nvidia-smi, and against
JAX while a child keeps the GPU busy (load_child.py).

Processes: NVML lists the PIDs of the driver's own PID namespace. In a container that
does not share the host's, it lists none, or PIDs that mean nothing in here; the panel
then shows no process, or strangers. Neither is this code's fault, so the test that looks
for the load's PID records what NVML listed and skips, saying which, rather than fail;
where NVML lists processes it must list those nvidia-smi lists.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, default_session, format_bytes
from mgpu_gui.core.devices.telemetry import GpuSnapshot, TelemetryPoller, take_snapshots
from mgpu_gui.core.engines import NO_PREALLOCATION

pytestmark = pytest.mark.gpu

MIB = 2**20
LOAD_CHILD = Path(__file__).with_name("load_child.py")
HOLD_BYTES = 2**30  # load_child.HOLD_BYTES (not imported: that module imports JAX)
SLACK = 64 * MIB  # what memory use may move by between two reads at idle
BUSY = 50  # utilization %, at least, of a GPU running products back to back


def test_inventory_matches_nvidia_smi(inventory: GpuInventory, smi, figure):
    rows = smi("gpu", "index,name,uuid,pci.bus_id,memory.total,driver_version")
    assert [int(row["index"]) for row in rows] == [gpu.index for gpu in inventory.gpus]
    for gpu, row in zip(inventory.gpus, rows, strict=True):
        assert (gpu.name, gpu.uuid) == (row["name"], row["uuid"])
        assert (gpu.pci_bus_id or "").lower() == row["pci.bus_id"].lower()
        assert gpu.memory_total is not None
        assert abs(gpu.memory_total - int(row["memory.total"]) * MIB) < MIB
        assert inventory.driver_version == row["driver_version"]
        cc = "{}.{}".format(*gpu.compute_capability) if gpu.compute_capability else "?"
        figure(f"GPU {gpu.index}: {gpu.name}, {format_bytes(gpu.memory_total)}, compute "
               f"capability {cc}, driver {inventory.driver_version} (CUDA "
               f"{inventory.cuda_driver_version}), PCI {gpu.pci_bus_id}, {gpu.uuid}")


def test_idle_snapshot_matches_nvidia_smi(gpu: GpuInfo, smi, figure):
    before = _smi_memory(smi, gpu)
    [snap] = take_snapshots(default_session(), [gpu])
    after = _smi_memory(smi, gpu)
    assert not snap.lost
    assert snap.memory_total == gpu.memory_total
    assert snap.memory_used is not None and snap.utilization_gpu is not None
    used = sorted((before[0], after[0]))
    reserved = before[1]
    # NVML's v1 memory figure (the panel's) counts the driver's reserved memory as used;
    # newer nvidia-smi shows that apart (memory.reserved).
    if used[0] - SLACK <= snap.memory_used <= used[1] + SLACK:
        said = "equals nvidia-smi's memory.used"
    else:
        assert reserved is not None, (snap.memory_used, used)
        assert used[0] + reserved - SLACK <= snap.memory_used <= used[1] + reserved + SLACK
        said = f"equals nvidia-smi's memory.used + memory.reserved ({format_bytes(reserved)})"
    figure(f"idle: memory used {snap.memory_used / MIB:.0f} MiB ({said}; nvidia-smi "
           f"{used[0] / MIB:.0f} MiB), utilization {snap.utilization_gpu} %, "
           f"{snap.temperature_c} °C, {snap.power_w} W of {snap.power_limit_w} W, "
           f"{snap.performance_state}, processes {_pids(snap)}")


@dataclass(frozen=True)
class Load:
    pid: int
    jax: dict  # what the child said: platform, kind, bytes_in_use, bytes_limit
    idle: GpuSnapshot  # the GPU just before the child started


@pytest.fixture(scope="module")
def load(gpu: GpuInfo, child_env: dict[str, str]) -> Iterator[Load]:
    """A child keeping `gpu` busy for the module's tests; ended (and the GPU seen to let go
    of its memory) afterwards."""
    [idle] = take_snapshots(default_session(), [gpu])
    # Without preallocation (75 % of the GPU at JAX's start) the rise NVML sees is the
    # buffers the child holds.
    child = subprocess.Popen([sys.executable, str(LOAD_CHILD)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             env={**child_env, **NO_PREALLOCATION})
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(child.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=240)  # JAX's CUDA start and the first compile
        assert line, f"the load child ended ({child.wait()}) before it said it was ready"
        yield Load(child.pid, json.loads(line), idle)
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        child.stdout.close()
        _watch(gpu, lambda s: (s.memory_used or 0) < (idle.memory_used or 0) + HOLD_BYTES // 2,
               timeout=30)


def test_utilization_and_memory_rise_under_load(gpu: GpuInfo, load: Load, smi, figure):
    seen = _watch(gpu, lambda s: (s.utilization_gpu or 0) >= 90, timeout=20)
    utilization = max(s.utilization_gpu or 0 for s in seen)
    used = max(s.memory_used or 0 for s in seen)
    [row] = [r for r in smi("gpu", "uuid,utilization.gpu,memory.used") if r["uuid"] == gpu.uuid]
    figure(f"under a JAX bf16 matmul load: utilization up to {utilization} % over "
           f"{len(seen)} snapshots (nvidia-smi then {row['utilization.gpu']} %), memory used "
           f"{load.idle.memory_used / MIB:.0f} -> {used / MIB:.0f} MiB; JAX: "
           f"{load.jax['platform']} '{load.jax['kind']}', its allocator holds "
           f"{load.jax['bytes_in_use']} of {load.jax['bytes_limit']} bytes")
    assert utilization >= BUSY
    assert int(row["utilization.gpu"]) >= BUSY
    assert used - (load.idle.memory_used or 0) >= HOLD_BYTES
    assert load.jax["platform"] == "gpu"
    assert load.jax["kind"] == gpu.name  # CUDA's device name and NVML's agree
    assert load.jax["bytes_limit"] is None or load.jax["bytes_limit"] <= gpu.memory_total


def test_the_loading_process_is_listed(gpu: GpuInfo, load: Load, smi, figure):
    [snap] = _watch(gpu, lambda s: bool(s.processes), timeout=10)[-1:]
    listed = {p.pid: p.used_memory for p in snap.processes or ()}
    smi_pids = {int(r["pid"]) for r in smi("compute-apps", "gpu_uuid,pid,used_memory")
                if r["gpu_uuid"] == gpu.uuid}
    figure(f"processes NVML lists under load: {_pids(snap)}; nvidia-smi: "
           f"{sorted(smi_pids)}; the load's PID here: {load.pid}")
    assert set(listed) == smi_pids  # what the panel lists is what nvidia-smi lists
    if not listed:
        pytest.skip("NVML lists no compute process while the load runs (recorded): the "
                    "container hides them, so the panel shows none")
    if load.pid not in listed:
        pytest.skip(f"NVML lists PIDs {sorted(listed)}, not the load's {load.pid} (recorded): "
                    "they come from another PID namespace than this container's")
    assert listed[load.pid] is None or listed[load.pid] >= HOLD_BYTES


def _watch(gpu: GpuInfo, enough: Callable[[GpuSnapshot], bool],
           timeout: float) -> list[GpuSnapshot]:
    """The panel's poller's snapshots of `gpu`, 4 a second, until one is `enough` (or
    `timeout` s); all of them."""
    seen: list[GpuSnapshot] = []
    done = threading.Event()

    def take(snapshots: list[GpuSnapshot]) -> None:
        seen.extend(snapshots)
        if enough(snapshots[0]):
            done.set()

    poller = TelemetryPoller(default_session(), take, gpus=[gpu], interval_s=0.25)
    poller.start()
    try:
        done.wait(timeout)
    finally:
        poller.stop()
    assert seen, "the poller took no snapshot"
    return seen


def _smi_memory(smi, gpu: GpuInfo) -> tuple[int, int | None]:
    """(memory.used, memory.reserved) of `gpu` in bytes; reserved None where this nvidia-smi
    does not know the field."""
    [row] = [r for r in smi("gpu", "uuid,memory.used") if r["uuid"] == gpu.uuid]
    try:
        [extra] = [r for r in smi("gpu", "uuid,memory.reserved") if r["uuid"] == gpu.uuid]
        reserved = int(extra["memory.reserved"]) * MIB
    except (subprocess.CalledProcessError, ValueError):
        reserved = None
    return int(row["memory.used"]) * MIB, reserved


def _pids(snap: GpuSnapshot) -> str:
    if snap.processes is None:
        return "unknown (NVML cannot say)"
    return ", ".join(f"{p.pid} ({format_bytes(p.used_memory)})" for p in snap.processes) or "none"
