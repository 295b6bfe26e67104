"""What a dataset's values hold: NaN/Inf, label values, classes, images that do not decode.

`inspection` reads layouts (headers, label arrays, folder listings); this reads
everything, so it runs in a child (`processes/data_check.py`) before a run's
folder exists: the run then fails on none of these after it started. Arrays are
streamed from the `.npz` in chunks (memory stays at one chunk, whatever the
file's size); image files go through the training pipeline's own decoder
(`images.decode_image`): all of them up to `DECODE_LIMIT` files, beyond that
every file's header. The first problem found is raised as a DataError naming
the file, the array and the first samples at fault.
"""

from __future__ import annotations

import os
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from mgpu_gui.core.config import DEMO
from mgpu_gui.core.datasets import images
from mgpu_gui.core.datasets.content_request import ContentRequest
from mgpu_gui.core.datasets.inspection import (
    LabelKind,
    describe_labels,
    list_images,
    read_npz_arrays,
    read_npz_layout,
)
from mgpu_gui.core.errors import DataError
from mgpu_gui.core.events import DataChecked

DECODE_LIMIT = 5000  # image files decoded in full; a larger folder gets a header check
CHUNK_BYTES = 16 << 20
FIRST_SHOWN = 5  # sample indices named in a message
PROGRESS_EVERY_S = 0.25

Progress = Callable[[str, int, int], None]  # what, done, total


def check_content(request: ContentRequest, progress: Progress | None = None) -> DataChecked:
    """Read every source in full; raise DataError for the first problem."""
    started = time.monotonic()
    tally = _Tally(progress)
    for source in request.sources:
        if source == DEMO:
            continue  # the app's own data
        path = Path(os.path.expanduser(source))
        if path.is_dir():
            _check_folder(path, request, tally)
        else:
            _check_npz(path, request, tally)
    return DataChecked(values=tally.values, images_decoded=tally.decoded,
                       images_header_only=tally.headers,
                       seconds=round(time.monotonic() - started, 3))


