"""Run a scaling test: one child process per device count, one count at a time.

Qt-free and TensorFlow-free, shared by `mgpu-train scale` and the GUI's
scaling dialog (which calls `ScaleRunner.run` from a QThread). Each count runs
`mgpu_gui.processes.scaling_worker` with its own device environment (logical CPU devices
and CUDA_VISIBLE_DEVICES can only be set before TensorFlow starts), so a count
that fails (out of memory, a crash) is reported as such and the next one runs.
`cancel()` may be called from any thread: it kills the running child.
"""

from __future__ import annotations

import json
import os
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
from mgpu_gui.core.engines import Engine, backend_env
from mgpu_gui.core.errors import ConfigError, UserError
from mgpu_gui.core.mesh.settings import splits_model
from mgpu_gui.core.runs import preflight
from mgpu_gui.core.tools.scaling import (
    DEFAULT_STEPS,
    DEFAULT_THRESHOLD,
    DEFAULT_WARMUP,
    CountResult,
    PointStatus,
    ScalingMode,
    ScalingReport,
    batch_for,
    build_report,
    default_counts,
    device_word,
    even_batches_note,
)

# Failures that do not depend on the device count (the model file's own errors): the
# counts after one are not started, since each would spend a TensorFlow start to meet it.
SAME_FOR_EVERY_COUNT = frozenset({"ModelError", "ConfigError"})
JAX_NOTE = ("Measured on the JAX engine (DataParallel, every step compiled with XLA); its "
            "input wait is not measured.")
# Where a count's progress bar stands at each phase (timing fills the rest step by step).
PHASE_FRACTION = {"starting": 0.0, "building": 0.15, "warmup": 0.3, "timing": 0.4}


@dataclass(frozen=True)
class ScaleRequest:
    """What to measure: the run's model, data and devices (`config`), and how."""

    config: RunConfig
    mode: ScalingMode = ScalingMode.WEAK
    counts: tuple[int, ...] | None = None  # None: 1, 2, ..., all chosen devices
    steps: int = DEFAULT_STEPS
    warmup: int = DEFAULT_WARMUP
    global_batch: int | None = None  # strong scaling; default: batch per replica x largest count
    threshold: float = DEFAULT_THRESHOLD

    def problems(self) -> list[tuple[str, str]]:
        found = []
        if self.steps < 2:
            found.append(("steps", f"must be at least 2 to show a spread, got {self.steps}"))
        least, why = (2, "on the JAX engine the second step compiles again on one device") if (
            self.config.engine == Engine.JAX) else (1, "the first step compiles")
        if self.warmup < least:
            found.append(("warmup", f"must be at least {least} ({why}), got {self.warmup}"))
        if not 0 < self.threshold <= 1:
            found.append(("threshold", f"must be in (0, 1], got {self.threshold}"))
        if self.global_batch is not None and self.global_batch < 1:
            found.append(("global_batch", f"must be at least 1, got {self.global_batch}"))
        if self.counts is not None and (not self.counts or min(self.counts) < 1):
            found.append(("counts", f"every count must be at least 1, got {self.counts}"))
        return found


@dataclass(frozen=True)
class CountPlan:
    """One count: its devices and batch, or why it is skipped."""

    devices: int
    global_batch: int
    batch_per_replica: int
    plan: DevicePlan | None = None
    skip: str = ""


@dataclass(frozen=True)
class ScalePlan:
    kind: DeviceKind
    counts: tuple[CountPlan, ...]
    device_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. why this runs on CPU replicas, counts a batch skips


@dataclass(frozen=True)
class ScaleProgress:
    """Where the test stands: count `index` of `total`, and that count's phase."""

    index: int
    total: int
    devices: int
    phase: str  # starting, building, warmup, timing, done, failed, skipped, cancelled
    step: int = 0
    steps: int = 0
    message: str = ""

    @property
    def fraction(self) -> float:
        """Of the whole test, 0..1."""
        if self.phase in ("done", "failed", "skipped", "cancelled"):
            within = 1.0
        elif self.phase == "timing" and self.steps:
            within = PHASE_FRACTION["timing"] + (1 - PHASE_FRACTION["timing"]) * (
                self.step / self.steps)
        else:
            within = PHASE_FRACTION.get(self.phase, 0.0)
        return min(1.0, (self.index + within) / max(self.total, 1))


