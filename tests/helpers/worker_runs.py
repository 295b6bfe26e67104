"""A run's worker started as the app starts it, to its end, for the engine tests."""

from __future__ import annotations

from mgpu_gui.core.children.supervisor import WorkerProcess, prepare_run
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.events import EpochEnd, RunStatus

NO_GPU = GpuInventory(NvmlState.NO_DRIVER)


def train(config: RunConfig) -> list:
    """Every event of a run of `config` that must complete."""
    worker = WorkerProcess(prepare_run(config, NO_GPU))
    worker.start()
    events = list(worker.events())
    assert worker.outcome().status is RunStatus.COMPLETED, worker.outcome().message
    return events


def epoch_losses(events: list) -> list[float]:
    return [e.metrics["loss"] for e in events if isinstance(e, EpochEnd)]
