"""The user's command run when a run ends (`--on-finish`), for mail or chat.

Fired by the supervising process once per end of an attempt (a resumed run fires
for its own end only), so a run started from the CLI, the queue or another window
alerts with the app closed. An argument list, never a shell; bounded in time; what
it did goes to the run's worker.log, and its failure never fails the run.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.events import RunStatus

TIMEOUT_S = 30.0


@dataclass(frozen=True)
class FinishedRun:
    """What the command is told, in its environment (MGPU_RUN_*)."""

    run_id: int | None
    name: str
    status: RunStatus
    folder: Path
    best: str  # e.g. "val_loss 0.0663 (epoch 7)", or ""

    def environment(self) -> dict[str, str]:
        return {"MGPU_RUN_ID": "" if self.run_id is None else str(self.run_id),
                "MGPU_RUN_NAME": self.name, "MGPU_RUN_STATUS": self.status.value,
                "MGPU_RUN_FOLDER": str(self.folder), "MGPU_RUN_BEST": self.best}


def parse_command(text: str) -> tuple[str, ...]:
    """A command line as typed, split as a shell would split words (no shell runs it)."""
    try:
        return tuple(shlex.split(text))
    except ValueError as error:  # an unclosed quote
        raise ValueError(f"cannot split {text!r} into words: {error}") from None


def run_finish_command(command: tuple[str, ...], finished: FinishedRun,
                       timeout_s: float = TIMEOUT_S) -> str:
    """Run `command`; return one line saying how it went (for the run's log)."""
    shown = shlex.join(command)
    started = time.monotonic()
    try:
        # A session of its own: at the timeout its whole process group is stopped, the
        # children it started included (they kept running, and kept its output open).
        process = subprocess.Popen(list(command), env={**os.environ, **finished.environment()},
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as error:
        return f"On-finish command {shown} could not start: {error.strerror or error}."
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return f"On-finish command {shown} was stopped after {timeout_s:g} s."
    took = time.monotonic() - started
    said = output.decode(errors="replace").strip()
    tail = f"; it said: {said[-500:]}" if said else ""
    if process.returncode != 0:
        return f"On-finish command {shown} failed (exit {process.returncode}){tail}"
    return f"On-finish command {shown} ran in {took:.1f} s{tail}"
