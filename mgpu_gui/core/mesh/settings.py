"""A run's mesh settings (`RunConfig.mesh`, `RunConfig.layout`) checked as its other
settings are: instantly, as (field, message) pairs, before anything starts."""

from __future__ import annotations

from dataclasses import dataclass

from mgpu_gui.core.engines import Engine
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.mesh.layout import LayoutRule, parse_rules
from mgpu_gui.core.mesh.shape import AUTO, MeshShape, parse_mesh

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
        if engine == Engine.TENSORFLOW:
            found.append(("layout", f"layout rules lay variables out over a mesh: "
                                    f"{MODEL_PARALLEL_JAX_ONLY}"))
        elif mesh is None:
            found.append(("layout", "layout rules say how variables split over a mesh: "
                                    "give --mesh DATAxMODEL too"))
        try:
            parse_rules(layout)
        except UserError as error:
            found.append(("layout", str(error)))
    return found


def splits_model(mesh: str | None) -> bool:
    """Whether the mesh may split variables over devices (a model axis above 1, or auto):
    what the tools that time or probe whole-model replicas do not do yet."""
    if mesh is None:
        return False
    try:
        shape = parse_mesh(mesh)
    except UserError:
        return False  # the settings' own check names it
    return shape is None or shape.model > 1


def is_auto(mesh: str | None) -> bool:
    return mesh is not None and mesh.strip().lower() == AUTO


@dataclass(frozen=True)
class MeshRequest:
    """The mesh a run trains on (its settings checked): the engine builds it."""

    shape: MeshShape
    rules: tuple[LayoutRule, ...] = ()


def mesh_request(mesh: str | None, layout: str | None) -> MeshRequest | None:
    """None: data parallelism as without a mesh (none given, or a model axis of 1 with no
    rules). UserError for auto, which the worker cannot resolve: preflight refuses it."""
    shape = None if mesh is None else parse_mesh(mesh)
    if mesh is not None and shape is None:
        raise UserError("--mesh auto is resolved before the run starts; give DATAxMODEL.")
    rules = tuple(parse_rules(layout)) if layout is not None else ()
    if shape is None or (shape.model == 1 and not rules):
        return None
    return MeshRequest(shape, rules)
