"""GPU inventory through NVML, and the plan of which devices a run trains on.

NVML (the library behind `nvidia-smi`) reads GPUs without touching CUDA, so
listing them neither grabs GPU memory nor fixes which GPUs a later TensorFlow
process sees. The shape follows nvitop's API: lazy `nvmlInit` under a lock,
`nvmlShutdown` at exit, and every NVML call made through `NvmlSession.query`,
which turns NVML errors into "not available" (`None`) instead of raising: a
lost or half-supported GPU must not take the GUI down. Never import
TensorFlow here.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import ModuleType
from typing import Any

from mgpu_gui.core.config import DeviceKind, DeviceSelection
from mgpu_gui.core.errors import DeviceError
from mgpu_gui.core.plain import to_plain

DEFAULT_CPU_REPLICAS = 2  # enough to exercise real data parallelism on any machine
NA = "N/A"  # how a value NVML cannot give is shown
CPU_HINT = "train on CPU replicas instead (--cpu, or device 'CPU' in the app)"


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


@dataclass(frozen=True)
class DevicePlan:
    """The devices one run trains on, and the environment its worker needs."""

    kind: DeviceKind  # GPU or CPU, never AUTO
    replicas: int
    gpus: tuple[GpuInfo, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # set before TensorFlow starts
    names: list[str] = field(default_factory=list)  # one per replica, human-readable
    note: str = ""  # shown in the status bar, e.g. why this is CPU training

    def to_json(self) -> str:
        """For the run folder: the supervisor plans, the worker reads it back."""
        return json.dumps(to_plain(dataclasses.asdict(self)), indent=2)

    @classmethod
    def from_json(cls, text: str) -> DevicePlan:
        data = json.loads(text)
        return cls(kind=DeviceKind(data["kind"]), replicas=data["replicas"],
                   gpus=tuple(GpuInfo.from_dict(g) for g in data.get("gpus", ())),
                   env=dict(data.get("env", {})), names=list(data.get("names", [])),
                   note=data.get("note", ""))


# -- NVML session ------------------------------------------------------------


class NvmlSession:
    """One NVML client: lazy init under a lock, shutdown at exit, safe queries."""

    def __init__(self, module: ModuleType | None = None, module_name: str = "pynvml"):
        self._module = module
        self._module_name = module_name
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
                    self._module = importlib.import_module(self._module_name)
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


_default_session = NvmlSession()


def default_session() -> NvmlSession:
    """The process-wide session on the real pynvml (initialised on first use)."""
    return _default_session


# -- inventory ---------------------------------------------------------------


def query_inventory(nvml: ModuleType | NvmlSession | None = None) -> GpuInventory:
    """List the GPUs NVML sees; never raises for driver or GPU problems.

    `nvml` injects a pynvml-like module (tests) or a session; the default is the
    process-wide session on the real pynvml. A module given here gets a session
    of its own that is shut down before returning.
    """
    if isinstance(nvml, NvmlSession):
        return _inventory(nvml)
    if nvml is None:
        return _inventory(_default_session)
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


def plan_devices(selection: DeviceSelection, inventory: GpuInventory) -> DevicePlan:
    """Turn the user's choice into concrete devices; DeviceError when impossible."""
    if selection.replicas is not None and selection.replicas < 1:
        raise DeviceError(f"At least 1 replica is needed, got {selection.replicas}.")
    if selection.kind is DeviceKind.CPU:
        if selection.gpus:
            raise DeviceError(
                f"GPUs {', '.join(selection.gpus)} were chosen but the device kind is CPU; "
                "clear the GPU choice or pick GPU."
            )
        return _cpu_plan(selection.replicas or DEFAULT_CPU_REPLICAS, "")
    wants_gpu = selection.kind is DeviceKind.GPU or bool(selection.gpus)
    if not inventory.gpus:
        if wants_gpu:
            reason = inventory.reason or "No GPU is available"
            advice = f" {inventory.advice}" if inventory.advice else ""
            raise DeviceError(f"Cannot train on GPUs: {reason}.{advice} Or {CPU_HINT}.")
        return _cpu_plan(selection.replicas or DEFAULT_CPU_REPLICAS, inventory.message)
    if selection.gpus:
        if selection.replicas not in (None, len(selection.gpus)):
            raise DeviceError(
                f"{selection.replicas} replicas asked for but {len(selection.gpus)} GPUs "
                "chosen; give one or the other."
            )
        chosen, note = _pick_named(selection.gpus, inventory.gpus), ""
    else:
        chosen, note = _pick_count(selection.replicas, inventory.gpus)
    return _gpu_plan(chosen, note)


def _cpu_plan(replicas: int, note: str) -> DevicePlan:
    names = [f"CPU replica {i} (logical device CPU:{i})" for i in range(replicas)]
    # An empty CUDA_VISIBLE_DEVICES keeps TensorFlow off every GPU.
    return DevicePlan(DeviceKind.CPU, replicas, (), {"CUDA_VISIBLE_DEVICES": ""}, names, note)


