"""A run's mesh settings (`RunConfig.mesh`, `RunConfig.layout`) checked as its other
settings are: instantly, as (field, message) pairs, before anything starts."""

from __future__ import annotations

from mgpu_gui.core.engines import Engine
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.mesh.layout import parse_rules
from mgpu_gui.core.mesh.shape import AUTO, parse_mesh

MODEL_PARALLEL_JAX_ONLY = ("Keras 3's ModelParallel (variables split over the devices) runs "
                           "on the JAX backend only; add --engine jax")


def mesh_problems(mesh: str | None, layout: str | None, engine: str
                  ) -> list[tuple[str, str]]:
    """What is wrong with the mesh and layout settings on `engine`; the device count is
    checked once the devices are planned (preflight.check_mesh)."""
    found = []
    if mesh is not None:
        try:
            shape = parse_mesh(mesh)
        except UserError as error:
            found.append(("mesh", str(error)))
        else:
            if engine == Engine.TENSORFLOW and (shape is None or shape.model > 1):
                found.append(("mesh", f"--mesh {mesh.strip()}"
                              + (" may pick a model axis > 1" if shape is None else
                                 f" splits variables over {shape.model} devices")
                              + f": {MODEL_PARALLEL_JAX_ONLY}, or train data parallel "
                                f"(no --mesh)"))
    if layout is not None:
        if mesh is None:
            found.append(("layout", "layout rules say how variables split over a mesh: "
                                    "give --mesh DATAxMODEL too"))
        try:
            parse_rules(layout)
        except UserError as error:
            found.append(("layout", str(error)))
    return found


def is_auto(mesh: str | None) -> bool:
    return mesh is not None and mesh.strip().lower() == AUTO
