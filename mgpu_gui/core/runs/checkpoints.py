"""Checkpoint and backup files that a crash can never leave half-written, and disk space.

TensorFlow-free: the worker's checkpoint callback, the run folder and the
preflight share it.

Every file is written under a temporary name in its own folder, with the same
suffix (Keras picks the format from it), flushed to disk, then moved over the
final name with `os.replace`, which is atomic on POSIX: a reader sees the old
file or the new one, never a part. A run's backup folder holds

    backup/epoch-0003.keras        the full model after epoch 3 (weights and
                                   optimizer state)
    backup/training_metadata.json  {"epoch": 3, "model": "epoch-0003.keras"}

An epoch is saved in two phases around its records:
1. `write_backup_model`: `epoch-0004.keras` atomically, then `last.keras` (and
   `best.keras` when the epoch improved) as hard links to it, swapped in
   atomically, so an epoch costs one model write;
2. (the epoch's event and CSV row are written)
3. `commit_backup`: the metadata, atomically; only then are older epoch files
   removed. From here on a resume starts after epoch 4.
A crash before 3 leaves metadata naming the complete epoch-0003 file, and the
resume redoes epoch 4; a crash after it redoes nothing. Either way no epoch is
lost from the records, and temporary files of a dead writer are removed when
the next run starts (`remove_temp_files`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.errors import OutputError
from mgpu_gui.core.sizes import format_bytes

METADATA_NAME = "training_metadata.json"
_EPOCH_FILE = re.compile(r"^epoch-(\d+)\.keras$")
_TEMP_MARK = ".tmp-"
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_UNWRITABLE_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}
# h5py reports the errno in its text only ("errno = 28, error message = ...").
_FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded|errno = (28|122)\b")


class DiskFullError(OutputError):
    """The disk holding the run folder is full (or too full for the run to start)."""


class BackupError(OutputError):
    """A run's backup cannot be read back."""


# -- crash-safe writes ----------------------------------------------------------
def temp_name(path: Path) -> Path:
    """`.last.tmp-<pid>.keras` for `last.keras`: same folder, same suffix, hidden."""
    stem, dot, suffix = path.name.partition(".")
    return path.with_name(f".{stem}{_TEMP_MARK}{os.getpid()}{dot}{suffix}")


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """`write(temp)` writes the file; it then replaces `path` in one step.

    On any failure the temporary file is removed (freeing what it took on a
    full disk) and `path` is left as it was.
    """
    _replace_atomically(path, write, sync=True)


def _replace_atomically(path: Path, make: Callable[[Path], None], *, sync: bool) -> None:
    """`make(temp)` makes the temporary file (synced after when `sync`), which then
    replaces `path`; on any failure the temporary file is removed."""
    tmp = temp_name(path)
    try:
        make(tmp)
        if sync:
            _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    _fsync_dir(path.parent)


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def link_atomically(source: Path, path: Path) -> None:
    """Make `path` name the same file as `source` (a copy where hard links fail)."""

    def link(tmp: Path) -> None:
        _remove(tmp)
        try:
            os.link(source, tmp)
        except OSError as error:
            if error.errno in _FULL_ERRNOS:
                raise
            shutil.copyfile(source, tmp)  # FAT, some network file systems: no hard links
            _fsync(tmp)

    _replace_atomically(path, link, sync=False)


def remove_temp_files(folder: Path) -> list[Path]:
    """Remove what writers that died mid-write left behind (one worker per run folder)."""
    removed = []
    with contextlib.suppress(OSError):
        for path in folder.iterdir():
            if is_temp_name(path.name):
                _remove(path)
                removed.append(path)
    return removed


def is_temp_name(name: str) -> bool:
    """A file name `temp_name` makes: a write under way, or one whose writer died."""
    return name.startswith(".") and _TEMP_MARK in name


def temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(f".*{_TEMP_MARK}*")] if folder.exists() else []


# -- the backup folder ----------------------------------------------------------
@dataclass(frozen=True)
class BackupState:
    """What a backup folder says: epochs done and the file that holds them."""

    epoch: int
    model: Path | None  # None: an empty backup (epoch 0)


def backup_model_name(epoch: int) -> str:
    return f"epoch-{epoch:04d}.keras"


