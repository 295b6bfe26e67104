"""Which devices a run trains on: a plan from the user's choice and the NVML inventory.

The plan carries the environment its worker needs before TensorFlow starts
(`CUDA_VISIBLE_DEVICES` by UUID, in PCI order as NVML numbers GPUs), so the
supervisor can refuse an impossible choice before any process starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from mgpu_gui.core.config import DeviceKind, DeviceSelection
from mgpu_gui.core.devices.nvml import NA, GpuInfo, GpuInventory, MigInstance
from mgpu_gui.core.errors import DeviceError
from mgpu_gui.core.plain import to_plain

DEFAULT_CPU_REPLICAS = 2  # enough to exercise real data parallelism on any machine
CPU_HINT = "train on CPU replicas instead (--cpu, or device 'CPU' in the app)"


@dataclass(frozen=True)
class DevicePlan:
    """The devices one run trains on, and the environment its worker needs."""

    kind: DeviceKind  # GPU or CPU, never AUTO
    replicas: int
    gpus: tuple[GpuInfo, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # set before TensorFlow starts
    names: list[str] = field(default_factory=list)  # one per replica, human-readable
    note: str = ""  # shown in the status bar, e.g. why this is CPU training
    warning: str = ""  # a choice that works but may disappoint: more CPU replicas than cores

    def to_json(self) -> str:
        """For the run folder: the supervisor plans, the worker reads it back."""
        return json.dumps(to_plain(dataclasses.asdict(self)), indent=2)

    @classmethod
    def from_json(cls, text: str) -> DevicePlan:
        data = json.loads(text)
        return cls(kind=DeviceKind(data["kind"]), replicas=data["replicas"],
                   gpus=tuple(GpuInfo.from_dict(g) for g in data.get("gpus", ())),
                   env=dict(data.get("env", {})), names=list(data.get("names", [])),
                   note=data.get("note", ""), warning=data.get("warning", ""))


# -- NVML session ------------------------------------------------------------


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
    return DevicePlan(DeviceKind.CPU, replicas, (), {"CUDA_VISIBLE_DEVICES": ""}, names, note,
                      cpu_replicas_warning(replicas))


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity (a container's or taskset's
    limit), which os.cpu_count() ignores."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def cpu_replicas_warning(replicas: int, cores: int | None = None) -> str:
    """Why more CPU replicas than cores disappoint ("" when they fit): they take turns on
    the cores, and the first step's graph grows with them (64 on 2 cores: 60-80 s to build
    here, against ~5 s for 2)."""
    cores = usable_cores() if cores is None else cores
    if replicas <= cores:
        return ""
    return (f"{replicas} CPU replicas on {cores} core{'s' if cores != 1 else ''}: the replicas "
            f"take turns on the cores (no speed-up beyond {cores}), and building the first "
            f"step takes longer with each replica (64 on 2 cores: over a minute). Use at most "
            f"{cores} unless you are testing data parallelism.")


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
