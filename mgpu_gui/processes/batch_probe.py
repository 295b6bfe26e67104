"""Child-process entry that tries one batch size on one device for the batch finder.

    python -m mgpu_gui.processes.batch_probe --events-fd N  < request.json

The request (one JSON object on stdin) holds the RunConfig (its batch per
replica is the batch to try), the one-device DevicePlan, the number of
training steps and the memory cap in bytes (or null). Progress and the result
go as JSON lines to the inherited pipe `N` (stdout and stderr belong to Keras
and TensorFlow):

    {"type": "phase", "phase": "building" | "training"}
    {"type": "result", ...ProbeResult...}            (always last, also on failure)

The probe builds and compiles the run's model under a one-device strategy of the
run's engine (MirroredStrategy, or DataParallel on JAX) with the same `prepare` as
training, then trains a few real steps (forward, backward, optimizer update), so
activations, gradients and optimizer slots all count. Its peak memory:
- on a GPU, the engine's allocator peak (engine/device_memory.py): the tensors, not
  the CUDA context around them. Memory grows as needed, and running out of it
  (TensorFlow's ResourceExhaustedError, JAX's RESOURCE_EXHAUSTED) means the batch
  does not fit.
- on CPU, the process's peak resident memory (`ru_maxrss`): the framework itself,
  the model, the data and the step (JAX's CPU devices keep no statistics). A
  watchdog thread ends the probe as soon as that passes the cap (checked every
  20 ms), so a probe overshoots the cap by at most what it allocates in that
  time. An address-space limit (RLIMIT_AS) would be the classic way, but
  TensorFlow reserves about 2.6 GB of virtual memory before any model exists, so
  it cannot express a cap.
The probe also volunteers as the kernel's first victim should the machine run
out of memory (oom_score_adj 1000), so an out-of-memory kill never lands on
another run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from mgpu_gui.core.config import DeviceKind, RunConfig
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.engines import Engine
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.tools.batch_search import (
    ProbeResult,
    ProbeStatus,
    format_memory,
    is_out_of_memory,
)

Emit = Callable[[dict[str, Any]], None]
WATCH_INTERVAL_S = 0.02


def peak_resident_bytes() -> int:
    """This process's peak resident memory (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def volunteer_for_oom_killer() -> None:
    """Ask the kernel to kill this process first when memory runs out (no privilege needed
    to raise one's own score)."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


class CapWatchdog:
    """Calls `over(peak)` once, from its own thread, when `peak()` passes `cap`."""

    def __init__(self, cap: int, peak: Callable[[], int], over: Callable[[int], None],
                 interval: float = WATCH_INTERVAL_S):
        self.cap, self.peak, self.over, self.interval = cap, peak, over, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="cap-watchdog")

    def start(self) -> CapWatchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)

    def _watch(self) -> None:
        while not self._stop.is_set():
            now = self.peak()
            if now > self.cap:
                self.over(now)
                return
            self._stop.wait(self.interval)


class Probe:
    """One batch on one device: build, train `steps` steps, measure the peak."""

    def __init__(self, config: RunConfig, plan: DevicePlan, steps: int, cap: int | None,
                 emit: Emit, exit_now: Callable[[int], None] = os._exit):
        self.config, self.plan, self.steps, self.cap = config, plan, steps, cap
        self.emit, self.exit_now = emit, exit_now
        self.batch = config.batch_per_replica
        self.gpu = plan.kind is DeviceKind.GPU
        self.engine = Engine(config.engine)
        self.stage = "setup"
        self.base: int | None = None
        self.started = time.monotonic()

    def result(self, status: ProbeStatus, peak: int | None, message: str = "",
               error_type: str = "") -> ProbeResult:
        return ProbeResult(self.batch, status, peak_bytes=peak, base_bytes=self.base,
                           seconds=round(time.monotonic() - self.started, 3), stage=self.stage,
                           message=message, error_type=error_type)

    def peak(self) -> int | None:
        if not self.gpu:
            return peak_resident_bytes()
        try:
            from mgpu_gui.engine.device_memory import peak_device_bytes

            return peak_device_bytes(self.engine)
        except Exception:  # the engine not started yet, or the device is gone
            return None

    def run(self) -> ProbeResult:
        watchdog = None
        if self.cap is not None and not self.gpu:
            watchdog = CapWatchdog(self.cap, peak_resident_bytes, self._over_cap).start()
        try:
            return self._run()
        except Exception as error:
            return self._failed(error)
        finally:
            if watchdog is not None:
                watchdog.stop()

    def _run(self) -> ProbeResult:
        from mgpu_gui.engine.inputs import pipeline_for
        from mgpu_gui.engine.strategy import apply_device_env, make_strategy

        apply_device_env(self.plan, engine=self.engine)  # before Keras, TF or JAX starts
        import keras

        from mgpu_gui.engine.training import prepare

        strategy, _ = make_strategy(self.plan, self.engine, pipeline_for(self.config))
        self.emit({"type": "phase", "phase": "building"})
        if self.config.seed is not None:
            keras.utils.set_random_seed(self.config.seed)
        setup = prepare(self.config, strategy, lambda message, level="info": self.emit(
            {"type": "log", "level": level, "message": message}))
        self.base = self.peak()
        self.stage = "training"
        self.emit({"type": "phase", "phase": "training"})
        self._fit(setup)
        peak = self.peak()
        if self.cap is not None and peak is not None and peak > self.cap:
            return self.result(ProbeStatus.TOO_BIG, peak, self._over_text(peak))
        return self.result(ProbeStatus.FITS, peak)

    def _fit(self, setup: Any) -> None:
        """The run's steps; with XLA as training.py sets it up (outside `prepare`), and
        without it, as a run goes on, when XLA cannot compile the model."""
        use_xla = bool(getattr(self.config, "jit_compile", False))
        if use_xla:
            from mgpu_gui.engine import xla

            use_xla = not xla.unsupported_layers(setup.model)
            if use_xla:
                xla.enable(setup.model)
        try:
            setup.model.fit(setup.train, epochs=1, steps_per_epoch=self.steps, shuffle=False,
                            verbose=0)
        except Exception as error:
            if not use_xla or xla.compile_error(error) is None:
                raise
            xla.disable(setup.model)
            setup.model.fit(setup.train, epochs=1, steps_per_epoch=self.steps, shuffle=False,
                            verbose=0)

    def _failed(self, error: BaseException) -> ProbeResult:
        name, text = type(error).__name__, " ".join(str(error).split())
        if is_out_of_memory(name, text):
            where = ("before the first step (the model and data alone)"
                     if self.stage == "setup" else "while training")
            return self.result(ProbeStatus.TOO_BIG, self.peak(),
                               f"out of memory {where}: {text[:200]}", name)
        if isinstance(error, UserError):
            return self.result(ProbeStatus.ERROR, self.peak(), str(error), name)
        return self.result(ProbeStatus.ERROR, self.peak(), f"{name}: {text[:400]}", name)

    def _over_text(self, peak: int) -> str:
        when = "before the first step" if self.stage == "setup" else "while training"
        return f"over the cap {when} ({format_memory(peak)} > {format_memory(self.cap)})"

    def _over_cap(self, peak: int) -> None:
        """From the watchdog: report and end the process at once, mid-allocation."""
        self.emit({"type": "result",
                   **self.result(ProbeStatus.TOO_BIG, peak, self._over_text(peak)).to_dict()})
        self.exit_now(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.batch_probe")
    parser.add_argument("--events-fd", type=int, required=True)
    args = parser.parse_args(argv)
    volunteer_for_oom_killer()
    request = json.loads(sys.stdin.read())
    pipe = os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8")
    lock = threading.Lock()  # the watchdog thread may report while the main thread logs

    def emit(message: dict[str, Any]) -> None:
        with lock:
            pipe.write(json.dumps(message) + "\n")
            pipe.flush()

    cap = request.get("cap_bytes")
    probe = Probe(RunConfig.from_dict(request["config"]),
                  DevicePlan.from_json(json.dumps(request["plan"])), int(request["steps"]),
                  int(cap) if cap is not None else None, emit)
    result = probe.run()
    emit({"type": "result", **result.to_dict()})
    pipe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
