"""Where each evaluated sample came from, and its picture, for the Evaluation view's cells.

The evaluator keeps, beside each sample's prediction, where the pipeline read it:
an image file, or a row of an array (an `.npz` key, or the demo's digits), after
any validation split shuffled the rows. A cell of the confusion matrix can then
show its samples as the user's own pictures, drawn from the data as stored
(not as the model saw them), long after the evaluation ran. Drawing parses the
user's files, so it runs in a child (`processes/sample_images.py`).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from mgpu_gui.core.config import DEMO
from mgpu_gui.core.datasets import images
from mgpu_gui.core.datasets.content import CHUNK_BYTES, read_exactly, read_npy_header
from mgpu_gui.core.datasets.inspection import load_demo_arrays
from mgpu_gui.core.errors import DataError

_PREFIX = "origin_"  # their arrays' names in the predictions file, beside labels and outputs


@dataclass(frozen=True)
class DrawRequest:
    """Draw the samples `picks` of an evaluation, `px` on their longer side."""

    predictions: str  # the evaluation's predictions file: where its samples came from
    picks: tuple[int, ...]
    px: int


@dataclass(frozen=True, eq=False)
class SampleOrigins:
    """Per sample: its image file, or its row of `key` in `source`."""

    source: str  # "demo", an .npz file or an image folder, as the run named it
    key: str  # the array the rows index ("x_test", "x_train", "demo"); "" for image files
    rows: np.ndarray  # int64 per sample (arrays); empty for image files
    files: np.ndarray  # str per sample (image files); empty for arrays
    drawable: bool  # the samples are pictures: image files, or 2-D/3-D arrays

    @classmethod
    def of_rows(cls, source: str, key: str, count: int, sample_shape: Sequence[int]
                ) -> SampleOrigins:
        """Rows 0..count-1 of `key`, as the file stores them."""
        return cls(source, key, np.arange(count, dtype=np.int64), np.array([], dtype=str),
                   images.drawable(sample_shape))

    @classmethod
    def of_files(cls, source: str, files: np.ndarray) -> SampleOrigins:
        return cls(source, "", np.array([], dtype=np.int64), files.astype(str), True)

    def __len__(self) -> int:
        return len(self.files) if self.key == "" else len(self.rows)

    def take(self, index: np.ndarray) -> SampleOrigins:
        """The origins of the samples at `index` (a split's, after any shuffle)."""
        if self.key == "":
            return SampleOrigins(self.source, "", self.rows, self.files[index], True)
        return SampleOrigins(self.source, self.key, self.rows[index], self.files,
                             self.drawable)

    def describe(self, sample: int) -> str:
        """Where sample `sample` came from, in words: a file name, or a row of an array."""
        if self.key == "":
            return os.path.basename(str(self.files[sample]))
        return f"{self.key}[{int(self.rows[sample])}]"

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {f"{_PREFIX}source": np.array(self.source), f"{_PREFIX}key": np.array(self.key),
                f"{_PREFIX}rows": self.rows, f"{_PREFIX}files": self.files,
                f"{_PREFIX}drawable": np.array(self.drawable)}

    @classmethod
    def from_arrays(cls, kept: Mapping[str, np.ndarray]) -> SampleOrigins | None:
        """The origins kept in a predictions file; None for one written before they were."""
        if f"{_PREFIX}source" not in kept:
            return None
        return cls(str(kept[f"{_PREFIX}source"]), str(kept[f"{_PREFIX}key"]),
                   kept[f"{_PREFIX}rows"], kept[f"{_PREFIX}files"],
                   bool(kept[f"{_PREFIX}drawable"]))


def draw_samples(request: DrawRequest, emit: Callable[[int, list[str]], None],
                 chunk: int = 32) -> None:
    """Base64 PNGs of the samples `request.picks`, in order ("" for a file that cannot be
    decoded any more), handed to `emit(first, pngs)` `chunk` at a time, so a view fills
    as they come. Raise DataError when the data itself is gone or changed."""
    with np.load(request.predictions) as kept:
        origins = SampleOrigins.from_arrays(kept)
    if origins is None:
        raise DataError("this evaluation was made before samples could be drawn; evaluate "
                        "again to see them.")
    if not origins.drawable:
        raise DataError("these samples are not pictures; they are listed instead.")
    first, pending = 0, []
    for picture in _pictures(origins, request.picks):
        pending.append("" if picture is None else images.thumbnail_png(picture, request.px))
        if len(pending) == chunk:
            emit(first, pending)
            first, pending = first + chunk, []
    if pending:
        emit(first, pending)


def _pictures(origins: SampleOrigins, picks: Sequence[int]):
    if origins.key == "":
        for sample in picks:
            try:
                yield Image.fromarray(images.decode_image(str(origins.files[sample])))
            except images.CorruptImageError:
                yield None
        return
    rows = [int(origins.rows[sample]) for sample in picks]
    if origins.source == DEMO:
        digits, _ = load_demo_arrays()
        values = {row: digits[row] for row in rows}
    else:
        values = read_npz_rows(Path(os.path.expanduser(origins.source)), origins.key, rows)
    for row in rows:
        yield images.array_image(values[row])


def read_npz_rows(path: Path, key: str, rows: Sequence[int]) -> dict[int, np.ndarray]:
    """Rows `rows` of the array `key`, streamed a chunk at a time up to the last one wanted
    (an `.npz` member cannot be memory-mapped, and the whole array may not fit)."""
    wanted = set(rows)
    found: dict[int, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as zf, zf.open(f"{key}.npy") as f:
            shape, fortran, dtype = read_npy_header(f)
            if fortran:
                raise DataError(f"{path.name}: {key} is stored in Fortran order, so its "
                                "samples cannot be read one by one.")
            per_sample = int(np.prod(shape[1:], dtype=np.int64))
            per_chunk = max(1, CHUNK_BYTES // max(1, per_sample * dtype.itemsize))
            last = max(wanted, default=-1)
            if last >= shape[0]:
                raise DataError(f"{path.name}: {key} has {shape[0]} samples, fewer than when "
                                "it was evaluated; evaluate again.")
            done = 0
            while done <= last:
                n = min(per_chunk, shape[0] - done)
                chunk = np.frombuffer(read_exactly(f, n * per_sample * dtype.itemsize),
                                      dtype=dtype).reshape(n, *shape[1:])
                found.update({row: chunk[row - done] for row in wanted
                              if done <= row < done + n})
                done += n
    except FileNotFoundError as error:
        raise DataError(f"the data file {path} is gone; its samples cannot be drawn.") from error
    except (KeyError, OSError, EOFError, ValueError, zipfile.BadZipFile) as error:
        raise DataError(f"{path.name}: {key} cannot be read any more ({error}); the file "
                        "changed since the evaluation.") from error
    return found
