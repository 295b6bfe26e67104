"""Child-process entry that times one device count of a scaling test.

    python -m mgpu_gui.processes.scaling_worker --events-fd N  < request.json

The request (one JSON object on stdin) holds the RunConfig (its batch per
replica already set for this count), the DevicePlan, and the number of
warm-up and timed steps. Progress and the result go as JSON lines to the
inherited pipe `N` (stdout and stderr belong to Keras and TensorFlow):

    {"type": "phase", "phase": "building" | "warmup" | "timing"}
    {"type": "step", "step": 3, "of": 30}            (timed steps only)
    {"type": "result", ...CountResult...}            (always last, also on failure)

The devices and the engine's environment (KERAS_BACKEND, JAX's XLA settings) are
set up before Keras, TensorFlow or JAX is imported, which is why each count needs a
process of its own. The job runs the same strategy (MirroredStrategy, or JAX's
DataParallel behind the same surface), the same `prepare` (model and pipeline under
the strategy) and the same `fit` as training, so the figures are those of a real
run: each step's end is synchronised by Keras fetching the step's loss for the
callbacks, and a step's time is the wall time between two consecutive step ends.
The timed steps' input wait is measured as in training (engine/input_wait.py), on
the TensorFlow engine only: on JAX it is reported as not measured (None), never 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.engines import Engine
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.tools.batch_search import is_out_of_memory
from mgpu_gui.core.tools.scaling import CountResult, PointStatus

Emit = Callable[[dict[str, Any]], None]


def time_steps(config: RunConfig, strategy: Any, *, steps: int, warmup: int,
               emit: Emit) -> CountResult:
    """Build the run's model and data under `strategy`, then time `steps` steps after
    `warmup` steps (the first traces and compiles the step function). The input wait
    is None (not measured) on the JAX engine, whose trainer feeds its step another way."""
    import keras

    from mgpu_gui.engine.training import prepare

    replicas = strategy.num_replicas_in_sync
    emit({"type": "phase", "phase": "building"})
    if config.seed is not None:
        keras.utils.set_random_seed(config.seed)
    setup = prepare(config, strategy, lambda message, level="info": emit(
        {"type": "log", "level": level, "message": message}))
    callbacks, take_wait = _input_wait(Engine(config.engine))
    timer = StepClock(warmup, steps, emit, on_timing=take_wait)  # drops the warm-up's
    emit({"type": "phase", "phase": "warmup"})
    setup.model.fit(setup.train, epochs=1, steps_per_epoch=warmup + steps,
                    callbacks=[*callbacks, timer.keras_callback()], shuffle=False, verbose=0)
    return CountResult(
        devices=replicas, global_batch=setup.global_batch,
        batch_per_replica=setup.global_batch // replicas, step_times_s=tuple(timer.times),
        warmup_s=timer.warmup_s, device_names=tuple(strategy.extended.worker_devices),
        input_wait=take_wait())


def _input_wait(engine: Engine) -> tuple[list[Any], Callable[[], float | None]]:
    """The callbacks that measure the input wait, and what reads (and resets) it. Nothing
    on JAX: engine/input_wait.py wraps TensorFlow's train function (and imports it)."""
    if engine is Engine.JAX:
        return [], lambda: None
    from mgpu_gui.engine.input_wait import InputWaitMeter, TimeInputWait

    waits = InputWaitMeter()
    return [TimeInputWait(waits)], waits.take_epoch


class StepClock:
    """Records the wall time between consecutive step ends after the warm-up.

    Fed by a Keras callback (`keras_callback`): Keras calls `on_train_batch_end`
    after turning the step's logs into Python floats (a callback that overrides
    it turns off async dispatch), so each call happens once that step's loss
    exists: a device sync per step. Plain Python, so tests can drive it.
    """

    def __init__(self, warmup: int, steps: int, emit: Emit,
                 clock: Callable[[], float] = time.perf_counter,
                 on_timing: Callable[[], object] = lambda: None):
        self.warmup, self.steps, self.emit, self.clock = warmup, steps, emit, clock
        self.on_timing = on_timing  # called as the timed steps begin
        self.times: list[float] = []
        self.warmup_s = 0.0
        self._start = 0.0
        self._last = 0.0

    def begin(self) -> None:
        self._start = self._last = self.clock()

    def step_ended(self, batch: int) -> None:
        now = self.clock()
        if batch + 1 == self.warmup:
            self.warmup_s = now - self._start
            self.on_timing()
            self.emit({"type": "phase", "phase": "timing"})
        elif batch >= self.warmup:
            self.times.append(now - self._last)
            self.emit({"type": "step", "step": len(self.times), "of": self.steps})
        self._last = now

    def keras_callback(self) -> Any:
        import keras  # only after the devices are set up

        clock = self

        class _Callback(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                clock.begin()

            def on_train_batch_end(self, batch, logs=None):
                clock.step_ended(batch)

        return _Callback()


def failure_message(error: BaseException, config: RunConfig, replicas: int) -> str:
    """What went wrong for this count, in words (the other counts go on)."""
    if isinstance(error, UserError):
        return str(error)
    name, text = type(error).__name__, " ".join(str(error).split())
    per_device = config.batch_per_replica
    if is_out_of_memory(name, text):
        return (f"out of memory with {per_device} samples per device "
                f"(global batch {per_device * replicas}); a smaller batch may fit.")
    return f"{name}: {text[:400]}"


def run(request: dict[str, Any], emit: Emit) -> CountResult:
    config = RunConfig.from_dict(request["config"])
    plan = DevicePlan.from_json(json.dumps(request["plan"]))
    steps, warmup = int(request["steps"]), int(request["warmup"])
    try:
        from mgpu_gui.engine.inputs import pipeline_for
        from mgpu_gui.engine.strategy import apply_device_env, make_strategy

        engine = Engine(config.engine)
        apply_device_env(plan, engine=engine)  # before TensorFlow, Keras or JAX is imported
        strategy, _ = make_strategy(plan, engine, pipeline_for(config))
        result = time_steps(config, strategy, steps=steps, warmup=warmup, emit=emit)
        # What a person recognises ("GPU 0: NVIDIA H100 (GPU-…)") over TensorFlow's names.
        return dataclasses.replace(result, device_names=tuple(plan.names) or result.device_names)
    except Exception as error:  # reported for this count; the test goes on
        return CountResult(
            devices=plan.replicas, global_batch=config.batch_per_replica * plan.replicas,
            batch_per_replica=config.batch_per_replica, status=PointStatus.FAILED,
            message=failure_message(error, config, plan.replicas),
            error_type=type(error).__name__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.scaling_worker")
    parser.add_argument("--events-fd", type=int, required=True)
    args = parser.parse_args(argv)
    request = json.loads(sys.stdin.read())
    pipe = os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8")

    def emit(message: dict[str, Any]) -> None:
        pipe.write(json.dumps(message) + "\n")

    result = run(request, emit)
    emit({"type": "result", **result.to_dict()})
    pipe.close()
    return 0 if result.status is PointStatus.OK else 1


if __name__ == "__main__":
    sys.exit(main())
