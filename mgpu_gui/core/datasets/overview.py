"""What a dataset looks like before training: the figures of the Data view.

Class counts per split (and a warning when they are far apart), a few samples
of each class as thumbnails, what the model will see (shape, dtype, value
range) and, for an image folder, the distribution of image sizes. Computed in
stages, each handed to `emit` as soon as it is known: the counts first (an
`.npz`'s label arrays, a folder's listing: about 0.2 s for 100,000 files; past
COUNT_BUDGET_S the class folders not listed yet are estimated, saying so, and
the exact counts follow), then the thumbnails, then what needs reading many
files or values.
Those later stages are bounded, whatever the data's size: each stops at its
time budget or sample cap, and the overview says how much it read
(`values_read` of `values_total`, `sizes_read` of `sizes_total`). Untrusted
files are parsed here, so this runs in a child (`processes/data_overview.py`).
"""

from __future__ import annotations

import os
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

import numpy as np
from PIL import Image

from mgpu_gui.core.config import DEMO
from mgpu_gui.core.datasets import images
from mgpu_gui.core.datasets.content import CHUNK_BYTES, read_exactly, read_npy_header
from mgpu_gui.core.datasets.folder_listing import ClassFolders
from mgpu_gui.core.datasets.inspection import (
    DataKind,
    LabelKind,
    check_pairs,
    class_ids,
    demo_split_indices,
    describe_labels,
    image_x_shape,
    label_classes,
    load_demo_arrays,
    npz_x_shape,
    read_npz_arrays,
    read_npz_layout,
)
from mgpu_gui.core.errors import DataError

IMBALANCE_RATIO = 5.0  # largest class / smallest class that earns the warning
THUMBS_PER_CLASS = 4
THUMB_CLASSES = 24  # classes drawn; a 1000-class folder shows the first ones
THUMB_PX = 64  # a thumbnail's longer side
HEADER_SAMPLE = 2000  # image headers read for the size distribution
COUNT_BUDGET_S = 0.4  # a folder's listing, then the rest of its counts are estimated
BUDGET_S = 2.0  # per stage after the counts
SIZES_SHOWN = 8  # most common image sizes listed; the rest are summed up
SEED = 0  # the same data shows the same samples every time


class Stage(StrEnum):
    COUNTS = "counts"  # classes, counts and shapes: no sample read yet
    SAMPLES = "samples"  # + thumbnails
    DONE = "done"  # + value range and image sizes


@dataclass(frozen=True)
class OverviewRequest:
    source: str  # "demo", an .npz file or an image folder
    image_size: tuple[int, int] = (32, 32)  # (height, width) an image folder is resized to
    budget_s: float = BUDGET_S
    count_budget_s: float = COUNT_BUDGET_S
    header_sample: int = HEADER_SAMPLE


@dataclass(frozen=True)
class SplitCounts:
    split: str  # "train", "val" or "test"
    samples: int
    counts: tuple[int, ...]  # per class, in class order; () when labels are no class ids


@dataclass(frozen=True)
class Thumbnail:
    label: int
    name: str  # the image file's name, or "sample 17" for an array
    png: str  # base64 PNG, at most THUMB_PX on its longer side


@dataclass(frozen=True)
class SizeCount:
    width: int
    height: int
    files: int  # among the headers read


@dataclass(frozen=True)
class DataOverview:
    """The figures known at `stage`; later stages only add to them."""

    source: str
    kind: DataKind
    stage: Stage
    class_names: tuple[str, ...]
    splits: tuple[SplitCounts, ...]
    label_note: str  # why there are no class counts ("" when there are)
    imbalance: str  # the warning ("" when the classes are balanced enough)
    input_shape: tuple[int, ...] | None  # per sample, as the model sees it
    stored: str  # what the files hold, e.g. "x_train: uint8 (1617, 8, 8)"
    dtype: str
    value_min: float | None = None
    value_max: float | None = None
    values_read: int = 0  # samples (arrays) or images (folders) the range is taken from
    values_total: int = 0
    sizes: tuple[SizeCount, ...] = ()  # most common first
    sizes_read: int = 0  # image headers read
    sizes_total: int = 0
    thumbnails: tuple[Thumbnail, ...] = ()
    thumbs_note: str = ""  # why some or all samples are not drawn
    seconds: float = 0.0
    estimated: int = 0  # the last class counts are estimates (folders not listed in time)

    @property
    def train_counts(self) -> tuple[int, ...]:
        return self.splits[0].counts if self.splits else ()

    def values_note(self) -> str:
        """Where the value range comes from, saying when it is a sample."""
        what = "images" if self.kind is DataKind.IMAGES else "samples"
        if self.values_read >= self.values_total:
            return f"all {self.values_total:,} {what}"
        how = ("a random sample" if self.kind is DataKind.IMAGES
               else "the first ones: reading stopped at the time limit")
        return f"{self.values_read:,} of {self.values_total:,} {what} ({how})"

    def counts_note(self) -> str:
        """What the counts are while some are estimates ("" once all are counted)."""
        if not self.estimated:
            return ""
        classes = len(self.class_names)
        return (f"Counts estimated: {classes - self.estimated} of {classes} class folders "
                "listed so far, the rest estimated from their folders' sizes (marked ≈); "
                "exact counts follow.")

    def sizes_note(self) -> str:
        if self.sizes_read >= self.sizes_total:
            return f"all {self.sizes_total:,} files"
        return f"{self.sizes_read:,} of {self.sizes_total:,} files (a random sample)"


