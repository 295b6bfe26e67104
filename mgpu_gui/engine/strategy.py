"""Turn a DevicePlan into a MirroredStrategy (or, on JAX, its stand-in), in the worker.

Order matters and is checked: `apply_device_env` before TensorFlow, Keras or JAX
is imported (CUDA reads CUDA_VISIBLE_DEVICES once, Keras KERAS_BACKEND, JAX its
XLA_* variables), then `make_strategy` before anything makes TensorFlow
initialise its devices (logical CPU devices and GPU memory growth can only be
configured before). The frameworks are imported inside the functions only, so a
worker can import this module before any of them starts.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import MutableMapping
from typing import Any

from mgpu_gui.core.config import DeviceKind
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.engines import Engine, InputPipeline, engine_env
from mgpu_gui.core.errors import DeviceError
from mgpu_gui.core.mesh.settings import MeshRequest

CUDA_EXTRA_HINT = "pip install 'mgpu-gui[cuda]'"
_NAMES = {"tensorflow": "TensorFlow", "keras": "Keras", "jax": "JAX"}


def _read_by(variable: str, engine: Engine) -> tuple[str, ...]:
    """The modules that read `variable` once, when they start, in a run on `engine` (a
    JAX imported into a TensorFlow run's process never trains, so its devices do not
    matter)."""
    if variable == "KERAS_BACKEND":
        return ("keras",)
    if variable.startswith(("XLA_", "JAX_")):
        return ("jax",)
    # CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER
    return ("tensorflow", "jax") if engine is Engine.JAX else ("tensorflow",)


def apply_device_env(
    plan: DevicePlan, environ: MutableMapping[str, str] | None = None,
    engine: Engine = Engine.TENSORFLOW,
) -> None:
    """Set the plan's environment (CUDA_VISIBLE_DEVICES, …) and the engine's
    (KERAS_BACKEND, JAX's XLA settings: core/engines.py).

    Must run before TensorFlow, Keras or JAX is imported: a change afterwards
    would be silently ignored, so it raises RuntimeError instead. Setting values
    that are already there is always fine.
    """
    env = os.environ if environ is None else environ
    cpu_replicas = plan.replicas if plan.kind is DeviceKind.CPU else None
    wanted = {**plan.env, **engine_env(engine, cpu_replicas=cpu_replicas, environ=env)}
    changes = {k: v for k, v in wanted.items() if env.get(k) != v}
    keras = sys.modules.get("keras")
    if keras is not None and keras.backend.backend() == changes.get("KERAS_BACKEND"):
        del changes["KERAS_BACKEND"]  # a test host's Keras already runs on that backend
    late = {_NAMES[m]: k for k in changes for m in _read_by(k, engine) if m in sys.modules}
    if late:
        names = ", ".join(late)
        raise RuntimeError(
            f"{names} is already imported, so it would ignore the device settings "
            f"{changes}; call apply_device_env() before importing {names}."
        )
    env.update(changes)


def make_strategy(plan: DevicePlan, engine: Engine = Engine.TENSORFLOW,
                  pipeline: InputPipeline = InputPipeline.TF_DATA,
                  mesh: MeshRequest | None = None) -> tuple[Any, str]:
    """A MirroredStrategy over the plan's devices (on JAX: a DataParallel, or on a `mesh`
    a ModelParallel, behind the same interface, engine/jax_strategy.py), and how
    replicas reduce, in words.
    `pipeline`: what feeds the run (`inputs.pipeline_for`); a JAX run fed by tf.data
    hides the GPUs from its TensorFlow, one on the Python pipeline imports none.

    Raises DeviceError when TensorFlow cannot see the planned devices, and
    RuntimeError when TensorFlow initialised its devices before this call.
    """
    if engine is Engine.JAX:
        from mgpu_gui.engine.jax_strategy import make_jax_strategy

        return make_jax_strategy(
            plan, hide_gpus_from_tensorflow=pipeline is InputPipeline.TF_DATA, mesh=mesh)
    import tensorflow as tf

    if plan.kind is DeviceKind.CPU:
        strategy, ops_name = _cpu_strategy(tf, plan.replicas)
    elif plan.kind is DeviceKind.GPU:
        strategy, ops_name = _gpu_strategy(tf, plan)
    else:
        raise ValueError(f"a DevicePlan is GPU or CPU, got {plan.kind!r}")
    if strategy.num_replicas_in_sync != plan.replicas:
        raise RuntimeError(
            f"MirroredStrategy has {strategy.num_replicas_in_sync} replicas, "
            f"the plan {plan.replicas}"
        )
    return strategy, ops_name


def _cpu_strategy(tf: Any, replicas: int) -> tuple[Any, str]:
    # One physical CPU split into `replicas` logical devices: real data
    # parallelism (same loss curves as on GPUs), not a speed-up.
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is None or len(current) != replicas:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
            )
        except RuntimeError as exc:  # devices already initialised
            have = len(tf.config.list_logical_devices("CPU"))
            if have != replicas:
                raise RuntimeError(
                    f"Cannot split the CPU into {replicas} replicas: TensorFlow already "
                    f"initialised its devices ({have} logical CPU). Logical devices must "
                    "be configured before anything runs on TensorFlow; make the strategy "
                    "first thing in a fresh process (one replica count per process)."
                ) from exc
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(devices) != replicas:
        raise RuntimeError(f"asked for {replicas} logical CPU devices, TensorFlow made "
                           f"{len(devices)}: {devices}")
    # NCCL is GPU-only; reducing on one device works for any device type.
    ops = tf.distribute.ReductionToOneDevice()
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=ops), (
        "ReductionToOneDevice"
    )


def _gpu_strategy(tf: Any, plan: DevicePlan) -> tuple[Any, str]:
    physical = gpus_growing_memory(tf)
    if not physical:
        raise DeviceError(_no_gpu_in_tensorflow(tf, plan))
    if len(physical) != plan.replicas:
        raise DeviceError(
            f"TensorFlow sees {len(physical)} GPU(s) but {plan.replicas} were planned "
            f"({', '.join(plan.names)}). Check that CUDA_VISIBLE_DEVICES is not changed "
            "after the plan is applied, and that nvidia-smi shows the GPUs."
        )
    devices = [d.name for d in tf.config.list_logical_devices("GPU")]
    if len(devices) == 1:
        # One replica: nothing to all-reduce across devices.
        return tf.distribute.MirroredStrategy(devices=devices), "none (one GPU)"
    if nccl_available(tf):
        ops, name = tf.distribute.NcclAllReduce(), "NcclAllReduce"
    else:
        ops, name = tf.distribute.HierarchicalCopyAllReduce(), "HierarchicalCopyAllReduce"
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=ops), name


def gpus_growing_memory(tf: Any) -> list:
    """The GPUs TensorFlow sees, each set to take memory as needed.

    Not all of it at start, so the GPU panel shows real use and other processes
    keep running. RuntimeError: the devices are already initialised, and
    TensorFlow's setting stays.
    """
    physical = tf.config.list_physical_devices("GPU")
    for gpu in physical:
        with contextlib.suppress(RuntimeError):
            tf.config.experimental.set_memory_growth(gpu, True)
    return physical


def _no_gpu_in_tensorflow(tf: Any, plan: DevicePlan) -> str:
    listed = ", ".join(plan.names)
    if not tf.test.is_built_with_cuda():
        return (
            f"The NVIDIA driver lists {listed}, but this TensorFlow build has no CUDA "
            "support. Install the project's cuda extra on Linux "
            f"({CUDA_EXTRA_HINT}), or train on CPU replicas (--cpu)."
        )
    return (
        f"The NVIDIA driver lists {listed}, but TensorFlow sees no GPU: TensorFlow "
        "was installed without its CUDA libraries. Install the project's cuda extra "
        f"({CUDA_EXTRA_HINT}), or train on CPU replicas (--cpu)."
    )


def nccl_available(tf: Any) -> bool:
    """Whether this TensorFlow has NCCL's GPU kernel and the NCCL library loads.

    The kernel is registered in every Linux CUDA build; without libnccl.so.2 (the
    nvidia-nccl wheel) NcclAllReduce would fail at the first step.
    """
    if not sys.platform.startswith("linux") or not tf.test.is_built_with_cuda():
        return False
    try:
        # TensorFlow's own check in select_cross_device_ops; private, so guarded.
        from tensorflow.python.framework import kernels
    except ImportError:
        return True  # a Linux CUDA build ships NCCL
    registered = kernels.get_registered_kernels_for_op("NcclAllReduce")
    if not any(k.device_type == "GPU" for k in registered.kernel):
        return False
    from mgpu_gui.engine.tf_facts import nccl_library

    return nccl_library()["nccl_version"] is not None
