"""Evaluate a trained model, or predict image files, in a child process.

Qt-free and TensorFlow-free, shared by `mgpu-train evaluate|predict` and (later)
the GUI's Evaluation view. The child, `mgpu_gui.processes.evaluator`, takes an
`EvaluateRequest` (the model and a data split under the run's devices: every
sample predicted; `EvaluationProgress`, then `EvaluationDone`) or a
`PredictRequest` (image files: `PredictionsMade`); it fails with an
`EvaluationFailed`. A child that cannot start, dies or is cancelled also ends in
an `EvaluationFailed`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgpu_gui.core.children.launch import Child, command_log, module_command
from mgpu_gui.core.children.runner import ChildProcesses, run_child
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.engines import Engine, backend_env, installed
from mgpu_gui.core.evaluation.result import Split
from mgpu_gui.core.events import (
    EvaluationDone,
    EvaluationFailed,
    EvaluationProgress,
    LogMessage,
    PredictionsMade,
    parse_event,
)

EvaluationOutcome = EvaluationDone | PredictionsMade | EvaluationFailed
LOG_NAME = "evaluate"


@dataclass(frozen=True)
class EvaluateRequest:
    """Which model, on which data (the run's own settings, or ones made for --data)."""

    model: Path
    config: RunConfig  # data, validation split, seed, image size, rescale, batch
    plan: DevicePlan
    split: Split | None = None  # None: the test set when there is one, else validation
    output: Path | None = None  # folder for evaluation.json and its predictions
    # The .py the model loads with (None: as its card or run records; folder.custom_objects_of)
    custom_objects: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "evaluate", "model": str(self.model), "config": self.config.to_dict(),
                "plan": self.plan.to_json(), "split": None if self.split is None
                else self.split.value, "output": None if self.output is None
                else str(self.output), "custom_objects": self.custom_objects}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvaluateRequest:
        return cls(Path(data["model"]), RunConfig.from_dict(data["config"]),
                   DevicePlan.from_json(data["plan"]),
                   None if data["split"] is None else Split(data["split"]),
                   None if data["output"] is None else Path(data["output"]),
                   data.get("custom_objects"))


@dataclass(frozen=True)
class PredictRequest:
    """Image files through a model file, as its card says they were prepared."""

    model: Path
    files: tuple[Path, ...]
    plan: DevicePlan  # one device: files one by one need no strategy
    top: int = 5
    custom_objects: str | None = None  # as EvaluateRequest's

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "predict", "model": str(self.model), "plan": self.plan.to_json(),
                "files": [str(f) for f in self.files], "top": self.top,
                "custom_objects": self.custom_objects}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PredictRequest:
        return cls(Path(data["model"]), tuple(Path(f) for f in data["files"]),
                   DevicePlan.from_json(data["plan"]), data["top"], data.get("custom_objects"))


def request_from_dict(data: dict[str, Any]) -> EvaluateRequest | PredictRequest:
    return PredictRequest.from_dict(data) if data["kind"] == "predict" else (
        EvaluateRequest.from_dict(data))


# The JAX engine trains where only JAX is installed; evaluate and predict read the data
# with tf.data and load the model on TensorFlow.
NO_TENSORFLOW = ("evaluate and predict run on TensorFlow, which is not installed here: install "
                 "mgpu-gui with its TensorFlow (pip install mgpu-gui), or evaluate the run on "
                 "a machine that has it; a model trained on the JAX engine loads there too.")


def evaluator_command(events_fd: int) -> list[str]:
    return module_command(Child.EVALUATOR, "--events-fd", str(events_fd))


class EvaluateJob:
    """One evaluator child, run to its end; `cancel()` (any thread) kills it."""

    def __init__(self, request: EvaluateRequest | PredictRequest,
                 on_progress: Callable[[EvaluationProgress], None] | None = None,
                 on_log: Callable[[str], None] | None = None,
                 on_output: Callable[[str], None] | None = None):
        self.request = request
        self.on_progress = on_progress
        self.on_log = on_log
        self.on_output = on_output
        self._children = ChildProcesses("evaluate-output", command_log(LOG_NAME))

    @property
    def log(self) -> Path | None:
        return self._children.log

    def cancel(self) -> None:
        self._children.cancel()

    def run(self) -> EvaluationOutcome:
        if not installed(Engine.TENSORFLOW):  # said before a child starts to fail on it
            return EvaluationFailed(NO_TENSORFLOW, "ConfigError", True)
        return run_child(self._children, evaluator_command, self.request.to_dict(),
                         {**self.request.plan.env, **backend_env(Engine.TENSORFLOW)},
                         self._message, "The evaluation process",
                         lambda error_type, message: EvaluationFailed(message, error_type,
                                                                      False),
                         self.on_output)

    def _message(self, message: dict[str, Any]) -> EvaluationOutcome | None:
        event = parse_event(json.dumps(message))
        if isinstance(event, EvaluationProgress) and self.on_progress is not None:
            self.on_progress(event)
        if isinstance(event, LogMessage) and self.on_log is not None:
            self.on_log(event.message)
        return event if isinstance(event, EvaluationDone | PredictionsMade | EvaluationFailed) \
            else None
