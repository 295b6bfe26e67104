"""How much of each training step waits for its input batch ("why is it slow?").

Keras' `fit` fetches each batch inside its compiled step (`iterator.get_next()` in the
train function's graph), where no callback can see how long the fetch blocked. So the
fetch is moved out and timed: `TimeInputWait` wraps the model's train function for the
length of a `fit`, and the wrapper takes the batch from the distributed iterator itself
(`next(iterator)`, eager: it returns when the batch is there), then hands it to Keras'
own train function, which runs its compiled step on it (the path Keras itself takes
for anything but a tf.data iterator). The wait is then exactly the time the step could
not start for want of data, prefetching included: a pipeline that keeps up costs
~0 here.

On GPUs the host dispatches steps ahead of the devices, so a host-side wait can overlap
the previous step still running. Every `GPU_SAMPLE_EVERY`-th step is therefore timed
between two device syncs (`tf.test.experimental.sync_devices`: the devices are idle
when the fetch starts, and the step has finished when its time ends); the other steps
run unsynchronised and untimed. CPU steps are synchronous: every one is timed, no sync.

Cost (tests/benchmarks/diagnosis.py; the demo on 2 CPU replicas, 2 cores, 16 ms steps):
+0.4 ms per step (+2 %), the eager `get_next` plus the compiled step's call with the
batch as its argument; the eager fetch itself reads as 5-6 % "wait" even when the
pipeline is one cached batch (the floor: the batch is split across the replicas). Timing
the fetch with `tf.timestamp()` inside the compiled step instead cost nothing but read
26-31 % on that cached batch: TensorFlow's executor runs other ready ops between the
clock reads, so that figure is not the wait.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import keras

GPU_SAMPLE_EVERY = 8  # GPU steps: one timed (two device syncs) in this many


@dataclass
class _Sums:
    wait_s: float = 0.0
    step_s: float = 0.0

    def share(self) -> float | None:
        return self.wait_s / self.step_s if self.step_s > 0 else None


class InputWaitMeter:
    """Sums of timed steps: the input wait and the whole step (fetch + compute), kept for
    the window since the last `take_window()` (batch events) and for the epoch
    (`take_epoch()`). Added to on the training thread, read on Keras' callback thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window = _Sums()
        self._epoch = _Sums()

    def add(self, wait_s: float, step_s: float) -> None:
        with self._lock:
            for sums in (self._window, self._epoch):
                sums.wait_s += wait_s
                sums.step_s += step_s

    def take_window(self) -> float | None:
        """The share of the timed steps' time spent waiting for input since the last call
        (None: no step was timed)."""
        with self._lock:
            share, self._window = self._window.share(), _Sums()
        return share

    def take_epoch(self) -> float | None:
        with self._lock:
            share, self._epoch = self._epoch.share(), _Sums()
        return share


class _TimedTrainFunction:
    """Keras' train function, with the fetch taken out of it and timed."""

    def __init__(self, inner, meter: InputWaitMeter, sync_every: int | None):
        import tensorflow as tf  # the tensorflow engine only (TimeInputWait)

        self.tf = tf
        self.inner = inner
        self.meter = meter
        self.sync_every = sync_every  # None: synchronous devices, time every step
        self._steps = 0

    def __call__(self, iterator):
        # The first step traces and compiles: seconds that are neither input nor compute.
        sampled = self._steps > 0 and (self.sync_every is None
                                       or self._steps % self.sync_every == 0)
        self._steps += 1
        if not sampled:
            return self.inner(iterator)
        if self.sync_every is not None:
            self.tf.test.experimental.sync_devices()
        start = time.perf_counter()
        try:
            data = next(iterator)
        except self.tf.errors.OutOfRangeError:
            raise StopIteration from None  # as Keras' graph path reports the end
        fetched = time.perf_counter()
        logs = self.inner((data,))  # not an iterator: Keras runs one compiled step on it
        if self.sync_every is not None:
            self.tf.test.experimental.sync_devices()
        self.meter.add(fetched - start, time.perf_counter() - start)
        return logs


class TimeInputWait(keras.callbacks.Callback):
    """Times each step's input wait into `meter` during `fit` (see the module's docstring).

    A model compiled with `steps_per_execution` > 1 (a model file's own compile) runs
    several steps per call: it is left alone and nothing is measured. So is a run on
    the JAX engine, whose trainer feeds its compiled step another way (no verdict).
    """

    async_safe = True

    def __init__(self, meter: InputWaitMeter):
        super().__init__()
        self.meter = meter
        self._inner = None

    def on_train_begin(self, logs=None):
        model = self.model
        if (keras.backend.backend() != "tensorflow"
                or getattr(model, "steps_per_execution", 1) != 1 or model.train_function is None):
            return
        gpus = any("GPU" in d.upper() for d in model.distribute_strategy.extended.worker_devices)
        self._inner = model.train_function
        model.train_function = _TimedTrainFunction(
            self._inner, self.meter, GPU_SAMPLE_EVERY if gpus else None)

    def on_train_end(self, logs=None):
        if self._inner is not None:
            self.model.train_function, self._inner = self._inner, None