Emit = Callable[[DataOverview], None]


def overview_data(request: OverviewRequest, emit: Emit | None = None) -> DataOverview:
    """The overview of `request.source`, each stage passed to `emit`; raise DataError."""
    started = time.monotonic()

    def stage(overview: DataOverview) -> DataOverview:
        overview = replace(overview, seconds=round(time.monotonic() - started, 3))
        if emit is not None and overview.stage is not Stage.DONE:
            emit(overview)
        return overview

    if request.source == DEMO:
        return _demo(stage)
    path = Path(os.path.expanduser(request.source))
    if not path.exists():
        raise DataError(f"dataset not found: {path}. Give an .npz file, an image folder, "
                        "or 'demo'.")
    if path.is_dir():
        return _folder(path, request, stage)
    return _npz(path, request, stage)


def imbalance_warning(names: Sequence[str], counts: Sequence[int]) -> str:
    """The warning for training counts whose largest is IMBALANCE_RATIO x the smallest."""
    if len(counts) < 2:
        return ""
    empty = [name for name, count in zip(names, counts, strict=True) if count == 0]
    if empty:
        shown = ", ".join(f"'{n}'" for n in empty[:5]) + (", ..." if len(empty) > 5 else "")
        return (f"{len(empty)} of {len(counts)} classes have no training samples ({shown}): "
                "the model can never predict them. Add samples of those classes, or "
                "renumber the labels without them.")
    big, small = int(np.argmax(counts)), int(np.argmin(counts))
    ratio = counts[big] / counts[small]
    if ratio < IMBALANCE_RATIO:
        return ""
    return (f"Imbalanced classes: '{names[big]}' has {counts[big]:,} training samples, "
            f"{ratio:.1f}x the {counts[small]:,} of '{names[small]}'. A model can score well "
            "by favouring the large classes; consider more samples of the small ones, "
            "resampling, or class weights.")


# -- demo and .npz arrays ----------------------------------------------------------
def _demo(stage: Callable[[DataOverview], DataOverview]) -> DataOverview:
    x, labels = load_demo_arrays()
    rest, test = demo_split_indices(len(x))
    names = class_ids(int(labels.max()) + 1)
    splits = tuple(SplitCounts(name, len(rows), _bincount(labels[rows], len(names)))
                   for name, rows in (("train", rest), ("test", test)))
    overview = stage(DataOverview(
        source=DEMO, kind=DataKind.DEMO, stage=Stage.COUNTS, class_names=names, splits=splits,
        label_note="", imbalance=imbalance_warning(names, splits[0].counts),
        input_shape=(*x.shape[1:], 1), stored=f"digits: {x.dtype} {x.shape}",
        dtype=str(x.dtype)))
    thumbs = tuple(Thumbnail(int(labels[i]), f"sample {i}",
                             images.thumbnail_png(images.array_image(x[i]), THUMB_PX))
                   for i in _first_per_class(labels[rest], len(names), rest))
    overview = stage(replace(overview, stage=Stage.SAMPLES, thumbnails=thumbs))
    return stage(replace(overview, stage=Stage.DONE, value_min=float(x.min()),
                         value_max=float(x.max()), values_read=len(x), values_total=len(x)))