class _Tally:
    """Counts what was read and reports progress at most every PROGRESS_EVERY_S."""

    def __init__(self, progress: Progress | None):
        self.progress = progress
        self.values = self.decoded = self.headers = 0
        self._last = 0.0

    def tick(self, what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if self.progress is not None and (now - self._last >= PROGRESS_EVERY_S or done == total):
            self._last = now
            self.progress(what, done, total)


# -- labels ----------------------------------------------------------------------
def check_labels(name: str, ys: Sequence[np.ndarray], keys: Sequence[str],
                 request: ContentRequest) -> None:
    """Finite labels; for a classifier, whole class ids of at least 2 classes."""
    for y, key in zip(ys, keys, strict=True):
        _refuse_non_finite(name, key, *_non_finite(y.reshape(len(y), -1), 0), len(y))
    if not request.classifier:
        return
    stats = describe_labels(ys, keys)
    train = ys[0]
    if stats.kind is LabelKind.ONEHOT:
        used = np.flatnonzero(train.sum(axis=0) > 0)
        if len(used) < 2 and request.learns:
            raise DataError(f"{name}: {keys[0]} uses only class {int(used[0])} of its "
                            f"{train.shape[1]} one-hot columns; {_one_class(request)}")
        return
    if stats.shape not in ((), (1,)):
        return  # multi-label or soft targets: no class ids to check
    flat = train.reshape(len(train))
    for y, key in zip(ys, keys, strict=True):
        bad = np.flatnonzero(y.reshape(len(y)) != np.round(y.reshape(len(y))))
        if len(bad):
            first = float(y.reshape(len(y))[bad[0]])
            raise DataError(
                f"{name}: {key} holds {len(bad)} label(s) that are not whole numbers (first "
                f"{_indices(bad)}; e.g. {first:g}), but {request.why or 'the run'} trains a "
                f"classifier, whose labels are class ids 0, 1, 2, ... Give the class of each "
                f"sample as a whole number, or, if these are values to predict, train with "
                f"a regression loss (--loss mean_squared_error).")
    classes = np.unique(flat)
    if len(classes) < 2 and request.learns:
        raise DataError(f"{name}: every label in {keys[0]} is {classes[0]:g} (one class); "
                        f"{_one_class(request)}")


def _one_class(request: ContentRequest) -> str:
    why = f" ({request.why})" if request.why else ""
    return (f"a classifier{why} needs samples of at least 2 classes to learn anything. "
            "Add samples of the other classes.")


# -- npz -------------------------------------------------------------------------
def _check_npz(path: Path, request: ContentRequest, tally: _Tally) -> None:
    layout = read_npz_layout(path)
    for xk, _ in layout.pairs:
        _scan_array(path, xk, tally)
    tally.values += _check_npz_labels(path, request)


def check_built_labels(request: ContentRequest) -> None:
    """The label half of `check_content`, once the built model's loss tells whether the
    run trains a classifier (a `.py` builder compiles itself): only label arrays are read.
    An image folder's classes were counted before the run, whatever its loss."""
    for source in request.sources:
        path = Path(os.path.expanduser(source))
        if source != DEMO and not path.is_dir():
            _check_npz_labels(path, request)


def _check_npz_labels(path: Path, request: ContentRequest) -> int:
    """Check the label arrays of an archive; return how many values they hold."""
    y_keys = [yk for _, yk in read_npz_layout(path).pairs]
    ys = read_npz_arrays(path, y_keys)
    check_labels(path.name, [ys[k] for k in y_keys], y_keys, request)
    return sum(int(y.size) for y in ys.values())


def _scan_array(path: Path, key: str, tally: _Tally) -> None:
    """Count NaN and Inf in one array of the archive, reading CHUNK_BYTES at a time."""
    what = f"{key} of {path.name}"
    try:
        with zipfile.ZipFile(path) as zf, zf.open(key + ".npy") as f:
            shape, fortran, dtype = read_npy_header(f)
            samples, count = int(shape[0]), int(np.prod(shape, dtype=np.int64))
            if dtype.kind not in "fc":  # integers cannot be NaN; read nothing more
                tally.values += count
                return
            per_chunk = max(1, CHUNK_BYTES // dtype.itemsize)
            per_sample = max(1, count // max(samples, 1))
            nans = infs = done = 0
            hit = np.zeros(samples, dtype=bool)
            while done < count:
                n = min(per_chunk, count - done)
                chunk = np.frombuffer(read_exactly(f, n * dtype.itemsize), dtype=dtype)
                bad = np.flatnonzero(~np.isfinite(chunk))
                if len(bad):
                    nan = int(np.isnan(chunk[bad]).sum())
                    nans, infs = nans + nan, infs + len(bad) - nan
                    flat = bad + done
                    hit[flat % samples if fortran else flat // per_sample] = True
                done += n
                tally.tick(what, done, count)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path.name}: the array {key} is corrupt or truncated ({exc}); "
                        "save the file again.") from exc
    tally.values += count
    _refuse_non_finite(path.name, key, nans, infs, np.flatnonzero(hit), samples)


def read_npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran order and dtype of the `.npy` stream `f`, left at its first value."""
    if np.lib.format.read_magic(f) == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


def read_exactly(f, size: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise EOFError(f"it ends {size - len(data)} bytes early")
    return data


def _non_finite(values: np.ndarray, offset: int) -> tuple[int, int, np.ndarray]:
    """(NaN count, Inf count, indices of rows holding either) of a 2-D float array."""
    if values.dtype.kind not in "fc":
        return 0, 0, np.zeros(0, dtype=np.int64)
    finite = np.isfinite(values)
    nans = int(np.isnan(values).sum())
    return nans, int((~finite).sum()) - nans, np.flatnonzero(~finite.all(axis=1)) + offset


def _refuse_non_finite(name: str, key: str, nans: int, infs: int, rows: np.ndarray,
                       samples: int) -> None:
    if not nans and not infs:
        return
    what = " and ".join(part for part in (f"{nans} NaN" if nans else "",
                                           f"{infs} infinite" if infs else "") if part)
    raise DataError(
        f"{name}: {key} holds {what} value(s) in {len(rows):,} of its {samples:,} samples "
        f"(first {_indices(rows)}); training on them makes the loss NaN. Replace those "
        f"values, or drop those samples from both the inputs and the labels, then save the "
        f"file again.")


def _indices(rows: np.ndarray) -> str:
    shown = ", ".join(str(int(i)) for i in rows[:FIRST_SHOWN])
    more = ", ..." if len(rows) > FIRST_SHOWN else ""
    return f"at sample{'s' if len(rows) > 1 else ''} {shown}{more}"


# -- image folders ----------------------------------------------------------------
def _check_folder(folder: Path, request: ContentRequest, tally: _Tally) -> None:
    listing = list_images(folder)
    used = sorted(set(listing.labels))
    if len(used) < 2 and request.classifier is not False:
        names = listing.class_names
        only = names[used[0]]
        empty = len(names) - 1
        raise DataError(
            f"{folder}: only the class folder '{only}' holds images"
            f"{f' ({empty} other class folder(s) are empty)' if empty else ''}; an image "
            f"folder trains a classifier, which needs at least 2 classes to learn anything. "
            f"Add a subfolder with the images of each other class.")
    full = len(listing.paths) <= DECODE_LIMIT
    read = images.decode_image if full else images.check_header
    what = f"images in {folder.name}/" + ("" if full else " (headers)")
    total = len(listing.paths)
    for done, path in enumerate(listing.paths, 1):
        read(path)
        tally.tick(what, done, total)
    if full:
        tally.decoded += total
    else:
        tally.headers += total
