"""Training on a data x model mesh (JAX): `keras.distribution.ModelParallel` whose
layout of each variable is decided by `core.mesh.layout` as the variable is made.

Why at creation, not from a LayoutMap filled beforehand: a LayoutMap is keyed by
variable paths, and the paths (and the owning layers' classes, which the
automatic layout needs) are only known once the model is built, while a variable
keeps the layout it was created with (making it replicated first would put the
whole model on every device, which is what a mesh is there to avoid). Building
the model twice does not help: Keras numbers auto-named layers per process
("dense", then "dense_2"), so a second build's paths differ from the first's, and
a first build inside a `StatelessScope` fails at `compile` (it makes variables
with values) and cannot hold a loaded file's weights. So Keras' hook is used:
a JAX variable asks the distribution for its layout (`get_variable_layout`) when
it is initialised, inside its layer's `add_weight`, where the innermost name
scope's caller is that layer. The layer's class is read from that scope (Keras'
own state: the one private read here); the user's rules and the automatic layout
are then applied by `plan_layout`, as `mgpu-train layout` shows them. Optimizer
slots take their variable's layout (Keras gives them the reference's). Weights
loaded from a file are assigned into the laid-out variables (each shard to its
device).
"""

from __future__ import annotations

from typing import Any

import keras
from keras.src.backend.common import global_state

from mgpu_gui.core.mesh.layout import (
    DEFAULT_SHARD_ABOVE,
    Layout,
    VariableInfo,
    axes_text,
    plan_layout,
)
from mgpu_gui.core.mesh.settings import MeshRequest
from mgpu_gui.core.mesh.shape import DATA_AXIS, MODEL_AXIS
from mgpu_gui.core.sizes import format_bytes


class PlannedModelParallel(keras.distribution.ModelParallel):
    """ModelParallel over a (data, model) DeviceMesh; each variable laid out as it is made."""

    def __init__(self, request: MeshRequest, devices: list[str]):
        mesh = keras.distribution.DeviceMesh(
            shape=(request.shape.data, request.shape.model),
            axis_names=(DATA_AXIS, MODEL_AXIS), devices=devices)
        # Empty: every layout comes from get_variable_layout; activations are left to XLA.
        super().__init__(layout_map=keras.distribution.LayoutMap(mesh),
                         batch_dim_name=DATA_AXIS)
        self.request = request
        self.made: list[VariableInfo] = []  # every variable laid out, in creation order

    def get_variable_layout(self, variable: Any) -> Any:
        given = getattr(variable, "_layout", None)  # an optimizer slot: its reference's
        if given is not None:
            return given
        info = VariableInfo(variable.path, tuple(int(size) for size in variable.shape),
                            str(variable.dtype), _creating_layer(), bool(variable.trainable))
        entry = plan_layout([info], self.request.shape, self.request.rules).variables[0]
        self.made.append(info)
        return keras.distribution.TensorLayout(entry.axes, self.device_mesh)

    def layout(self) -> Layout:
        """What was laid out, with the notes (rules that matched nothing, large variables
        left replicated)."""
        return plan_layout(self.made, self.request.shape, self.request.rules)


def _creating_layer() -> str:
    """The class of the layer whose `add_weight` is running ("" outside any layer)."""
    stack = global_state.get_global_attribute("name_scope_stack") or []
    caller = stack[-1].caller if stack else None
    return type(caller).__name__ if isinstance(caller, keras.layers.Layer) else ""


def describe(distribution: PlannedModelParallel, devices: tuple[str, ...]) -> str:
    """How the run trains, for RunStarted and the log."""
    shape = distribution.request.shape
    return (f"ModelParallel on a {shape.flag} mesh over {_span(devices)} ({DATA_AXIS} x "
            f"{MODEL_AXIS}; XLA's sharding inserts the collectives)")


def split_report(model: keras.Model, distribution: PlannedModelParallel) -> str:
    """Which of the model's variables are split, and the shard each device holds, read from
    the arrays themselves; then the layout's notes."""
    planned = distribution.layout()
    layout = {entry.variable.path: entry for entry in planned.variables}
    lines = []
    held: dict[Any, int] = {}  # bytes of the model's variables on each device
    for variable in model.variables:
        for shard in variable.value.addressable_shards:
            held[shard.device] = held.get(shard.device, 0) + shard.data.nbytes
        entry = layout.get(variable.path)
        if entry is None or not entry.sharded:
            continue
        shards = {shard.device: tuple(shard.data.shape)
                  for shard in variable.value.addressable_shards}
        shapes = sorted(set(shards.values()))
        lines.append(f"  {variable.path} {_dims(tuple(variable.shape))} "
                     f"{axes_text(entry.axes)}: "
                     + "; ".join(f"{_dims(s)} on {sum(v == s for v in shards.values())} "
                                 f"devices" for s in shapes))
    total = len(model.variables)
    head = (f"{len(lines)} of the model's {total} variables are split over the mesh "
            f"(each device's shard); the rest are replicated"
            + (":" if lines else "."))
    if not lines and distribution.request.shape.model > 1:
        head += (f" Every device holds the whole model: no variable is large enough for "
                 f"the automatic layout (over {format_bytes(DEFAULT_SHARD_ABOVE)}) or "
                 f"matched by a --layout rule; give rules, or train data parallel.")
    paths = {variable.path for variable in model.variables}
    plan = sum(entry.bytes_per_device for entry in planned.variables
               if entry.variable.path in paths)
    total_line = (f"Each device holds {format_bytes(max(held.values(), default=0))} of the "
                  f"model's variables (the plan: {format_bytes(plan)}; optimizer state "
                  f"and gradients come on top, laid out alike).")
    notes = [f"note: {note}" for note in planned.notes]
    return "\n".join([head, *lines, total_line, *notes])


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _span(devices: tuple[str, ...]) -> str:
    """"cpu:0..cpu:3" for a numbered run of devices, else them all."""
    numbers = [name.rpartition(":")[2] for name in devices]
    prefix = {name.rpartition(":")[0] for name in devices}
    if len(prefix) == 1 and numbers == [str(i) for i in range(int(numbers[0]),
                                                              int(numbers[0]) + len(numbers))]:
        return f"{devices[0]}..{devices[-1]}" if len(devices) > 1 else devices[0]
    return ", ".join(devices)
