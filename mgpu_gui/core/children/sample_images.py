"""Pictures of evaluated samples, drawn in a short-lived child (`processes/sample_images.py`).

`SampleImagesJob(request, on_part).run()` starts the child, hands each chunk of
pictures to `on_part(first, pngs)` as it arrives (on the job's thread) and
returns None when all are drawn, or a `SamplesDrawFailed` with the message to
show; `cancel()`, from any thread, kills it (another cell was chosen, or the
view closed). Qt-free, so the GUI's `ChildJobRunner` runs it in a QThread.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from mgpu_gui.core.children.data_check import CHILD_ENV
from mgpu_gui.core.children.launch import Child, command_log, module_command
from mgpu_gui.core.children.runner import ChildProcesses, run_child
from mgpu_gui.core.evaluation.samples import DrawRequest
from mgpu_gui.core.events import SamplesDrawFailed, SamplesDrawn, parse_event

MEMORY_MIB = 1024  # beyond the imports: one chunk of an array, one decoded image at a time


class SampleImagesJob:
    def __init__(self, request: DrawRequest, on_part: Callable[[int, list[str]], None]):
        self.request, self.on_part = request, on_part
        self._children = ChildProcesses("sample-images-output", command_log("sample-images"))

    def cancel(self) -> None:
        self._children.cancel()

    def run(self) -> SamplesDrawFailed | None:
        outcome = run_child(
            self._children, self._command, dataclasses.asdict(self.request), CHILD_ENV,
            self._message, "Drawing the samples",
            lambda kind, message: SamplesDrawFailed(message, kind, user_error=False))
        return outcome if isinstance(outcome, SamplesDrawFailed) else None

    def _command(self, events_fd: int) -> list[str]:
        return module_command(Child.SAMPLE_IMAGES, "--events-fd", str(events_fd),
                              "--memory-mib", str(MEMORY_MIB))

    def _message(self, message: dict[str, Any]) -> SamplesDrawn | SamplesDrawFailed | None:
        event = parse_event(json.dumps(message))
        if isinstance(event, SamplesDrawFailed):
            return event
        if not isinstance(event, SamplesDrawn):
            return None
        if event.final:
            return event
        self.on_part(event.first, event.pngs)
        return None


__all__ = ["SampleImagesJob"]