def _npz(path: Path, request: OverviewRequest,
         stage: Callable[[DataOverview], DataOverview]) -> DataOverview:
    layout = read_npz_layout(path)
    y_keys = [yk for _, yk in layout.pairs]
    ys = read_npz_arrays(path, y_keys)
    check_pairs(path.name, layout.pairs, layout.x_shapes, ys)
    labels = describe_labels([ys[k] for k in y_keys], y_keys)
    names = class_ids(labels.num_classes)
    note = ""
    if labels.kind is LabelKind.OTHER:
        note = (f"y_train holds values of shape {labels.shape or '()'} per sample, not class "
                "ids or one-hot rows (regression targets or multi-label): no class counts.")
    splits = tuple(SplitCounts(xk[2:], len(ys[yk]), _class_counts(ys[yk], labels.kind,
                                                                  len(names)))
                   for xk, yk in layout.pairs)
    shape, dtype = layout.x_shapes["x_train"], layout.x_dtypes["x_train"]
    overview = stage(DataOverview(
        source=str(path), kind=DataKind.NPZ, stage=Stage.COUNTS, class_names=names,
        splits=splits, label_note=note, imbalance=imbalance_warning(names, splits[0].counts),
        input_shape=npz_x_shape(shape, dtype), stored=f"x_train: {dtype} {shape}",
        dtype=str(dtype), values_total=shape[0]))
    train = ys["y_train"]
    if labels.kind is LabelKind.OTHER:
        overview = replace(overview, thumbs_note="No classes, so no samples per class.")
        wanted = []
    else:
        wanted = _first_per_class(label_classes(train, labels.kind), len(names),
                                  np.arange(len(train)))
    return _scan_npz(path, shape, overview, wanted, train, labels.kind, request, stage)


def _scan_npz(path: Path, shape: tuple[int, ...], overview: DataOverview, wanted: list[int],
              train: np.ndarray, kind: LabelKind, request: OverviewRequest,
              stage: Callable[[DataOverview], DataOverview]) -> DataOverview:
    """Stream x_train a chunk of whole samples at a time, for as long as the budget allows:
    its value range, and the samples to draw as they pass (with shuffled data, all of
    them are near the start)."""
    per_sample = int(np.prod(shape[1:], dtype=np.int64))
    drawable, thumbs_note = _drawable(shape[1:])
    thumbs_note = overview.thumbs_note or thumbs_note
    found: dict[int, np.ndarray] = {}
    low = high = None
    done = 0
    deadline = time.monotonic() + request.budget_s
    try:
        with zipfile.ZipFile(path) as zf, zf.open("x_train.npy") as f:
            _, fortran, dtype = read_npy_header(f)
            if fortran:  # samples are not contiguous: the range is right, no sample is
                drawable, thumbs_note = False, "x_train is stored in Fortran order: not drawn."
            per_chunk = max(1, CHUNK_BYTES // max(1, per_sample * dtype.itemsize))
            while done < shape[0] and (time.monotonic() < deadline or done == 0):
                n = min(per_chunk, shape[0] - done)
                chunk = np.frombuffer(read_exactly(f, n * per_sample * dtype.itemsize),
                                      dtype=dtype)
                finite = chunk[np.isfinite(chunk)] if dtype.kind in "fc" else chunk
                if finite.size:
                    low = float(finite.min()) if low is None else min(low, float(finite.min()))
                    high = float(finite.max()) if high is None else max(high, float(finite.max()))
                if drawable and not fortran:
                    rows = chunk.reshape(n, *shape[1:])
                    found.update({i: rows[i - done] for i in wanted if done <= i < done + n})
                done += n
                if len(found) == len(wanted) and overview.stage is Stage.COUNTS:
                    overview = stage(replace(overview, stage=Stage.SAMPLES, thumbnails=tuple(
                        _npz_thumb(i, found[i], train, kind) for i in wanted)))
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path.name}: the array x_train is corrupt or truncated ({exc}); "
                        "save the file again.") from exc
    thumbs = tuple(_npz_thumb(i, found[i], train, kind) for i in wanted if i in found)
    if drawable and len(thumbs) < len(wanted):
        thumbs_note = f"{len(wanted) - len(thumbs)} samples lie beyond what was read in time."
    return stage(replace(overview, stage=Stage.DONE, value_min=low, value_max=high,
                         values_read=done, thumbnails=thumbs, thumbs_note=thumbs_note))


def _drawable(sample: tuple[int, ...]) -> tuple[bool, str]:
    """Whether samples of this shape are images (2-D, or 3-D with 1, 3 or 4 channels)."""
    if images.drawable(sample):
        return True, ""
    return False, f"Samples of shape {sample} are not images: none drawn."


def _npz_thumb(index: int, sample: np.ndarray, train: np.ndarray,
               kind: LabelKind) -> Thumbnail:
    label = int(label_classes(train[index:index + 1], kind)[0])
    return Thumbnail(label, f"sample {index}",
                     images.thumbnail_png(images.array_image(sample), THUMB_PX))


def _class_counts(y: np.ndarray, kind: LabelKind, classes: int) -> tuple[int, ...]:
    return () if kind is LabelKind.OTHER else _bincount(label_classes(y, kind), classes)


def _bincount(ids: np.ndarray, classes: int) -> tuple[int, ...]:
    return tuple(int(c) for c in np.bincount(ids.astype(np.int64), minlength=classes))


