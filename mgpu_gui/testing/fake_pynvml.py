"""Test-only: a fake `pynvml`, GPUs whose readings tests set.

Two ways in:
- a test builds one, `fake_nvml([FakeGpu(...), ...])`, and hands it to the NVML
  layer (`query_inventory(module)`, `NvmlSession(module)`, a `TelemetrySource`);
- with `MGPU_GUI_FAKE_GPUS=/path/gpus.json` set, the NVML layer's loader
  (`core.devices.nvml.load_pynvml`, the one selection point) uses
  `from_file(path)` instead of pynvml, in every process that inherits the
  variable: the GUI, the CLI, the queue runner and the claims all see the same
  fake machine. A training worker planned on those GPUs trains on as many CPU
  replicas (the worker's own selection point). The file:

    {"gpus": [{"index": 0, "uuid": "GPU-fake-0", "name": "Fake GPU",
               "memory_total": 8589934592, "compute_capability": [8, 0],
               "processes": [{"pid": 4242, "used_memory": 1024}],
               "utilization": 30}]}

Behaviour is set per GPU and per call: `gpu.errors["nvmlDeviceGetFanSpeed"] =
"NVMLError_NotSupported"` makes that call fail on that GPU, `gpu.lost = True`
makes every call on it (its handle included) raise GpuIsLost, `gpu.mig` lists its
MIG slots (None: MIG not supported), and `module.before_call` (a callable taking
the function name) runs before every device call, e.g. to block a poll or count
calls. `fake_nvml(count_error=...)` makes listing the GPUs fail.

Plain Python only: the NVML layer (core) imports this module, so it imports
nothing of the app.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

GiB = 2**30
UUID0 = "GPU-11111111-1111-1111-1111-111111111111"
UUID1 = "GPU-22222222-2222-2222-2222-222222222222"
H100 = "NVIDIA H100 80GB HBM3"

ERRORS = {  # pynvml's names and codes
    "NVMLError_NotSupported": 3, "NVMLError_NoPermission": 4, "NVMLError_NotFound": 6,
    "NVMLError_DriverNotLoaded": 9, "NVMLError_LibraryNotFound": 12,
    "NVMLError_FunctionNotFound": 13, "NVMLError_GpuIsLost": 15,
    "NVMLError_LibRmVersionMismatch": 25, "NVMLError_Unknown": 999,
}


@dataclass
class FakeGpu:
    name: str = H100
    uuid: str | None = UUID0
    bus: bytes = b"00000000:17:00.0"
    memory_total: int = 80 * GiB
    memory_used: int = 1 * GiB
    utilization: int = 0  # %
    memory_busy: int = 0  # %
    temperature: int = 35
    power_mw: int = 70_000
    power_limit_mw: int = 700_000
    fan: int = 30
    pstate: int = 0
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    errors: dict[str, str] = field(default_factory=dict)  # function -> NVMLError_* name
    lost: bool = False
    cc: tuple[int, int] = (9, 0)  # CUDA compute capability
    mig: list[tuple[str, str, int] | None] | None = None  # slots: (uuid, name, bytes) or empty


def two_gpus() -> list[FakeGpu]:
    """GPU 0 training hard (pid 4242), GPU 1 nearly idle with a foreign pid 5151."""
    return [
        FakeGpu(uuid=UUID0, memory_used=61 * GiB, utilization=97, memory_busy=41,
                temperature=71, power_mw=312_000, fan=55, processes=[(4242, 60 * GiB)]),
        FakeGpu(uuid=UUID1, bus=b"00000000:65:00.0", memory_used=12 * GiB, utilization=3,
                memory_busy=1, temperature=38, power_mw=88_000, pstate=2,
                processes=[(5151, 11 * GiB)]),
    ]


def fake_nvml(gpus: list[FakeGpu] | None = None, init_error: str | None = None,
              count_error: str | None = None, driver: str = "550.54.15") -> ModuleType:
    """A pynvml-like module over `gpus` (default: `two_gpus()`)."""
    m = ModuleType("fake_pynvml")
    m.gpus = two_gpus() if gpus is None else gpus
    m.inits = 0
    m.shutdowns = 0
    m.before_call: Callable[[str], Any] | None = None
    m.NVML_DEVICE_MIG_ENABLE = 1
    m.NVML_TEMPERATURE_GPU = 0

    class NVMLError(Exception):
        value = 999

        def __str__(self) -> str:
            return type(self).__name__.removeprefix("NVMLError_")

    m.NVMLError = NVMLError
    for name, code in ERRORS.items():
        setattr(m, name, type(name, (NVMLError,), {"value": code}))
    m.NVMLLibraryMismatchError = type("NVMLLibraryMismatchError", (Exception,), {})

    def fail(name: str) -> None:
        raise getattr(m, name)()

    def init() -> None:
        m.inits += 1
        if init_error:
            fail(init_error)

    def shutdown() -> None:
        m.shutdowns += 1

    def gpu_of(function: str, handle: tuple) -> FakeGpu:
        if m.before_call is not None:
            m.before_call(function)
        gpu = m.gpus[handle[1]]
        if gpu.lost:
            fail("NVMLError_GpuIsLost")
        if function in gpu.errors:
            fail(gpu.errors[function])
        return gpu

    mig_reads: dict[str, Callable[[tuple[str, str, int]], Any]] = {
        "nvmlDeviceGetName": lambda mig: mig[1],
        "nvmlDeviceGetUUID": lambda mig: mig[0],
        "nvmlDeviceGetMemoryInfo": lambda mig: SimpleNamespace(total=mig[2], used=0, free=mig[2]),
    }

    def device(function: str, read: Callable[[FakeGpu], Any]) -> None:
        def call(handle: tuple, *args: Any) -> Any:
            gpu = gpu_of(function, handle)
            if handle[0] == "mig":
                return mig_reads[function](gpu.mig[handle[2]])
            return read(gpu)
        call.__name__ = function
        setattr(m, function, call)

    def count() -> int:
        if count_error:
            fail(count_error)
        return len(m.gpus)

    def handle_by_index(index: int) -> tuple:
        if index >= len(m.gpus):
            fail("NVMLError_NotFound")
        handle = ("gpu", index)
        gpu_of("nvmlDeviceGetHandleByIndex", handle)
        return handle

    def processes(gpu: FakeGpu) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]

    def mig_mode(gpu: FakeGpu) -> Any:
        if gpu.mig is None:
            fail("NVMLError_NotSupported")
        return (1, 1)

    def mig_handle(handle: tuple, slot: int) -> tuple:
        if m.gpus[handle[1]].mig[slot] is None:
            fail("NVMLError_NotFound")  # what NVML says for an empty slot
        return ("mig", handle[1], slot)

    m.nvmlInit = init
    m.nvmlShutdown = shutdown
    m.nvmlSystemGetDriverVersion = lambda: driver
    m.nvmlSystemGetCudaDriverVersion = lambda: 12040
    m.nvmlDeviceGetCount = count
    m.nvmlDeviceGetHandleByIndex = handle_by_index
    m.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    device("nvmlDeviceGetName", lambda g: g.name)
    device("nvmlDeviceGetUUID", lambda g: g.uuid)
    device("nvmlDeviceGetPciInfo", lambda g: SimpleNamespace(busId=g.bus))
    device("nvmlDeviceGetCudaComputeCapability", lambda g: g.cc)
    device("nvmlDeviceGetMigMode", mig_mode)
    device("nvmlDeviceGetMaxMigDeviceCount", lambda g: len(g.mig or []))
    device("nvmlDeviceGetMemoryInfo", lambda g: SimpleNamespace(
        total=g.memory_total, used=g.memory_used, free=g.memory_total - g.memory_used))
    device("nvmlDeviceGetUtilizationRates",
           lambda g: SimpleNamespace(gpu=g.utilization, memory=g.memory_busy))
    device("nvmlDeviceGetTemperature", lambda g: g.temperature)
    device("nvmlDeviceGetPowerUsage", lambda g: g.power_mw)
    device("nvmlDeviceGetEnforcedPowerLimit", lambda g: g.power_limit_mw)
    device("nvmlDeviceGetPowerManagementLimit", lambda g: g.power_limit_mw)
    device("nvmlDeviceGetFanSpeed", lambda g: g.fan)
    device("nvmlDeviceGetPerformanceState", lambda g: g.pstate)
    for suffix in ("", "_v3", "_v2"):
        device("nvmlDeviceGetComputeRunningProcesses" + suffix, processes)
    return m


def from_file(path: str | Path) -> ModuleType:
    """The fake machine a MGPU_GUI_FAKE_GPUS file describes (see the module's docstring).

    What the file leaves out, NVML does not give: no PCI bus id, no compute
    capability, no memory size; the driver calls itself "fake".
    """
    entries = sorted(json.loads(Path(path).read_text())["gpus"], key=lambda g: g["index"])
    return fake_nvml([_gpu_from(entry) for entry in entries], driver="fake")


def _gpu_from(entry: dict[str, Any]) -> FakeGpu:
    processes = [(p["pid"], p.get("used_memory")) for p in entry.get("processes", ())]
    unknown = [function for function, key in (
        ("nvmlDeviceGetPciInfo", "pci_bus_id"),
        ("nvmlDeviceGetCudaComputeCapability", "compute_capability"),
        ("nvmlDeviceGetMemoryInfo", "memory_total")) if entry.get(key) is None]
    return FakeGpu(
        name=entry.get("name", "Fake GPU"), uuid=entry.get("uuid"),
        bus=str(entry.get("pci_bus_id", "")).encode(), memory_total=entry.get("memory_total") or 0,
        memory_used=sum(used or 0 for _, used in processes), processes=processes,
        utilization=entry.get("utilization", 0),
        cc=tuple(entry.get("compute_capability") or (0, 0)),
        errors=dict.fromkeys(unknown, "NVMLError_NotSupported"))
