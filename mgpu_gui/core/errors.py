"""Errors a user can meet: each message says what was wrong and what to do.

The CLI prints `str(error)` and exits non-zero; the GUI shows it where the user
looks. Anything that is not a `UserError` is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input or machine, explained in plain words.

    `resumable`: whether a run that failed with it can get past it by being resumed
    (same settings, same files) once the user did what the message says. When not,
    nothing may suggest a resume: it would fail the same way.
    """

    exit_code = 2
    resumable: bool = True


class ConfigError(UserError):
    """The run configuration is invalid; `problems` lists one message per field."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        lines = [f"{field}: {message}" for field, message in problems]
        super().__init__("Invalid run settings:\n  " + "\n  ".join(lines))


class DeviceError(UserError):
    """The requested GPUs or replicas cannot be provided on this machine."""


class ModelError(UserError):
    """The model file cannot be loaded, built or used with the data."""


class DataError(UserError):
    """The dataset cannot be read or does not fit the model.

    Not resumable: the data must change, and a resumed run on other data would
    continue epochs (and a validation split) drawn from the old.
    """

    resumable = False


class ExportError(UserError):
    """Exporting or verifying the exported model failed."""


class RehearsalError(UserError):
    """The rehearsal before epoch 1 found what would fail later (engine/rehearsal.py).

    A setup failure even when it stops the first epoch: no epoch is complete, so the run
    leaves no folder and no row. Not resumable: the model or the settings must change.
    """

    resumable = False


class OutputError(UserError):
    """The output folder cannot be created or written."""


class WeightsUnavailable(ModelError):
    """A built-in architecture's pretrained weights could not be downloaded (no network).

    The message names the file, where to put it, and training from scratch; the CLI
    adds the command line that does that, the GUI a button. A resume would fail the
    same way until the file is there, and a run refused in setup leaves no folder.
    """

    resumable = False
