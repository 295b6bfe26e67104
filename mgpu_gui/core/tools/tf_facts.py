"""Ask TensorFlow about this machine, from a child process (the parent's side).

The About dialog, "Check my setup…" and `mgpu-train doctor` run the facts
child (`mgpu_gui.processes.tf_facts`, command line from `tf_facts_command()`):
the GUI process never imports TensorFlow, and a TensorFlow that aborts while
probing CUDA takes only that child down. Its answer, a `TfFactsGathered` event
on its events pipe, is read as a `doctor.TfFacts`; a child that cannot start,
dies or is cancelled gives a `TfFacts` with `error` saying so. The CLI calls
`ask_tensorflow`; the GUI runs `TfFactsJob` in a QThread (`gui.jobs.child_job`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mgpu_gui.core.children.launch import Child, command_log, module_command
from mgpu_gui.core.children.runner import ChildProcesses, run_child
from mgpu_gui.core.events import TfFactsGathered, parse_event
from mgpu_gui.core.tools.doctor import TfFacts


def tf_facts_command(events_fd: int) -> list[str]:
    """The argv of the facts child, answering on `events_fd` (program first)."""
    return module_command(Child.TF_FACTS, "--events-fd", str(events_fd))


LOG_NAME = "tensorflow-check"  # command_log(LOG_NAME): what the facts child printed


class TfFactsJob:
    """One facts child, run to its end; `cancel()` (any thread) kills it. `on_output`
    gets what it prints (which goes to its log file in any case)."""

    def __init__(self, on_output: Callable[[str], None] | None = None) -> None:
        self.on_output = on_output
        self._children = ChildProcesses("tf-facts-output", command_log(LOG_NAME))

    @property
    def log(self) -> Path | None:
        return self._children.log

    @property
    def cancelled(self) -> bool:
        return self._children.cancelled

    def cancel(self) -> None:
        self._children.cancel()

    def run(self) -> TfFacts:
        return run_child(self._children, tf_facts_command, {}, {}, _facts,
                         "the TensorFlow check",
                         lambda _error_type, message: TfFacts(error=message), self.on_output)


def _facts(message: dict[str, Any]) -> TfFacts | None:
    try:
        event = parse_event(json.dumps(message))
        return TfFacts.from_dict(event.facts) if isinstance(event, TfFactsGathered) else None
    except (ValueError, TypeError, KeyError) as exc:
        return TfFacts(error=f"the TensorFlow check answered nonsense ({exc})")


def ask_tensorflow(timeout_s: float = 180.0,
                   on_output: Callable[[str], None] | None = None) -> TfFacts:
    """Run the facts child and read its answer (for the CLI). Never raises for what the
    child does; a child still running after `timeout_s` is killed."""
    job = TfFactsJob(on_output)
    timer = threading.Timer(timeout_s, job.cancel)
    timer.daemon = True
    timer.start()
    try:
        facts = job.run()
    finally:
        timer.cancel()
    if job.cancelled:
        return TfFacts(error=f"the TensorFlow check did not answer within {timeout_s:.0f} s")
    return facts
