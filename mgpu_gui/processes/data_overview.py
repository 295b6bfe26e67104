"""Child entry of the Data view: a dataset's counts, samples, value range and image sizes.

    python -m mgpu_gui.processes.data_overview --events-fd N --memory-mib M  < request.json

One `OverviewRequest` as JSON on stdin; a `DataOverviewed` event per stage as
JSON lines on the inherited pipe `N` (the counts within moments, then the
thumbnails, then the bounded reads; the last one `final`), or a
`DataOverviewFailed`. Short-lived, one per view, like the data check: it may
read for seconds, which the warm inspector's 2 s requests must not wait behind.
No TensorFlow: numpy and Pillow. It starts, and is memory-capped, as
processes/capped.py says.
"""

from __future__ import annotations

import dataclasses
import sys

from mgpu_gui.core.datasets.overview import DataOverview, OverviewRequest, overview_data
from mgpu_gui.core.events import DataOverviewed, DataOverviewFailed, Event
from mgpu_gui.core.plain import from_plain, to_plain
from mgpu_gui.processes.capped import beyond_the_cap, serve
from mgpu_gui.processes.failure import failure_of


def answer(request: OverviewRequest, emit, memory_mib: int) -> Event:
    """The final figures; every failure becomes a `DataOverviewFailed`."""
    def plain(overview: DataOverview) -> dict:
        return to_plain(dataclasses.asdict(overview))

    try:
        final = overview_data(request, lambda part: emit(DataOverviewed(plain(part), False)))
    except MemoryError:
        return DataOverviewFailed(beyond_the_cap(memory_mib), "MemoryError", user_error=True)
    except Exception as error:  # a UserError says what to fix; anything else is a bug
        return failure_of(error, DataOverviewFailed)
    return DataOverviewed(plain(final), True)


def main(argv: list[str] | None = None) -> int:
    return serve("mgpu_gui.processes.data_overview",
                 lambda data: from_plain(OverviewRequest, data), answer, argv)


if __name__ == "__main__":
    sys.exit(main())
