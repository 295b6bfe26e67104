"""The shape of a device mesh: data-parallel groups x model shards.

`DATAxMODEL` spans the run's devices: "4x1" is plain data parallelism (every
device holds the whole model), "1x4" shards each large variable over four
devices, "2x2" does both. "auto" leaves the choice to the memory plan
(`memory.MemoryPlan.pick`): the smallest model axis that fits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mgpu_gui.core.errors import UserError

AUTO = "auto"
DATA_AXIS, MODEL_AXIS = "data", "model"  # the axis names Keras' DeviceMesh gets
_SHAPE = re.compile(r"^\s*(\d+)\s*[x×]\s*(\d+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class MeshShape:
    data: int  # data-parallel groups: each holds a whole copy of the (sharded) model
    model: int  # devices each sharded variable is split over

    @property
    def devices(self) -> int:
        return self.data * self.model

    def axis_size(self, axis: str) -> int:
        return {DATA_AXIS: self.data, MODEL_AXIS: self.model}[axis]

    @property
    def flag(self) -> str:
        """As --mesh takes it: "2x2"."""
        return f"{self.data}x{self.model}"

    def describe(self) -> str:
        """For a person: "data parallel" for a model axis of 1, else the flag."""
        return "data parallel" if self.model == 1 else f"--mesh {self.flag}"


def parse_mesh(text: str, devices: int | None = None) -> MeshShape | None:
    """A --mesh value: a MeshShape, or None for "auto"; checked against the run's
    device count when it is known."""
    if text.strip().lower() == AUTO:
        return None
    match = _SHAPE.match(text)
    if match is None:
        raise UserError(f"--mesh {text!r}: give DATAxMODEL (e.g. 2x2, 4x1) or auto.")
    mesh = MeshShape(int(match.group(1)), int(match.group(2)))
    if mesh.data < 1 or mesh.model < 1:
        raise UserError(f"--mesh {text}: both sizes must be at least 1.")
    if devices is not None and mesh.devices != devices:
        raise UserError(f"--mesh {mesh.flag} needs {mesh.devices} device"
                        f"{'s' if mesh.devices != 1 else ''}; the run has {devices} "
                        f"(it allows {', '.join(m.flag for m in meshes_for(devices))}).")
    return mesh


def meshes_for(devices: int) -> list[MeshShape]:
    """Every mesh of exactly `devices` devices, data parallelism first (model axis 1)."""
    if devices < 1:
        raise UserError(f"a mesh needs at least 1 device, not {devices}.")
    return [MeshShape(devices // model, model)
            for model in range(1, devices + 1) if devices % model == 0]
