"""TEST-ONLY fault injection: real failures at a chosen step of a running worker.

    MGPU_GUI_FAULT=KIND[=MS]@EPOCH:STEP     e.g. MGPU_GUI_FAULT=oom@2:3

EPOCH and STEP count from 1 as a user does; the fault happens as that step
begins (`slow_input`: from that step on). With MGPU_GUI_FAULT_RUN=SUFFIX too,
only a run whose folder name ends with SUFFIX meets it (one trial of a sweep:
its runs share the environment). The tests set the variable for the CLI, whose
worker inherits it; the training worker hands `run_training` the callback only
when it is set. Never set it otherwise.

Kinds:
- `oom`: raises `tf.errors.ResourceExhaustedError` worded as TensorFlow's
  allocator does ("OOM when allocating tensor with shape[...]").
- `error`: raises a RuntimeError, as a bug in the model's own code would.
- `abort`: `os.abort()`, a hard crash like TensorFlow's own aborts (SIGABRT).
- `kill`: SIGKILL to the worker itself, as the kernel's OOM killer does.
- `nan`: sets the first weighted layer's weights to NaN, as a step on NaN data or
  a diverging learning rate leaves them (data with NaN are refused before a run).
- `fill_disk`: fills the disk holding the run folder with a file next to it
  (`<output folder>/.mgpu-fault-fill`) until the disk is full, then gives
  back `FILL_RESERVE` bytes, so the worker's small writes (events, logs) still
  succeed while the next model checkpoint, larger than that, meets ENOSPC: a
  disk filled by something else while training ran.
- `slow_input=MS`: every batch reaches the step MS milliseconds late, as from a
  pipeline that cannot keep up (decoding, a slow disk): the sleep is in the fetch
  the step waits for, so no prefetching hides it (engine/input_wait.py times it).

Parsing is TensorFlow-free; only the callback imports Keras. Nothing of the
app is imported: the training worker, the one place that reads the variable,
hands the callback to the engine.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

ENV_VAR = "MGPU_GUI_FAULT"
ONLY_VAR = "MGPU_GUI_FAULT_RUN"
FILL_NAME = ".mgpu-fault-fill"
FILL_RESERVE = 64 * 1024
_SPEC = re.compile(r"^\s*([a-z_]+)(?:=(\d+))?@(\d+):(\d+)\s*$")


class FaultKind(StrEnum):
    OOM = "oom"
    ERROR = "error"
    ABORT = "abort"
    KILL = "kill"
    FILL_DISK = "fill_disk"
    NAN = "nan"
    SLOW_INPUT = "slow_input"


class FaultSpecError(ValueError):
    """The MGPU_GUI_FAULT value cannot be parsed (the worker reports it as a user error)."""


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    epoch: int  # 1-based
    step: int  # 1-based
    ms: int = 0  # slow_input: the delay per batch

    @classmethod
    def parse(cls, text: str) -> Fault:
        kinds = ", ".join(k.value for k in FaultKind)
        match = _SPEC.match(text)
        if match is None:
            raise FaultSpecError(
                f"{ENV_VAR}={text!r} is not KIND@EPOCH:STEP (e.g. oom@2:3, slow_input=80@1:1;"
                f" kinds: {kinds}). "
                f"It is a test-only setting: unset it for real runs.")
        kind, ms = match.group(1), int(match.group(2) or 0)
        epoch, step = int(match.group(3)), int(match.group(4))
        if kind not in {k.value for k in FaultKind}:
            raise FaultSpecError(f"{ENV_VAR}={text!r}: unknown kind {kind!r}; use one of {kinds}.")
        if epoch < 1 or step < 1:
            raise FaultSpecError(f"{ENV_VAR}={text!r}: epoch and step count from 1.")
        if (kind == FaultKind.SLOW_INPUT) != (ms > 0):
            raise FaultSpecError(f"{ENV_VAR}={text!r}: slow_input needs a delay (slow_input="
                                 f"MS@EPOCH:STEP, MS > 0); no other kind takes one.")
        return cls(FaultKind(kind), epoch, step, ms)

    def __str__(self) -> str:
        delay = f"={self.ms}" if self.ms else ""
        return f"{self.kind.value}{delay}@{self.epoch}:{self.step}"


def from_env(environ: Mapping[str, str] | None = None, run_name: str = ""
             ) -> Fault | None:
    """The fault asked for by the environment, or None (the normal case, or a run
    `run_name` that ONLY_VAR leaves out)."""
    environ = os.environ if environ is None else environ
    text = environ.get(ENV_VAR, "")
    if not run_name.endswith(environ.get(ONLY_VAR, "")):
        return None
    return Fault.parse(text) if text.strip() else None


def fill_disk(folder: Path, reserve: int = FILL_RESERVE) -> Path:
    """Fill the disk holding `folder` until ENOSPC, then free `reserve` bytes."""
    path = folder / FILL_NAME
    chunk = b"\0" * (1 << 20)
    with open(path, "ab", buffering=0) as f:  # unbuffered: each write reaches the disk
        for size in (1 << 20, 1 << 16, 1 << 12, 1):  # smaller pieces may still fit
            with contextlib.suppress(OSError):
                while True:
                    f.write(chunk[:size])
        size = f.tell()
    with open(path, "r+b") as f:
        f.truncate(max(0, size - reserve))
        os.fsync(f.fileno())
    return path


def fault_callback(fault: Fault, run_dir_path: Path) -> Any:
    """A Keras callback that injects `fault`; it acts on the training thread."""
    import keras

    if fault.kind is FaultKind.SLOW_INPUT:
        return _slow_input(fault)

    class InjectFault(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if (self.epoch + 1, batch + 1) == (fault.epoch, fault.step):
                inject(fault, run_dir_path, self.model)

    return InjectFault()


def inject(fault: Fault, run_dir_path: Path, model: Any = None) -> None:
    where = f"in epoch {fault.epoch} at step {fault.step}"
    print(f"{ENV_VAR}: injecting {fault.kind.value} {where}", file=sys.stderr, flush=True)
    if fault.kind is FaultKind.OOM:
        import tensorflow as tf

        raise tf.errors.ResourceExhaustedError(
            None, None,
            "OOM when allocating tensor with shape[1048576,4096] and type float on "
            "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu "
            f"(injected by {ENV_VAR}={fault})")
    if fault.kind is FaultKind.ERROR:
        raise RuntimeError(f"injected by {ENV_VAR}={fault}")
    if fault.kind is FaultKind.ABORT:
        os.abort()
    if fault.kind is FaultKind.KILL:
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.kind is FaultKind.FILL_DISK:
        fill_disk(run_dir_path.parent)
    if fault.kind is FaultKind.NAN:
        import numpy as np

        layer = next(layer for layer in model.layers if layer.weights)
        for weight in layer.weights:
            weight.assign(np.full(weight.shape, np.nan, dtype=weight.dtype))


def _slow_input(fault: Fault) -> Any:
    """Wraps the model's train function (after the engine's input timing wrapped it, for
    the length of `fit`) so that each fetch from the step's iterator sleeps `fault.ms`."""
    import time

    import keras

    class SlowIterator:
        def __init__(self, inner: Any, late: bool):
            self.inner, self.late = inner, late

        def __iter__(self):
            return self

        def __next__(self):
            if self.late:
                time.sleep(fault.ms / 1000)
            return next(self.inner)

    class SlowInput(keras.callbacks.Callback):
        async_safe = True

        def __init__(self) -> None:
            super().__init__()
            self.epoch, self.batch, self.timed = 0, 0, None

        def on_train_begin(self, logs=None):
            self.timed = self.model.train_function
            self.model.train_function = lambda it: self.timed(SlowIterator(it, self.late()))

        def late(self) -> bool:
            return (self.epoch + 1, self.batch + 1) >= (fault.epoch, fault.step)

        def on_train_end(self, logs=None):
            self.model.train_function = self.timed

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            self.batch = batch

    return SlowInput()
