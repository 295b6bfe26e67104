"""Child entry that reads untrusted model and data files: one request line in, one result out.

    python -m mgpu_gui.processes.inspector --results-fd N --memory-mib M

Started once and kept warm by `core/children/inspector.py`, so a crash in a C
library (HDF5 on a damaged `.h5`) costs the app a message, not the window. Each
`InspectRequest` JSON line on stdin gets one event on the inherited pipe `N`:
`FileInspected` or `InspectFailed` (`InspectorReady` first, once). stdout and
stderr are left to the libraries. It imports h5py, numpy and zipfile, never
TensorFlow or Keras, and reads file headers only. EOF on stdin ends it.

Its address space is capped (RLIMIT_AS) at what the imports took plus M MiB: a
zip bomb or an absurd array header then ends in a MemoryError and a message,
not in the machine swapping.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import PurePath

from mgpu_gui.core.children.limits import cap_memory
from mgpu_gui.core.datasets.inspection import inspect_data
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import (
    Event,
    FileInspected,
    InspectFailed,
    InspectorReady,
)
from mgpu_gui.core.inspect_request import InspectKind, InspectRequest
from mgpu_gui.core.modelfiles.inspection import inspect_model_file
from mgpu_gui.core.plain import to_plain


def answer(request: InspectRequest, headroom_mib: int) -> Event:
    """Read one file; every failure becomes an `InspectFailed` the parent can show."""
    name = os.path.basename(request.path) or request.path
    try:
        if request.kind is InspectKind.MODEL:
            info = inspect_model_file(request.path)
        else:
            info = inspect_data(request.path)
        return FileInspected({key: str(value) if isinstance(value, PurePath) else value
                              for key, value in to_plain(dataclasses.asdict(info)).items()})
    except UserError as error:
        return InspectFailed(str(error), type(error).__name__, user_error=True)
    except MemoryError:
        return InspectFailed(
            f"{name} is too large to read: reading its headers needs more than "
            f"{headroom_mib} MiB of memory, so it is damaged or not a model or data file "
            "(e.g. a zip bomb).", "MemoryError", user_error=True)
    except Exception as error:  # a damaged file the parsers did not expect, or a bug
        return InspectFailed(f"{type(error).__name__}: {error}", type(error).__name__,
                             user_error=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.inspector")
    parser.add_argument("--results-fd", type=int, required=True)
    parser.add_argument("--memory-mib", type=int, required=True)
    args = parser.parse_args(argv)
    os.set_inheritable(args.results_fd, False)
    limit = cap_memory(args.memory_mib << 20)
    with os.fdopen(args.results_fd, "w", buffering=1, encoding="utf-8") as results:
        results.write(InspectorReady(limit).to_json() + "\n")
        for line in sys.stdin:
            event = answer(InspectRequest.from_json(line), args.memory_mib)
            results.write(event.to_json() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
