"""The memory plan judged on the built model, before the first step (issue 31).

`core.mesh.memory` counts what each GPU must hold (parameters, optimizer state,
gradients) on the run's mesh, from the model's variables as `mgpu-train layout`
reads them in the probe child; here they are the run's own, and the optimizer the
one the model was compiled with (the file's, when its compile is kept). A run that
cannot fit is refused during setup, before `RunStarted`: no folder and no row are
left, as for the rehearsal's refusals. Activations are not estimated, so only a
certain failure is refused. CPU replicas have no memory of their own: no check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.engines import Engine
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.mesh.layout import VariableInfo, parse_rules
from mgpu_gui.core.mesh.memory import fit_note, fit_refusal, plan_memory, smallest_gpu
from mgpu_gui.core.mesh.settings import mesh_request
from mgpu_gui.core.mesh.shape import MeshShape


class MemoryPlanError(UserError):
    """The run's mesh needs more memory per GPU than its GPUs have. Resumable: on other
    GPUs, or another mesh, it may fit."""


def model_variables(model: keras.Model) -> list[VariableInfo]:
    """Each variable with the class of the layer that owns it: the innermost layer whose
    weights hold it (a nested model's weights hold its layers' too)."""
    owner: dict[int, str] = {}
    for layer in model._flatten_layers():  # parents before their sublayers
        for variable in layer.weights:
            owner[id(variable)] = type(layer).__name__
    return [VariableInfo(variable.path, tuple(int(size) for size in variable.shape),
                         str(variable.dtype), owner.get(id(variable), ""),
                         bool(variable.trainable)) for variable in model.variables]


def optimizer_key(optimizer: Any) -> str:
    """The compiled optimizer as the plan's slot table names it ("sgd-momentum", "adam"),
    looking through a LossScaleOptimizer."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    name = type(inner).__name__.lower()
    settings = inner.get_config()
    if name == "sgd" and settings.get("momentum"):
        return "sgd-momentum"
    if name == "rmsprop" and settings.get("centered"):
        return "rmsprop-centered"
    return name


def check_memory(config: RunConfig, plan: DevicePlan, model: keras.Model,
                 log: Callable[[str], None]) -> None:
    """MemoryPlanError when parameters + optimizer state + gradients alone exceed the
    smallest GPU of the run; else the plan's figures go to the log."""
    gpu_memory = smallest_gpu(gpu.memory_total for gpu in plan.gpus)
    if gpu_memory is None:
        return
    request = mesh_request(config.mesh, config.layout)
    mesh = request.shape if request is not None else MeshShape(plan.replicas, 1)
    rules = parse_rules(config.layout) if config.layout else ()
    memory = plan_memory(model_variables(model), plan.replicas, optimizer_key(model.optimizer),
                         gpu_memory, rules)
    refusal = fit_refusal(memory, mesh, on_jax=config.engine == Engine.JAX)
    if refusal is not None:
        raise MemoryPlanError(refusal)
    log(fit_note(memory, mesh))
