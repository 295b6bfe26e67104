"""The zoo's commands, as a user types them: `mgpu-train` subprocesses whose outcome is
judged into a Cell (done, refused before training, refused, failed before or after it).
Shared by tests/benchmarks/zoo.py (the whole zoo, every stage, both engines) and
tests/test_zoo.py (the suite's smallest part of it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mgpu_gui.core.events import (
    EpochEnd,
    Event,
    ExportNotMade,
    RunFailed,
    RunFinished,
    parse_event,
)
from tests.zoo import ZooModel

ROOT = Path(__file__).resolve().parents[2]
BUG_MARKERS = ("This is a bug", "Traceback (most recent call last)")
TIMEOUT_S = 1200


def zoo_env(store: Path) -> dict[str, str]:
    """A command's environment: no GPU, a run store of its own, the engine its flags say."""
    # The tree first (the zoo's files import tests.zoo), what was there kept: under
    # pytest, the folders its warm starter was started with (a PYTHONPATH that differs
    # has every child started fresh).
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": path, "MGPU_GUI_STORE": str(store)}
    env.pop("KERAS_BACKEND", None)
    return env


def train_command(entry: ZooModel, prepared: dict, work: Path, engine: str, replicas: int
                  ) -> list[str]:
    """`mgpu-train train` of `entry` on CPU replicas, runs under `work` (its store there
    too), events as JSON; epochs, name and exports to add."""
    command = ["--store", str(work / "store.sqlite"), "train", "--model", prepared["model"],
               "--data", prepared["data"], "--cpu", "--replicas", str(replicas),
               "--batch-per-replica", "8", "--seed", "7", "--engine", engine,
               "-o", str(work / "runs"), "--json", *entry.train_args]
    if entry.custom_objects_path:
        command += ["--custom-objects", str(entry.custom_objects_path)]
    return command


def mgpu_train() -> list[str]:
    """The venv's console script next to this Python, as users run it."""
    script = Path(sys.executable).parent / "mgpu-train"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mgpu_gui.cli.main"]


@dataclass
class Cell:
    kind: str  # ok, refused_early, refused, na, failed_early, failed
    text: str = ""

    def show(self) -> str:
        return {"ok": "✓" + (f" ({self.text})" if self.text else ""),
                "na": "n/a" + (f" ({self.text})" if self.text else ""),
                "refused_early": f"refused before training: {self.text}",
                "refused": f"refused: {self.text}",
                "failed_early": f"FAILED before training: {self.text}",
                "failed": f"FAILED after training: {self.text}"}[self.kind]

    def short(self) -> str:
        return {"ok": "✓", "na": "n/a", "refused_early": "refused (before)",
                "refused": "refused", "failed_early": "FAILED (before)",
                "failed": "FAILED"}[self.kind]

    @property
    def failed(self) -> bool:
        return self.kind.startswith("failed")


@dataclass
class Outcome:
    """One command: its exit code, its events (with --json), its other output."""

    rc: int
    events: list[Event] = field(default_factory=list)
    stdout: str = ""  # lines that are not events
    stderr: str = ""
    seconds: float = 0.0

    def of(self, cls: type) -> list:
        return [e for e in self.events if isinstance(e, cls)]

    @property
    def bug(self) -> bool:
        return any(m in self.stderr or m in self.stdout for m in BUG_MARKERS)

    def message(self, limit: int = 300) -> str:
        """What went wrong as the user reads it: its first line, at most `limit` characters
        (Keras' own messages can hold a whole config or array)."""
        text = self._message()
        return text if len(text) <= limit else text[:limit - 1] + "…"

    def _message(self) -> str:
        for line in self.stderr.splitlines():
            if line.startswith("error:"):
                return line.removeprefix("error:").strip()
        for event in self.of(RunFailed) + self.of(ExportNotMade):
            return event.message.strip().splitlines()[0]
        for event in self.of(RunFinished):
            if event.message:
                return event.message.strip().splitlines()[0]
        lines = [ln for ln in (self.stderr + "\n" + self.stdout).splitlines() if ln.strip()]
        return lines[-1].strip() if lines else f"exit code {self.rc}, nothing said"


def run_cli(args: list[str], log: Path, env: dict[str, str], on_event=None) -> Outcome:
    """Run `mgpu-train ARGS`; events (JSON lines on stdout) go to `on_event(event, proc)`."""
    started = time.monotonic()
    with open(log.with_suffix(".stderr"), "w") as err:
        proc = subprocess.Popen([*mgpu_train(), *args], stdout=subprocess.PIPE, stderr=err,
                                text=True, cwd=ROOT, env=env)
        timer = threading.Timer(TIMEOUT_S, proc.kill)
        timer.start()
        outcome = Outcome(rc=0)
        other: list[str] = []
        assert proc.stdout is not None
        with proc.stdout, open(log.with_suffix(".stdout"), "w") as raw:
            for line in proc.stdout:
                raw.write(line)
                event = None
                if line.startswith("{"):
                    try:
                        event = parse_event(line)
                    except (ValueError, KeyError, TypeError):
                        event = None
                if event is None:
                    other.append(line)
                    continue
                outcome.events.append(event)
                if on_event is not None:
                    on_event(event, proc)
        outcome.rc = proc.wait()
        timer.cancel()
    outcome.stdout = "".join(other)
    outcome.stderr = log.with_suffix(".stderr").read_text(errors="replace")
    outcome.seconds = time.monotonic() - started
    if outcome.rc in (-signal.SIGKILL, 137) and outcome.seconds >= TIMEOUT_S:
        outcome.stderr += f"\nerror: timed out after {TIMEOUT_S} s (killed by the benchmark)"
    return outcome


def judge_run(outcome: Outcome, expect: int = 0) -> Cell:
    """A training command (train, stop, resume): refused at once, done, or failed."""
    epochs = outcome.of(EpochEnd)
    if outcome.rc == expect and not outcome.bug:
        return Cell("ok")
    if outcome.rc == 2 and not epochs and not outcome.bug:
        return Cell("refused_early", outcome.message())
    return Cell("failed" if epochs else "failed_early",
                f"exit {outcome.rc}: {outcome.message()}")


def judge_tool(outcome: Outcome, entry: ZooModel, stage: str) -> Cell:
    """A command on a trained model (evaluate, predict, export, resume). A refusal (exit 2)
    is accepted only where the zoo entry names it as a limit the README states; a
    trained model that a later stage refuses otherwise is a failure after training."""
    if outcome.rc == 0 and not outcome.bug:
        return Cell("ok")
    message = outcome.message()
    if outcome.rc == 2 and not outcome.bug:
        if any(s == stage and words in message for s, words in entry.known_refusals):
            return Cell("refused", message)
        return Cell("failed", f"refused (exit 2): {message}")
    return Cell("failed", f"exit {outcome.rc}: {message}")


def prepare_in_child(names: list[str], out: Path) -> dict[str, dict]:
    """The zoo's data and generated model files, written by a child on TensorFlow."""
    code = ("import json, sys; from dataclasses import asdict; from pathlib import Path; "
            "from tests.zoo import prepare; "
            "print('PREPARED ' + json.dumps({k: asdict(v) for k, v in "
            "prepare(sys.argv[1].split(','), Path(sys.argv[2])).items()}))")
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3",
           "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, ",".join(names), str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PREPARED ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"preparing the zoo failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("PREPARED "))