def read_backup(folder: Path) -> BackupState | None:
    """The backup's metadata, or None when there is none (a fresh run)."""
    try:
        meta = json.loads((folder / METADATA_NAME).read_text(encoding="utf-8"))
        epoch = int(meta["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    name = meta.get("model") if isinstance(meta, dict) else None
    return BackupState(epoch, folder / name if isinstance(name, str) and name else None)


def write_backup_model(folder: Path, epoch: int, save_model: Callable[[Path], None]) -> Path:
    """Phase 1: the model after `epoch` completed epochs, atomically; not yet the backup."""
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / backup_model_name(epoch)
    write_atomically(model, save_model)
    return model


def commit_backup(folder: Path, epoch: int) -> None:
    """Phase 3: name the epoch's model in the metadata, then drop what nothing names."""
    model = folder / backup_model_name(epoch)
    write_text_atomically(folder / METADATA_NAME,
                          json.dumps({"epoch": epoch, "model": model.name}) + "\n")
    prune_backup(folder, model)


def prune_backup(folder: Path, keep: Path) -> None:
    """Remove the backup's model files other than `keep` (links elsewhere stay valid)."""
    with contextlib.suppress(OSError):
        for path in folder.iterdir():
            if is_stale_backup_model(path.name, keep):
                _remove(path)


def is_stale_backup_model(name: str, keep: Path | None) -> bool:
    """An epoch's model file in the backup folder that is not `keep` (the committed one;
    None: none is committed)."""
    return bool(_EPOCH_FILE.match(name)) and (keep is None or name != keep.name)


# -- disk space and write failures ------------------------------------------------
LOG_MARGIN = 16 * 2**20  # events, history, worker.log, TensorBoard: generous
ADAM_FACTOR = 3  # weights + two moment slots: what a checkpoint of an untrained model grows to


@dataclass(frozen=True)
class SpaceNeed:
    """A conservative estimate of the disk space a run needs, and how it was reached."""

    total: int
    checkpoint: int | None  # one model checkpoint; None: not known yet
    copies: int

    def explain(self) -> str:
        logs = f"{format_bytes(LOG_MARGIN)} for logs"
        if self.checkpoint is None:
            return f"at least {logs}; the model's size is known once it is built"
        return (f"{self.copies} copies of a {format_bytes(self.checkpoint)} model checkpoint "
                f"(the backup, the next epoch's backup while it is written, the best epoch "
                f"and {self.copies - 3} export(s)) plus {logs}")


def space_needed(checkpoint_bytes: int | None, exports: int) -> SpaceNeed:
    copies = 3 + exports
    total = LOG_MARGIN + (checkpoint_bytes or 0) * copies
    return SpaceNeed(total, checkpoint_bytes, copies)


def check_free_space(folder: Path, need: SpaceNeed) -> None:
    """Refuse a run the disk holding `folder` cannot hold (DiskFullError)."""
    free = free_bytes(folder)
    if free is None or free >= need.total:
        return
    raise DiskFullError(
        f"Not enough free disk space for this run in {folder}: it needs about "
        f"{format_bytes(need.total)} ({need.explain()}), but only {format_bytes(free)} is "
        f"free on that disk. Free some space there, or choose another output folder "
        f"(--output-dir).")


def free_bytes(path: Path) -> int | None:
    """Free space for an ordinary user on the disk holding `path` (or its nearest parent)."""
    existing = nearest_existing(path)
    try:
        return shutil.disk_usage(existing).free
    except OSError:
        return None


def nearest_existing(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def write_failure(error: BaseException, folder: Path | None = None) -> str | None:
    """"full" or "unwritable" when `error` (or what caused it) is such a write failure.

    A full disk is recognised anywhere (reads never report it); "unwritable" only
    for a file inside `folder`, so a model or data file that cannot be read is
    never taken for it.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "errno", None)
        # TensorFlow's own file writes (TensorBoard) report ENOSPC as RESOURCE_EXHAUSTED.
        if code in _FULL_ERRNOS or _FULL_TEXT.search(str(current)):
            return "full"
        if isinstance(current, OSError) and code in _UNWRITABLE_ERRNOS and _inside(
                current.filename, folder):
            return "unwritable"
        current = current.__cause__ or current.__context__
    return None


def _inside(filename: object, folder: Path | None) -> bool:
    if folder is None:
        return True
    if not isinstance(filename, str | os.PathLike):
        return False
    return Path(os.path.abspath(filename)).is_relative_to(Path(folder).absolute())


def os_reason(error: BaseException) -> str:
    """The operating system's words for the first OSError in the chain."""
    current: BaseException | None = error
    while current is not None:
        if isinstance(current, OSError) and current.strerror:
            return current.strerror
        current = current.__cause__ or current.__context__
    return str(error)


# -- helpers ------------------------------------------------------------------------
def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable; some file systems cannot sync a folder."""
    with contextlib.suppress(OSError):
        _fsync(folder)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        path.unlink()
