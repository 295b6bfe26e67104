"""Export or unwrap a model file in a child process: request in, typed events out.

Qt-free and TensorFlow-free, shared by `mgpu-train export|unwrap` (which calls
`ExportJob.run()` directly) and the GUI (which calls it from a QThread). The
child, `mgpu_gui.processes.export`, loads the model, writes the export and has
it reloaded by a verifier child of its own; it says what it does as `LogMessage`
events (an unwrap's recovery steps) and ends with `ExportDone` or
`ExportFailed`. A child that cannot start, dies or is cancelled also ends in an
`ExportFailed`: `run()` never raises for what the child does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from mgpu_gui.core.children.launch import Child, command_log, module_command
from mgpu_gui.core.children.runner import ChildProcesses, died_text
from mgpu_gui.core.events import ExportDone, ExportFailed, LogMessage, parse_event

ExportOutcome = ExportDone | ExportFailed


class ExportMode(StrEnum):
    EXPORT = "export"  # a run's .keras/.h5 model to another format
    UNWRAP = "unwrap"  # a legacy multi-GPU wrapper file to its plain template


@dataclass(frozen=True)
class ExportRequest:
    """What the export child writes; paths absolute (the verifier runs elsewhere)."""

    mode: ExportMode
    source: Path
    output: Path
    format: str
    custom_objects: Path | None = None  # unwrap: a .py defining a `custom_objects` dict

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "source": str(self.source), "output": str(self.output),
                "format": self.format,
                "custom_objects": None if self.custom_objects is None else str(self.custom_objects)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExportRequest:
        custom = data.get("custom_objects")
        return cls(ExportMode(data["mode"]), Path(data["source"]), Path(data["output"]),
                   data["format"], None if custom is None else Path(custom))


def export_command(events_fd: int) -> list[str]:
    return module_command(Child.EXPORT, "--events-fd", str(events_fd))


def done_line(mode: ExportMode, done: ExportDone) -> str:
    """The one-line result (scripts parse `Exported keras model: PATH (...)`)."""
    verb = "Exported" if mode is ExportMode.EXPORT else "Wrote"
    return (f"{verb} {done.format} model: {done.path} (reloaded in a fresh process, "
            f"max prediction difference {done.max_abs_diff:.2g})")


def failed_text(failed: ExportFailed, log: Path | None = None) -> str:
    """Why it failed, for the user; a bug names its exception type. With a `log`, where
    the child's full output is."""
    text = (failed.message if failed.user_error or not failed.error_type
            else f"unexpected {failed.error_type}: {failed.message}")
    if log is None:
        return text
    return f"{text} The process's full output (TensorFlow's included) is in {log}."


class ExportJob:
    """One export child, run to its end; `cancel()` (any thread) kills it."""

    def __init__(self, request: ExportRequest, on_log: Callable[[str], None] | None = None,
                 on_output: Callable[[str], None] | None = None):
        self.request = request
        self.on_log = on_log
        self.on_output = on_output
        # What the child and its verifier print (TensorFlow's start-up among it).
        self._children = ChildProcesses("export-output", command_log(request.mode.value))

    @property
    def log(self) -> Path | None:
        """The log file of the child's output: named to the user when the job fails."""
        return self._children.log

    def cancel(self) -> None:
        self._children.cancel()

    def run(self) -> ExportOutcome:
        try:
            ended = self._children.run(export_command, self.request.to_dict(), {}, self._message,
                                       self.on_output)
        except OSError as error:
            return ExportFailed(f"The export process could not start: {error}", "",
                                user_error=False)
        if ended is not None and ended.result is not None:
            return ended.result
        if ended is None or self._children.cancelled:
            return ExportFailed("The export was cancelled; nothing was written.", "",
                                user_error=False)
        how, last = died_text(ended.code, ended.tail)
        return ExportFailed(f"The export process {how} before it finished.{last}", "",
                            user_error=False)

    def _message(self, message: dict[str, Any]) -> ExportOutcome | None:
        event = parse_event(json.dumps(message))
        if isinstance(event, LogMessage) and self.on_log is not None:
            self.on_log(event.message)
        return event if isinstance(event, ExportDone | ExportFailed) else None
