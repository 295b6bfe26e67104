"""What TensorFlow says about this machine, asked in a child process.

    python -m mgpu_gui.engine.tf_facts        # prints one JSON object on stdout

The About dialog, "Check my setup…" and `mgpu-train doctor` run this as a
child (`tf_facts_command()`): the GUI process never imports TensorFlow, and a
TensorFlow that aborts while probing CUDA takes only this child down. The
result is the `TfFacts` of `mgpu_gui.core.tools.doctor` as JSON: versions, what the
build was made with (`tf.sysconfig.get_build_info()`), the GPUs TensorFlow
lists, whether NCCL can be used, and the CUDA driver version as the driver's
own `libcuda` reports it (the library TensorFlow loads).

What can be known without a GPU, and how:
- built with CUDA: `tf.test.is_built_with_cuda()`; CUDA/cuDNN: the build info.
- CUDA libraries: the `nvidia-*-cu12` packages of `tensorflow[and-cuda]`
  (TensorFlow finds them through its RPATH in site-packages/nvidia).
- NCCL: TensorFlow's GPU kernel for `NcclAllReduce` is registered (the check
  `tf.distribute` itself makes), and `libnccl.so.2` loads and reports its
  version (`ncclGetVersion`). Whether an all-reduce across GPUs works needs
  two GPUs; that is not tried here.

TensorFlow is imported inside `gather()` only, so importing this module (for
`tf_facts_command`) stays instant and Qt processes stay TensorFlow-free.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mgpu_gui.core.children.launch import module_command

MODULE = "mgpu_gui.engine.tf_facts"
# TensorFlow log lines worth showing a user who asks why a GPU is not used.
_RELEVANT = re.compile(r"dlopen|cuInit|cuda|CUDA|GPU|gpu|NCCL|nccl|driver|Ignoring visible")
_GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] ")  # "W0000 00:00:… x.cc:52] "
MAX_MESSAGES = 12


def tf_facts_command() -> list[str]:
    """The argv that prints this machine's TensorFlow facts as JSON (program first)."""
    return module_command(MODULE)


def ask_tensorflow(timeout_s: float = 180.0, env: dict[str, str] | None = None) -> Any:
    """Run the facts child and parse its answer: a `doctor.TfFacts` (for the CLI; the GUI
    runs the same command with QProcess). Never raises for what the child does."""
    from mgpu_gui.core.tools.doctor import TfFacts

    try:
        done = subprocess.run(tf_facts_command(), capture_output=True, text=True,
                              timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return TfFacts(error=f"the TensorFlow check did not answer within {timeout_s:.0f} s")
    except OSError as exc:
        return TfFacts(error=f"the TensorFlow check could not start: {exc}")
    return TfFacts.from_output(done.stdout, done.returncode, done.stderr)


def gather() -> dict[str, Any]:
    """Ask TensorFlow (and the CUDA/NCCL libraries it would load); never raises."""
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": sys.platform,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_packages": _cuda_packages(),
        "tensorflow_package": _tensorflow_package(),
    }
    facts.update(_cuda_driver())
    try:
        import tensorflow as tf
    except Exception as exc:  # not installed, or a broken install: say which
        return {**facts, "error": f"TensorFlow cannot be imported: {type(exc).__name__}: {exc}"}
    facts["tensorflow_version"] = tf.__version__
    try:
        import keras

        facts["keras_version"] = keras.__version__
    except Exception as exc:
        facts["keras_version"] = None
        facts["error"] = f"Keras cannot be imported: {type(exc).__name__}: {exc}"
    build = dict(tf.sysconfig.get_build_info())
    facts["built_with_cuda"] = bool(tf.test.is_built_with_cuda())
    facts["cuda_build_version"] = build.get("cuda_version")  # absent from CPU-only builds
    facts["cudnn_build_version"] = build.get("cudnn_version")
    facts["cuda_compute_capabilities"] = list(build.get("cuda_compute_capabilities") or [])
    facts["gpus"] = _tf_gpus(tf)
    facts["nccl_kernel"] = _nccl_kernel(facts["built_with_cuda"])
    facts.update(nccl_library())
    return facts


def _tf_gpus(tf: Any) -> list[dict[str, Any]]:
    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        details: dict[str, Any] = {}
        with contextlib.suppress(Exception):  # details are optional; the device is not
            details = dict(tf.config.experimental.get_device_details(device))
        capability = details.get("compute_capability")
        gpus.append({"name": device.name, "device_name": details.get("device_name"),
                     "compute_capability": list(capability) if capability else None})
    return gpus


