"""Run the batch-size finder: one short-lived child process per batch tried.

Qt-free and TensorFlow-free, shared by `mgpu-train find-batch` and the GUI's
batch finder dialog (which calls `BatchFinder.run` from a QThread). Each probe
runs `mgpu_gui.processes.batch_probe` on ONE device (the batch found is per
device): one GPU through CUDA_VISIBLE_DEVICES, or one CPU replica. A probe
that runs out of memory fails alone, in its own process; nothing else shares
its memory:
- on a GPU it grows its memory as needed (TF_FORCE_GPU_ALLOW_GROWTH; on JAX
  XLA_PYTHON_CLIENT_PREALLOCATE=false, set by the probe itself), never
  reserving the whole device, and gives it all back when it exits;
- on CPU it stops itself as soon as its peak resident memory passes the cap,
  and it tells the kernel to kill it first should the machine run out of
  memory (oom_score_adj 1000), so another run is never the victim.
`cancel()` may be called from any thread: it kills the running probe.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgpu_gui.core.children.inspector import file_inspector
from mgpu_gui.core.children.launch import Child, command_log, module_command
from mgpu_gui.core.children.runner import ChildExit, ChildProcesses, died_text
from mgpu_gui.core.config import DEMO, DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, query_inventory
from mgpu_gui.core.devices.plan import DevicePlan, plan_devices
from mgpu_gui.core.engines import backend_env
from mgpu_gui.core.errors import ConfigError, UserError
from mgpu_gui.core.mesh.settings import splits_model
from mgpu_gui.core.runs import preflight
from mgpu_gui.core.tools.batch_search import (
    BatchReport,
    ProbeResult,
    ProbeStatus,
    SearchSettings,
    build_report,
    data_cap,
    search,
)

MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class BatchRequest:
    """Find the largest batch per device for this run (model, data, devices)."""

    config: RunConfig
    settings: SearchSettings = SearchSettings()
    memory_cap: int | None = None  # bytes; on CPU, None means the memory available now


@dataclass(frozen=True)
class SearchPlan:
    kind: DeviceKind
    probe_plan: DevicePlan  # the one device every probe runs on
    devices: int  # the run's device count
    max_batch: int
    data_limit: int  # the largest batch per device the training set allows (`data_cap`)
    train_samples: int
    cap_bytes: int | None
    cap_source: str
    notes: tuple[str, ...] = ()

    @property
    def device_name(self) -> str:
        return self.probe_plan.names[0] if self.probe_plan.names else ""


@dataclass(frozen=True)
class BatchProgress:
    """Probe `probe` (1-based) with `batch` is at `phase`."""

    probe: int
    batch: int
    phase: str  # starting, building, training, done
    message: str = ""


def plan_search(request: BatchRequest, inventory: GpuInventory | None = None,
                available: Callable[[], int | None] | None = None) -> SearchPlan:
    """The probe device, the largest batch and the cap; a UserError before any process."""
    config, settings = request.config, request.settings
    found = config.problems() + settings.problems()
    if splits_model(config.mesh):
        found.append(("mesh", "the batch finder probes one device holding the whole model "
                              "and does not measure a mesh with a model axis yet; drop "
                              f"--mesh {config.mesh}"))
    if request.memory_cap is not None and request.memory_cap < 1:
        found.append(("memory_cap", f"must be more than 0 bytes, got {request.memory_cap}"))
    if found:
        raise ConfigError(found)
    inventory = inventory if inventory is not None else query_inventory()
    full = plan_devices(config.devices, inventory)
    notes = [full.note] if full.note else []
    if full.kind is DeviceKind.GPU:
        probe_plan, note = _smallest_gpu(full, inventory)
        notes += [note] if note else []
    else:
        probe_plan = plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=1), inventory)
        if full.replicas > 1:
            notes.append(f"CPU replicas all live in one process: a run with {full.replicas} "
                         f"replicas holds {full.replicas} batches' activations at once, so it "
                         f"needs more memory than this one-replica probe.")
    # The inputs only (nothing is written); the batch is checked against the data below.
    _, data = preflight.check(config.replace(batch_per_replica=1, tensorboard=False), 1,
                              file_inspector(), disk=False)
    train_samples = data.split_counts(config.validation_split)[0]
    if train_samples < full.replicas:
        raise UserError(f"The training set has {train_samples} samples, fewer than the "
                        f"{full.replicas} devices: every device needs at least one per step.")
    data_limit, note = data_cap(train_samples, full.replicas, settings.min_steps)
    max_batch = min(settings.max_batch, data_limit)
    if max_batch < settings.max_batch:
        notes.append(note)
    cap, source = request.memory_cap, "given" if request.memory_cap is not None else ""
    if cap is None and full.kind is DeviceKind.CPU:
        cap = (available or available_memory)()
        source = "available memory" if cap is not None else ""
    return SearchPlan(full.kind, probe_plan, full.replicas, max_batch, data_limit,
                      train_samples, cap, source, tuple(notes))


def _smallest_gpu(full: DevicePlan, inventory: GpuInventory) -> tuple[DevicePlan, str]:
    """The chosen GPU with the least memory: a batch that fits there fits on every one."""
    ids = full.env["CUDA_VISIBLE_DEVICES"].split(",")  # UUIDs (or indices), chosen order
    sizes = [g.memory_total for g in full.gpus]
    index = 0
    if len(ids) > 1 and all(s is not None for s in sizes) and len(set(sizes)) > 1:
        index = min(range(len(ids)), key=lambda i: sizes[i] or 0)
    plan = plan_devices(DeviceSelection(kind=DeviceKind.GPU, gpus=(ids[index],)), inventory)
    note = (f"Probing on {full.names[index]}, the chosen GPU with the least memory."
            if index else "")
    return plan, note


def available_memory(meminfo: Path = MEMINFO) -> int | None:
    """The kernel's estimate of memory available to a new process (Linux), in bytes."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def worker_command(events_fd: int) -> list[str]:
    return module_command(Child.BATCH_PROBE, "--events-fd", str(events_fd))


