"""The doctor ("Check my setup"): what the driver, CUDA, TensorFlow, NCCL and JAX say,
and what to fix when they disagree.

Gathering the facts is the callers' business: NVML is asked in the calling
process (`core.devices`, no TensorFlow), TensorFlow and JAX in a child process
(`core.tools.tf_facts`; `doctor_jax` reads JAX's). Everything here is a pure
function of those facts, so each situation (no driver, CPU-only TensorFlow on a
GPU machine, MIG, an old driver, NCCL missing, ...) is tested with facts recorded
as JSON.

`diagnose(facts)` returns findings, each ok / warning / error with a message
and, where something can be done, the fix. `mgpu-train doctor` prints them
(`doctor_report`) and exits 1 when a finding is an error; the GUI's "Check my
setup…" shows the same findings.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.plain import to_plain
from mgpu_gui.core.tools.doctor_jax import JaxFacts, jax_findings
from mgpu_gui.core.tools.findings import Finding, Severity

CUDA_EXTRA = "pip install 'mgpu-gui[cuda]'"
TESTED_TENSORFLOW = "2.21"
# The oldest Linux driver of each CUDA major version (NVIDIA's minor-version compatibility).
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13"}
NO_GPU_PLATFORMS = {"win32": "native Windows", "darwin": "macOS"}


# -- facts ---------------------------------------------------------------------


@dataclass(frozen=True)
class NvmlGpu:
    index: int
    name: str | None
    uuid: str | None
    compute_capability: tuple[int, int] | None = None
    mig_enabled: bool = False
    mig_instances: int = 0


@dataclass(frozen=True)
class NvmlFacts:
    """What NVML (the driver) says: versions and GPUs, or why it cannot say."""

    state: NvmlState
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports
    gpus: tuple[NvmlGpu, ...] = ()
    reason: str = ""  # why there is no GPU list (state not OK)
    advice: str = ""

    @classmethod
    def from_inventory(cls, inventory: GpuInventory) -> NvmlFacts:
        return cls(
            state=inventory.state, driver_version=inventory.driver_version,
            cuda_driver_version=inventory.cuda_driver_version,
            gpus=tuple(NvmlGpu(g.index, g.name, g.uuid, g.compute_capability, g.mig_enabled,
                               len(g.mig_instances)) for g in inventory.gpus),
            reason=inventory.reason or inventory.message, advice=inventory.advice)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NvmlFacts:
        gpus = tuple(NvmlGpu(**{**g, "compute_capability": _pair(g.get("compute_capability"))})
                     for g in data.get("gpus", ()))
        return cls(**{**_known(cls, data), "state": NvmlState(data["state"]), "gpus": gpus})


@dataclass(frozen=True)
class TfGpu:
    name: str  # "/physical_device:GPU:0"
    device_name: str | None = None  # "NVIDIA H100 80GB HBM3"
    compute_capability: tuple[int, int] | None = None


@dataclass(frozen=True)
class TfFacts:
    """What TensorFlow says, from the facts child (`core.tools.tf_facts`)."""

    error: str | None = None  # TensorFlow could not be asked; then little else is known
    installed: bool = True  # False: not installed (a JAX-only machine); `error` says so too
    tensorflow_version: str | None = None
    tensorflow_package: str | None = None  # "tensorflow", "tensorflow-cpu", ...
    keras_version: str | None = None
    built_with_cuda: bool = False
    cuda_build_version: str | None = None
    cudnn_build_version: str | None = None
    cuda_compute_capabilities: tuple[str, ...] = ()  # the build's: "sm_60", "compute_90"
    gpus: tuple[TfGpu, ...] = ()
    cuda_driver_version: str | None = None  # from the driver's libcuda
    cuda_driver_error: str | None = None
    cuda_packages: dict[str, str] = field(default_factory=dict)  # nvidia-*-cu12 wheels
    nccl_kernel: bool = False  # TensorFlow's NcclAllReduce GPU kernel is registered
    nccl_version: str | None = None  # libnccl.so.2 loaded and reported this
    nccl_error: str | None = None
    cuda_visible_devices: str | None = None  # None: not set
    platform: str = "linux"
    python: str | None = None
    messages: tuple[str, ...] = ()  # TensorFlow's own log lines about CUDA and GPUs
    # What JAX says, asked by the same child (doctor_jax); None: not asked.
    jax: JaxFacts | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TfFacts:
        known = _known(cls, data)
        known["gpus"] = tuple(
            TfGpu(**{**_known(TfGpu, g), "compute_capability": _pair(g.get("compute_capability"))})
            for g in data.get("gpus") or ())
        for name in ("cuda_compute_capabilities", "messages"):
            known[name] = tuple(data.get(name) or ())
        known["cuda_packages"] = dict(data.get("cuda_packages") or {})
        known["jax"] = JaxFacts.from_dict(data["jax"]) if data.get("jax") else None
        return cls(**known)


@dataclass(frozen=True)
class Facts:
    nvml: NvmlFacts
    tf: TfFacts

    def to_dict(self) -> dict[str, Any]:
        return to_plain(dataclasses.asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Facts:
        return cls(NvmlFacts.from_dict(data["nvml"]), TfFacts.from_dict(data["tf"]))


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The keys of `data` that are fields of `cls` (facts from newer versions still load)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _pair(value: Any) -> tuple[int, int] | None:
    return (int(value[0]), int(value[1])) if value else None


# -- decisions -----------------------------------------------------------------


def diagnose(facts: Facts) -> list[Finding]:
    """What the facts mean, most basic first: driver, TensorFlow, GPUs, CUDA, NCCL, then
    JAX (optional: the second engine)."""
    nvml, tf = facts.nvml, facts.tf
    findings = _driver(nvml)
    jax = jax_findings(tf.jax, len(nvml.gpus) if nvml.state is NvmlState.OK else 0)
    if not tf.installed:
        return [*findings, _no_tensorflow(tf), *jax]
    if tf.error:
        findings.append(Finding(
            Severity.ERROR, "tensorflow", f"TensorFlow could not be asked: {tf.error}.",
            "Reinstall the app's dependencies (pip install -e . in its folder, or pip install "
            "mgpu-gui), then check again."))
        return findings + jax
    findings += _tensorflow(tf)
    findings += _gpus(nvml, tf)
    findings += _nccl(nvml, tf)
    return findings + jax


def exit_code(findings: list[Finding]) -> int:
    return 1 if any(f.severity is Severity.ERROR for f in findings) else 0


def _driver(nvml: NvmlFacts) -> list[Finding]:
    if nvml.state is NvmlState.OK:
        count = len(nvml.gpus)
        names = ", ".join(f"{g.index}: {g.name or '?'}" for g in nvml.gpus)
        return [Finding(Severity.OK, "driver",
                        f"NVIDIA driver {nvml.driver_version or '?'} (supports CUDA "
                        f"{nvml.cuda_driver_version or '?'}) lists {count} "
                        f"GPU{'s' if count != 1 else ''}: {names}.")]
    if nvml.state is NvmlState.NO_DRIVER and "pynvml" in nvml.reason:
        return [Finding(Severity.WARNING, "driver", f"{nvml.reason}.",
                        nvml.advice or "pip install nvidia-ml-py")]
    if nvml.state is NvmlState.NO_DRIVER:
        return [Finding(Severity.OK, "driver",
                        f"{nvml.reason or 'No NVIDIA driver found'}: training runs on CPU "
                        "replicas (logical CPU devices), with the same data-parallel code.",
                        "Only to train on NVIDIA GPUs: install the NVIDIA driver (nvidia-smi "
                        f"must work), then the CUDA extra: {CUDA_EXTRA}.")]
    severity = Severity.ERROR if nvml.state is NvmlState.DRIVER_ERROR else Severity.WARNING
    return [Finding(severity, "driver",
                    f"{nvml.reason}: training can only run on CPU replicas.", nvml.advice)]


def _no_tensorflow(tf: TfFacts) -> Finding:
    """TensorFlow absent: a machine set up for the JAX engine alone is fine (a warning, so
    the doctor's exit code stays 0); with no engine that can train it is an error."""
    jax = tf.jax
    keras = f"Keras {tf.keras_version}" if tf.keras_version else "Keras is not installed"
    if jax is not None and jax.installed and not jax.error and tf.keras_version:
        return Finding(Severity.WARNING, "tensorflow",
                       f"TensorFlow is not installed ({keras}): runs train on the JAX engine "
                       "(--engine jax) only; the tensorflow engine is not available here.",
                       f"For the tensorflow engine: pip install 'tensorflow>={TESTED_TENSORFLOW},"
                       f"<2.22' (NVIDIA GPUs: {CUDA_EXTRA}).")
    return Finding(Severity.ERROR, "tensorflow",
                   f"TensorFlow is not installed ({keras}), and the JAX engine cannot train "
                   "here either: no engine can train.",
                   "Reinstall the app's dependencies (pip install -e . in its folder, or pip "
                   "install mgpu-gui), then check again.")


def _tensorflow(tf: TfFacts) -> list[Finding]:
    package = f" ({tf.tensorflow_package})" if tf.tensorflow_package else ""
    build = (f"built with CUDA {tf.cuda_build_version or '?'}, cuDNN "
             f"{tf.cudnn_build_version or '?'}" if tf.built_with_cuda
             else "not built with CUDA")
    findings = [Finding(Severity.OK, "tensorflow",
                        f"TensorFlow {tf.tensorflow_version}{package}, {build}; Keras "
                        f"{tf.keras_version or '?'}.")]
    if not (tf.keras_version or "").startswith("3."):
        findings.append(Finding(Severity.ERROR, "tensorflow",
                                f"Keras {tf.keras_version or 'is missing'}: the app needs "
                                "Keras 3.", "pip install 'keras>=3.15,<4'"))
    if tf.tensorflow_version and _major_minor(tf.tensorflow_version) != _major_minor(
            TESTED_TENSORFLOW):
        findings.append(Finding(Severity.WARNING, "tensorflow",
                                f"TensorFlow {tf.tensorflow_version} is not the version the "
                                f"app is tested with ({TESTED_TENSORFLOW}).",
                                f"pip install 'tensorflow>={TESTED_TENSORFLOW},<2.22'"))
    return findings


def _gpus(nvml: NvmlFacts, tf: TfFacts) -> list[Finding]:
    listed = len(nvml.gpus) if nvml.state is NvmlState.OK else 0
    seen = len(tf.gpus)
    if not listed:
        if seen:
            return [Finding(
                Severity.WARNING, "gpus",
                f"TensorFlow sees {seen} GPU{'s' if seen != 1 else ''}, but NVML cannot list "
                f"them ({nvml.reason or nvml.state}): the app plans runs from NVML's list, so "
                "it trains on CPU replicas.",
                nvml.advice or "Check that nvidia-smi works; pip install nvidia-ml-py.")]
        return []
    findings = _driver_cuda(nvml, tf)
    if seen == 0:
        findings += _none_seen(nvml, tf, listed)
    elif seen < listed:
        findings += _fewer_seen(nvml, tf, listed, seen)
    else:
        names = ", ".join(g.device_name or g.name for g in tf.gpus)
        findings.append(Finding(Severity.OK, "gpus",
                                f"TensorFlow sees all {listed} GPU{'s' if listed != 1 else ''} "
                                f"NVML lists ({names})."))
    return findings


def _driver_cuda(nvml: NvmlFacts, tf: TfFacts) -> list[Finding]:
    """Is the driver new enough for the CUDA TensorFlow was built with?"""
    findings = []
    if tf.cuda_driver_error and not tf.cuda_driver_version:
        findings.append(Finding(
            Severity.ERROR, "cuda",
            f"NVML works, but TensorFlow's process cannot load the driver's CUDA library "
            f"({tf.cuda_driver_error}).",
            "Check that libcuda.so.1 is on the library path; in a container, start it with "
            "the NVIDIA container toolkit (docker run --gpus all)."))
    if not tf.built_with_cuda or not tf.cuda_build_version:
        return findings
    supported = tf.cuda_driver_version or nvml.cuda_driver_version
    if supported is None:
        return findings
    have, need = _major_minor(supported), _major_minor(tf.cuda_build_version)
    driver = f"NVIDIA driver {nvml.driver_version or '?'} supports CUDA {supported}"
    if have[0] < need[0]:
        minimum = MIN_DRIVER.get(need[0])
        findings.append(Finding(
            Severity.ERROR, "cuda",
            f"The driver is too old for this TensorFlow: {driver}, TensorFlow was built with "
            f"CUDA {tf.cuda_build_version}. TensorFlow cannot use the GPUs with it.",
            f"Update the NVIDIA driver to one for CUDA {need[0]}.x"
            + (f" (at least {minimum}; one for CUDA {need[0]}.{need[1]} or newer is best)."
               if minimum else ".")))
    elif have < need:
        findings.append(Finding(
            Severity.WARNING, "cuda",
            f"{driver}, older than the CUDA {tf.cuda_build_version} TensorFlow was built with. "
            "It runs through CUDA's minor-version compatibility, but XLA may compile kernels "
            "more slowly (its PTX compiler is newer than the driver) and GPUs newer than the "
            "build's kernels may fail.",
            f"Update the NVIDIA driver to one that supports CUDA {need[0]}.{need[1]} or newer."))
    else:
        findings.append(Finding(Severity.OK, "cuda",
                                f"{driver}; TensorFlow was built with CUDA "
                                f"{tf.cuda_build_version}: compatible."))
    return findings


def _none_seen(nvml: NvmlFacts, tf: TfFacts, listed: int) -> list[Finding]:
    """NVML lists GPUs, TensorFlow sees none: say why, as far as the facts tell."""
    gpus = f"{listed} GPU{'s' if listed != 1 else ''}"
    if tf.platform in NO_GPU_PLATFORMS:
        return [Finding(Severity.ERROR, "gpus",
                        f"NVML lists {gpus}, but TensorFlow has no GPU support on "
                        f"{NO_GPU_PLATFORMS[tf.platform]} (since TensorFlow 2.11).",
                        "Train on Linux, or in WSL2 on Windows, with the CUDA extra: "
                        f"{CUDA_EXTRA}.")]
    if not tf.built_with_cuda:
        fix = CUDA_EXTRA
        if tf.tensorflow_package == "tensorflow-cpu":
            fix = f"pip uninstall -y tensorflow-cpu && {CUDA_EXTRA}"
        return [Finding(Severity.ERROR, "gpus",
                        f"NVML lists {gpus}, but this TensorFlow "
                        f"({tf.tensorflow_package or 'tensorflow'} {tf.tensorflow_version}) is a "
                        "CPU-only build: it can never use them.", fix)]
    findings = []
    hidden = tf.cuda_visible_devices is not None and tf.cuda_visible_devices.strip() in ("",
                                                                                         "-1")
    if hidden:
        findings.append(Finding(
            Severity.WARNING, "gpus",
            f"CUDA_VISIBLE_DEVICES={tf.cuda_visible_devices!r} hides every GPU from TensorFlow "
            "in this environment, so this check cannot see them. (Runs started by mgpu-gui set "
            "CUDA_VISIBLE_DEVICES to the GPUs you choose.)",
            "Check again without it: env -u CUDA_VISIBLE_DEVICES mgpu-train doctor"))
    if not tf.cuda_packages:
        findings.append(Finding(
            Severity.ERROR, "gpus",
            f"NVML lists {gpus}, but TensorFlow sees none: it is built with CUDA "
            f"{tf.cuda_build_version or '?'} but was installed without its CUDA libraries "
            "(no nvidia-*-cu12 packages). Runs on GPUs fail; CPU replicas still work.",
            f"Install the CUDA extra: {CUDA_EXTRA}"))
    elif not hidden and not any(f.severity is Severity.ERROR for f in _driver_cuda(nvml, tf)):
        said = "; ".join(tf.messages[-3:])
        findings.append(Finding(
            Severity.ERROR, "gpus",
            f"NVML lists {gpus}, but TensorFlow sees none, although its CUDA libraries are "
            "installed." + (f" TensorFlow said: {said}" if said else ""),
            "Reinstall the CUDA extra (pip install --force-reinstall 'mgpu-gui[cuda]'), then "
            "run python -c \"import tensorflow as tf; print(tf.config.list_physical_devices("
            "'GPU'))\" and read what it logs."))
    return findings


def _fewer_seen(nvml: NvmlFacts, tf: TfFacts, listed: int, seen: int) -> list[Finding]:
    """TensorFlow sees some of NVML's GPUs: each cause the facts show, else a plain warning."""
    summary = f"TensorFlow sees {seen} of the {listed} GPUs NVML lists."
    findings = []
    cvd = tf.cuda_visible_devices
    if cvd is not None:
        findings.append(Finding(
            Severity.WARNING, "gpus",
            f"{summary} CUDA_VISIBLE_DEVICES={cvd!r} is set in this environment and limits "
            "TensorFlow here. Runs started by mgpu-gui replace it with the GPUs you choose (by "
            "UUID), so it does not limit them; if a scheduler gave you these GPUs, choose only "
            "those in the GPU panel.",
            "To see what TensorFlow sees without it: env -u CUDA_VISIBLE_DEVICES mgpu-train "
            "doctor"))
    for gpu in nvml.gpus:
        if gpu.mig_enabled:
            findings.append(Finding(
                Severity.WARNING, "gpus",
                f"{summary} GPU {gpu.index} ({gpu.name or '?'}) has MIG mode on: a CUDA "
                "process sees one MIG instance at most, so TensorFlow counts a MIG instance, "
                "not the whole GPU, and cannot train data-parallel across MIG instances.",
                f"To train on whole GPUs, turn MIG off: sudo nvidia-smi -i {gpu.index} -mig 0 "
                "(with no process on the GPU; it may need a reset)."))
    oldest = _oldest_architecture(tf.cuda_compute_capabilities)
    for gpu in nvml.gpus:
        if oldest and gpu.compute_capability and gpu.compute_capability < oldest:
            findings.append(Finding(
                Severity.WARNING, "gpus",
                f"{summary} GPU {gpu.index} ({gpu.name or '?'}, compute capability "
                f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}) is older than the "
                f"oldest architecture this TensorFlow is built for ({oldest[0]}.{oldest[1]}): "
                "TensorFlow ignores it.",
                "Uncheck it in the GPU panel (or leave it out of --gpus)."))
    if not findings:
        said = "; ".join(tf.messages[-3:])
        findings.append(Finding(
            Severity.WARNING, "gpus",
            summary + (f" TensorFlow said: {said}" if said else ""),
            "Compare nvidia-smi with the GPUs listed above; a GPU in a bad state may need a "
            "reset (nvidia-smi -r) or a reboot."))
    return findings


