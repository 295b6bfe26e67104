"""A run folder's size on disk, and pruning what a finished run no longer needs.

Checkpoints are hard links (checkpoints.py): `checkpoints/last.keras` and the
backup's committed `backup/epoch-NNNN.keras` are one file, so sizes count each
file once (by inode), and a removal frees a file's bytes only when no other
name of it is left.

A prune keeps what the run stands for and what a resume needs: `best.keras`,
`last.keras`, the backup's metadata and the model file it names, the exported
models, events, logs and settings. It removes
- model files in `checkpoints/` other than best and last, and backup epochs that
  the metadata does not name (written, never committed: a resume drops them too);
- temporary files of writers that died mid-write;
- the decoded-image disk cache (`cache/`), which the next resume rebuilds.
A running run (its lock held) is never touched; the removal itself holds the
run's lock, so no resume starts meanwhile. Pruning again removes nothing more.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.core.runs.folder import EXPORT_NAMES, RunDir
from mgpu_gui.core.runs.lock import RunBusyError, RunLock, is_live

_CHECKPOINT_FOLDERS = ("checkpoints", "backup")
_KEPT_CHECKPOINTS = ("best.keras", "last.keras")
_MODEL_SUFFIXES = (".keras", ".h5")
_CACHE = "cache"
_RUNNING = "it is still running (its training process holds the run's lock)"


@dataclass(frozen=True)
class RunSize:
    """A run folder's bytes by kind (each file once, however many names it has)."""

    checkpoints: int  # checkpoints/ and backup/: best, last, the resume backup
    exports: int  # the exported models
    other: int  # events, logs, settings, the image cache, TensorBoard, evaluations
    prunable: int  # what a prune would free now

    @property
    def total(self) -> int:
        return self.checkpoints + self.exports + self.other

    def describe(self) -> str:
        """The sizes by kind, a line each."""
        size = ckpt.format_bytes
        lines = [f"{size(self.total)} in all", f"Checkpoints (best, last, the resume backup): "
                 f"{size(self.checkpoints)}", f"Exported models: {size(self.exports)}",
                 f"The rest (events, logs, caches, evaluations): {size(self.other)}"]
        if self.prunable:
            lines.append(f"Pruning its checkpoints frees {size(self.prunable)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class PrunePlan:
    """What a prune of one run removes and frees; after `prune`, what it did."""

    folder: Path
    remove: tuple[Path, ...] = ()  # files, and the cache folder as a whole
    frees: int = 0
    skipped: str = ""  # why the run is left alone ("": it is not)
    problems: tuple[str, ...] = ()  # removals that failed (after `prune`)

    def what(self) -> str:
        """'2 old checkpoints, 1 temporary file and the image cache', or 'nothing'."""
        cache = self.folder / _CACHE
        temp = sum(ckpt.is_temp_name(path.name) for path in self.remove)
        old = len(self.remove) - temp - (cache in self.remove)
        parts = [f"{n} {noun}{'s' if n != 1 else ''}" for noun, n in (
            ("old checkpoint", old), ("temporary file", temp)) if n]
        if cache in self.remove:
            parts.append("the decoded-image cache")
        if not parts:
            return "nothing"
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


@dataclass(frozen=True)
class _File:
    path: Path
    top: str  # the run folder's entry it is in (or is)
    depth: int  # 1: in the run folder itself, 2: in one of its folders, ...
    inode: tuple[int, int]  # (device, inode): one file, however many names
    size: int
    links: int


def measure(folder: Path) -> RunSize | None:
    """The run folder's size (None: it does not exist); one walk, no change."""
    if not folder.is_dir():
        return None
    files = _walk(folder)
    kinds: dict[tuple[int, int], str] = {}
    sizes: dict[tuple[int, int], int] = {}
    for file in files:  # a file named in checkpoints/ or backup/ counts as a checkpoint
        kind = _kind(file)
        if kinds.get(file.inode) != "checkpoints":
            kinds[file.inode] = kind
        sizes[file.inode] = file.size
    by_kind: Counter[str] = Counter()
    for inode, kind in kinds.items():
        by_kind[kind] += sizes[inode]
    _, frees = _plan(folder, files)
    return RunSize(by_kind["checkpoints"], by_kind["exports"], by_kind["other"], frees)


def plan_prune(folder: Path) -> PrunePlan:
    """What `prune` would remove now (a look: nothing changes, no lock is taken)."""
    if not folder.is_dir():
        return PrunePlan(folder, skipped="its folder was deleted")
    if is_live(folder):
        return PrunePlan(folder, skipped=_RUNNING)
    remove, frees = _plan(folder, _walk(folder))
    return PrunePlan(folder, remove, frees)


def prune(folder: Path) -> PrunePlan:
    """Remove what a prune removes, under the run's lock; the plan says what went and
    which removals failed (a failed one frees nothing)."""
    try:
        lock = RunLock.acquire(folder)
    except RunBusyError:
        return PrunePlan(folder, skipped=_RUNNING)
    except FileNotFoundError:
        return PrunePlan(folder, skipped="its folder was deleted")
    except OSError as error:  # a read-only folder: nothing could be removed either
        return PrunePlan(folder, skipped=f"its folder cannot be changed "
                                         f"({error.strerror or error})")
    try:
        files = _walk(folder)
        remove, _ = _plan(folder, files)
        problems = []
        for path in remove:
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
            except OSError as error:
                problems.append(f"{path}: {error.strerror or error}")
        gone = {f.path for f in files if not os.path.lexists(f.path)}
        return PrunePlan(folder, tuple(p for p in remove if not os.path.lexists(p)),
                         _frees(files, gone), problems=tuple(problems))
    finally:
        lock.release()


def _plan(folder: Path, files: list[_File]) -> tuple[tuple[Path, ...], int]:
    """The paths a prune removes (the cache folder whole), and the bytes that frees."""
    backup = ckpt.read_backup(RunDir(folder).backup)
    keep = backup.model if backup is not None else None
    going = [f for f in files if _prunable(f, keep)]
    remove = [f.path for f in going if _role(f) != "cache"]
    cache = folder / _CACHE
    if os.path.lexists(cache):
        remove.append(cache)
    return tuple(sorted(remove)), _frees(files, {f.path for f in going})


def _frees(files: list[_File], going: set[Path]) -> int:
    """Bytes of the files whose every name is in `going` (a name elsewhere keeps it)."""
    gone = Counter(f.inode for f in files if f.path in going)
    sizes = {f.inode: (f.size, f.links) for f in files}
    return sum(size for inode, (size, links) in sizes.items() if gone[inode] >= links)


def _prunable(file: _File, keep: Path | None) -> bool:
    role = _role(file)
    if role != "checkpoint":
        return role in ("temp", "cache")
    if file.top == "backup":
        return ckpt.is_stale_backup_model(file.path.name, keep)
    return file.path.name not in _KEPT_CHECKPOINTS


def _role(file: _File) -> str:
    """'cache', 'temp', 'checkpoint' (a model file in checkpoints/ or backup/), or ''."""
    if file.top == _CACHE:
        return "cache"
    name = file.path.name
    if ckpt.is_temp_name(name):
        return "temp"
    if file.depth == 2 and file.top in _CHECKPOINT_FOLDERS and name.endswith(_MODEL_SUFFIXES):
        return "checkpoint"
    return ""


def _kind(file: _File) -> str:
    if file.top in _CHECKPOINT_FOLDERS:
        return "checkpoints"
    return "exports" if file.top in EXPORT_NAMES.values() else "other"


def _walk(folder: Path) -> list[_File]:
    """Every regular file under `folder` (symbolic links are not followed); a file
    removed during the walk is left out."""
    found: list[_File] = []
    stack: list[tuple[str, str, int]] = [(str(folder), "", 1)]  # (path, top, depth)
    while stack:
        where, top, depth = stack.pop()
        try:
            entries = list(os.scandir(where))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, top or entry.name, depth + 1))
                elif entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    found.append(_File(Path(entry.path), top or entry.name, depth,
                                       (info.st_dev, info.st_ino), info.st_size,
                                       info.st_nlink))
            except OSError:
                continue
    return found
