"""Client side of `replica_host`: one shared process per replica count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mgpu_gui.core.children import warm_start
from mgpu_gui.core.events import Event, parse_event

ROOT = Path(__file__).resolve().parents[2]


class ReplicaHost:
    def __init__(self, replicas: int):
        self.replicas = replicas
        # Made by a module- or session-scoped fixture, before the test's own start: its
        # export checks share this process's starter rather than start one of their own.
        warm_start.start_starter()
        events_r, events_w = os.pipe()
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONPATH": str(ROOT)}
        self.log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"replica_host_{replicas}.log",  # noqa: SIM115
                        "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.replica_host", str(replicas), str(events_w)],
            pass_fds=(events_w,), stdin=subprocess.PIPE, stdout=self.log, stderr=self.log,
            text=True, cwd=ROOT, env=env)
        os.close(events_w)
        self.events = os.fdopen(events_r, "r", encoding="utf-8")

    def run(self, run_dir: Path, stop_at: tuple[int, int] | None = None,
            fault: str | None = None) -> tuple[int, list[Event]]:
        """Run one job (with a test-only fault, a MGPU_GUI_FAULT value); returns the worker
        exit code and the events it emitted."""
        assert self.proc.stdin is not None
        request = {"run_dir": str(run_dir), "stop_at": stop_at, "fault": fault}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        found: list[Event] = []
        for line in self.events:
            data = json.loads(line)
            if data.get("type") == "job_done":
                return data["code"], found
            found.append(parse_event(line))
        raise RuntimeError(f"replica host {self.replicas} died; see {self.log.name}:\n"
                           + Path(self.log.name).read_text()[-3000:])

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.events.close()
        self.log.close()