def _nccl(nvml: NvmlFacts, tf: TfFacts) -> list[Finding]:
    seen = len(tf.gpus)
    listed = len(nvml.gpus) if nvml.state is NvmlState.OK else 0
    if max(seen, listed) < 2 or not tf.built_with_cuda or tf.platform in NO_GPU_PLATFORMS:
        return []  # one device (or CPU replicas): nothing to all-reduce with NCCL
    if seen == 0 and not tf.cuda_packages:
        return []  # the CUDA extra is missing altogether: said once, with NCCL in its fix
    if tf.nccl_kernel and tf.nccl_version:
        return [Finding(Severity.OK, "nccl",
                        f"NCCL {tf.nccl_version}: gradients are summed across GPUs with "
                        "NcclAllReduce." if seen >= 2 else
                        f"NCCL {tf.nccl_version} is installed, for summing gradients across "
                        "GPUs.")]
    if tf.nccl_kernel:
        return [Finding(
            Severity.ERROR, "nccl",
            f"This TensorFlow sums gradients across GPUs with NCCL, but libnccl.so.2 cannot "
            f"be loaded ({tf.nccl_error or 'not found'}); TensorFlow then logs 'Unable to "
            "load NCCL library. Multi-GPU collectives will not work.' Runs on one GPU or on "
            "CPU replicas are not affected.",
            f"Install the CUDA extra, which includes nvidia-nccl-cu12: {CUDA_EXTRA}")]
    return [Finding(
        Severity.WARNING, "nccl",
        "This TensorFlow has no NCCL kernel: MirroredStrategy sums gradients with "
        "HierarchicalCopyAllReduce instead, which works but is slower across GPUs.",
        f"Use a Linux TensorFlow built with CUDA: {CUDA_EXTRA}")]


def _major_minor(version: str) -> tuple[int, int]:
    numbers = [int(n) for n in re.findall(r"\d+", version)[:2]]
    return (numbers + [0, 0])[0], (numbers + [0, 0])[1]


def _oldest_architecture(capabilities: tuple[str, ...]) -> tuple[int, int] | None:
    """'sm_60' -> (6, 0): the oldest GPU architecture the build has kernels for."""
    found = [(int(m.group(1)[:-1]), int(m.group(1)[-1]))
             for c in capabilities if (m := re.fullmatch(r"(?:sm|compute)_(\d{2,3})", c))]
    return min(found) if found else None
