"""What went wrong inside a running job, in words: exceptions become `UserError`s.

`run_training` keeps a `Where` up to date (stage, epoch and step, the batch) and
hands any exception to `explain_failure`, which returns a UserError that says
what happened, where, what is kept and what to do, or the exception itself
when it cannot say more (the worker then reports it as unexpected).

Measured with TensorFlow 2.21 / Keras 3.15:
- An exception inside `tf.numpy_function` / `tf.py_function` in a layer reaches
  `fit` as `tf.errors.InvalidArgumentError` whose text holds the Python
  traceback ("ValueError: boom\\nTraceback (most recent call last): ...").
- A full disk: `model.save` raises OSError(ENOSPC); h5py raises OSError with
  "errno = 28" in its text; TensorFlow's own file writes say RESOURCE_EXHAUSTED,
  so disk space is checked before memory.
- An image that no longer decodes: TensorFlow's decoder in the pipeline raises
  InvalidArgumentError ("Invalid PNG data, size 80", "jpeg::Uncompress failed")
  naming no file, so the files are decoded again one by one to find it.

JAX's failures (engine/jax_failures.py reads them) get the same shape of message.

Each error class says whether a resume can get past it (`UserError.resumable`);
a message of one that cannot (NaN loss, out of memory, bad data) suggests none.
"""

from __future__ import annotations

import re
import sys
import traceback
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from mgpu_gui.core.config import DeviceKind, RunConfig
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.errors import DataError, ExportError, OutputError, UserError
from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.engine.callbacks import EpochCheckpoints, EpochTracker, NonFiniteWeights
from mgpu_gui.engine.jax_failures import JaxFailure, JaxFailureKind, jax_failure

_MAX_TEXT = 600
# "(0) INVALID_ARGUMENT:  ValueError: boom\nTraceback (most recent call last):\n ..."
_PY_FUNC = re.compile(
    r"(?:[A-Z_]+:\s+)?(?P<type>[A-Za-z_][\w.]*): (?P<text>[^\n]*)\n"
    r"Traceback \(most recent call last\):\n"
    r"(?P<tb>.*?)\n\n\n\t \[\[\{\{node ", re.DOTALL)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)')


class NonFiniteLossError(UserError):
    """The loss became NaN or infinite; the weights of that step were not saved.

    Not resumable: the same settings from the same backup meet the same step again.
    """

    resumable = False


class OutOfMemoryError(UserError):
    """The devices ran out of memory. Resumable: memory another process held may be
    free again, and the completed epochs are worth keeping."""


class ModelCodeError(UserError):
    """Code that runs during training (most likely the model's own) raised an exception."""


class XlaError(UserError):
    """JAX's compiler or runtime (XLA) failed: an error inside JAX, not in the model's code."""


class ExportDiskFullError(ckpt.DiskFullError, ExportError):
    """The disk filled up while the trained model was exported."""


class Stage(StrEnum):
    SETUP = "setup"
    TRAINING = "training"
    EVALUATION = "evaluation"
    EXPORT = "export"


@dataclass
class Where:
    """How far the job got: updated as it runs, read when something fails."""

    config: RunConfig
    run_dir: RunDir
    plan: DevicePlan
    replicas: int
    stage: Stage = Stage.SETUP
    steps: int = 0
    tracker: EpochTracker | None = None
    checkpoints: EpochCheckpoints | None = None
    export_format: str | None = None
    epochs_done: int = 0

    @property
    def global_batch(self) -> int:
        return self.config.batch_per_replica * self.replicas

    def position(self) -> tuple[int, int] | None:
        """(epoch, step), both 1-based, of the step that was running."""
        if self.tracker is None or self.tracker.position is None:
            return None
        epoch, batch = self.tracker.position
        return epoch + 1, batch + 1

    def at(self) -> str:
        """Where in training, for a message: 'in epoch 2 at step 3 of 5'."""
        if self.checkpoints is not None and self.checkpoints.writing is not None:
            return f"while saving the checkpoint of epoch {self.checkpoints.writing + 1}"
        position = self.position()
        if position is None:
            return "before the first training step (while building the training step)"
        return f"in epoch {position[0]} at step {position[1]} of {self.steps}"

    def kept(self, resumable: bool = True) -> str:
        """What the run keeps. A resume is offered only when the cause allows one
        (`resumable`) and the run folder's backup does (`RunDir.resume_point`)."""
        point = self.run_dir.resume_point()
        if resumable or not point.exists:
            return point.kept()
        done = point.epochs_done
        epochs = f"{done} completed epoch{'s' if done != 1 else ''}"
        return (f"The checkpoints of the {epochs} are kept in {self.run_dir.checkpoints}."
                if done else "No epoch was completed.")

    def then_go_on(self) -> str:
        """After a fix: resume when the backup allows it, else train again."""
        return ("then resume the run" if self.run_dir.resume_point().resumable
                else "then train the run again")


