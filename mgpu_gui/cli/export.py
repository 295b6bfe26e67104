"""`mgpu-train export`: write a run's model in another format, verified.

TensorFlow runs in the export child (core/tools/export_job.py), never here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mgpu_gui.cli.common import format_from_suffix, run_export_job
from mgpu_gui.core.config import EXPORT_FORMATS
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.tools.export_job import ExportMode, ExportRequest


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a trained model to another format")
    p.add_argument("source", type=Path, help="a run folder or a .keras/.h5 model file")
    p.add_argument("-o", "--output", type=Path, required=True)
    p.add_argument("--format", choices=EXPORT_FORMATS,
                   help="default: from the output's suffix (.keras, .h5; else savedmodel)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    source = _export_source(args.source.expanduser().absolute())
    output = args.output.expanduser().absolute()  # the verifier runs in another folder
    return run_export_job(ExportRequest(ExportMode.EXPORT, source, output,
                                        args.format or format_from_suffix(output)), args)


def _export_source(source: Path) -> Path:
    """A run folder stands for its exported model, else its last complete epoch."""
    if not source.is_dir():
        if not source.exists():
            raise UserError(f"{source} does not exist; give a run folder or a .keras/.h5 file.")
        return source
    model = RunDir(source).trained_model()
    if model is not None:
        return model
    raise UserError(f"{source} holds no trained model yet (no model.keras and no "
                    f"checkpoints/last.keras); finish at least one epoch first.")
