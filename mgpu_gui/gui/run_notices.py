"""What the notifier says when a run ends or a queued run starts, in a person's words.

A run's end reaches the window two ways: its own run's `RunOutcome`, or the store's
record of a run it followed (a queued run, one from a terminal); both read the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mgpu_gui.core.events import EpochEnd, RunFinished, RunStarted, RunStatus
from mgpu_gui.core.eventtext import NOTHING_TO_RESUME, best_text
from mgpu_gui.core.runs.folder import RunDir, folder_label
from mgpu_gui.core.runs.queue import QueuedJob, config_summary
from mgpu_gui.core.runs.store import RunRecord
from mgpu_gui.gui.widgets.notifier import Notice, NoticeKind
from mgpu_gui.gui.widgets.runs_table import short_name

if TYPE_CHECKING:
    from mgpu_gui.core.children.supervisor import RunOutcome


def run_end_notice(name: str, status: str, done: int | None, epochs: int | None,
                   reason: str = "", best: str | None = None) -> Notice:
    """`status`: a RunStatus or store RunState value; `done`/`epochs` None: unknown;
    `best`: the best epoch as `best_text` says it. An alert: said on the desktop too."""
    kind, title, text = _run_end(name, status, done, epochs, reason)
    if best and kind is not NoticeKind.FAILED:
        text += f"; best {best}"
    return Notice(kind, title, text, alert=True)


def _run_end(name: str, status: str, done: int | None, epochs: int | None,
             reason: str) -> tuple[NoticeKind, str, str]:
    counts = f"{done} of {epochs} epochs" if done is not None and epochs else ""
    if status == RunStatus.COMPLETED:
        return NoticeKind.DONE, "Run completed", f"{name}: {counts or 'all epochs'}"
    if status == RunStatus.EARLY_STOPPED:
        return (NoticeKind.DONE, "Run stopped early",
                f"{name}: early stopping ended it after {counts or 'some epochs'}")
    if status == RunStatus.FAILED:
        first = reason.strip().splitlines()[0] if reason.strip() else "see the log"
        return (NoticeKind.FAILED, "Run failed",
                f"{name}" + (f" after {counts}" if counts else "") + f": {first}")
    word = "interrupted" if status == "interrupted" else "stopped"
    if status == RunStatus.STOPPED and done == 0:
        return NoticeKind.INFO, "Run stopped", f"{name}: {NOTHING_TO_RESUME}"
    return (NoticeKind.INFO, f"Run {word}",
            f"{name}: {counts + ' done; ' if counts else ''}resume it from the Runs tab")


def outcome_notice(run_dir: RunDir | None, outcome: RunOutcome) -> Notice:
    """The window's own run has ended: how, and how far it got."""
    name = folder_label(run_dir.path.name) if run_dir is not None else "The run"
    epochs = done = best = None
    for event in outcome.events:
        if isinstance(event, RunStarted):
            epochs, done = event.epochs, event.initial_epoch
        elif isinstance(event, EpochEnd):
            done = event.epoch + 1
        elif isinstance(event, RunFinished):
            done = event.epochs_done
            best = best_text(event.best_metric, event.best_value, event.best_epoch)
    return run_end_notice(name, outcome.status.value, done, epochs, outcome.message, best)


def record_end_notice(record: RunRecord) -> Notice:
    """A run another process supervised (the queue, a terminal) has ended."""
    return run_end_notice(short_name(record), record.status.value, record.epochs_done,
                          record.epochs, record.message,
                          best_text(record.best_metric, record.best_value, record.best_epoch))


def queued_start_notice(job: QueuedJob) -> Notice:
    return Notice(NoticeKind.INFO, "Queued run started",
                  f"Job {job.id} ({job.name}): {config_summary(job.config)}")