def _nccl_kernel(built_with_cuda: bool) -> bool:
    """Whether this TensorFlow has NCCL's GPU kernel (what MirroredStrategy checks)."""
    if not built_with_cuda:
        return False
    try:
        from tensorflow.python.framework import kernels  # private, hence guarded
    except ImportError:
        return False
    registered = kernels.get_registered_kernels_for_op("NcclAllReduce")
    return any(k.device_type == "GPU" for k in registered.kernel)


def _cuda_packages() -> dict[str, str]:
    """The NVIDIA CUDA wheels installed (`tensorflow[and-cuda]` pulls a dozen)."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-") and re.search(r"-cu\d+$", name):
            found[name] = dist.version
    return dict(sorted(found.items()))


def _tensorflow_package() -> str | None:
    """Which distribution provides `tensorflow`: tensorflow, tensorflow-cpu, tf-nightly…"""
    names = importlib.metadata.packages_distributions().get("tensorflow") or []
    return names[0] if names else None


def _cuda_driver() -> dict[str, Any]:
    """The CUDA version the driver supports, from the driver's libcuda (as CUDA sees it)."""
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
        version = ctypes.c_int(0)
        status = lib.cuDriverGetVersion(ctypes.byref(version))
    except (OSError, AttributeError) as exc:
        return {"cuda_driver_version": None, "cuda_driver_error": str(exc)}
    if status != 0 or not version.value:
        return {"cuda_driver_version": None,
                "cuda_driver_error": f"{name}: cuDriverGetVersion returned {status}"}
    return {"cuda_driver_version": f"{version.value // 1000}.{version.value % 1000 // 10}",
            "cuda_driver_error": None}


def nccl_library() -> dict[str, Any]:
    """Load libnccl.so.2 the way TensorFlow finds it (its pip package first) and ask its
    version; NCCL encodes 2.27.7 as 22707."""
    candidates = []
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("nvidia.nccl")
        for folder in (spec.submodule_search_locations or []) if spec else []:
            candidates.append(str(Path(folder) / "lib" / "libnccl.so.2"))
    candidates.append("libnccl.so.2")
    errors = []
    for candidate in candidates:
        try:
            lib = ctypes.CDLL(candidate)
            version = ctypes.c_int(0)
            if lib.ncclGetVersion(ctypes.byref(version)) != 0:
                raise OSError("ncclGetVersion failed")
        except (OSError, AttributeError) as exc:
            errors.append(str(exc))
            continue
        code = version.value
        major, minor, patch = code // 10000, code % 10000 // 100, code % 100
        if code < 10000:  # NCCL before 2.9 encoded it as 1000*major + 100*minor + patch
            major, minor, patch = code // 1000, code % 1000 // 100, code % 100
        return {"nccl_version": f"{major}.{minor}.{patch}", "nccl_error": None}
    return {"nccl_version": None, "nccl_error": "; ".join(errors[-1:]) or "libnccl.so.2 not found"}


def relevant_messages(lines: list[str]) -> list[str]:
    """TensorFlow's log lines about CUDA, GPUs and NCCL, once each, without the glog prefix."""
    seen: dict[str, None] = {}
    for line in lines:
        if _RELEVANT.search(line):
            seen.setdefault(_GLOG_PREFIX.sub("", line.strip()), None)
    return list(seen)[-MAX_MESSAGES:]


@contextlib.contextmanager
def _captured_stderr():
    """Collect what TensorFlow's C++ side logs on fd 2 (it explains missing GPUs)."""
    lines: list[str] = []
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", "replace")
            lines.extend(text.splitlines())


def main() -> int:
    # Warnings and errors only: TensorFlow says why it skips a GPU at WARNING level.
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # as runs number GPUs
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # whatever TensorFlow or Keras print must not corrupt the JSON
    try:
        with _captured_stderr() as logged:
            try:
                facts = gather()
            except Exception as exc:  # a bug here: still answer in JSON
                facts = {"error": f"checking TensorFlow failed: {type(exc).__name__}: {exc}"}
    finally:
        sys.stdout = real_stdout
    facts["messages"] = relevant_messages(logged)
    for line in logged:  # still visible to whoever runs this by hand
        print(line, file=sys.stderr)
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
