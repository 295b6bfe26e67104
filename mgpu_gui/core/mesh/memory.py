"""What each device must hold on each mesh, before any process starts.

Per device: the parameters (each variable's share under its layout), the
optimizer's state (so many slots per trainable variable, each laid out like
it) and the gradients (one per trainable variable, laid out like it).
Activations are not estimated: they depend on the batch, and the batch finder
measures them on the devices. The figures are a floor, then, and a plan that
does not fit is refused for certain.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mgpu_gui.core.errors import UserError
from mgpu_gui.core.mesh.layout import (
    DEFAULT_SHARD_ABOVE,
    LayoutRule,
    VariableInfo,
    plan_layout,
)
from mgpu_gui.core.mesh.shape import MeshShape, meshes_for
from mgpu_gui.core.sizes import format_bytes

# Slots of optimizer state per trainable variable, each the variable's size.
OPTIMIZER_SLOTS = {
    "adam": 2, "adamw": 2, "nadam": 2, "adamax": 2,  # first and second moments
    "sgd": 0, "sgd-momentum": 1,  # the run's SGD has no momentum (Keras' default)
    "rmsprop": 1, "rmsprop-centered": 2,  # mean square (+ mean gradient when centered)
    "adagrad": 1, "lion": 1, "adadelta": 2, "ftrl": 2,
}
UNKNOWN_SLOTS = 2  # as Adam: most optimizers keep at most two moments


@dataclass(frozen=True)
class OptimizerState:
    name: str
    slots: int
    note: str = ""  # when the slots are a guess


def optimizer_state(name: str) -> OptimizerState:
    key = name.strip().lower().replace("_", "-")
    if key in OPTIMIZER_SLOTS:
        return OptimizerState(key, OPTIMIZER_SLOTS[key])
    return OptimizerState(key, UNKNOWN_SLOTS,
                          f"optimizer {name!r} is not one the plan knows; assumed "
                          f"{UNKNOWN_SLOTS} slots of state per variable, as Adam's")


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes one device holds on `mesh`."""

    mesh: MeshShape
    params: int
    optimizer: int
    gradients: int

    @property
    def total(self) -> int:
        return self.params + self.optimizer + self.gradients


@dataclass(frozen=True)
class MemoryPlan:
    """Every mesh of the run's device count, data parallelism first."""

    devices: int
    optimizer: OptimizerState
    meshes: list[DeviceMemory]
    gpu_memory: int | None  # bytes, of the smallest GPU; None: unknown (no verdict)
    notes: list[str] = field(default_factory=list)  # meshes the layout rules do not fit

    def memory(self, mesh: MeshShape) -> DeviceMemory:
        for entry in self.meshes:
            if entry.mesh == mesh:
                return entry
        raise UserError(f"the layout rules do not fit --mesh {mesh.flag}: "
                        + "; ".join(self.notes))

    def fits(self, mesh: MeshShape) -> bool | None:
        """None when the GPUs' memory is unknown."""
        if self.gpu_memory is None:
            return None
        return self.memory(mesh).total <= self.gpu_memory

    def smallest_fit(self) -> DeviceMemory | None:
        """The mesh with the smallest model axis that fits (the least communication)."""
        return next((entry for entry in self.meshes if self.fits(entry.mesh)), None)

    def pick(self) -> MeshShape:
        """--mesh auto."""
        if self.gpu_memory is None:
            raise UserError("--mesh auto picks by the GPUs' memory, and none is known here "
                            "(no GPU through NVML): give --gpu-memory, or a mesh.")
        if not self.meshes:
            raise UserError("the layout rules fit no mesh: " + "; ".join(self.notes))
        fit = self.smallest_fit()
        if fit is None:
            raise UserError(self.refusal(self.meshes[0].mesh))
        return fit.mesh

    def refusal(self, mesh: MeshShape, fit_on: str = "") -> str:
        """'needs 31.2 GiB per GPU as data parallel; your GPUs have 24.0 GiB: --mesh 1x2
        needs 15.8 GiB each'; `fit_on` goes before the mesh that fits ("the JAX engine's ")."""
        gpu = format_bytes(self.gpu_memory)
        text = (f"needs {format_bytes(self.memory(mesh).total)} per GPU as "
                f"{mesh.describe()}; your GPUs have {gpu}")
        fit = self.smallest_fit()
        if fit is not None:
            return (f"{text}: {fit_on}--mesh {fit.mesh.flag} needs {format_bytes(fit.total)} "
                    f"each")
        least = min(self.meshes, key=lambda entry: entry.total)
        return (f"{text}, and no mesh of {self.devices} devices fits: the least is "
                f"--mesh {least.mesh.flag} at {format_bytes(least.total)} each "
                f"(more GPUs, a smaller model, or an optimizer with less state)")


def plan_memory(variables: Sequence[VariableInfo], devices: int, optimizer: str,
                gpu_memory: int | None = None, rules: Sequence[LayoutRule] = (),
                shard_above: int = DEFAULT_SHARD_ABOVE) -> MemoryPlan:
    state = optimizer_state(optimizer)
    entries, notes = [], []
    for mesh in meshes_for(devices):
        try:
            layout = plan_layout(variables, mesh, rules, shard_above)
        except UserError as error:  # a rule that cannot apply on this mesh: the others can
            notes.append(f"--mesh {mesh.flag}: {error}")
            continue
        trainable = layout.trainable_bytes
        entries.append(DeviceMemory(mesh, layout.param_bytes, state.slots * trainable,
                                    trainable))
    return MemoryPlan(devices, state, entries, gpu_memory, notes)


def fit_refusal(plan: MemoryPlan, mesh: MeshShape, on_jax: bool) -> str | None:
    """Why a run on `mesh` cannot start on its GPUs; None when it fits, or when the GPUs'
    memory is unknown. Only what the plan counts is judged: a run refused here would fail
    for certain, one let through may still run out of memory on its activations. On
    TensorFlow a mesh that fits is named as the JAX engine's (ModelParallel is JAX-only)."""
    if plan.fits(mesh) is not False:
        return None
    fit = plan.smallest_fit()
    fit_on = "" if on_jax else "the JAX engine's "
    how = ("" if fit is None else f" Train with --mesh {fit.mesh.flag}." if on_jax else
           f" Train on the JAX engine: --engine jax --mesh {fit.mesh.flag}.")
    return (f"The model will not fit the GPUs: it {plan.refusal(mesh, fit_on)}. "
            f"That counts the parameters, the {plan.optimizer.name} optimizer's state "
            f"({plan.optimizer.slots} slot{'s' if plan.optimizer.slots != 1 else ''} per "
            f"trainable variable) and the gradients; activations come on top.{how}")


def fit_note(plan: MemoryPlan, mesh: MeshShape) -> str:
    """The log's line for a run whose mesh fits (or whose GPUs' memory is unknown)."""
    entry = plan.memory(mesh)
    whose = ("" if plan.gpu_memory is None else
             f", of the GPUs' {format_bytes(plan.gpu_memory)}")
    return (f"Memory plan: {format_bytes(entry.total)} per GPU as {mesh.describe()} "
            f"(parameters {format_bytes(entry.params)} + {plan.optimizer.name} state "
            f"{format_bytes(entry.optimizer)} + gradients {format_bytes(entry.gradients)}"
            f"{whose}); activations come on top.")


def smallest_gpu(memory_totals: Iterable[int | None]) -> int | None:
    """The memory a plan is judged against: the smallest GPU's; None without GPUs (CPU
    replicas have no memory of their own) or when NVML did not say for one of them."""
    sizes = list(memory_totals)
    return None if not sizes or None in sizes else min(sizes)
