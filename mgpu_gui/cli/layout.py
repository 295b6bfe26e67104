"""`mgpu-train layout`: how a model's variables split over a data x model mesh, and what
each device must hold on every mesh of the run's devices.

The model is built on the CPU in the model probe child (as the app's build check
does), which reports its variables; the layout and the memory plan are plain
arithmetic here (`core.mesh`). Nothing here imports TensorFlow, and nothing trains.
"""

from __future__ import annotations

import argparse
import json
import sys

from mgpu_gui.cli.mesh_flags import LAYOUT_HELP, MESH_HELP
from mgpu_gui.core.children.model_probe import ModelProbeJob
from mgpu_gui.core.children.runner import cancel_on_interrupt
from mgpu_gui.core.config import DEMO, RunConfig
from mgpu_gui.core.devices.nvml import GpuInfo, NvmlState, query_inventory
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import ModelProbeFailed
from mgpu_gui.core.mesh.layout import (
    DEFAULT_SHARD_ABOVE,
    VariableInfo,
    parse_rules,
    plan_layout,
)
from mgpu_gui.core.mesh.memory import OPTIMIZER_SLOTS, plan_memory
from mgpu_gui.core.mesh.report import layout_table, plan_json, plan_text
from mgpu_gui.core.mesh.shape import parse_mesh
from mgpu_gui.core.plain import from_plain
from mgpu_gui.core.runs.checkpoints import format_bytes
from mgpu_gui.core.tools.batch_search import parse_memory

# The RunConfig fields that decide which model is built, as this command's flags.
_MODEL_FLAGS = {"model": "MODEL", "data": "--data", "builder": "--builder",
                "custom_objects": "--custom-objects"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "layout", help="show how a model's variables split over a data x model mesh, and "
                       "the memory each device needs",
        description="Build the model on the CPU (in a child process), then print each "
                    "variable's layout on the mesh (split over the model axis, or "
                    "replicated) and its bytes per device, and the memory plan for every "
                    "mesh of the run's devices: parameters + optimizer state + gradients "
                    "per device (activations are not estimated: `mgpu-train find-batch` "
                    "measures them). Nothing trains.")
    p.add_argument("model", help=f"a .keras, .h5 or .py file, a built-in architecture, or "
                                 f"'{DEMO}'")
    p.add_argument("--mesh", default="auto",
                   help=f"{MESH_HELP} (default auto)")
    p.add_argument("--devices", type=int,
                   help="how many devices the run has (default: the mesh's, or for auto "
                        "the GPUs NVML sees)")
    p.add_argument("--data", default=DEMO,
                   help=f"the data the model is built for (input shape, class count): an .npz "
                        f"file, an image folder, or '{DEMO}' (default)")
    p.add_argument("--builder", help="the function of a .py model file that returns the model")
    p.add_argument("--custom-objects", help="a .py defining a `custom_objects` dict for "
                                            "models with custom layers")
    p.add_argument("--allow-unsafe-code", action="store_true",
                   help="let Lambda layers in the model file run their Python code (trusted "
                        "files only)")
    p.add_argument("--layout", metavar="RULES_OR_FILE", help=LAYOUT_HELP)
    p.add_argument("--optimizer", default="adam",
                   help=f"whose state to plan for: {', '.join(OPTIMIZER_SLOTS)} (default "
                        f"adam; others are taken as 2 slots per variable)")
    p.add_argument("--gpu-memory", metavar="SIZE",
                   help="each GPU's memory, e.g. 24GiB or 80GB (a bare number: GiB) "
                        "(default: the smallest GPU NVML sees; none: no fit verdict)")
    p.add_argument("--shard-above", metavar="SIZE", default=str(DEFAULT_SHARD_ABOVE),
                   help=f"the automatic layout splits variables larger than this, e.g. 1MiB, "
                        f"0 (default {format_bytes(DEFAULT_SHARD_ABOVE)})")
    p.add_argument("--json", action="store_true", help="print the layout and the plan as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rules = parse_rules(args.layout) if args.layout else []
    shard_above = 0 if args.shard_above.strip() == "0" else parse_memory(args.shard_above)
    gpus = _gpus()
    known = [gpu.memory_total for gpu in gpus if gpu.memory_total]
    gpu_memory = _gpu_memory(args.gpu_memory) if args.gpu_memory else min(known, default=None)
    if args.devices is not None and args.devices < 1:
        raise UserError(f"--devices {args.devices}: give 1 or more.")
    mesh = parse_mesh(args.mesh, args.devices)
    devices = args.devices or (mesh.devices if mesh else len(gpus))
    if mesh is None and not devices:
        raise UserError("--mesh auto needs the run's device count, and NVML sees no GPU "
                        "here: give --devices N, or a mesh such as 1x4.")
    if mesh is None and gpu_memory is None:
        raise UserError("--mesh auto picks by the GPUs' memory, and none is known here: "
                        "give --gpu-memory SIZE, or a mesh such as 1x4.")
    variables = _probe(_config(args), args)
    plan = plan_memory(variables, devices, args.optimizer, gpu_memory, rules, shard_above)
    chosen = mesh or plan.pick()
    layout = plan_layout(variables, chosen, rules, shard_above)
    if args.json:
        print(json.dumps(plan_json(layout, plan), indent=2))
    else:
        print(layout_table(layout))
        print()
        print(plan_text(plan, chosen))
    return 0


def _config(args: argparse.Namespace) -> RunConfig:
    config = RunConfig(model=args.model, data=args.data, builder=args.builder,
                       custom_objects=args.custom_objects,
                       allow_unsafe_code=args.allow_unsafe_code)
    config = config.with_absolute_paths()
    found = [f"{_MODEL_FLAGS[name]}: {message}" for name, message in config.problems()
             if name in _MODEL_FLAGS]
    if found:
        raise UserError("; ".join(found))
    return config


def _probe(config: RunConfig, args: argparse.Namespace) -> list[VariableInfo]:
    job = ModelProbeJob(config)
    interrupted = cancel_on_interrupt(job.cancel, "model check")
    print("Building the model on the CPU to read its variables...", file=sys.stderr)
    outcome = job.run()
    if isinstance(outcome, ModelProbeFailed):
        if interrupted():
            raise KeyboardInterrupt
        if args.debug and outcome.traceback:
            print(outcome.traceback, file=sys.stderr)
        raise UserError(f"the model could not be built: {outcome.message}")
    return [from_plain(VariableInfo, entry) for entry in outcome.variables]


def _gpus() -> tuple[GpuInfo, ...]:
    """The GPUs NVML sees (none without a driver)."""
    inventory = query_inventory()
    return inventory.gpus if inventory.state is NvmlState.OK else ()


def _gpu_memory(text: str) -> int:
    try:
        size = int(float(text) * 2**30)  # a bare number: GiB, as `mgpu-train devices` shows
    except (ValueError, OverflowError):  # a unit, or "inf"
        return parse_memory(text)
    if size < 1:
        raise UserError(f"--gpu-memory {text}: give more than 0.")
    return size