# A chosen device: the GPU, and the MIG instance to use on it (if MIG is on).
_Choice = tuple[GpuInfo, MigInstance | None]


def _pick_named(wanted: Sequence[str], gpus: Sequence[GpuInfo]) -> list[_Choice]:
    chosen: list[_Choice] = []
    named_as: dict[int, str] = {}
    for raw in wanted:
        gpu, mig = _find(raw.strip(), gpus)
        if gpu.index in named_as:
            again = f"as {named_as[gpu.index]!r} and {raw!r}"
            raise DeviceError(
                f"GPU {gpu.index} is chosen twice ({again}); "
                "each GPU can hold one replica, so list it once."
            )
        named_as[gpu.index] = raw
        chosen.append((gpu, mig if mig is not None else _first_mig(gpu)))
    return chosen


def _find(key: str, gpus: Sequence[GpuInfo]) -> tuple[GpuInfo, MigInstance | None]:
    for gpu in gpus:
        if key.isdigit() and int(key) == gpu.index:
            return gpu, None
        if gpu.uuid and key.lower() == gpu.uuid.lower():
            return gpu, None
        for mig in gpu.mig_instances:
            if mig.uuid and key.lower() == mig.uuid.lower():
                return gpu, mig
    kind = "index" if key.isdigit() else "UUID"
    raise DeviceError(
        f"There is no GPU with {kind} {key!r} on this machine. {_existing(gpus)} "
        "Choose GPUs by these indices or UUIDs."
    )


def _pick_count(replicas: int | None, gpus: Sequence[GpuInfo]) -> tuple[list[_Choice], str]:
    # MIG GPUs cannot share a process with other devices, so an unnamed choice
    # takes the plain GPUs, and one MIG instance only when every GPU is in MIG mode.
    plain = [g for g in gpus if not g.mig_enabled]
    if plain:
        candidates, wanted, what = plain, replicas or len(plain), "GPU"
        skipped = [str(g.index) for g in gpus if g.mig_enabled]
        note = (f"GPU {', '.join(skipped)} left out: in MIG mode, which CUDA cannot "
                "combine with other GPUs in one process." if skipped else "")
        if skipped:
            what = "GPU not in MIG mode"
    else:
        candidates, wanted, what = list(gpus), replicas or 1, "GPU"
        note = "Every GPU is in MIG mode: training on one MIG instance."
    if wanted > len(candidates):
        plural = "s" if len(candidates) != 1 else ""
        raise DeviceError(
            f"{wanted} GPUs asked for, but this machine has {len(candidates)} "
            f"{what.replace('GPU', 'GPU' + plural, 1)}. {_existing(gpus)} "
            f"Ask for at most {len(candidates)}, or {CPU_HINT}."
        )
    return [(g, _first_mig(g)) for g in candidates[:wanted]], note


def _first_mig(gpu: GpuInfo) -> MigInstance | None:
    if not gpu.mig_enabled:
        return None
    if not gpu.mig_instances:
        raise DeviceError(
            f"GPU {gpu.index} ({gpu.name or NA}) has MIG enabled but no MIG instance "
            "created, so CUDA cannot use it. Create one (nvidia-smi mig -cgi <profile> -C) "
            f"or turn MIG off (nvidia-smi -i {gpu.index} -mig 0)."
        )
    return gpu.mig_instances[0]


def _gpu_plan(chosen: list[_Choice], note: str) -> DevicePlan:
    migs = [(g, m) for g, m in chosen if m is not None]
    if migs and len(chosen) > 1:
        gpu, _ = migs[0]
        raise DeviceError(
            f"GPU {gpu.index} is in MIG mode, and CUDA shows a process only one MIG "
            "instance, so it cannot train together with other devices. Choose it alone "
            f"(one replica), or turn MIG off (nvidia-smi -i {gpu.index} -mig 0)."
        )
    ids = [m.uuid if m is not None else g.uuid for g, m in chosen]
    if None in ids:
        # Without UUIDs, fall back to indices: PCI_BUS_ID order makes them NVML's.
        ids = [str(g.index) for g, _ in chosen]
    names = [
        g.label if m is None else f"GPU {g.index} MIG {m.index}: {m.name or NA} ({m.uuid})"
        for g, m in chosen
    ]
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(ids)}
    gpus = tuple(g for g, _ in chosen)
    return DevicePlan(DeviceKind.GPU, len(chosen), gpus, env, names, note)


def _existing(gpus: Sequence[GpuInfo]) -> str:
    listed = "; ".join(f"{g.index} = {g.name or NA} ({g.uuid or NA})" for g in gpus)
    return f"GPUs found: {listed}."


# -- text ------------------------------------------------------------------


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
