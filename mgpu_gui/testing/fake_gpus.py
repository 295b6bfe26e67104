"""Test-only: GPUs described in a JSON file stand in for NVML's, across processes.

The job queue's runner and the workers it starts are other processes than the
test, so a fake `pynvml` module handed to one function cannot reach them. With
`MGPU_GUI_FAKE_GPUS=/path/gpus.json` set, the inventory and the GPUs' compute
processes come from that file, and a worker planned on those GPUs trains on as
many CPU replicas instead (real training, fake devices). Unset, nothing here
has any effect. The file:

    {"gpus": [{"index": 0, "uuid": "GPU-fake-0", "name": "Fake GPU",
               "memory_total": 8589934592, "processes": [{"pid": 4242, "used_memory": 1024}]}]}
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from mgpu_gui.core.config import DeviceKind
from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, NvmlState
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.devices.telemetry import ProcessInfo

ENV_VAR = "MGPU_GUI_FAKE_GPUS"


def _read() -> list[dict] | None:
    path = os.environ.get(ENV_VAR)
    if not path:
        return None
    return list(json.loads(Path(path).read_text())["gpus"])


def inventory() -> GpuInventory | None:
    gpus = _read()
    if gpus is None:
        return None
    infos = tuple(GpuInfo(index=g["index"], name=g.get("name", "Fake GPU"), uuid=g.get("uuid"),
                          pci_bus_id=None, memory_total=g.get("memory_total"),
                          compute_capability=tuple(g["compute_capability"])
                          if g.get("compute_capability") else None)
                  for g in gpus)
    return GpuInventory(NvmlState.OK, infos, driver_version="fake", cuda_driver_version="12.4")


def processes() -> dict[int, tuple[ProcessInfo, ...]] | None:
    """Each fake GPU's compute processes, by index."""
    gpus = _read()
    if gpus is None:
        return None
    return {g["index"]: tuple(ProcessInfo(p["pid"], p.get("used_memory"))
                              for p in g.get("processes", ())) for g in gpus}


def as_cpu(plan: DevicePlan) -> DevicePlan:
    """The plan a worker follows: fake GPUs become as many CPU replicas."""
    if os.environ.get(ENV_VAR) is None or plan.kind is not DeviceKind.GPU:
        return plan
    return dataclasses.replace(
        plan, kind=DeviceKind.CPU, gpus=(), env={"CUDA_VISIBLE_DEVICES": ""},
        names=[f"CPU replica {i} (standing in for {name})" for i, name in enumerate(plan.names)])