def plan_scaling(request: ScaleRequest, inventory: GpuInventory | None = None) -> ScalePlan:
    """Every count's devices and batch; a UserError (before any process) when impossible."""
    config = request.config
    found = config.problems() + request.problems()
    if splits_model(config.mesh):
        found.append(("mesh", "the scaling test times data parallelism (every device "
                              "holding the whole model) and does not run a mesh with a model "
                              f"axis yet; drop --mesh {config.mesh}"))
    if found:
        raise ConfigError(found)
    inventory = inventory if inventory is not None else query_inventory()
    full = plan_devices(config.devices, inventory)
    counts = list(request.counts) if request.counts else default_counts(full.replicas)
    # GPUs are the chosen ones; CPU replicas are as many as asked, unless a largest was given.
    if (full.kind is DeviceKind.GPU or config.devices.replicas) and counts[-1] > full.replicas:
        word = device_word(full.kind.value, counts[-1])
        which = f" ({', '.join(full.names)})" if full.kind is DeviceKind.GPU else ""
        raise UserError(f"{counts[-1]} {word} asked for, but {full.replicas} are chosen"
                        f"{which}; choose more or smaller counts.")
    # The inputs only: every count's batch is checked below, and nothing is written.
    _, data = preflight.check(config.replace(batch_per_replica=1, tensorboard=False), 1,
                              file_inspector(), disk=False)
    train_samples = data.split_counts(config.validation_split)[0]
    global_batch = request.global_batch or config.batch_per_replica * counts[-1]
    plans = []
    for k in counts:
        batch = batch_for(request.mode, k, config.batch_per_replica, global_batch)
        if isinstance(batch, str):  # no per-device batch: it would not be even
            plans.append(CountPlan(k, global_batch, 0, skip=batch))
            continue
        g, per = batch
        if train_samples < g:
            plans.append(CountPlan(k, g, per, skip=(
                f"the training set has {train_samples} samples, fewer than one global batch "
                f"({g}); lower the batch")))
            continue
        plans.append(CountPlan(k, g, per, plan=_count_plan(full, k, inventory)))
    names = full.names if full.kind is DeviceKind.GPU else [
        f"CPU replica {i} (logical device CPU:{i})" for i in range(counts[-1])]
    notes = [full.note, JAX_NOTE if config.engine == Engine.JAX else ""]
    if request.mode is ScalingMode.STRONG:
        notes.append(even_batches_note(global_batch, counts))
    return ScalePlan(full.kind, tuple(plans), tuple(names), tuple(n for n in notes if n))


def _count_plan(full: DevicePlan, k: int, inventory: GpuInventory) -> DevicePlan:
    if full.kind is DeviceKind.CPU:
        return plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=k), inventory)
    ids = full.env["CUDA_VISIBLE_DEVICES"].split(",")  # UUIDs (or indices), in the chosen order
    return plan_devices(DeviceSelection(kind=DeviceKind.GPU, gpus=tuple(ids[:k])), inventory)


def worker_command(events_fd: int) -> list[str]:
    return module_command(Child.SCALING_WORKER, "--events-fd", str(events_fd))


