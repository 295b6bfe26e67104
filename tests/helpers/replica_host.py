"""A long-lived process with N logical CPU replicas that runs training jobs for tests.

    python -m tests.helpers.replica_host N EVENTS_FD

Logical devices can be configured once per process, before TensorFlow starts;
starting a worker per test would pay TensorFlow's import and device setup each
time. Each request on stdin is a JSON object {"run_dir": ..., "stop_at": [epoch,
batch] | null, "fault": a MGPU_GUI_FAULT value | null}; every event goes to
EVENTS_FD as a JSON line, and each job ends with the line {"type": "job_done",
"code": N}. Jobs run through the worker's own `run_job`, so the tests exercise the
code path the app uses.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from mgpu_gui.core.config import DeviceKind
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.events import BatchEnd, Event
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.processes.training_worker import EventChannel, run_job


class StopAt:
    """Wraps a channel: requests a stop once the given batch was reported."""

    def __init__(self, channel: EventChannel, stop: threading.Event, at: tuple[int, int] | None):
        self.channel, self.stop, self.at = channel, stop, at

    @property
    def started(self) -> bool:
        return self.channel.started

    def emit(self, event: Event) -> None:
        self.channel.emit(event)
        if self.at and isinstance(event, BatchEnd) and (event.epoch, event.batch) >= self.at:
            self.stop.set()


def main() -> None:
    replicas, events_fd = int(sys.argv[1]), int(sys.argv[2])
    plan = DevicePlan(kind=DeviceKind.CPU, replicas=replicas, gpus=(),
                      env={"CUDA_VISIBLE_DEVICES": ""}, names=[], note="")
    from mgpu_gui.engine.strategy import apply_device_env, make_strategy

    apply_device_env(plan)
    strategy, xops = make_strategy(plan)
    pipe = os.fdopen(events_fd, "w", buffering=1, encoding="utf-8")
    for line in sys.stdin:
        request = json.loads(line)
        run_dir = RunDir(Path(request["run_dir"]))
        channel = EventChannel(pipe, run_dir.events_jsonl)
        stop = threading.Event()
        at = tuple(request["stop_at"]) if request.get("stop_at") else None
        extra = []
        if request.get("fault"):
            from mgpu_gui.testing import faults

            extra = [faults.fault_callback(faults.Fault.parse(request["fault"]), run_dir.path)]
        code = run_job(run_dir, plan, strategy, xops, StopAt(channel, stop, at), stop,
                       extra_callbacks=extra)
        channel.close()
        import keras

        keras.backend.clear_session()
        pipe.write(json.dumps({"type": "job_done", "code": code}) + "\n")


if __name__ == "__main__":
    main()