class BatchFinder:
    """Runs the probes of one search in turn; `run()` blocks, `cancel()` ends it early."""

    def __init__(self, request: BatchRequest, *, inventory: GpuInventory | None = None,
                 on_progress: Callable[[BatchProgress], None] | None = None,
                 on_report: Callable[[BatchReport], None] | None = None,
                 on_output: Callable[[str], None] | None = None,
                 command: Callable[[int], list[str]] = worker_command,
                 available: Callable[[], int | None] | None = None):
        """`on_report` gets the report so far after each probe; `on_output` what the
        probes print; `command` makes a probe's command line from its events fd (tests
        swap the child). The callbacks run in the thread that calls `run`."""
        self.request = request
        self.inventory = inventory
        self.available = available
        self.on_progress = on_progress
        self.on_report = on_report
        self.on_output = on_output
        self.command = command
        self.results: list[ProbeResult] = []
        self._plan: SearchPlan | None = None
        self._children = ChildProcesses("batch-probe-output", command_log("find-batch"))

    @property
    def cancelled(self) -> bool:
        return self._children.cancelled

    def plan(self) -> SearchPlan:
        if self._plan is None:
            self._plan = plan_search(self.request, self.inventory, self.available)
        return self._plan

    def cancel(self) -> None:
        """Stop the search: kill the running probe; no other probe starts."""
        self._children.cancel()

    def run(self) -> BatchReport:
        plan = self.plan()

        def done(result: ProbeResult) -> None:
            self.results.append(result)
            phase = "done" if result.status is not ProbeStatus.CANCELLED else "cancelled"
            self._progress(BatchProgress(len(self.results), result.batch, phase,
                                         result.status.value))
            if self.on_report is not None:
                self.on_report(self.report(finished=False))

        search(self.request.settings, self._probe, max_batch=plan.max_batch, on_result=done)
        return self.report()

    def report(self, finished: bool = True) -> BatchReport:
        plan, config = self.plan(), self.request.config
        return build_report(
            self.results, self.request.settings, device_kind=plan.kind.value,
            device_name=plan.device_name, devices=plan.devices, max_batch=plan.max_batch,
            cap_bytes=plan.cap_bytes, cap_source=plan.cap_source, data_limit=plan.data_limit,
            train_samples=plan.train_samples,
            model=_source_name(config.model), data=_source_name(config.data), notes=plan.notes,
            finished=finished)

    def _progress(self, progress: BatchProgress) -> None:
        if self.on_progress is not None:
            self.on_progress(progress)

    def _probe(self, batch: int) -> ProbeResult:
        plan = self.plan()
        number = len(self.results) + 1
        self._progress(BatchProgress(number, batch, "starting"))
        config = self.request.config.replace(
            batch_per_replica=batch, devices=DeviceSelection(kind=plan.kind, replicas=1))
        request = {"config": config.to_dict(), "plan": json.loads(plan.probe_plan.to_json()),
                   "steps": self.request.settings.steps, "cap_bytes": plan.cap_bytes}
        started = time.monotonic()
        ended = self._children.run(
            self.command, request, {"TF_FORCE_GPU_ALLOW_GROWTH": "true", **plan.probe_plan.env,
                                    **backend_env(config.engine)},
            lambda message: self._handle(message, number, batch), self.on_output)
        if ended is None:
            return ProbeResult(batch, ProbeStatus.CANCELLED, message="cancelled")
        if ended.result is not None:
            return ended.result
        if self.cancelled:
            return ProbeResult(batch, ProbeStatus.CANCELLED, message="cancelled while it ran")
        return ProbeResult(batch, ProbeStatus.TOO_BIG, seconds=time.monotonic() - started,
                           message=_died(ended))

    def _handle(self, message: dict[str, Any], number: int, batch: int) -> ProbeResult | None:
        kind = message.get("type")
        if kind == "result":
            return ProbeResult.from_dict(message)
        if kind == "phase":
            self._progress(BatchProgress(number, batch, message["phase"]))
        elif kind == "log" and self.on_output is not None:
            self.on_output(message.get("message", ""))
        return None


def _died(ended: ChildExit) -> str:
    """A probe that died without a result is taken as out of memory (the kernel's OOM
    killer, or an allocator abort); its last words say otherwise when it was not."""
    how, last = died_text(ended.code, ended.tail, ended.log)
    return f"the probe {how} without a result (most likely out of memory).{last}"


def _source_name(source: str) -> str:
    return source if source == DEMO else Path(os.path.expanduser(source)).name


__all__ = ["BatchFinder", "BatchProgress", "BatchRequest", "SearchPlan", "available_memory",
           "plan_search"]