def explain_failure(error: BaseException, where: Where) -> BaseException:
    """A UserError for `error`, or `error` itself when there is nothing better to say."""


    if isinstance(error, (NonFiniteLossError, OutOfMemoryError, ModelCodeError,
                          ckpt.DiskFullError)):
        return error
    # TensorFlow's errors only where it was loaded: a JAX run on the Python pipeline has none.
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        from mgpu_gui.engine import pipeline

        if pipeline.is_decode_failure(error):  # TensorFlow's decoder says which file? never
            return _image_failed(pipeline.undecodable_file(where.config) or (
                "an image cannot be decoded any more, and decoding the files again one by one "
                f"did not find which within {pipeline.FIND_BUDGET_S:.0f} s."), where)
    failure = ckpt.write_failure(error, where.run_dir.path)
    if failure is not None:
        return _write_failed(failure, error, where)
    jax = jax_failure(error)  # also behind a UserError: a .py builder's ModelError
    if jax is not None:
        return _jax_failed(jax, error, where)
    if isinstance(error, UserError):
        return error
    if isinstance(error, NonFiniteWeights):
        return NonFiniteLossError(
            f"The model's weights became NaN or infinite in epoch {error.epoch + 1}, though "
            f"the loss stayed finite (layers such as ReLU can hide NaN values from it). "
            f"Training stopped without saving them. {where.kept(False)} Check the data for NaN "
            f"values, lower the learning rate, or enable gradient clipping in the model's "
            f"optimizer.")
    if tf is not None and isinstance(error, tf.errors.ResourceExhaustedError):
        return _out_of_memory(error, where)
    if where.stage is Stage.TRAINING:
        if isinstance(error, RuntimeError) and "NaN or Inf loss" in str(error):
            return _non_finite(where)
        return _code_failed(error, where)
    return error


def log_traceback(error: BaseException) -> None:
    """Into worker.log (the worker's stderr): the message points the user there."""
    traceback.print_exception(error, file=sys.stderr)
    sys.stderr.flush()


def _write_failed(failure: str, error: BaseException, where: Where) -> UserError:
    folder = where.run_dir.path
    reason = ckpt.os_reason(error)
    if where.stage is Stage.EXPORT:
        what = f"while writing the {where.export_format or 'model'} export"
        kept = (f"Training itself finished ({where.epochs_done} epochs); its checkpoints are "
                f"kept in {where.run_dir.checkpoints}.")
        retry = (f"then export the run again: mgpu-train export {folder} -o "
                 f"{where.run_dir.export_path(where.export_format or 'keras')}")
    else:
        what = {Stage.SETUP: "while preparing the run",
                Stage.EVALUATION: "while evaluating the test set",
                Stage.TRAINING: where.at()}[where.stage]
        kept, retry = where.kept(), where.then_go_on()
    if failure == "full":
        free = ckpt.format_bytes(ckpt.free_bytes(folder))
        message = (f"The disk holding the run folder {folder} is full ({free} free): a write "
                   f"failed {what} ({reason}). {kept} Free some space on that disk, {retry}.")
        cls = ExportDiskFullError if where.stage is Stage.EXPORT else ckpt.DiskFullError
        return cls(message)
    message = (f"Cannot write to the run folder {folder}: {reason} (a write failed {what}). "
               f"{kept} Make the folder writable, {retry}.")
    return ExportError(message) if where.stage is Stage.EXPORT else OutputError(message)


def _out_of_memory(error: BaseException, where: Where, said_by: str = "TensorFlow",
                   said: str | None = None) -> OutOfMemoryError:
    log_traceback(error)
    per, replicas = where.config.batch_per_replica, where.replicas
    gpu = where.plan.kind is DeviceKind.GPU
    kind = "GPU" if gpu else "CPU replica"
    devices = f"the {replicas} {kind}{'s' if replicas != 1 else ''} in use"
    if where.plan.names:
        devices += f" ({'; '.join(where.plan.names)})"
    when = _when(where)
    if per > 1:
        half = per // 2
        advice = (f"Use a smaller batch per replica, e.g. {half} (--batch-per-replica {half}; "
                  f"'Batch per GPU' in the app), or a smaller model.")
    else:
        advice = ("The batch per replica is already 1: use a smaller model, or devices with "
                  "more memory.")
    kept = f" {where.kept()}" if where.stage is not Stage.SETUP else ""
    said = _first_line(said or getattr(error, "message", None) or str(error))
    return OutOfMemoryError(
        f"Out of memory {when} on {devices}, with a batch of {per} per replica (global batch "
        f"{where.global_batch} = {per} x {replicas} replicas). {advice}{kept} "
        f"{said_by} said: {said}")


def _non_finite(where: Where) -> NonFiniteLossError:
    # NanGuard raises in the batch-end hooks of the step whose loss was not finite,
    # before the tracker counts that step: it is the one after the steps done.
    position = where.position()
    epoch = position[0] if position else 1
    step = (where.tracker.steps_done(epoch - 1) if where.tracker else 0) + 1
    return NonFiniteLossError(
        f"The loss became NaN or infinite in epoch {epoch} at step {step} of {where.steps}. "
        f"Training stopped; checkpoints hold only epochs that ended with a finite loss. "
        f"{where.kept(False)} Lower the learning rate, check the data for NaN values, or "
        f"enable gradient clipping in the model's optimizer, then start a new run.")


