"""The run folder: one per run, holding its config, events, checkpoints and exports.

`events.jsonl` is the durable record of a run: everything else (a GUI's curves,
a future run store) can be rebuilt from it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.config import DEMO, RunConfig, custom_objects_problem
from mgpu_gui.core.errors import ExportError, OutputError, UserError
from mgpu_gui.core.events import (
    EpochEnd,
    Event,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
    parse_event,
)
from mgpu_gui.core.modelfiles.card import ModelCard, card_path, read_card
from mgpu_gui.core.runs.checkpoints import read_backup

EXPORT_NAMES = {"keras": "model.keras", "h5": "model.h5", "savedmodel": "model_savedmodel"}
_STAMP = re.compile(r"^\d{8}-\d{6}-")  # run folders are "<date>-<time>-<name>"


@dataclass(frozen=True)
class ResumePoint:
    """Whether a run can be resumed, and from which epoch, as its folder says.

    The one answer to "resumable?": failure and stop messages, the resume hint and
    `resume` itself all ask it, so none promises a backup another denies.
    """

    folder: Path
    exists: bool
    epochs_done: int  # complete epochs in the backup

    @property
    def resumable(self) -> bool:
        return self.exists and self.epochs_done > 0

    def kept(self) -> str:
        """What a failed or stopped run keeps, in one sentence."""
        if not self.exists:
            return f"Its run folder {self.folder} was deleted, so there is nothing to resume."
        done = self.epochs_done
        if not done:
            return "No epoch was completed, so there is no backup to resume from."
        return (f"The backup of the {done} completed epoch{'s' if done != 1 else ''} is kept "
                f"in {self.folder / 'backup'}; a resume continues with epoch {done + 1}.")

    def refusal(self) -> str | None:
        """Why a resume cannot go on (None: it can)."""
        if not self.exists:
            return (f"The run folder {self.folder} was deleted: there is nothing to resume. "
                    f"Remove the run from the history with `mgpu-train runs --prune` (Delete "
                    f"in the app's Runs tab).")
        if not self.epochs_done:
            return (f"No epoch of the run in {self.folder} was completed, so there is no "
                    f"backup to resume from. Train it again as a new run: mgpu-train "
                    f"--config {self.folder / 'config.json'}")
        return None


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def config_json(self) -> Path:
        return self.path / "config.json"

    @property
    def plan_json(self) -> Path:
        return self.path / "plan.json"

    @property
    def cluster_json(self) -> Path:
        """A multi-worker run's cluster (cluster.py); absent on one machine."""
        return self.path / "cluster.json"

    @property
    def events_jsonl(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def worker_log(self) -> Path:
        return self.path / "worker.log"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def best_checkpoint(self) -> Path:
        return self.checkpoints / "best.keras"

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / "last.keras"

    @property
    def backup(self) -> Path:
        return self.path / "backup"

    @property
    def history_csv(self) -> Path:
        return self.path / "history.csv"

    @property
    def cache(self) -> Path:
        """An image folder's decoded pixels, when they do not fit in memory (local disk)."""
        return self.path / "cache"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tensorboard"

    def export_path(self, fmt: str) -> Path:
        return self.path / EXPORT_NAMES[fmt]

    def write_checkpoint_cards(self, card: ModelCard) -> None:
        """The run's card beside its checkpoints, so that a model exported from one later
        (a run stopped before its export, the window's Export) keeps its class names and
        how its inputs were prepared."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        for checkpoint in (self.last_checkpoint, self.best_checkpoint):
            card_path(checkpoint, "keras").write_text(card.to_json(), encoding="utf-8")

    def trained_model(self) -> Path | None:
        """The model a run stands for: its verified export, else its last complete epoch."""
        for candidate in (self.export_path("keras"), self.last_checkpoint):
            if candidate.exists():
                return candidate
        return None

    def read_config(self) -> RunConfig:
        """The run's settings, every path absolute: runs of versions that stored paths as
        typed (issue 29, finding 6) have theirs taken from the folder they were started
        in (`started_in`), else from the current folder."""
        return self._absolute(RunConfig.from_json(self.config_json.read_text()))

    def _absolute(self, stored: RunConfig) -> RunConfig:
        return stored.with_absolute_paths(self.started_in(stored))

    def started_in(self, config: RunConfig) -> Path | None:
        """The folder a run with a relative output folder was started in: this folder's
        place under that output folder tells it (runs/2026…-demo under /lab: /lab for
        `-o runs`); None for an absolute output folder."""
        output = Path(os.path.expanduser(config.output_dir))
        if output.is_absolute():
            return None
        parent, parts = self.path.absolute().parent, Path(os.path.normpath(output)).parts
        if parts == (".",):
            return parent
        if parent.parts[len(parent.parts) - len(parts):] != parts:
            return None
        return Path(*parent.parts[:len(parent.parts) - len(parts)])

    def check_stored_paths(self) -> None:
        """UserError naming the relative paths an older run stored that are not where
        `read_config` looks (both: as stored, and where), before anything reads them."""
        stored = RunConfig.from_json(self.config_json.read_text())
        found = self._absolute(stored)
        missing = [f"'{before}' (looked for at {after})"
                   for name in ("model", "data", "validation_data", "custom_objects")
                   if (before := getattr(stored, name)) != (after := getattr(found, name))
                   and after is not None and not Path(after).exists()]
        if missing:
            raise UserError(
                f"The run in {self.path} was made by an earlier version, which kept its "
                f"paths as typed, and {' and '.join(missing)} cannot be found. Run the "
                f"command from the folder the run was started in, or put the files there.")

    def events(self) -> list[Event]:
        """The events recorded so far; a torn last line (a crash mid-write) is skipped."""
        if not self.events_jsonl.exists():
            return []
        found = []
        for line in self.events_jsonl.read_text().splitlines():
            try:
                found.append(parse_event(line))
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def final_status(self) -> RunStatus | None:
        """How the latest attempt ended, per its events (None: it has not ended)."""
        for event in reversed(self.events()):
            if isinstance(event, RunFinished):
                return event.status
            if isinstance(event, RunFailed):
                return RunStatus.FAILED
            if isinstance(event, RunStarted):
                return None
        return None

    def backup_epoch(self) -> int:
        """Epochs already completed according to the backup's metadata (0: fresh).

        The metadata is replaced atomically and only after the model file it
        names is complete (see checkpoints.py), so this count can be trusted.
        """
        state = read_backup(self.backup)
        return state.epoch if state is not None else 0

    def resume_point(self) -> ResumePoint:
        return ResumePoint(self.path, self.path.is_dir(), self.backup_epoch())

    def has_progress(self) -> bool:
        """True once any epoch finished: such a folder is never deleted on a failure."""
        return self.backup_epoch() > 0 or self.last_checkpoint.exists() or any(
            isinstance(e, EpochEnd) for e in self.events())

    def previous_best(self, monitor: str,
                      before_epoch: int | None = None) -> tuple[int, float] | None:
        """The best epoch recorded before a resume, so a worse one is never called best.

        `before_epoch`: only epochs the resume keeps count (a crash can record an
        epoch that its backup did not commit; the resume redoes it).
        """
        best = None
        for event in self.events():
            if before_epoch is not None and isinstance(event, EpochEnd) and (
                    event.epoch >= before_epoch):
                continue
            if isinstance(event, EpochEnd) and monitor in event.metrics:
                value = event.metrics[monitor]
                if best is None or value < best[1]:
                    best = (event.epoch, value)
        return best


def custom_objects_of(model: Path) -> str | None:
    """The custom objects a model file saved by a run needs: as its card records them (an
    export, wherever it was written), else from the settings of the run folder it is in
    (a checkpoint); None for a file saved elsewhere."""
    with contextlib.suppress(ExportError):  # an unreadable card: the run's settings
        card = read_card(card_path(model, "savedmodel" if model.is_dir() else "keras"))
        if card is not None and card.custom_objects:
            return card.custom_objects
    for folder in (model.parent, model.parent.parent):
        run = RunDir(folder)
        if run.config_json.is_file():
            try:
                return run.read_config().custom_objects_source()
            except (OSError, ValueError, KeyError, TypeError):
                return None
    return None


def custom_objects_for(model: Path, given: Path | None, own: tuple[str, ...]) -> str | None:
    """The custom-objects file `model` loads with: `given` (--custom-objects), else the one
    its card or run records. A UserError, before any engine starts, when the file names
    objects of its own (`own`, from its inspection) and no file is known: Keras cannot
    rebuild them ("Could not locate class") without their code."""
    if given is not None:
        given = given.expanduser().absolute()
        if problem := custom_objects_problem(given):
            raise UserError(f"{problem}.")
        return str(given)
    recorded = custom_objects_of(model)
    if recorded is None and own:
        raise UserError(
            f"{model.name} uses objects of its own ({', '.join(own)}), which Keras rebuilds "
            "only from their code: give --custom-objects FILE, the .py that defines them "
            "(with a `custom_objects` dict naming them, or the classes themselves).")
    return recorded


def create_run_dir(config: RunConfig) -> RunDir:
    """Make a fresh, uniquely named run folder, or say why the output folder can't be used."""
    root = config.output_path
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError as error:
        raise OutputError(
            f"Cannot use output folder {root}: {error.filename} exists and is not a folder. "
            f"Choose another output folder."
        ) from error
    except OSError as error:
        raise OutputError(_unwritable(root, error)) from error
    if not root.is_dir():
        raise OutputError(f"Cannot use output folder {root}: it is not a folder. "
                          f"Choose another output folder.")
    stem = run_stem(config.run_name, config.model)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(1000):
        path = root / (f"{stamp}-{stem}" + (f"-{attempt}" if attempt else ""))
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as error:
            raise OutputError(_unwritable(root, error)) from error
        run_dir = RunDir(path)
        try:
            run_dir.config_json.write_text(config.to_json())
        except OSError as error:
            shutil.rmtree(path, ignore_errors=True)
            raise OutputError(_unwritable(root, error)) from error
        return run_dir
    raise OutputError(f"Could not create a new run folder in {root}; clean up old runs there.")


def folder_label(folder_name: str) -> str:
    """A run folder's name without its date stamp: the name the user gave (or the model's)."""
    return _STAMP.sub("", folder_name) or folder_name


def run_stem(run_name: str | None, model: str) -> str:
    """The name in a run's folder name: the user's run name, else its model's."""
    if run_name:
        return _slug(run_name)
    return _slug("demo" if model == DEMO else Path(os.path.expanduser(model)).stem)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:60] or "run"


def _unwritable(root: Path, error: OSError) -> str:
    reason = error.strerror or str(error)
    return (f"Cannot write to output folder {root}: {reason}. "
            f"Choose a folder you can write to (--output-dir).")
