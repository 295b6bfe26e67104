"""What TensorFlow says about this machine: gathered in the facts child.

The child is `mgpu_gui.processes.tf_facts`; the parent's side (its command,
reading its answer) is `mgpu_gui.core.tools.tf_facts`. `gather()` returns the
`TfFacts` of `mgpu_gui.core.tools.doctor` as a dict: versions, what the
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

TensorFlow is imported inside `gather()` and `environment_versions()` only; `engine.strategy` asks
`nccl_library` too.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import importlib.util
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any


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


def environment_versions() -> dict[str, str | None]:
    """What a run's environment record (core.runs.environment) says of TensorFlow: its
    version, Keras', and the CUDA and cuDNN it was built with (None: a CPU build)."""
    import keras
    import tensorflow as tf

    build = dict(tf.sysconfig.get_build_info())
    return {"tensorflow": tf.__version__, "keras": keras.__version__,
            "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version")}


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
