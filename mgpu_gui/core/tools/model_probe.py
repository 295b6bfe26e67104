"""The model probe, parent side: build a run's model in a child process, typed outcome out.

The probe child (`mgpu_gui.processes.model_probe`) loads or builds a run's
model the way training does, on the CPU, and ends with `ModelProbed` or
`ModelProbeFailed` on its events pipe (user code and TensorFlow print freely
on stdout and stderr, which are kept only as the tail for a crash message).
A probe that cannot start, dies or is cancelled also ends in a
`ModelProbeFailed`. The GUI runs `ModelProbeJob` in a QThread
(`gui.jobs.child_job`); nothing on this side imports TensorFlow.
"""

from __future__ import annotations

import json
from typing import Any

from mgpu_gui.core.children.launch import Child, command_log, module_command
from mgpu_gui.core.children.runner import ChildProcesses, run_child
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.events import ModelProbed, ModelProbeFailed, parse_event

ProbeOutcome = ModelProbed | ModelProbeFailed
PROBE_ENV = {"CUDA_VISIBLE_DEVICES": ""}  # the probe must never take GPU memory


def probe_command(events_fd: int) -> list[str]:
    """The argv of a probe that reads its RunConfig on stdin (program first)."""
    return module_command(Child.MODEL_PROBE, "--events-fd", str(events_fd))


class ModelProbeJob:
    """One probe child, run to its end; `cancel()` (any thread) kills it."""

    def __init__(self, config: RunConfig):
        self.config = config
        self._children = ChildProcesses("model-probe-output", command_log("model-check"))

    def cancel(self) -> None:
        self._children.cancel()

    def run(self) -> ProbeOutcome:
        return run_child(self._children, probe_command, self.config.to_dict(), PROBE_ENV,
                         _outcome, "The model check",
                         lambda error_type, message: ModelProbeFailed(message, error_type))


def _outcome(message: dict[str, Any]) -> ProbeOutcome | None:
    event = parse_event(json.dumps(message))
    return event if isinstance(event, ModelProbed | ModelProbeFailed) else None
