"""Child entry of the Data view: a dataset's counts, samples, value range and image sizes.

    python -m mgpu_gui.processes.data_overview --events-fd N --memory-mib M  < request.json

One `OverviewRequest` as JSON on stdin; a `DataOverviewed` event per stage as
JSON lines on the inherited pipe `N` (the counts within moments, then the
thumbnails, then the bounded reads; the last one `final`), or a
`DataOverviewFailed`. Short-lived, one per view, like the data check: it may
read for seconds, which the warm inspector's 2 s requests must not wait behind.
No TensorFlow: numpy and Pillow. Its address space is capped at its imports
plus M MiB (arrays are streamed a chunk at a time).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from mgpu_gui.core.children.limits import cap_memory
from mgpu_gui.core.datasets.overview import DataOverview, OverviewRequest, overview_data
from mgpu_gui.core.events import DataOverviewed, DataOverviewFailed, Event
from mgpu_gui.core.plain import from_plain, to_plain
from mgpu_gui.processes.failure import failure_of


def answer(request: OverviewRequest, emit, memory_mib: int) -> Event:
    """The final figures; every failure becomes a `DataOverviewFailed`."""
    def plain(overview: DataOverview) -> dict:
        return to_plain(dataclasses.asdict(overview))

    try:
        final = overview_data(request, lambda part: emit(DataOverviewed(plain(part), False)))
    except MemoryError:
        return DataOverviewFailed(
            f"reading the data needs more than {memory_mib} MiB of memory beyond a chunk of "
            "its arrays, so a file is damaged or not a dataset (e.g. a zip bomb).",
            "MemoryError", user_error=True)
    except Exception as error:  # a UserError says what to fix; anything else is a bug
        return failure_of(error, DataOverviewFailed)
    return DataOverviewed(plain(final), True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.data_overview")
    parser.add_argument("--events-fd", type=int, required=True)
    parser.add_argument("--memory-mib", type=int, required=True)
    args = parser.parse_args(argv)
    os.set_inheritable(args.events_fd, False)
    request = from_plain(OverviewRequest, json.loads(sys.stdin.read()))
    cap_memory(args.memory_mib << 20)
    with os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8") as events:

        def emit(event: Event) -> None:
            events.write(event.to_json() + "\n")

        emit(answer(request, emit, args.memory_mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
