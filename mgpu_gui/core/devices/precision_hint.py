"""Which mixed-precision policy the hardware supports: the hint the run setup shows.

Plain Python (NVML's compute capability, the CPU's flags), so the GUI shows it
without TensorFlow; applying a policy to a model is the worker's
(`mgpu_gui.engine.precision`).

Why the thresholds: bfloat16 tensor cores arrived with Ampere (compute
capability 8.0), float16 tensor cores with Volta (7.0). On a GPU without them
the policy runs but emulated, slower than float32. On a CPU, bfloat16 has
instructions on x86 with AVX512-BF16 or AMX; float16 runs on Eigen's emulation
for most operations (oneDNN supports half only with AVX-512 and even there
little of it) and is slower than float32 (see tests/benchmarks/precision.py).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mgpu_gui.core.config import PRECISIONS

if TYPE_CHECKING:
    from mgpu_gui.core.devices.nvml import GpuInfo

FLOAT32, BFLOAT16, FLOAT16 = PRECISIONS
MIXED = (BFLOAT16, FLOAT16)
BF16_MIN_CC = (8, 0)  # Ampere: bfloat16 tensor cores
FP16_MIN_CC = (7, 0)  # Volta: float16 tensor cores
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
LABELS = {FLOAT32: "float32 (full precision)", BFLOAT16: "mixed bfloat16",
          FLOAT16: "mixed float16 (loss scaling)"}


@dataclass(frozen=True)
class PrecisionHint:
    """One or two sentences for the run setup, and whether to show them as a warning."""

    text: str
    warning: bool = False  # the chosen policy will be slower than float32 here


def precision_hint(precision: str, gpus: Sequence[GpuInfo] = (),
                   cpu: frozenset[str] | None = None) -> PrecisionHint:
    """What the chosen devices support, and whether `precision` suits them.

    `gpus` are the GPUs the run would use (NVML's compute capability); none
    means CPU replicas, judged by the CPU's flags (`cpu_flags()` by default).
    """
    if gpus:
        return _gpu_hint(precision, gpus)
    return _cpu_hint(precision, cpu_flags() if cpu is None else cpu)


def _gpu_hint(precision: str, gpus: Sequence[GpuInfo]) -> PrecisionHint:
    known = [g for g in gpus if g.compute_capability]
    if not known:
        return PrecisionHint(
            "NVML does not give these GPUs' compute capability: mixed_bfloat16 needs 8.0 "
            "(Ampere) or newer, mixed_float16 7.0 (Volta) or newer to be faster than float32.")
    weakest = min(known, key=lambda g: g.compute_capability or (0, 0))
    cc = weakest.compute_capability or (0, 0)
    which = "This GPU" if len(gpus) == 1 else "The chosen GPUs"
    if cc >= BF16_MIN_CC:
        supports = "mixed_bfloat16 and mixed_float16 (bfloat16 and float16 tensor cores)"
    elif cc >= FP16_MIN_CC:
        supports = "mixed_float16 (float16 tensor cores), not bfloat16"
    else:
        supports = "neither mixed policy at speed (no tensor cores)"
    lowest = "" if len({g.compute_capability for g in known}) == 1 else ", the lowest"
    text = f"{which} (compute capability {cc[0]}.{cc[1]}{lowest}) support{_s(which)} {supports}."
    if len(known) < len(gpus):
        text += " NVML does not give the compute capability of every chosen GPU."
    name = f"GPU {weakest.index} ({weakest.name or 'unknown'})"
    if precision == BFLOAT16 and cc < BF16_MIN_CC:
        return PrecisionHint(f"{text} bfloat16 needs compute capability 8.0 (Ampere) or newer: "
                             f"{name} would emulate it, slower than float32. Use "
                             f"mixed_float16 there.", warning=True)
    if precision == FLOAT16 and cc < FP16_MIN_CC:
        return PrecisionHint(f"{text} float16 tensor cores need compute capability 7.0 "
                             f"(Volta) or newer: on {name} expect no speed-up.", warning=True)
    if precision == FLOAT16:
        text += " Loss scaling keeps small float16 gradients from vanishing."
    return PrecisionHint(text)


def _cpu_hint(precision: str, flags: frozenset[str]) -> PrecisionHint:
    found = [f for f in CPU_BF16_FLAGS if f in flags]
    if precision == FLOAT16:
        return PrecisionHint(
            "On CPU replicas float16 is emulated for most operations and slower than "
            "float32; mixed_float16 is for GPUs with compute capability 7.0 or newer.",
            warning=True)
    if precision == BFLOAT16 and not found:
        return PrecisionHint(
            "This CPU has no bfloat16 instructions (AVX512-BF16 or AMX): mixed_bfloat16 "
            "runs, but slower than float32.", warning=True)
    if precision == BFLOAT16:
        return PrecisionHint(
            f"This CPU has bfloat16 instructions ({', '.join(found)}): mixed_bfloat16 runs; "
            "whether it is faster than float32 depends on the model.")
    return PrecisionHint(
        "Training on CPU replicas: float32. Mixed precision pays off on GPUs with tensor "
        "cores (bfloat16: compute capability 8.0 or newer; float16: 7.0 or newer).")


@functools.lru_cache(maxsize=1)
def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (Linux); empty when they cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def _s(subject: str) -> str:
    return "s" if subject.startswith("This") else ""