class ScaleRunner:
    """Runs the counts of one request in turn; `run()` blocks, `cancel()` ends it early."""

    def __init__(self, request: ScaleRequest, *, inventory: GpuInventory | None = None,
                 on_progress: Callable[[ScaleProgress], None] | None = None,
                 on_report: Callable[[ScalingReport], None] | None = None,
                 on_output: Callable[[str], None] | None = None,
                 command: Callable[[int], list[str]] = worker_command):
        """`on_report` gets the figures so far after each count; `on_output` what the
        children print; `command` makes a child's command line from its events fd
        (tests swap the child). The callbacks run in the thread that calls `run`."""
        self.request = request
        self.inventory = inventory
        self.on_progress = on_progress
        self.on_report = on_report
        self.on_output = on_output
        self.command = command
        self.results: list[CountResult] = []
        self._plan: ScalePlan | None = None
        self._children = ChildProcesses("scale-output", command_log("scale"))

    @property
    def cancelled(self) -> bool:
        return self._children.cancelled

    def plan(self) -> ScalePlan:
        if self._plan is None:
            self._plan = plan_scaling(self.request, self.inventory)
        return self._plan

    def cancel(self) -> None:
        """Stop the test: kill the running count's process; later counts do not start."""
        self._children.cancel()

    def run(self) -> ScalingReport:
        plan = self.plan()
        total = len(plan.counts)
        fatal: CountResult | None = None
        for index, count in enumerate(plan.counts):
            if self.cancelled:
                result = self._not_run(count, PointStatus.CANCELLED, "cancelled before it ran")
            elif fatal is not None:
                result = self._not_run(count, PointStatus.SKIPPED, (
                    f"not run: the {count_label(plan.kind.value, fatal.devices)} count failed "
                    f"with an error in the model, which every count would meet"))
            elif count.skip:
                result = self._not_run(count, PointStatus.SKIPPED, count.skip)
            else:
                result = self._run_count(index, total, count)
                if result.error_type in SAME_FOR_EVERY_COUNT:
                    fatal = result
            self.results.append(result)
            phase = {PointStatus.OK: "done"}.get(result.status, result.status.value)
            self._progress(ScaleProgress(index, total, count.devices, phase,
                                         message=result.message))
            if self.on_report is not None:
                self.on_report(self.report())
        return self.report()

    def report(self) -> ScalingReport:
        """The figures so far (every count once `run` returned)."""
        plan, request = self.plan(), self.request
        notes = list(plan.notes)
        if self.cancelled:
            notes.append("The test was cancelled; counts not measured are marked so.")
        return build_report(
            self.results, mode=request.mode, device_kind=plan.kind.value,
            threshold=request.threshold, steps=request.steps, warmup=request.warmup,
            model=_source_name(request.config.model), data=_source_name(request.config.data),
            device_names=plan.device_names, notes=notes)

    @staticmethod
    def _not_run(count: CountPlan, status: PointStatus, message: str) -> CountResult:
        return CountResult(count.devices, count.global_batch, count.batch_per_replica,
                           status=status, message=message)

    def _progress(self, progress: ScaleProgress) -> None:
        if self.on_progress is not None:
            self.on_progress(progress)

    def _run_count(self, index: int, total: int, count: CountPlan) -> CountResult:
        assert count.plan is not None
        self._progress(ScaleProgress(index, total, count.devices, "starting"))
        config = self.request.config.replace(
            batch_per_replica=count.batch_per_replica,
            devices=DeviceSelection(kind=count.plan.kind, replicas=count.devices))
        request = {"config": config.to_dict(), "plan": json.loads(count.plan.to_json()),
                   "steps": self.request.steps, "warmup": self.request.warmup}
        ended = self._children.run(
            self.command, request, {**count.plan.env, **backend_env(config.engine)},
            lambda message: self._handle(message, index, total, count), self.on_output)
        if ended is None:
            return self._not_run(count, PointStatus.CANCELLED, "cancelled before it ran")
        if ended.result is not None:
            return ended.result
        if self.cancelled:
            return self._not_run(count, PointStatus.CANCELLED, "cancelled while it ran")
        return self._not_run(count, PointStatus.FAILED, _died(ended))

    def _handle(self, message: dict[str, Any], index: int, total: int,
                count: CountPlan) -> CountResult | None:
        kind = message.get("type")
        if kind == "result":
            return CountResult.from_dict(message)
        if kind == "phase":
            self._progress(ScaleProgress(index, total, count.devices, message["phase"]))
        elif kind == "step":
            self._progress(ScaleProgress(index, total, count.devices, "timing",
                                         step=message["step"], steps=message["of"]))
        elif kind == "log" and self.on_output is not None:
            self.on_output(message.get("message", ""))
        return None


def _died(ended: ChildExit) -> str:
    how, last = died_text(ended.code, ended.tail, ended.log)
    return (f"the timing process {how} without a result (a crash, or killed for lack of "
            f"memory).{last}")


def _source_name(source: str) -> str:
    return source if source == DEMO else Path(os.path.expanduser(source)).name


def count_label(kind: str, devices: int) -> str:
    return f"{devices} {device_word(kind, devices)}"
