"""`mgpu-train predict`: a model's top classes for image files, as training prepared them.

TensorFlow runs in the evaluator child (core/tools/evaluate_job.py), never here.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from mgpu_gui.cli.common import EXIT_USAGE, run_evaluator
from mgpu_gui.core.children.inspector import file_inspector
from mgpu_gui.core.config import DeviceSelection
from mgpu_gui.core.datasets.inspection import IMAGE_SUFFIXES, image_files_under
from mgpu_gui.core.devices.nvml import query_inventory
from mgpu_gui.core.devices.plan import plan_devices
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import PredictionsMade
from mgpu_gui.core.runs.folder import custom_objects_for
from mgpu_gui.core.tools.evaluate_job import PredictRequest


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="a model's top classes for image files (a folder: "
                       "every image under it), prepared as its training prepared them")
    p.add_argument("model", type=Path, help="a .keras/.h5 model file; its card (the "
                   "<stem>.classes.json an export writes) says how images were prepared")
    p.add_argument("files", nargs="+", type=Path, help="image files or folders")
    p.add_argument("--top", type=int, default=5, help="classes shown per file (default 5)")
    p.add_argument("--csv", type=Path, help="write one row per file: the file, then the "
                   "class and probability of each of the top classes, and any error")
    p.add_argument("--custom-objects", type=Path, help="the .py defining the model's own "
                   "classes, for a file saved outside this app's runs (a run's model finds "
                   "them itself)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.model.is_file():
        raise UserError(f"{args.model} is not a model file; give a .keras or .h5 file.")
    if args.top < 1:
        raise UserError("--top must be at least 1.")
    # A damaged or truncated file refused here, as the run setup refuses it (no TensorFlow).
    model = args.model.expanduser().absolute()
    facts = file_inspector().inspect_model(str(model))
    custom = custom_objects_for(model, args.custom_objects, facts.custom_objects)
    files = image_files(args.files)
    plan = plan_devices(DeviceSelection(replicas=1), query_inventory())
    outcome = run_evaluator(PredictRequest(model, files, plan, args.top, custom), args,
                            "prediction")
    if isinstance(outcome, int):
        return outcome
    assert isinstance(outcome, PredictionsMade)
    print(f"Inputs: {outcome.inputs}")
    for row in outcome.rows:
        said = row["error"] or ", ".join(f"{name} {p:.1%}" for name, p in row["top"])
        print(f"{row['file']}: {said}")
    if args.csv is not None:
        with open(args.csv, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["file", *[f"{what}_{k}" for k in range(1, args.top + 1)
                                        for what in ("class", "probability")], "error"])
            for row in outcome.rows:
                cells = [v for name, p in row["top"] for v in (name, f"{p:.6g}")]
                cells += [""] * (2 * args.top - len(cells))
                writer.writerow([row["file"], *cells, row["error"]])
    failed = sum(1 for row in outcome.rows if row["error"])
    if failed:
        print(f"error: {failed} of {len(outcome.rows)} file(s) could not be read (above).",
              file=sys.stderr)
        return EXIT_USAGE
    return 0


def image_files(paths: list[Path]) -> tuple[Path, ...]:
    """The files given, folders replaced by every image file under them (sorted)."""
    found: list[Path] = []
    for path in (p.expanduser().absolute() for p in paths):
        if path.is_dir():
            inside = image_files_under(path)
            if not inside:
                raise UserError(f"{path} holds no image files ({', '.join(IMAGE_SUFFIXES)}).")
            found += map(Path, inside)
        elif path.is_file():
            found.append(path)
        else:
            raise UserError(f"{path} does not exist; give image files or folders.")
    return tuple(found)
