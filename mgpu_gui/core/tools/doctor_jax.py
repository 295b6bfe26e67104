"""The doctor's JAX half: what JAX says on this machine, and what to fix.

The facts child (`mgpu_gui.processes.tf_facts`) asks JAX after TensorFlow, with
XLA_PYTHON_CLIENT_PREALLOCATE=false set before JAX starts, so asking takes no
GPU memory. JAX is optional (the `jax` extra): not having it is worth a line,
not a warning. A JAX that cannot start, or a CPU-only jaxlib on a machine with
NVIDIA GPUs, is a warning: the TensorFlow engine still trains. Pure functions of
the facts, like `doctor`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mgpu_gui.core.engines import JAX_CUDA_EXTRA, JAX_EXTRA, pip_install
from mgpu_gui.core.plain import from_plain
from mgpu_gui.core.tools.findings import Finding, Severity


@dataclass(frozen=True)
class JaxDevice:
    id: int
    platform: str  # "cpu", "gpu"
    kind: str  # JAX's device_kind: "cpu", "NVIDIA H100 80GB HBM3"

    def __str__(self) -> str:
        return f"{self.platform}:{self.id}" + (f" ({self.kind})" if self.kind != self.platform
                                               else "")


@dataclass(frozen=True)
class JaxFacts:
    """What JAX says, from the facts child."""

    installed: bool = False
    error: str | None = None  # installed, but JAX could not start
    jax_version: str | None = None
    jaxlib_version: str | None = None
    backend: str | None = None  # JAX's default backend: "gpu" when it can use a GPU
    devices: tuple[JaxDevice, ...] = ()  # the default backend's
    cuda_plugins: dict[str, str] = field(default_factory=dict)  # jax-cuda12-plugin, -pjrt
    messages: tuple[str, ...] = ()  # what JAX logged while its backends started

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JaxFacts:
        return from_plain(cls, data)

    def gpus(self) -> tuple[JaxDevice, ...]:
        return tuple(d for d in self.devices if d.platform == "gpu")


def jax_findings(jax: JaxFacts | None, nvidia_gpus: int) -> list[Finding]:
    """`nvidia_gpus`: how many GPUs NVML lists (0: none, or no driver). `jax` None: JAX
    was not asked (the facts child died, or facts recorded before JAX was asked)."""
    if jax is None:
        return []
    extra = JAX_CUDA_EXTRA if nvidia_gpus else JAX_EXTRA
    if not jax.installed:
        return [Finding(Severity.OK, "jax",
                        "JAX is not installed: runs train on the TensorFlow engine (the JAX "
                        "engine is optional).",
                        f"Only to train on the JAX engine (--engine jax): {pip_install(extra)}")]
    if jax.error:
        return [Finding(Severity.WARNING, "jax",
                        f"JAX is installed but could not start ({jax.error}): runs on the "
                        f"JAX engine fail; the TensorFlow engine is not affected.{_said(jax)}",
                        f"Reinstall it: {pip_install(extra, '--force-reinstall')}, or train on "
                        "the tensorflow engine.")]
    devices = ", ".join(str(d) for d in jax.devices) or "none"
    findings = [Finding(Severity.OK, "jax",
                        f"JAX {jax.jax_version or '?'} (jaxlib {jax.jaxlib_version or '?'}) "
                        f"sees {devices}: the JAX engine (--engine jax) can train here"
                        + (" (a CPU run splits the CPU into its replicas)."
                           if jax.backend == "cpu" else "."))]
    seen = len(jax.gpus())
    gpus = f"{nvidia_gpus} GPU{'s' if nvidia_gpus != 1 else ''}"
    if nvidia_gpus and not seen and not jax.cuda_plugins:
        findings.append(Finding(
            Severity.WARNING, "jax",
            f"NVML lists {gpus}, but this JAX is a CPU-only build (no jax-cuda plugin): the "
            "JAX engine can train on CPU replicas only. The TensorFlow engine is not affected.",
            f"For the JAX engine on the GPUs: {pip_install(JAX_CUDA_EXTRA)}"))
    elif nvidia_gpus and not seen:
        plugins = ", ".join(f"{n} {v}" for n, v in jax.cuda_plugins.items())
        findings.append(Finding(
            Severity.WARNING, "jax",
            f"NVML lists {gpus} and JAX's CUDA plugin is installed ({plugins}), but JAX "
            f"sees no GPU: the JAX engine can train on CPU replicas only.{_said(jax)}",
            "Reinstall JAX's CUDA build: "
            f"{pip_install(JAX_CUDA_EXTRA, '--force-reinstall')}; "
            "it needs a driver that supports CUDA 12 (see nvidia-smi)."))
    elif 0 < seen < nvidia_gpus:
        findings.append(Finding(
            Severity.WARNING, "jax", f"JAX sees {seen} of the {gpus} NVML lists.",
            "If CUDA_VISIBLE_DEVICES is set here, it limits this check only (runs set it to "
            "the GPUs you choose); otherwise compare with nvidia-smi."))
    return findings


def _said(jax: JaxFacts) -> str:
    return f" JAX said: {'; '.join(jax.messages[-2:])}" if jax.messages else ""


def jax_version_text(jax: JaxFacts | None) -> str:
    """JAX in a few words, for the About dialog's row."""
    if jax is None:
        return "unknown"
    if not jax.installed:
        return "not installed (optional)"
    if jax.error:
        return f"{jax.jax_version or 'installed'}, could not start"
    return f"{jax.jax_version or '?'} ({', '.join(str(d) for d in jax.devices) or 'no devices'})"


def jax_fact_lines(jax: JaxFacts | None) -> list[str]:
    """The JAX part of `mgpu-train doctor`'s facts."""
    lines = ["JAX (asked in the same child process)"]
    if jax is None:
        return [*lines, "  not asked"]
    if not jax.installed:
        return [*lines, "  not installed"]
    lines.append(f"  JAX {jax.jax_version or '?'}, jaxlib {jax.jaxlib_version or '?'}")
    if jax.error:
        lines.append(f"  could not start: {jax.error}")
    else:
        lines.append(f"  default backend {jax.backend or '?'}: "
                     + (", ".join(str(d) for d in jax.devices) or "no devices"))
    lines.append("  CUDA plugins: " + (", ".join(f"{n} {v}" for n, v in jax.cuda_plugins.items())
                                       or "none (a CPU-only jaxlib)"))
    if jax.messages:
        lines += ["  JAX said:", *(f"    {m}" for m in jax.messages)]
    return lines
