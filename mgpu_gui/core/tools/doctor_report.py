"""The doctor's findings and facts in words: `mgpu-train doctor`, the About dialog and
"Check my setup…" all show these texts, so they say the same things."""

from __future__ import annotations

import dataclasses
from typing import Any

from mgpu_gui.core.devices.nvml import NvmlState
from mgpu_gui.core.plain import to_plain
from mgpu_gui.core.tools.doctor import Facts, Finding, NvmlFacts, Severity, TfFacts
from mgpu_gui.core.tools.doctor_jax import jax_fact_lines, jax_version_text

TF_ROWS = ("TensorFlow", "Keras", "CUDA", "cuDNN", "GPUs TensorFlow sees", "NCCL")
SYMBOLS = {Severity.OK: "✓", Severity.WARNING: "⚠", Severity.ERROR: "✗"}


def version_rows(nvml: NvmlFacts | None, tf: TfFacts | None) -> list[tuple[str, str]]:
    """(label, value) pairs for the About dialog; `tf` None: not known yet."""
    rows: list[tuple[str, str]] = []
    if nvml is None:
        rows.append(("NVIDIA driver", "looking…"))
    elif nvml.driver_version:
        rows.append(("NVIDIA driver", f"{nvml.driver_version} (supports CUDA "
                                      f"{nvml.cuda_driver_version or '?'})"))
    else:
        rows.append(("NVIDIA driver", nvml.reason or "none"))
    if tf is not None and not tf.installed:
        return rows + [("TensorFlow", "not installed"),
                       ("Keras", tf.keras_version or "not installed"),
                       *((label, "no TensorFlow") for label in TF_ROWS[2:]),
                       ("JAX", jax_version_text(tf.jax))]
    if tf is None or tf.error:
        first = "asking TensorFlow…" if tf is None else f"could not be asked: {tf.error}"
        rest = "asking TensorFlow…" if tf is None else "unknown"
        return (rows + [("TensorFlow", first)] + [(label, rest) for label in TF_ROWS[1:]]
                + [("JAX", "asking…" if tf is None else jax_version_text(tf.jax))])
    cuda_build = "not built with CUDA" if not tf.built_with_cuda else None
    rows += [
        ("TensorFlow", tf.tensorflow_version or "?"),
        ("Keras", tf.keras_version or "?"),
        ("CUDA", cuda_build or f"{tf.cuda_build_version or '?'} (TensorFlow's build)"),
        ("cuDNN", cuda_build or f"{tf.cudnn_build_version or '?'} (TensorFlow's build)"),
        ("GPUs TensorFlow sees", ", ".join(g.device_name or g.name for g in tf.gpus)
         or "none"),
        ("NCCL", _nccl_text(tf)),
        ("JAX", jax_version_text(tf.jax)),
    ]
    return rows


def _nccl_text(tf: TfFacts) -> str:
    if tf.nccl_version:
        return tf.nccl_version + ("" if tf.nccl_kernel else " (TensorFlow has no NCCL kernel)")
    if not tf.built_with_cuda:
        return "not used (CPU-only TensorFlow)"
    return "library not installed" if tf.nccl_kernel else "not available"


def format_facts(facts: Facts, *, verbose: bool = False) -> str:
    """The facts as `mgpu-train doctor` prints them. TensorFlow's own log lines are left
    out (unless `verbose`) where there is no GPU for them to explain: without a driver
    they only repeat it ("failed call to cuInit"), in words that read like an error."""
    nvml, tf = facts.nvml, facts.tf
    lines = ["NVML (the NVIDIA driver)"]
    if nvml.state is NvmlState.OK:
        lines.append(f"  driver {nvml.driver_version or '?'}, supports CUDA "
                     f"{nvml.cuda_driver_version or '?'}")
        for gpu in nvml.gpus:
            cc = ("" if gpu.compute_capability is None
                  else f", compute capability {gpu.compute_capability[0]}."
                       f"{gpu.compute_capability[1]}")
            mig = f", MIG on ({gpu.mig_instances} instances)" if gpu.mig_enabled else ""
            lines.append(f"  GPU {gpu.index}: {gpu.name or '?'} ({gpu.uuid or '?'}){cc}{mig}")
    else:
        versions = f" (driver {nvml.driver_version})" if nvml.driver_version else ""
        lines.append(f"  {nvml.state.value}{versions}: {nvml.reason}")
    lines.append("TensorFlow (asked in a child process)")
    if not tf.installed:
        lines.append(f"  not installed; Keras {tf.keras_version or 'not installed either'}")
        return "\n".join(lines + jax_fact_lines(tf.jax))
    if tf.error:
        lines.append(f"  could not be asked: {tf.error}")
        return "\n".join(lines + jax_fact_lines(tf.jax))
    build = (f"CUDA {tf.cuda_build_version or '?'}, cuDNN {tf.cudnn_build_version or '?'}, "
             f"architectures {' '.join(tf.cuda_compute_capabilities) or '?'}"
             if tf.built_with_cuda else "not built with CUDA")
    lines += [
        f"  TensorFlow {tf.tensorflow_version} ({tf.tensorflow_package or '?'}), Keras "
        f"{tf.keras_version or '?'}, Python {tf.python or '?'} on {tf.platform}",
        f"  build: {build}",
        f"  CUDA driver (libcuda): "
        f"{tf.cuda_driver_version or 'not loaded: ' + (tf.cuda_driver_error or '?')}",
        "  CUDA libraries (nvidia-*-cu12 wheels): "
        + (", ".join(f"{n} {v}" for n, v in tf.cuda_packages.items()) or "none installed"),
        "  GPUs: " + (", ".join(
            f"{g.name} ({g.device_name or '?'})" for g in tf.gpus) or "none"),
        f"  NCCL: kernel {'registered' if tf.nccl_kernel else 'absent'}, library "
        f"{tf.nccl_version or 'not loaded: ' + (tf.nccl_error or '?')}",
        "  CUDA_VISIBLE_DEVICES: " + ("not set" if tf.cuda_visible_devices is None
                                      else repr(tf.cuda_visible_devices)),
    ]
    if tf.messages and (verbose or nvml.state in (NvmlState.OK, NvmlState.DRIVER_ERROR)):
        lines.append("  TensorFlow said:")
        lines += [f"    {message}" for message in tf.messages]
    return "\n".join(lines + jax_fact_lines(tf.jax))


def format_findings(findings: list[Finding]) -> str:
    lines = []
    for finding in findings:
        lines.append(f"{SYMBOLS[finding.severity]} {finding.message}")
        if finding.fix:
            lines.append(f"    → {finding.fix}")
    return "\n".join(lines)


def report(facts: Facts, findings: list[Finding], *, verbose: bool = False) -> str:
    errors = sum(f.severity is Severity.ERROR for f in findings)
    warnings = sum(f.severity is Severity.WARNING for f in findings)
    verdict = ("No problems found." if not errors and not warnings else
               f"{errors} error{'s' if errors != 1 else ''}, {warnings} "
               f"warning{'s' if warnings != 1 else ''}.")
    return (f"{format_facts(facts, verbose=verbose)}\n\nFindings\n"
            f"{format_findings(findings)}\n\n{verdict}")


def findings_to_plain(findings: list[Finding]) -> list[dict[str, Any]]:
    return [to_plain(dataclasses.asdict(f)) for f in findings]
