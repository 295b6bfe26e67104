"""The layout table and the memory plan as text (terminal, run setup) and as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mgpu_gui.core.mesh.layout import Layout, axes_text
from mgpu_gui.core.mesh.memory import MemoryPlan
from mgpu_gui.core.mesh.shape import MeshShape
from mgpu_gui.core.sizes import format_bytes

NOT_ESTIMATED = ("activations are not estimated (they grow with the batch; the batch "
                 "finder measures them)")


def layout_table(layout: Layout) -> str:
    """One row per variable, then the totals per device."""
    rows = [("VARIABLE", "LAYER", "SHAPE", "LAYOUT", "PER DEVICE")]
    for entry in layout.variables:
        variable = entry.variable
        how = axes_text(entry.axes) if entry.sharded else "replicated"
        if entry.source not in ("auto", "replicated"):
            how += " (rule)"
        rows.append((variable.path + ("" if variable.trainable else " (frozen)"),
                     variable.layer, "x".join(map(str, variable.shape)) or "scalar", how,
                     format_bytes(entry.bytes_per_device)))
    whole = sum(entry.variable.nbytes for entry in layout.variables)
    sharded = sum(entry.sharded for entry in layout.variables)
    lines = _columns(rows, right=(False, False, False, False, True))
    lines.append(f"Per device on --mesh {layout.mesh.flag}: {format_bytes(layout.param_bytes)} "
                 f"of parameters ({format_bytes(whole)} whole; {sharded} of "
                 f"{len(layout.variables)} variables split over the model axis), "
                 f"{format_bytes(layout.trainable_bytes)} of them trainable.")
    return "\n".join(lines + [f"note: {note}" for note in layout.notes])


def plan_text(plan: MemoryPlan, chosen: MeshShape | None = None) -> str:
    """Per device, for every mesh: parameters + optimizer state + gradients, and whether
    it fits the GPUs; `chosen` is marked, and refused if it does not fit."""
    state = plan.optimizer
    lines = [f"Memory per device on {plan.devices} device{'s' if plan.devices != 1 else ''}: "
             f"parameters + {state.name} state ({state.slots} slot"
             f"{'s' if state.slots != 1 else ''} per trainable variable) + gradients; "
             f"{NOT_ESTIMATED}."]
    header = ["MESH", "PARAMETERS", "OPTIMIZER", "GRADIENTS", "TOTAL"]
    if plan.gpu_memory is not None:
        header.append(f"FITS {format_bytes(plan.gpu_memory)}")
    rows: list[Sequence[str]] = [header]
    for entry in plan.meshes:
        row = [entry.mesh.flag + (" *" if entry.mesh == chosen else ""),
               *(format_bytes(size) for size in (entry.params, entry.optimizer,
                                                 entry.gradients, entry.total))]
        if plan.gpu_memory is not None:
            row.append("yes" if plan.fits(entry.mesh) else "no")
        rows.append(row)
    lines += _columns(rows, right=(False, True, True, True, True, False))
    if plan.gpu_memory is None:
        lines.append("No verdict: the GPUs' memory is unknown (no GPU through NVML); "
                     "give --gpu-memory to check a fit.")
    elif chosen is not None and plan.fits(chosen) is False:
        lines.append(f"--mesh {chosen.flag} does not fit: {plan.refusal(chosen)}.")
    elif plan.meshes:
        fit = plan.smallest_fit()
        lines.append(f"--mesh auto picks {fit.mesh.flag}." if fit else
                     f"Nothing fits: {plan.refusal(plan.meshes[0].mesh)}.")
    return "\n".join(lines + [f"note: {note}" for note in (
        [state.note] if state.note else []) + plan.notes])


def plan_json(layout: Layout, plan: MemoryPlan) -> dict[str, Any]:
    """What `layout_table` and `plan_text` say, as plain data."""
    pick = plan.smallest_fit() if plan.gpu_memory is not None else None
    return {
        "mesh": layout.mesh.flag,
        "devices": plan.devices,
        "variables": [{
            "path": entry.variable.path, "layer": entry.variable.layer,
            "shape": list(entry.variable.shape), "dtype": entry.variable.dtype,
            "trainable": entry.variable.trainable, "layout": list(entry.axes),
            "source": entry.source, "bytes_per_device": entry.bytes_per_device,
        } for entry in layout.variables],
        "param_bytes_per_device": layout.param_bytes,
        "trainable_bytes_per_device": layout.trainable_bytes,
        "optimizer": {"name": plan.optimizer.name, "slots": plan.optimizer.slots},
        "gpu_memory": plan.gpu_memory,
        "plan": [{"mesh": entry.mesh.flag, "params": entry.params,
                  "optimizer": entry.optimizer, "gradients": entry.gradients,
                  "total": entry.total, "fits": plan.fits(entry.mesh)}
                 for entry in plan.meshes],
        "auto_pick": pick.mesh.flag if pick else None,
        "activations": "not estimated",
        "notes": layout.notes + ([plan.optimizer.note] if plan.optimizer.note else [])
        + plan.notes,
    }


def _columns(rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(width) if r else cell.ljust(width)
                      for cell, width, r in zip(row, widths, right, strict=False)).rstrip()
            for row in rows]
