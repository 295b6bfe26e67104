"""`mgpu-train unwrap`: the plain model inside a legacy multi-GPU wrapper file, verified.

The export child (core/tools/export_job.py) recovers and writes it; TensorFlow
never runs here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mgpu_gui.cli.common import format_from_suffix, run_export_job
from mgpu_gui.core.config import EXPORT_FORMATS
from mgpu_gui.core.tools.export_job import ExportMode, ExportRequest


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("unwrap", help="recover the plain model from a legacy multi-GPU "
                       "wrapper file and write it, verified")
    p.add_argument("file", type=Path, help="a .h5 or .keras model file")
    p.add_argument("-o", "--output", type=Path, required=True,
                   help="a .keras or .h5 file, or a SavedModel folder")
    p.add_argument("--format", choices=EXPORT_FORMATS,
                   help="default: from the output's suffix (.keras, .h5; else savedmodel)")
    p.add_argument("--custom-objects", dest="custom_objects", type=Path,
                   help="a .py defining a `custom_objects` dict for custom layers")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output = args.output.expanduser().absolute()
    custom = args.custom_objects.expanduser().absolute() if args.custom_objects else None
    return run_export_job(ExportRequest(ExportMode.UNWRAP, args.file.expanduser().absolute(),
                                        output, args.format or format_from_suffix(output),
                                        custom), args)
