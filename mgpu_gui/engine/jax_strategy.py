"""The JAX engine's devices: `keras.distribution.DataParallel` (or, on a data x model
mesh, `ModelParallel`: jax_mesh.py) behind the part of `tf.distribute.Strategy` the
engine uses, so training.py runs unchanged on either. On a mesh a "replica" is still
one device: the global batch is the batch per replica x the devices, as for data
parallelism, and is split over the mesh's data axis.

DataParallel shards each global batch over the devices' mesh and replicates
the variables; JAX compiles one global program per step (XLA), so the gradient
all-reduce is XLA's and BatchNorm's statistics are over the global batch, i.e.
always synchronised. The distribution is set globally (Keras' `fit` reads it to
shard batches), so `scope()` is a formality kept for the shared code.

tf.data feeds the model where TensorFlow is installed (Keras' JAX trainer turns
its batches into numpy): TensorFlow is then told to see no GPU first, or it would
take GPU memory beside JAX. The Python pipeline (py_pipeline.py) needs no
TensorFlow, and then none is imported. Call `make_jax_strategy` after
`apply_device_env` (KERAS_BACKEND, XLA_FLAGS).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mgpu_gui.core.config import DeviceKind
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.engines import HOST_DEVICES_FLAG, JAX_CUDA_EXTRA_HINT
from mgpu_gui.core.errors import DeviceError
from mgpu_gui.core.mesh.settings import MeshRequest


@dataclass(frozen=True)
class JaxStrategy:
    """What training.py asks of a strategy, answered by a DataParallel distribution."""

    distribution: Any  # keras.distribution.DataParallel
    worker_devices: tuple[str, ...]  # Keras' names, e.g. "cpu:0", "cuda:1"

    @property
    def num_replicas_in_sync(self) -> int:
        return len(self.worker_devices)

    @property
    def extended(self) -> JaxStrategy:  # tf.distribute keeps these on `strategy.extended`
        return self

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        with self.distribution.scope():
            yield

    def describe_variables(self, model: Any) -> str:
        """Where the model's variables live, for the log: on a mesh, which are split and
        each device's shard of them."""
        if hasattr(self.distribution, "request"):  # jax_mesh.PlannedModelParallel
            from mgpu_gui.engine.jax_mesh import split_report

            return split_report(model, self.distribution)
        return (f"All {len(model.variables)} model variables are mirrored across "
                f"{self.num_replicas_in_sync} replicas.")

    def variable_created_in_scope(self, value: Any) -> bool:
        """Whether a variable's array is laid out on every device (replicated); one made
        before the distribution was set lives on one device only."""
        sharding = getattr(value, "sharding", None)
        return sharding is not None and len(sharding.device_set) == self.num_replicas_in_sync


def make_jax_strategy(plan: DevicePlan, *, hide_gpus_from_tensorflow: bool = True,
                      mesh: MeshRequest | None = None) -> tuple[JaxStrategy, str]:
    """DataParallel over the plan's devices (or with a `mesh`, ModelParallel: jax_mesh.py),
    set as Keras' distribution, and how the replicas reduce, in words. DeviceError when
    JAX sees other devices than planned. `hide_gpus_from_tensorflow`: tf.data feeds the
    run (TensorFlow loads here)."""
    if hide_gpus_from_tensorflow:
        import tensorflow as tf

        tf.config.set_visible_devices([], "GPU")  # tf.data only: the GPUs are JAX's
    import jax
    import keras

    platform = "cpu" if plan.kind is DeviceKind.CPU else "gpu"
    try:
        found = jax.devices(platform)
    except RuntimeError as error:  # no such backend: a CPU-only jaxlib, a missing plugin
        raise DeviceError(_no_devices(plan, f"{error}")) from error
    if len(found) != plan.replicas:
        raise DeviceError(_no_devices(plan, f"JAX sees {len(found)} {platform} device(s)"))
    names = tuple(keras.distribution.list_devices(platform))
    if mesh is not None:
        from mgpu_gui.engine.jax_mesh import PlannedModelParallel, describe

        distribution = PlannedModelParallel(mesh, list(names))
        how = f"{describe(distribution, names)}, JAX {jax.__version__}"
    else:
        distribution = keras.distribution.DataParallel(devices=list(names))
        how = f"DataParallel over {', '.join(names)} (JAX {jax.__version__}, XLA all-reduce)"
    keras.distribution.set_distribution(distribution)
    return JaxStrategy(distribution, names), how


def jax_versions() -> dict[str, str | None]:
    """What a JAX run's environment record says of JAX: its version, jaxlib's, and the
    platform of the devices it trains on (cpu, gpu)."""
    import jax
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", None),
            "jax_platform": jax.default_backend()}


def _no_devices(plan: DevicePlan, seen: str) -> str:
    if plan.kind is DeviceKind.CPU:
        return (f"{seen}, but {plan.replicas} CPU replicas were planned: JAX's CPU backend "
                f"started before {HOST_DEVICES_FLAG} was set. This is a bug in mgpu-gui.")
    return (f"{seen}, but {plan.replicas} GPU(s) were planned ({', '.join(plan.names)}). "
            f"JAX needs its CUDA build for GPUs: {JAX_CUDA_EXTRA_HINT}; or train "
            "on CPU replicas (--cpu) or on the tensorflow engine.")
