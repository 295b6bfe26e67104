"""Run one short-lived worker child at a time: request in, JSON events out, cancellable.

Qt-free and TensorFlow-free, shared by the batch finder (core/tools/batch_finder.py)
and the scaling test (core/tools/scaling_runner.py). A child gets its request as JSON on
stdin and writes its events as JSON lines to an inherited pipe (`--events-fd`);
what it prints (stdout and stderr: TensorFlow's start-up noise among it) is read on
a helper thread (`pump_output`, which the training worker's supervisor shares) and
goes to a log file, never to the terminal: a run's worker.log, or for a command
outside a run `command_log(name)` in the user's log folder, which the command names
when it fails. `on_output` gets it too (the CLI's --debug). Its last lines are
kept for the message when it dies without a result. The child starts in its own
session, so a terminal's Ctrl-C reaches only the parent.
`cancel()` may be called from any thread: it kills the running child, and no
other child starts. `run_child` runs one child to a typed outcome, never raising
for what the child does (it could not start, was cancelled, died without a result).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

from mgpu_gui.core.children.launch import CHILD_ENV
from mgpu_gui.core.children.warm_start import WarmChild, spawn
from mgpu_gui.core.eventtext import is_noise

OUTPUT_TAIL_LINES = 12

R = TypeVar("R")


@dataclass(frozen=True)
class ChildExit(Generic[R]):
    """How one child ended: its result (None when it sent none), exit code, last lines,
    and the log file that holds all of them (None: none was kept)."""

    result: R | None
    code: int
    tail: tuple[str, ...]
    log: Path | None = None


class ChildProcesses:
    """Starts children one at a time; `cancel()` kills the running one for good.

    With a `log`, what the children print goes there: the first child rewrites it,
    later ones (a batch search's probes) append."""

    def __init__(self, thread_name: str = "child-output", log: Path | None = None):
        self.thread_name = thread_name
        self.log = log
        self._log_mode = "w"
        self._proc: subprocess.Popen | WarmChild | None = None
        self._cancelled = False
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def run(self, command: Callable[[int], list[str]], request: dict[str, Any],
            env: dict[str, str], on_message: Callable[[dict[str, Any]], R | None],
            on_output: Callable[[str], None] | None = None,
            cwd: str | None = None) -> ChildExit[R] | None:
        """Run `command(events_fd)` to its end (in `cwd`), `env` added to this environment.

        `on_message` gets each event; what it returns (not None) is the child's result.
        None when cancelled before the child started.
        """
        events_r, events_w = os.pipe()
        env = {**os.environ, **CHILD_ENV, **env}
        try:
            with self._lock:
                if self._cancelled:
                    os.close(events_r)
                    return None
                # In its own session: a terminal's Ctrl-C reaches only the parent.
                self._proc = proc = spawn(command(events_w), pass_fds=(events_w,), env=env,
                                          cwd=cwd)
        except BaseException:
            os.close(events_r)
            raise
        finally:
            os.close(events_w)
        tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
        assert proc.stdout is not None
        pump = threading.Thread(target=pump_output,
                                args=(proc.stdout, self._open_log(), tail, on_output),
                                daemon=True, name=self.thread_name)
        pump.start()
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.write(json.dumps(request).encode())
            proc.stdin.close()
        result = None
        with os.fdopen(events_r, "r", encoding="utf-8") as events:
            for line in events:
                try:
                    message: dict[str, Any] = json.loads(line)
                except ValueError:
                    continue  # a torn line from a dying child
                result = on_message(message) or result
        code = proc.wait()
        pump.join(timeout=5)
        with self._lock:
            self._proc = None
        return ChildExit(result, code, tuple(tail), self.log)

    def _open_log(self) -> IO[str] | None:
        """The log file for the next child; none when it cannot be written (the job
        does not depend on its log)."""
        if self.log is None:
            return None
        try:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            log = open(self.log, self._log_mode, encoding="utf-8", errors="replace")  # noqa: SIM115 (closed by pump_output)
        except OSError:
            return None
        self._log_mode = "a"
        return log


def pump_output(stream: IO[bytes], log: IO[str] | None, tail: deque[str],
                on_output: Callable[[str], None] | None) -> None:
    """Every line a child prints, to its end: into `log` (flushed, so it can be read
    while the child runs), its `tail`, and `on_output`. Closes `stream` and `log`."""
    with stream, log if log is not None else contextlib.nullcontext():
        for raw in stream:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if log is not None:
                log.write(line + "\n")
                log.flush()
            tail.append(line)
            if on_output is not None:
                on_output(line)


def died_text(code: int, tail: Sequence[str], log: Path | None = None) -> tuple[str, str]:
    """How a child ended ("was killed by SIGKILL") and its last words (" Last output: ..."),
    startup noise left out, then where its full output is; the second is empty when it
    said nothing and kept no log."""
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    said = [line for line in tail if not is_noise(line)][-4:]
    last = " Last output: " + " | ".join(said) if said else ""
    if log is not None:
        last += f" Its full output is in {log}."
    return how, last


def run_child(children: ChildProcesses, command: Callable[[int], list[str]],
              request: dict[str, Any], env: dict[str, str],
              on_message: Callable[[dict[str, Any]], R | None], what: str,
              failed: Callable[[str, str], R],
              on_output: Callable[[str], None] | None = None) -> R:
    """The child's result, or `failed(error_type, message)` when it gives none: it could
    not start ("FailedToStart"), was cancelled ("Cancelled") or died ("ChildDied");
    `what` starts the message ("The model check")."""
    try:
        ended = children.run(command, request, env, on_message, on_output)
    except OSError as error:
        return failed("FailedToStart", f"{what} could not start: {error}")
    if ended is not None and ended.result is not None:
        return ended.result
    if ended is None or children.cancelled:
        return failed("Cancelled", f"{what} was cancelled.")
    how, last = died_text(ended.code, ended.tail, ended.log)
    return failed("ChildDied", f"{what} {how} before it answered.{last}")


def cancel_on_interrupt(cancel: Callable[[], None], what: str) -> Callable[[], bool]:
    """In a terminal command: Ctrl-C (or SIGTERM) says "Cancelling the <what>..." and
    calls `cancel` (which kills the running child; it started in its own session, so
    the signal reaches only this process). Returns "was it interrupted?"."""
    seen = [False]

    def on_interrupt(signum, frame):
        seen[0] = True
        print(f"\nCancelling the {what}...", file=sys.stderr, flush=True)
        cancel()

    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)
    return lambda: seen[0]


__all__ = ["OUTPUT_TAIL_LINES", "ChildExit", "ChildProcesses",
           "cancel_on_interrupt", "died_text", "pump_output", "run_child"]
