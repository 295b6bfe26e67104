"""The augmentation preview's pictures, made in a short-lived child
(`processes/augment_preview.py`).

`AugmentPreviewJob(request, on_row).run()` starts the child, hands each image's row
to `on_row` as it arrives (on the job's thread) and returns the `AugmentPreviewDone`,
or an `AugmentPreviewFailed` with the message to show; `cancel()`, from any thread,
kills it (the strengths changed, or the dialog closed). Qt-free, so the GUI's
`ChildJobRunner` runs it in a QThread.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from mgpu_gui.core.augment_preview import PreviewRequest
from mgpu_gui.core.children.data_check import CHILD_ENV
from mgpu_gui.core.children.launch import Child, command_log, module_command
from mgpu_gui.core.children.runner import ChildProcesses, run_child
from mgpu_gui.core.events import (
    AugmentPreviewDone,
    AugmentPreviewFailed,
    AugmentPreviewRow,
    parse_event,
)

MEMORY_MIB = 1536  # beyond TensorFlow's start: its thread pools, one decoded image at a time
# The augmentation runs on the host's CPU in training too (tf.data): no GPU to start or hold.
ENV = {**CHILD_ENV, "CUDA_VISIBLE_DEVICES": ""}


class AugmentPreviewJob:
    def __init__(self, request: PreviewRequest, on_row: Callable[[AugmentPreviewRow], None]):
        self.request, self.on_row = request, on_row
        self._children = ChildProcesses("augment-preview-output",
                                        command_log("augment-preview"))

    def cancel(self) -> None:
        self._children.cancel()

    def run(self) -> AugmentPreviewDone | AugmentPreviewFailed:
        return run_child(
            self._children, self._command, dataclasses.asdict(self.request), ENV,
            self._message, "The augmentation preview",
            lambda kind, message: AugmentPreviewFailed(message, kind, user_error=False))

    def _command(self, events_fd: int) -> list[str]:
        return module_command(Child.AUGMENT_PREVIEW, "--events-fd", str(events_fd),
                              "--memory-mib", str(MEMORY_MIB))

    def _message(self, message: dict[str, Any]
                 ) -> AugmentPreviewDone | AugmentPreviewFailed | None:
        event = parse_event(json.dumps(message))
        if isinstance(event, AugmentPreviewRow):
            self.on_row(event)
            return None
        return event if isinstance(event, AugmentPreviewDone | AugmentPreviewFailed) else None


__all__ = ["AugmentPreviewJob"]
