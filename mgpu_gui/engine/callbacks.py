"""Keras callbacks that turn `fit` into events and keep Keras' own callbacks honest.

Two facts of Keras 3.15's `fit` shape this module:
- After `model.stop_training = True` mid-epoch, `fit` still validates and calls
  `on_epoch_end`, so checkpoints, backups and CSV logs would record a partial
  epoch as complete (and maybe as "best"). `CompleteEpochsOnly` forwards
  epoch-level hooks to the wrapped callbacks only for epochs that ran every step.
- Batch-end hooks run on a thread pool (no device sync on the training thread)
  only when every callback is `async_safe` or leaves its batch hooks unset. The
  callbacks here are async-safe, so `mgpu-train` trains as fast as a bare `fit`
  (on TensorFlow; on JAX, EventCallback's batch hooks run on the training thread).
  Batch-begin hooks always run on the training thread, in order, so they tell
  exactly which step was running when `fit` raised.

Checkpoints are ours, not Keras' (`ModelCheckpoint` writes in place, and
`BackupAndRestore` stores weights and metadata in two files a crash can part):
`EpochCheckpoints` and `CommitBackup` write them crash-safely, see checkpoints.py.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

import keras

from mgpu_gui.core.events import BatchEnd, CheckpointSaved, EpochEnd, EventSink
from mgpu_gui.core.lr_schedule import LinearScaling
from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.engine.input_wait import InputWaitMeter


class EpochTracker:
    """Counts the steps each epoch really ran; shared by the callbacks of one run."""

    def __init__(self, steps_per_epoch: int):
        self.steps_per_epoch = steps_per_epoch
        self._done: dict[int, int] = {}
        self._cut: set[int] = set()  # epochs whose validation a stop cut short
        self._lock = threading.Lock()
        self.position: tuple[int, int] | None = None  # (epoch, batch) last begun, 0-based

    def batch_begun(self, epoch: int, batch: int) -> None:
        self.position = (epoch, batch)

    def batch_done(self, epoch: int, batch: int) -> None:
        with self._lock:
            self._done[epoch] = max(self._done.get(epoch, 0), batch + 1)

    def steps_done(self, epoch: int) -> int:
        with self._lock:
            return self._done.get(epoch, 0)

    def validation_cut(self, epoch: int) -> None:
        with self._lock:
            self._cut.add(epoch)

    def complete(self, epoch: int) -> bool:
        """Every step ran, and its validation (if any) was not cut short."""
        with self._lock:
            return self._done.get(epoch, 0) >= self.steps_per_epoch and epoch not in self._cut

    def last_step_begun(self, epoch: int) -> bool:
        """Whether `epoch` began its last step: exact on the training thread, where the
        batch-end hooks (and so `complete`) may still be pending."""
        return self.position == (epoch, self.steps_per_epoch - 1)


class AtTrainEnd(keras.callbacks.Callback):
    """Calls `then()` when `fit` ends, before Keras lets go of its iterators: freeing
    those of 64 CPU replicas deadlocked in tf.data's thread pool, so a stopped run says
    its last word here (the worker then exits whatever the teardown does)."""

    def __init__(self, then: Callable[[], object]):
        super().__init__()
        self.then = then

    def on_train_end(self, logs=None):
        self.then()


class ValidateCompleteEpochs(list):
    """`validation_freq` for Keras' `fit`: validate only an epoch that ran every step.

    Keras validates an epoch a stop request cut short, and that pass is thrown away
    with the epoch (CompleteEpochsOnly): on a GPU a whole validation pass between a stop
    and its end, on 64 CPU replicas minutes. Keras asks `epoch + 1 in validation_freq`
    on the training thread, right after the epoch's last step.
    """

    def __init__(self, tracker: EpochTracker):
        super().__init__()
        self.tracker = tracker

    def __contains__(self, epoch: object) -> bool:
        return isinstance(epoch, int) and self.tracker.last_step_begun(epoch - 1)


class EpochEndGate(keras.callbacks.Callback):
    """Runs `inner` at epoch granularity, passing on `on_epoch_end` only where `passes`.

    Batch hooks are not forwarded: the wrapped callbacks are configured to act
    per epoch only, which keeps `fit`'s batch dispatch asynchronous.
    """

    async_safe = True

    def __init__(self, inner: keras.callbacks.Callback):
        super().__init__()
        self.inner = inner

    def passes(self, epoch: int) -> bool:
        raise NotImplementedError

    def set_model(self, model: keras.Model) -> None:
        super().set_model(model)
        self.inner.set_model(model)

    def set_params(self, params: dict) -> None:
        super().set_params(params)
        self.inner.set_params(params)

    def on_train_begin(self, logs=None):
        self.inner.on_train_begin(logs)

    def on_train_end(self, logs=None):
        self.inner.on_train_end(logs)

    def on_epoch_begin(self, epoch, logs=None):
        self.inner.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.passes(epoch):
            self.inner.on_epoch_end(epoch, logs)


class CompleteEpochsOnly(EpochEndGate):
    """Skips `on_epoch_end` of a partial (stopped) epoch."""

    def __init__(self, inner: keras.callbacks.Callback, tracker: EpochTracker):
        super().__init__(inner)
        self.tracker = tracker

    def passes(self, epoch: int) -> bool:
        return self.tracker.complete(epoch)


class LinearWarmup(keras.callbacks.Callback):
    """The linear scaling rule's warm-up (lr_schedule.py): sets the LR before each step.

    During the warm-up the LR rises per step to the scaled LR; the first epoch
    after it starts at the scaled LR. Later epochs are left alone, so a
    ReduceLROnPlateau reduction (see `AfterWarmup`) and the LR a resumed run's
    backup restored both stand. A callback rather than a LearningRateSchedule:
    Keras refuses to set the LR of an optimizer built with a schedule, which is
    what ReduceLROnPlateau does. Before-step hooks run on the training thread, in
    order, so the step sees the value; `fit` still dispatches batch ends asynchronously.
    """

    async_safe = True

    def __init__(self, rule: LinearScaling):
        super().__init__()
        self.rule = rule
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        if epoch == self.rule.warmup_epochs:
            self.model.optimizer.learning_rate = self.rule.scaled_lr

    def on_train_batch_begin(self, batch, logs=None):
        if self.rule.in_warmup(self._epoch):
            self.model.optimizer.learning_rate = self.rule.lr_at(self._epoch, batch)


class AfterWarmup(EpochEndGate):
    """Runs `inner`'s epoch ends only after the warm-up (for ReduceLROnPlateau).

    The warm-up owns the LR; a reduction decided in it would be overwritten at
    the next step, and a plateau in the first epochs says little. From the first
    epoch after the warm-up, ReduceLROnPlateau watches and reduces from the scaled LR.
    """

    def __init__(self, inner: keras.callbacks.Callback, warmup_epochs: int):
        super().__init__(inner)
        self.warmup_epochs = warmup_epochs

    def passes(self, epoch: int) -> bool:
        return epoch >= self.warmup_epochs


class NonFiniteWeights(RuntimeError):
    """The weights became NaN or infinite though the loss stayed finite; nothing was saved."""

    def __init__(self, epoch: int):
        super().__init__(f"non-finite weights after epoch {epoch + 1}")
        self.epoch = epoch


class EpochCheckpoints(keras.callbacks.Callback):
    """Restores the backup when training begins; saves each complete epoch crash-safely.

    At an epoch's end (wrap in `CompleteEpochsOnly`): the full model (weights and
    optimizer state) goes to `backup/epoch-NNNN.keras`, and `last` (and `best` when
    the monitored value improved) become hard links to it. The epoch is committed
    to the backup later, by `CommitBackup`, after its records were written.
    """

    async_safe = True

    def __init__(self, backup: Path, last: Path, best: Path, *, monitor: str,
                 best_so_far: float | None, restore_after: int = 0):
        super().__init__()
        self.backup, self.last, self.best = backup, last, best
        # A backup of this many epochs or fewer is an earlier stage's (transfer.py): its
        # optimizer state does not fit this fit's model.
        self.restore_after = restore_after
        self.monitor = monitor
        self.best_value = math.inf if best_so_far is None else best_so_far
        self.saved: dict[int, list[tuple[str, Path]]] = {}  # epoch -> (kind, path), for events
        self.writing: int | None = None  # the epoch being saved, for error messages

    def on_train_begin(self, logs=None):
        for folder in (self.backup, self.last.parent, self.best.parent):
            ckpt.remove_temp_files(folder)
        restore_backup(self.model, self.backup, after=self.restore_after)

    def on_epoch_end(self, epoch, logs=None):
        if not _all_finite(self.model):
            raise NonFiniteWeights(epoch)
        self.writing = epoch
        model_file = ckpt.write_backup_model(self.backup, epoch + 1, self.model.save)
        self.last.parent.mkdir(parents=True, exist_ok=True)
        ckpt.link_atomically(model_file, self.last)
        saved = [("last", self.last)]
        value = (logs or {}).get(self.monitor)
        if value is not None and float(value) < self.best_value:  # NaN never improves
            self.best_value = float(value)
            ckpt.link_atomically(model_file, self.best)
            saved.insert(0, ("best", self.best))
        self.saved[epoch] = saved
        self.writing = None

    def commit(self, epoch: int) -> None:
        self.writing = epoch
        ckpt.commit_backup(self.backup, epoch + 1)
        self.writing = None


def strategy_scope(model: keras.Model) -> contextlib.AbstractContextManager:
    """The scope new variables of `model` belong in: its MirroredStrategy's. Keras on JAX
    has no `distribute_strategy`: its distribution is set for the whole process."""
    strategy = getattr(model, "distribute_strategy", None)
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


def restore_backup(model: keras.Model, backup: Path, *, after: int = 0) -> int:
    """Load the backup's model file into `model`, weights and optimizer state, when it holds
    more than `after` epochs; returns the epochs it holds."""
    state = ckpt.read_backup(backup)
    if state is None or state.epoch <= after:
        return 0 if state is None else state.epoch
    if state.model is None or not state.model.is_file():
        raise ckpt.BackupError(
            f"The backup in {backup} says {state.epoch} epoch(s) are done but the "
            f"model file it names ({state.model or 'none'}) is missing, so the run cannot "
            f"resume. Start a new run; checkpoints/last.keras, if present, holds the last "
            f"completed epoch.")
    optimizer = model.optimizer
    if optimizer is not None and not optimizer.built:
        with strategy_scope(model):
            optimizer.build(model.trainable_variables)
    try:
        # From a `.keras` file this restores the optimizer's state too (its step
        # count, moments and learning rate), not only the weights.
        model.load_weights(state.model)
    except Exception as error:  # Keras raises many types for a bad file
        raise ckpt.BackupError(
            f"The backup of epoch {state.epoch} ({state.model}) cannot be read: "
            f"{type(error).__name__}: {error}. Start a new run.") from error
    ckpt.prune_backup(backup, state.model)  # epochs saved but never committed
    return state.epoch


class CommitBackup(keras.callbacks.Callback):
    """Commits an epoch's backup after its records; put it last (wrap in CompleteEpochsOnly).

    Until then a resume would redo the epoch, so a crash while its event or CSV
    row is written never leaves a hole in the run's history.
    """

    async_safe = True

    def __init__(self, checkpoints: EpochCheckpoints):
        super().__init__()
        self.checkpoints = checkpoints

    def on_epoch_end(self, epoch, logs=None):
        self.checkpoints.commit(epoch)


class NanGuard(keras.callbacks.TerminateOnNaN):
    """`TerminateOnNaN(raise_error=True)`, async-safe: the error surfaces one batch
    later on the training thread, before any epoch-end save can run."""

    async_safe = True

    def __init__(self) -> None:
        super().__init__(raise_error=True)


class EventCallback(keras.callbacks.Callback):
    """Emits batch and epoch events, honours stop requests at batch boundaries."""

    # Not on JAX: there `self.model` writes the trainer's state back into the variables,
    # and from the pool's thread that raced the next step, which donates those buffers
    # (measured: "Buffer has been deleted or donated", then SIGSEGV). Synchronous, it
    # costs a sync only on the steps that emit an event (one per batch_interval_s).
    async_safe = keras.backend.backend() != "jax"

    def __init__(
        self,
        sink: EventSink,
        tracker: EpochTracker,
        *,
        global_batch: int,
        epochs: int,
        monitor: str,
        batch_interval_s: float,
        stop_requested: Callable[[], bool],
        checkpoints: EpochCheckpoints | None = None,
        input_wait: InputWaitMeter | None = None,
    ):
        super().__init__()
        self.sink = sink
        self.input_wait = input_wait
        self.tracker = tracker
        self.global_batch = global_batch
        self.epochs = epochs
        self.monitor = monitor
        self.batch_interval_s = batch_interval_s
        self.stop_requested = stop_requested
        self.checkpoints = checkpoints
        self.best_value = math.inf
        self.best_epoch: int | None = None
        self.epochs_done = 0
        self.last_epoch_seen: int | None = None
        self._lock = threading.Lock()
        self._epoch_start = 0.0
        self._last_emit = 0.0
        self._last_emit_step = 0
        self._last_batch_time = 0.0

    def learning_rate(self) -> float | None:
        try:
            return float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        except (AttributeError, TypeError, ValueError):
            return None

    def on_epoch_begin(self, epoch, logs=None):
        with self._lock:
            self.last_epoch_seen = epoch
            self._epoch_start = self._last_emit = time.perf_counter()
            self._last_emit_step = 0
        if self.input_wait is not None:
            self.input_wait.take_epoch()  # an epoch cut short is not carried into this one
        if self.stop_requested():
            self.model.stop_training = True

    def on_train_batch_begin(self, batch, logs=None):
        self.tracker.batch_begun(self.last_epoch_seen or 0, batch)

    def on_train_batch_end(self, batch, logs=None):
        epoch = self.last_epoch_seen or 0
        self.tracker.batch_done(epoch, batch)
        now = time.perf_counter()
        last = batch + 1 == self.tracker.steps_per_epoch
        with self._lock:
            self._last_batch_time = max(self._last_batch_time, now)
            due = last or now - self._last_emit >= self.batch_interval_s
            fresh = batch + 1 > self._last_emit_step
            if not (due and fresh):
                emit = None
            else:
                steps = batch + 1 - self._last_emit_step
                rate = steps * self.global_batch / max(now - self._last_emit, 1e-9)
                self._last_emit, self._last_emit_step = now, batch + 1
                emit = (steps, rate)
        if emit is not None:
            self.sink.emit(BatchEnd(
                epoch=epoch, batch=batch, steps=self.tracker.steps_per_epoch,
                metrics=_floats(logs), samples_per_s=emit[1],
                learning_rate=self.learning_rate(),
                input_wait=self.input_wait.take_window() if self.input_wait else None,
            ))
        if self.stop_requested():
            self.model.stop_training = True

    def on_test_batch_end(self, batch, logs=None):
        # Only `fit`'s validation calls these hooks. A stop during it ends the validation
        # too (on 64 CPU replicas it took minutes): the epoch, with metrics of part of
        # the validation set, is not recorded.
        if self.stop_requested() and self.last_epoch_seen is not None:
            self.tracker.validation_cut(self.last_epoch_seen)
            self.model.stop_evaluating = self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if not self.tracker.complete(epoch):
            return
        metrics = _floats(logs)
        duration = self._last_batch_time - self._epoch_start
        value = metrics.get(self.monitor, math.nan)
        best = value < self.best_value
        if best:
            self.best_value, self.best_epoch = value, epoch
        self.epochs_done = epoch + 1
        self.sink.emit(EpochEnd(
            epoch=epoch, epochs=self.epochs, metrics=metrics,
            samples_per_s=self.tracker.steps_per_epoch * self.global_batch / max(duration, 1e-9),
            duration_s=duration, learning_rate=self.learning_rate(), best=best,
            input_wait=self.input_wait.take_epoch() if self.input_wait else None,
        ))
        saved = self.checkpoints.saved.pop(epoch, []) if self.checkpoints else []
        for kind, path in saved:
            self.sink.emit(CheckpointSaved(kind=kind, path=str(path), epoch=epoch))


def _all_finite(model: keras.Model) -> bool:
    """One device sync for all float weights. NanGuard watches the loss, but a NaN can hide
    from it: with NaN inputs a ReLU layer's NaN kernel gives 0s, and the loss stays finite."""
    checks = [keras.ops.all(keras.ops.isfinite(v.value)) for v in model.weights
              if "float" in str(v.dtype)]
    return not checks or bool(keras.ops.convert_to_numpy(keras.ops.all(keras.ops.stack(checks))))


def _floats(logs: dict | None) -> dict[str, float]:
    return {k: float(v) for k, v in (logs or {}).items() if _is_number(v)}


def _is_number(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True