def _first_per_class(ids: np.ndarray, classes: int, rows: np.ndarray) -> list[int]:
    """`rows` of the first THUMBS_PER_CLASS samples of each of the first THUMB_CLASSES
    classes, by class then order."""
    picked = [rows[np.flatnonzero(ids == c)[:THUMBS_PER_CLASS]]
              for c in range(min(classes, THUMB_CLASSES))]
    return [int(i) for block in picked for i in block]


# -- image folders -----------------------------------------------------------------
def _folder(folder: Path, request: OverviewRequest,
            stage: Callable[[DataOverview], DataOverview]) -> DataOverview:
    classes = ClassFolders(folder)
    if not classes.list_until(time.monotonic() + request.count_budget_s):
        stage(_folder_counts(folder, classes.class_names, classes.counts(), request,
                             estimated=len(classes.class_names) - classes.listed))
    listing = classes.listing()
    names = listing.class_names
    labels = np.asarray(listing.labels, dtype=np.int64)
    total = len(listing.paths)
    overview = stage(_folder_counts(folder, names, _bincount(labels, len(names)), request))
    rng = np.random.default_rng(SEED)
    picks = [int(i) for c in range(min(len(names), THUMB_CLASSES))
             for i in _random_of(np.flatnonzero(labels == c), THUMBS_PER_CLASS, rng)]
    overview = stage(_folder_thumbnails(listing.paths, labels, picks, overview, request))
    order = _random_of(np.arange(total), request.header_sample, rng)
    sizes: Counter[tuple[int, int]] = Counter()
    deadline = time.monotonic() + request.budget_s
    unreadable = 0
    for index in order:
        if time.monotonic() > deadline:
            break
        try:
            sizes[images.check_header(listing.paths[index])] += 1
        except images.CorruptImageError:
            unreadable += 1  # the data check names them; here they only go uncounted
    return stage(replace(overview, stage=Stage.DONE, sizes=tuple(
        SizeCount(w, h, n) for (w, h), n in sizes.most_common()),
        sizes_read=sum(sizes.values()) + unreadable))


def _folder_counts(folder: Path, names: tuple[str, ...], counts: tuple[int, ...],
                   request: OverviewRequest, estimated: int = 0) -> DataOverview:
    total = sum(counts)
    about = "about " if estimated else ""
    return DataOverview(
        source=str(folder), kind=DataKind.IMAGES, stage=Stage.COUNTS, class_names=names,
        splits=(SplitCounts("train", total, counts),), label_note="",
        imbalance="" if estimated else imbalance_warning(names, counts),
        input_shape=image_x_shape(request.image_size),
        stored=f"{about}{total:,} image files in {len(names)} class folders", dtype="uint8",
        values_total=total, sizes_total=total, estimated=estimated)


def _folder_thumbnails(paths: Sequence[str], labels: np.ndarray, picks: list[int],
                       overview: DataOverview, request: OverviewRequest) -> DataOverview:
    """Decode the picked files (the training pipeline's decoder) within the budget: their
    thumbnails, and the value range of their pixels."""
    thumbs: list[Thumbnail] = []
    low, high, read, bad = 255, 0, 0, []
    deadline = time.monotonic() + request.budget_s
    for index in picks:
        if time.monotonic() > deadline:
            break
        read += 1
        try:
            pixels = images.decode_image(paths[index])
        except images.CorruptImageError:
            bad.append(os.path.basename(paths[index]))
            continue
        low, high = min(low, int(pixels.min())), max(high, int(pixels.max()))
        image = Image.fromarray(pixels)
        thumbs.append(Thumbnail(int(labels[index]), os.path.basename(paths[index]),
                                images.thumbnail_png(image, THUMB_PX)))
    notes = []
    if read < len(picks):
        notes.append(f"{len(picks) - read} samples not drawn: decoding took over "
                     f"{request.budget_s:g} s.")
    if bad:
        notes.append(f"{len(bad)} cannot be decoded ({', '.join(bad[:3])}); the data "
                     "check before training names them all.")
    decoded = read - len(bad)
    return replace(overview, stage=Stage.SAMPLES, thumbnails=tuple(thumbs),
                   thumbs_note=" ".join(notes),
                   value_min=float(low) if decoded else None,
                   value_max=float(high) if decoded else None, values_read=decoded)


def _random_of(indices: np.ndarray, limit: int, rng: np.random.Generator) -> np.ndarray:
    """At most `limit` of `indices`, in a random order."""
    return rng.permutation(indices)[:limit]


__all__ = ["DataOverview", "OverviewRequest", "SizeCount", "SplitCounts", "Stage",
           "Thumbnail", "imbalance_warning", "overview_data"]
