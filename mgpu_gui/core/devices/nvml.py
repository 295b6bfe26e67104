"""GPU inventory through NVML (the plan of which devices a run uses: plan.py).

NVML (the library behind `nvidia-smi`) reads GPUs without touching CUDA, so
listing them neither grabs GPU memory nor fixes which GPUs a later TensorFlow
process sees. The shape follows nvitop's API: lazy `nvmlInit` under a lock,
`nvmlShutdown` at exit, and every NVML call made through `NvmlSession.query`,
which turns NVML errors into "not available" (`None`) instead of raising: a
lost or half-supported GPU must not take the GUI down. Never import
TensorFlow here.

`load_pynvml` is the one place the NVML module is chosen: pynvml, or (tests
only) the fake machine that MGPU_GUI_FAKE_GPUS names, so the GUI, the CLI, the
queue runner and the claims of every process see the same fake GPUs through
this same code.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from types import ModuleType
from typing import Any

from mgpu_gui.core.plain import to_plain

NA = "N/A"  # how a value NVML cannot give is shown
# Test-only: a JSON file of fake GPUs (mgpu_gui/testing/fake_pynvml.py) that stands in
# for NVML in this process and every process it starts.
FAKE_GPUS_VAR = "MGPU_GUI_FAKE_GPUS"


class NvmlState(StrEnum):
    OK = "ok"
    NO_DRIVER = "no_driver"  # pynvml missing, or libnvidia-ml not found
    DRIVER_ERROR = "driver_error"  # the library is there but NVML cannot start
    NO_GPU = "no_gpu"  # NVML works and counts zero GPUs


@dataclass(frozen=True)
class MigInstance:
    index: int  # slot on its parent GPU
    uuid: str | None  # "MIG-…"; what CUDA_VISIBLE_DEVICES takes
    name: str | None
    memory_total: int | None  # bytes


@dataclass(frozen=True)
class GpuInfo:
    index: int  # NVML index: PCI bus order, as CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    memory_total: int | None  # bytes
    compute_capability: tuple[int, int] | None
    mig_instances: tuple[MigInstance, ...] = ()
    mig_enabled: bool = False

    @property
    def label(self) -> str:
        """What a person recognises: 'GPU 0: NVIDIA H100 80GB HBM3 (GPU-…)'."""
        return f"GPU {self.index}: {self.name or NA} ({self.uuid or NA})"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuInfo:
        cc = data.get("compute_capability")
        return cls(**{**data, "compute_capability": tuple(cc) if cc else None,
                      "mig_instances": tuple(MigInstance(**m)
                                             for m in data.get("mig_instances", ()))})


@dataclass(frozen=True)
class GpuInventory:
    state: NvmlState
    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # highest CUDA the driver supports, "12.4"
    message: str = ""  # for the user, non-OK states: what it means and what to do
    reason: str = ""  # the cause alone, e.g. "No NVIDIA driver found (…)"
    advice: str = ""  # the remedy alone, e.g. "Install the NVIDIA driver …"

    def to_json(self) -> str:
        return json.dumps(to_plain(dataclasses.asdict(self)), indent=2)


def load_pynvml() -> ModuleType:
    """The NVML module: pynvml, or the fake machine MGPU_GUI_FAKE_GPUS names (tests only;
    `mgpu_gui.testing` is never imported unless the variable is set)."""
    fake_gpus = os.environ.get(FAKE_GPUS_VAR)
    if fake_gpus:
        from mgpu_gui.testing import fake_pynvml

        return fake_pynvml.from_file(fake_gpus)
    import pynvml

    return pynvml


class NvmlSession:
    """One NVML client: lazy init under a lock, shutdown at exit, safe queries.

    `module` injects a pynvml-like module (tests); otherwise `load` is asked for
    one on first use.
    """

    def __init__(self, module: ModuleType | None = None,
                 load: Callable[[], ModuleType] = load_pynvml):
        self._module = module
        self._load = load
        self._lock = threading.Lock()
        self._started = False
        self._failure: tuple[NvmlState, str, str] | None = None

    @property
    def module(self) -> ModuleType | None:
        return self._module

    def start(self) -> tuple[NvmlState, str, str] | None:
        """Initialise NVML once; None when it works, else (state, reason, advice).

        A failure is remembered (a missing driver does not appear between two
        polls); `shutdown()` forgets it so the next call tries again.
        """
        with self._lock:
            if self._started:
                return None
            if self._failure is not None:
                return self._failure
            if self._module is None:
                try:
                    self._module = self._load()
                except ImportError as exc:
                    self._failure = (
                        NvmlState.NO_DRIVER,
                        f"GPUs cannot be listed: the pynvml module is missing ({exc})",
                        "Reinstall the app's dependencies (pip install nvidia-ml-py).",
                    )
                    return self._failure
            nvml = self._module
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as exc:
                self._failure = _explain_init_error(nvml, exc)
                return self._failure
            self._started = True
            atexit.register(self.shutdown)
            return None

    def shutdown(self) -> None:
        with self._lock:
            self._failure = None
            if not self._started:
                return
            self._started = False
            atexit.unregister(self.shutdown)
            nvml = self._module
            assert nvml is not None
            with contextlib.suppress(nvml.NVMLError):  # nothing to do about it at exit
                nvml.nvmlShutdown()

    def query(self, function: str, *args: Any) -> Any:
        """Call `pynvml.<function>(*args)`; None when NVML cannot give the value.

        Covers NVML errors (not supported, no permission, GPU lost, …) and
        functions this pynvml or driver does not have.
        """
        nvml = self._module
        func = getattr(nvml, function, None) if nvml is not None else None
        if func is None:
            return None
        try:
            return func(*args)
        except nvml.NVMLError:
            return None


def _explain_init_error(nvml: ModuleType, exc: Exception) -> tuple[NvmlState, str, str]:
    def is_(name: str) -> bool:
        cls = getattr(nvml, name, None)
        return isinstance(cls, type) and isinstance(exc, cls)

    if is_("NVMLError_LibraryNotFound"):
        return (
            NvmlState.NO_DRIVER,
            "No NVIDIA driver found (libnvidia-ml not available)",
            "To train on GPUs, install the NVIDIA driver and check that nvidia-smi works.",
        )
    if is_("NVMLError_DriverNotLoaded"):
        reason = f"The NVIDIA driver is installed but not running ({exc})"
        advice = "Check nvidia-smi; rebooting or loading the nvidia kernel module fixes this."
    elif is_("NVMLError_LibRmVersionMismatch"):
        reason = f"The NVIDIA driver library and kernel module differ in version ({exc})"
        advice = "This follows a driver update: reboot, then check nvidia-smi."
    elif is_("NVMLError_NoPermission"):
        reason = f"Not allowed to talk to the NVIDIA driver ({exc})"
        advice = "Check the permissions of /dev/nvidia* for this user."
    else:
        reason = f"The NVIDIA driver could not be started ({exc})"
        advice = "Check nvidia-smi and the driver installation."
    return NvmlState.DRIVER_ERROR, reason, advice


_default_sessions: dict[str, NvmlSession] = {}
_default_lock = threading.Lock()


def default_session() -> NvmlSession:
    """The process-wide session (initialised on first use).

    One per value of MGPU_GUI_FAKE_GPUS, which is never set outside tests: a
    test that sets it gets the fake machine even after NVML was used without it.
    """
    key = os.environ.get(FAKE_GPUS_VAR, "")
    with _default_lock:
        session = _default_sessions.get(key)
        if session is None:
            session = _default_sessions[key] = NvmlSession()
        return session


# -- inventory ---------------------------------------------------------------


def query_inventory(nvml: ModuleType | NvmlSession | None = None) -> GpuInventory:
    """List the GPUs NVML sees; never raises for driver or GPU problems.

    `nvml` injects a pynvml-like module (tests) or a session; the default is the
    process-wide session (`default_session()`). A module given here gets a
    session of its own that is shut down before returning.
    """
    if isinstance(nvml, NvmlSession):
        return _inventory(nvml)
    if nvml is None:
        return _inventory(default_session())
    session = NvmlSession(nvml)
    try:
        return _inventory(session)
    finally:
        session.shutdown()


def _inventory(session: NvmlSession) -> GpuInventory:
    failure = session.start()
    if failure is not None:
        return _not_ok(*failure)
    driver = _text(session.query("nvmlSystemGetDriverVersion"))
    cuda = _cuda_version(session.query("nvmlSystemGetCudaDriverVersion"))
    count = session.query("nvmlDeviceGetCount")
    if count is None:
        return _not_ok(
            NvmlState.DRIVER_ERROR,
            "The NVIDIA driver is running but cannot count its GPUs",
            "Check nvidia-smi and the driver installation.",
            driver, cuda,
        )
    if count == 0:
        return _not_ok(
            NvmlState.NO_GPU,
            f"The NVIDIA driver{' ' + driver if driver else ''} is running but reports no GPU",
            "Check nvidia-smi; a GPU may be disabled or passed to a virtual machine.",
            driver, cuda,
        )
    gpus = tuple(_gpu_info(session, index) for index in range(count))
    return GpuInventory(NvmlState.OK, gpus, driver, cuda)


def _not_ok(
    state: NvmlState, reason: str, advice: str,
    driver: str | None = None, cuda: str | None = None,
) -> GpuInventory:
    message = f"{reason}: training will run on CPU replicas. {advice}"
    return GpuInventory(state, (), driver, cuda, message, reason, advice)


def _gpu_info(session: NvmlSession, index: int) -> GpuInfo:
    q = session.query
    handle = q("nvmlDeviceGetHandleByIndex", index)
    if handle is None:  # GPU lost or not accessible: keep its index, know nothing else
        return GpuInfo(index, None, None, None, None, None)
    pci = q("nvmlDeviceGetPciInfo", handle)
    memory = q("nvmlDeviceGetMemoryInfo", handle)
    capability = q("nvmlDeviceGetCudaComputeCapability", handle)
    mig_mode = q("nvmlDeviceGetMigMode", handle)
    enabled_value = getattr(session.module, "NVML_DEVICE_MIG_ENABLE", 1)
    mig_enabled = bool(mig_mode) and mig_mode[0] == enabled_value
    return GpuInfo(
        index=index,
        name=_text(q("nvmlDeviceGetName", handle)),
        uuid=_text(q("nvmlDeviceGetUUID", handle)),
        pci_bus_id=_text(getattr(pci, "busId", None)),
        memory_total=getattr(memory, "total", None),
        compute_capability=tuple(capability) if capability else None,
        mig_instances=_mig_instances(session, handle) if mig_enabled else (),
        mig_enabled=mig_enabled,
    )


def _mig_instances(session: NvmlSession, handle: Any) -> tuple[MigInstance, ...]:
    q = session.query
    found = []
    for slot in range(q("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
        mig = q("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if mig is None:  # empty slot: NVML says NotFound
            continue
        memory = q("nvmlDeviceGetMemoryInfo", mig)
        found.append(MigInstance(
            index=slot,
            uuid=_text(q("nvmlDeviceGetUUID", mig)),
            name=_text(q("nvmlDeviceGetName", mig)),
            memory_total=getattr(memory, "total", None),
        ))
    return tuple(found)


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):  # older pynvml versions return bytes
        value = value.decode("utf-8", "replace")
    return value or None


def _cuda_version(value: int | None) -> str | None:
    # NVML encodes CUDA 12.4 as 12040.
    return f"{value // 1000}.{value % 1000 // 10}" if isinstance(value, int) and value else None


# -- planning ----------------------------------------------------------------


def format_bytes(size: int | None) -> str:
    return NA if size is None else f"{size / 2**30:.1f} GiB"


def format_inventory(inventory: GpuInventory) -> str:
    """The text `mgpu-train devices` prints."""
    lines = []
    versions = []
    if inventory.driver_version:
        versions.append(f"NVIDIA driver {inventory.driver_version}")
    if inventory.cuda_driver_version:
        versions.append(f"CUDA {inventory.cuda_driver_version}")
    if inventory.state is not NvmlState.OK:
        if versions:
            lines.append(", ".join(versions))
        lines.append(inventory.message)
        return "\n".join(lines)
    count = len(inventory.gpus)
    lines.append(", ".join([*versions, f"{count} GPU{'s' if count != 1 else ''}"]))
    rows = [("#", "Name", "Memory", "CC", "PCI bus", "UUID")]
    for gpu in inventory.gpus:
        cc = "{}.{}".format(*gpu.compute_capability) if gpu.compute_capability else NA
        rows.append((str(gpu.index), gpu.name or NA, format_bytes(gpu.memory_total), cc,
                     gpu.pci_bus_id or NA, gpu.uuid or NA))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

    lines.append(line(rows[0]))
    for gpu, row in zip(inventory.gpus, rows[1:], strict=True):
        lines.append(line(row))
        if gpu.mig_enabled and not gpu.mig_instances:
            lines.append("   MIG mode on, no MIG instance created")
        for mig in gpu.mig_instances:
            lines.append(f"   MIG {mig.index}: {mig.name or NA}, "
                         f"{format_bytes(mig.memory_total)}, {mig.uuid or NA}")
    return "\n".join(lines)