def _image_failed(message: str, where: Where) -> DataError:
    training = where.at() if where.position() else "in epoch 1, before its first step ended"
    when = {Stage.SETUP: "while loading the data", Stage.TRAINING: training,
            Stage.EVALUATION: "while evaluating the test set",
            Stage.EXPORT: "while exporting the model"}[where.stage]
    return DataError(
        f"Training stopped {when}: {message} It could be read when the run started, so it "
        f"changed since (or its drive fails). {where.kept(False)} Then start a new run.")


def _code_failed(error: BaseException, where: Where) -> ModelCodeError:
    details = _traceback_logged(error, where)

    tf = sys.modules.get("tensorflow")
    py_func = _PY_FUNC.search(getattr(error, "message", None) or str(error)) if (
        tf is not None and isinstance(error, tf.errors.OpError)) else None
    if py_func is not None:
        frames = _FRAME.findall(py_func.group("tb"))
        origin = ""
        if frames:
            file, line, func = frames[-1]
            origin = f" ({Path(file).name}, line {line}, in {func.strip()})"
        return ModelCodeError(
            f"The model's code raised {py_func.group('type')}: "
            f"{_clip(py_func.group('text'))} {where.at()}{origin}, inside a "
            f"tf.numpy_function or tf.py_function. Training stopped. {where.kept()} "
            f"Fix the code, {where.then_go_on()}. {details}")
    return ModelCodeError(
        f"Training failed {where.at()} with {type(error).__name__}: "
        f"{_clip(str(error)).rstrip('.')}. "
        f"It was raised by code that runs during training, most likely the model's own "
        f"(custom layers, losses or metrics). {where.kept()} Fix the code, "
        f"{where.then_go_on()}. {details}")


def _jax_failed(failure: JaxFailure, error: BaseException, where: Where) -> UserError:
    """JAX's failures, said as the TensorFlow ones are: what, where, what is kept, what to do."""
    if failure.kind is JaxFailureKind.OUT_OF_MEMORY:
        return _out_of_memory(error, where, "JAX", failure.what)
    when, details = _when(where), _traceback_logged(error, where)
    if failure.source is not None and failure.source is not error:
        print("The error JAX raised, behind the one above:", file=sys.stderr)
        log_traceback(failure.source)
    kept = f"{where.kept()} " if where.stage is not Stage.SETUP else ""
    line = f"{failure.origin}" if failure.origin else "the model's code"
    if failure.kind is JaxFailureKind.TENSORFLOW_OP:
        return ModelCodeError(
            f"This model's code runs on the tensorflow engine but not on JAX: it calls "
            f"TensorFlow on the model's tensors {when} ({line}), and TensorFlow cannot take "
            f"JAX's arrays. {kept}Train it on the tensorflow engine (--engine tensorflow; "
            f"'Engine' in the app), or use keras.ops in place of the tf.* functions, "
            f"{where.then_go_on()}. {details}")
    if failure.kind is JaxFailureKind.TRACE:
        return ModelCodeError(
            f"The model's code cannot run under JAX's jit: {failure.what} in {line}, {when}. "
            f"JAX compiles each step from a trace with placeholder tensors, which have no "
            f"values for Python to test or convert. {kept}Write that line with keras.ops "
            f"(keras.ops.cond or keras.ops.where in place of if, x.astype in place of float() "
            f"or int()), {where.then_go_on()}. {details}")
    if failure.kind is JaxFailureKind.CALLBACK:
        return ModelCodeError(
            f"The model's code raised {_clip(failure.what)} {when} ({line}), inside a "
            f"jax.pure_callback. Training stopped. {kept}Fix the code, {where.then_go_on()}. "
            f"{details}")
    return XlaError(
        f"JAX's compiler or runtime (XLA) failed {when}: {_clip(failure.what)}. This is an "
        f"error inside JAX, not in the model's Python code. {kept}Train on the tensorflow "
        f"engine (--engine tensorflow), or try another JAX version. {details}")


def _when(where: Where) -> str:
    return {Stage.SETUP: "while building the model", Stage.TRAINING: where.at(),
            Stage.EVALUATION: "while evaluating the test set",
            Stage.EXPORT: "while exporting the model"}[where.stage]


def _traceback_logged(error: BaseException, where: Where) -> str:
    """Log the traceback; the sentence that points the user to it. A run that fails in
    setup leaves no folder (the supervisor removes it): the details keep it then."""
    log_traceback(error)
    if where.stage is Stage.SETUP:
        return "The full traceback is in the details."
    return (f"The full traceback is in worker.log in the run folder {where.run_dir.path} "
            f"(and in the details).")


def _first_line(text: str) -> str:
    return _clip(text.strip().splitlines()[0] if text.strip() else text)


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "..."
