"""Child-process entry that exports or unwraps a model file: request in, typed events out.

    python -m mgpu_gui.processes.export --events-fd N  < request.json

The request is an `ExportRequest` (core/tools/export_job.py) as one JSON object
on stdin. Events go as JSON lines to the inherited pipe `N` (stdout and stderr
belong to Keras and TensorFlow): `LogMessage`s while it works, then always
`ExportDone` or `ExportFailed` last. The CLI and the GUI start it, so neither
imports TensorFlow; the export is verified by a fresh verifier child of its own
(processes/export_verifier.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import ExportDone, ExportFailed, LogMessage
from mgpu_gui.core.modelfiles.inspection import inspect_model_file
from mgpu_gui.core.runs.folder import custom_objects_of
from mgpu_gui.core.tools.export_job import ExportMode, ExportRequest
from mgpu_gui.engine.export import ExportResult, export_file, export_model
from mgpu_gui.engine.export_sample import random_sample
from mgpu_gui.processes.failure import failure_of


def export(request: ExportRequest, log: Callable[[str], None]) -> ExportResult:
    if request.mode is ExportMode.EXPORT:
        return export_file(request.source, request.output, request.format,
                           custom_objects_file=custom_objects_of(request.source))
    return unwrap(request, log)


def unwrap(request: ExportRequest, log: Callable[[str], None]) -> ExportResult:
    """The plain template of a legacy multi-GPU wrapper file; a plain file is converted."""
    info = inspect_model_file(request.source)
    if info.format == "py":
        raise UserError(f"{info.path.name} is a .py file: there is nothing to unwrap.")
    if info.wrapper is None:
        log(f"{info.path.name} is already a plain model (no multi-GPU wrapper); "
            f"writing it as a verified {request.format} conversion.")
        return export_file(info.path.absolute(), request.output, request.format)
    from mgpu_gui.engine.models import load_custom_objects
    from mgpu_gui.engine.unwrap import recover_model

    custom = load_custom_objects(request.custom_objects) if request.custom_objects else {}
    model = recover_model(info.path, custom_objects=custom, log=log).model
    return export_model(model, request.output, request.format, sample_x=random_sample(model),
                        custom_objects_file=request.custom_objects)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.export")
    parser.add_argument("--events-fd", type=int, required=True)
    args = parser.parse_args(argv)
    request = ExportRequest.from_dict(json.loads(sys.stdin.read()))
    with os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8") as pipe:
        def emit(event) -> None:
            pipe.write(event.to_json() + "\n")

        try:
            result = export(request, lambda message: emit(LogMessage(message)))
        except Exception as error:
            emit(failure_of(error, ExportFailed))
            return 1
        emit(ExportDone(str(result.path), result.format, result.verified, result.max_abs_diff,
                        None if result.classes_path is None else str(result.classes_path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
