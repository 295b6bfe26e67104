"""Events in words: the lines the CLI prints and the GUI's log shows."""

from __future__ import annotations

import re

from mgpu_gui.core.events import (
    CheckpointSaved,
    Diagnosed,
    EpochEnd,
    Evaluated,
    Event,
    ExportNotMade,
    LogMessage,
    ModelExported,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
    StageStarted,
)
from mgpu_gui.core.lr_schedule import format_lr
from mgpu_gui.core.modelfiles.compile_facts import CompileSource, optimizer_text
from mgpu_gui.core.progress import format_metrics, format_rate


def event_lines(event: Event, *, verbose: bool = False) -> list[str]:
    """What a person should read about `event`; batch events are for progress bars."""
    if isinstance(event, RunStarted):
        return started_lines(event)
    if isinstance(event, EpochEnd):
        best = "  * best" if event.best else ""
        return [f"Epoch {event.epoch + 1}/{event.epochs}  {format_metrics(event.metrics)}"
                f"  ({event.duration_s:.1f} s, {format_rate(event.samples_per_s)}){best}"]
    if isinstance(event, StageStarted):
        return [stage_line(event)]
    if isinstance(event, LogMessage):
        if event.level == "debug" and not verbose:
            return []
        return [("warning: " if event.level == "warning" else "") + event.message]
    if isinstance(event, CheckpointSaved):
        return [f"Checkpoint saved ({event.kind}, epoch {event.epoch + 1}): {event.path}"] if (
            verbose) else []
    if isinstance(event, Evaluated):
        return [f"Test set ({event.samples} samples, {event.dropped} left out by the last "
                f"partial batch): {format_metrics(event.metrics)}"]
    if isinstance(event, ModelExported):
        return [f"Exported {event.format} model: {event.path} (reloaded in a fresh process, "
                f"max prediction difference {event.max_abs_diff:.2g})"]
    if isinstance(event, ExportNotMade):
        return [f"Not exported as {event.format}: {event.message}"]
    if isinstance(event, RunFinished):
        return [finished_line(event)]
    if isinstance(event, RunFailed):
        return [f"Failed: {event.message}"]
    if isinstance(event, Diagnosed):
        return [event.line] if event.line else []
    return []


def started_lines(e: RunStarted) -> list[str]:
    kind = "GPU" if e.device_kind == "gpu" else "CPU replica"
    source = CompileSource(e.optimizer_source or CompileSource.RUN)
    return [
        f"Run folder: {e.run_dir}",
        f"Training {e.model_name} ({e.params:,} parameters) on {e.num_replicas} "
        f"{kind}{'s' if e.num_replicas != 1 else ''} "
        f"(num_replicas_in_sync = {e.num_replicas}, {e.cross_device_ops})",
        *(f"  {name}" for name in e.device_names),
        f"Global batch {e.global_batch} = {e.batch_per_replica} per replica x "
        f"{e.num_replicas}; {e.train_samples} training samples, {e.steps_per_epoch} steps "
        f"per epoch, {e.dropped_per_epoch} dropped per epoch; {e.val_samples} validation, "
        f"{e.test_samples} test samples",
        *([f"Optimizer: {optimizer_text(e.optimizer, e.learning_rate, source, e.file_optimizer)}"]
          if e.optimizer else []),
    ]


def stage_line(e: StageStarted) -> str:
    """What a transfer-learning stage trains, and from which epoch."""
    lr = "" if e.learning_rate is None else f", learning rate {format_lr(e.learning_rate)}"
    if e.stage == 1:
        what = "the head, with the backbone frozen"
    else:
        layers = ("all" if e.unfrozen_layers >= e.backbone_layers else
                  f"the top {e.unfrozen_layers} of {e.backbone_layers}")
        what = (f"fine-tuning {layers} layers of the backbone (BatchNorm layers stay frozen, "
                "in inference mode)")
    return (f"Stage {e.stage} of 2 from epoch {e.first_epoch + 1} of {e.epochs}: {what}; "
            f"{e.trainable_params:,} trainable parameters{lr}.")


NOTHING_TO_RESUME = "Stopped before the first epoch; nothing to resume."


def finished_line(event: RunFinished) -> str:
    if event.status is RunStatus.STOPPED:
        # The backup holds exactly the complete epochs (ResumePoint reads the same count).
        if not event.epochs_done:
            return NOTHING_TO_RESUME
        return (f"Stopped after {event.epochs_done} complete epoch(s). {event.message} "
                f"The run can be resumed from its backup.")
    done = "Finished early (early stopping)" if event.status is RunStatus.EARLY_STOPPED else (
        "Finished")
    best = ""
    if event.best_epoch is not None and event.best_value is not None:
        best = f"; best {event.best_metric} {event.best_value:.4g} in epoch {event.best_epoch + 1}"
    epochs = "1 epoch" if event.epochs_done == 1 else f"{event.epochs_done} epochs"
    return f"{done}: {epochs}{best}."


# What TensorFlow prints at every start whatever the run, and the native stack addresses
# an aborting XLA or TensorFlow prints under its one telling line ("F rendezvous.cc:161
# Termination timeout ..."); worker.log keeps it all.
_NOISE = re.compile(
    r"All log messages before absl::InitializeLog|oneDNN custom operations are on|"
    r"cudart_stub\.cc|Could not find cuda drivers|failed call to cuInit|"
    r"This TensorFlow binary is optimized|rebuild TensorFlow with the appropriate compiler|"
    r"^\s*@\s+0x[0-9a-f]+\s|\*\*\* Check failure stack trace")


def best_text(metric: str | None, value: float | None, epoch: int | None) -> str | None:
    """A run's best epoch as every listing says it ("val_loss 0.0663 (epoch 7)", from
    the 0-based `epoch`); None when the run has none yet."""
    if value is None or epoch is None:
        return None
    return f"{metric} {value:.4g} (epoch {epoch + 1})"


def is_noise(line: str) -> bool:
    """Output no user reads, hidden from the GUI's log and crash messages (not from
    worker.log)."""
    return bool(_NOISE.search(line))
