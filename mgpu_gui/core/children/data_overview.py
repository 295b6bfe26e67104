"""The Data view's figures, read in a short-lived child (`processes/data_overview.py`).

`DataOverviewJob(request, on_update).run()` starts the child, hands each partial
`DataOverview` to `on_update` as it arrives (the counts within moments, on the
job's thread) and returns the final one, or a `DataOverviewFailed` with the
message to show. The child bounds its own reading (`OverviewRequest.budget_s`
per stage); `cancel()`, from any thread, kills it (the view closed, or the data
changed). Qt-free, so the GUI's `ChildJobRunner` runs it in a QThread.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from mgpu_gui.core.children.data_check import CHILD_ENV
from mgpu_gui.core.children.launch import Child, command_log, module_command
from mgpu_gui.core.children.runner import ChildProcesses, run_child
from mgpu_gui.core.datasets.overview import DataOverview, OverviewRequest
from mgpu_gui.core.events import DataOverviewed, DataOverviewFailed, parse_event
from mgpu_gui.core.plain import from_plain

MEMORY_MIB = 1024  # beyond the imports: label arrays, one chunk of x, the thumbnails

DataOverviewOutcome = DataOverview | DataOverviewFailed


class DataOverviewJob:
    """One overview child, run to its end; `cancel()` (any thread) kills it."""

    def __init__(self, request: OverviewRequest,
                 on_update: Callable[[DataOverview], None] | None = None,
                 memory_mib: int = MEMORY_MIB):
        self.request = request
        self.on_update = on_update
        self.memory_mib = memory_mib
        self._children = ChildProcesses("data-overview-output", command_log("data-overview"))

    def cancel(self) -> None:
        self._children.cancel()

    def run(self) -> DataOverviewOutcome:
        return run_child(
            self._children, self._command, dataclasses.asdict(self.request), CHILD_ENV,
            self._message, "The data overview",
            lambda kind, message: DataOverviewFailed(message, kind, user_error=False))

    def _command(self, events_fd: int) -> list[str]:
        return module_command(Child.DATA_OVERVIEW, "--events-fd", str(events_fd),
                              "--memory-mib", str(self.memory_mib))

    def _message(self, message: dict[str, Any]) -> DataOverviewOutcome | None:
        event = parse_event(json.dumps(message))
        if isinstance(event, DataOverviewFailed):
            return event
        if not isinstance(event, DataOverviewed):
            return None
        overview = from_plain(DataOverview, event.overview)
        if event.final:
            return overview
        if self.on_update is not None:
            self.on_update(overview)
        return None


__all__ = ["DataOverviewJob", "DataOverviewOutcome"]
