"""A run's data as numpy arrays or lists of image files, split and checked: no TensorFlow.

Both input pipelines start here: tf.data (`pipeline.py`) and the Python one
(`py_pipeline.py`, which lets the JAX engine train where TensorFlow is not
installed). What they make of a split (an unbatched `tf.data.Dataset`, or the
split itself for a `keras.utils.PyDataset`) goes into `PreparedData`, with what
the model and the UI need to know; the batching rules (drop_remainder, the
evaluation batch) are `mgpu_gui.core.datasets.batching`'s for both.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from mgpu_gui.core.config import DEMO, RunConfig
from mgpu_gui.core.datasets.inspection import (
    DEMO_MAX_VALUE,
    DataKind,
    LabelKind,
    LabelStats,
    check_pairs,
    class_ids,
    demo_split_indices,
    describe_labels,
    image_x_shape,
    list_images,
    load_demo_arrays,
    npz_x_shape,
    read_npz_arrays,
    read_npz_layout,
    split_sizes,
)
from mgpu_gui.core.errors import DataError
from mgpu_gui.core.evaluation.samples import SampleOrigins
from mgpu_gui.core.modelfiles.card import ARRAYS, IMAGES, InputRecord


@dataclass(frozen=True)
class Arrays:
    """Samples in memory: float32 inputs (pixels already rescaled), their labels."""

    x: np.ndarray
    y: np.ndarray
    origin: SampleOrigins


@dataclass(frozen=True)
class Files:
    """An image folder's samples: files still to decode and resize, their labels."""

    paths: np.ndarray
    labels: np.ndarray
    origin: SampleOrigins


Split = Arrays | Files


def size(data: Split) -> int:
    return len(data.y) if isinstance(data, Arrays) else len(data.labels)


def labels(data: Split) -> np.ndarray:
    return data.y if isinstance(data, Arrays) else data.labels


def take(data: Split, index: np.ndarray) -> Split:
    if isinstance(data, Arrays):
        return Arrays(data.x[index], data.y[index], data.origin.take(index))
    return Files(data.paths[index], data.labels[index], data.origin.take(index))


class LabelMap(StrEnum):
    """How labels change to the form the loss takes (`models.label_mapper`); each pipeline
    applies it its own way."""

    TO_ONEHOT = "to one-hot"
    TO_IDS = "to class ids"


def relabeled(y: np.ndarray, mapping: LabelMap | None, num_classes: int | None) -> np.ndarray:
    """Labels in the form the loss takes (`models.label_mapper`), as tf.data's map makes them."""
    if mapping is LabelMap.TO_ONEHOT:
        return np.eye(num_classes, dtype=np.float32)[y.reshape(len(y), -1)[:, 0].astype(np.intp)]
    if mapping is LabelMap.TO_IDS:
        return np.argmax(y, axis=-1)
    return y


@dataclass(frozen=True)
class SourceData:
    """The run's splits as read, before a pipeline turns them into datasets."""

    kind: DataKind
    train: Split
    val: Split | None
    test: Split | None
    input_shape: tuple[int, ...]
    class_names: tuple[str, ...]
    labels: LabelStats
    val_source: str  # where validation came from, for the run log


@dataclass(frozen=True, eq=False)
class PreparedData:
    """Unbatched datasets (whatever the pipeline makes of each split) plus what the model
    and the UI need to know.

    tf.data: an image folder's datasets yield uint8 pixels, resized: that is what a
    cache holds (a quarter of float32); `finish` makes them the model's float32 input
    and must follow them (`batch_for_training` maps it after the cache and the
    shuffle). Other data, and every split of the Python pipeline, yields float32
    already, and `finish` is None.
    `x_sample` is a few validation (else training) inputs, finished, kept in numpy
    so an exported model can be checked against the trained one without the pipeline;
    `y_sample` their labels as the data gives them (the rehearsal's loss on one batch).
    """

    kind: DataKind
    train: Any
    val: Any | None
    test: Any | None
    train_samples: int
    val_samples: int
    test_samples: int
    input_shape: tuple[int, ...]
    num_classes: int | None
    class_names: tuple[str, ...]
    label_kind: LabelKind
    label_max: float | None
    x_sample: np.ndarray
    y_sample: np.ndarray
    val_source: str  # where validation came from, for the run log
    # The labels of `val` and `test` in their order, without decoding a sample (evaluation).
    val_labels: np.ndarray | None = None
    test_labels: np.ndarray | None = None
    # Where each of them was read (a file, a row of an array): the evaluation draws them.
    val_origins: SampleOrigins | None = None
    test_origins: SampleOrigins | None = None
    finish: Callable[[Any, Any], tuple[Any, Any]] | None = None
    # Each split's image files (image folders): a disk cache is named for them.
    files: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, source: SourceData, convert: Callable[[Split], Any], x_sample: np.ndarray,
           finish: Callable | None = None) -> PreparedData:
        """`source`'s splits, each made a dataset by `convert`."""
        val, test = source.val, source.test
        sampled = source.train if val is None else val  # as the pipelines take `x_sample`
        parts = [(s, n) for s, n in ((source.train, "train"), (val, "validation"),
                                     (test, "test")) if s is not None]
        return cls(
            kind=source.kind, train=convert(source.train),
            val=None if val is None else convert(val), test=None if test is None else convert(test),
            train_samples=size(source.train), val_samples=0 if val is None else size(val),
            test_samples=0 if test is None else size(test), input_shape=source.input_shape,
            num_classes=source.labels.num_classes, class_names=source.class_names,
            label_kind=source.labels.kind, label_max=source.labels.maximum, x_sample=x_sample,
            y_sample=labels(sampled)[:len(x_sample)], val_source=source.val_source,
            val_labels=None if val is None else labels(val),
            test_labels=None if test is None else labels(test),
            val_origins=None if val is None else val.origin,
            test_origins=None if test is None else test.origin, finish=finish,
            files={name: part.paths for part, name in parts if isinstance(part, Files)})

    @property
    def cached_itemsize(self) -> int:
        """Bytes per value a cache holds: uint8 pixels, or float32."""
        return 1 if self.finish is not None else 4

    def finished(self, ds: Any) -> Any:
        """`ds` as the model takes it (float32), for a single pass such as an evaluation."""
        if ds is None or self.finish is None:
            return ds
        import tensorflow as tf  # only tf.data datasets have a `finish`

        return ds.map(self.finish, num_parallel_calls=tf.data.AUTOTUNE)

    def fingerprint(self, split: str) -> str:
        """The split's files (names, sizes, modification times) and the size they are
        resized to: a cache made from them is valid while this is the same. A stat per
        file, so only asked for when a split goes to a disk cache."""
        digest = hashlib.sha256(repr(self.input_shape).encode())
        for path in self.files[split]:
            info = os.stat(path)
            digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
        return digest.hexdigest()[:16]


def read_data(config: RunConfig) -> SourceData:
    """Read `config.data` (+ `config.validation_data`) into splits.

    Validation comes from, in order: `config.validation_data` when given (an
    explicit choice), `x_val`/`y_val` in the `.npz`, else a seeded split of
    `config.validation_split` of the training samples. `.npz` inputs become
    float32; uint8 inputs are treated as pixels: multiplied by
    `config.input_rescale`, and (N, H, W) gets a channel axis. Image folders are
    listed only (each pipeline decodes them: 3 channels, resized to
    `config.image_size`, x rescale). The demo is scaled to [0, 1] with a fixed
    held-out test set.
    """
    train, val, test, kind, class_names, shape = _read_source(config.data, config, role="data")
    val_source = ""
    if config.validation_data is not None:  # an explicit choice wins over x_val in the file
        val, _, _, vkind, vnames, vshape = _read_source(
            config.validation_data, config, role="validation_data")
        if vshape != shape:
            raise DataError(f"validation data samples have shape {vshape} but training "
                            f"samples have {shape}; use data of the same kind and size.")
        if vkind is DataKind.IMAGES and kind is DataKind.IMAGES and vnames != class_names:
            raise DataError(f"validation folder classes {list(vnames)} differ from the "
                            f"training folder classes {list(class_names)}.")
        kinds = [_label_stats([(p, n)]).kind for p, n in ((train, "train"), (val, "validation"))]
        if kinds[0] is not kinds[1]:
            raise DataError(f"validation labels are {kinds[1].value} but training labels are "
                            f"{kinds[0].value}; use the same label format in both.")
        val_source = f"validation_data ({config.validation_data})"
    elif val is not None:
        val_source = "x_val/y_val in the data file"
    elif config.validation_split > 0:
        train, val = _split(train, config.validation_split, config.seed)
        val_source = f"{config.validation_split:.0%} of the training samples (seed {config.seed})"
    named = ((train, "train"), (val, "validation"), (test, "test"))
    stats = _label_stats([(s, n) for s, n in named if s is not None])
    if kind is not DataKind.IMAGES:
        class_names = class_ids(stats.num_classes)
    return SourceData(kind, train, val, test, shape, class_names, stats, val_source or "none")


def check_one_batch(samples: int, global_batch: int, replicas: int | None, what: str) -> None:
    """A DataError when a split (`what`: "training", "validation" or "test") holds less than
    one global batch: every batch is full (drop_remainder), so it would give none."""
    if samples < global_batch:
        split = (f"{global_batch // replicas} per replica x {replicas} replicas" if replicas
                 else "batch per replica x replicas")
        raise DataError(
            f"the {what} set has {samples} samples, fewer than one global batch "
            f"({global_batch} = {split}); lower the batch per replica or use fewer replicas")


def input_record(config: RunConfig, prepared: PreparedData) -> InputRecord:
    """What the pipeline did to a sample before the model saw it, for the export's card."""
    if prepared.kind is DataKind.IMAGES:
        image_size = tuple(int(s) for s in config.image_size)
        return InputRecord(IMAGES, (image_size[0], image_size[1]), channels=3,
                           rescale=float(config.input_rescale))
    return InputRecord(ARRAYS, rescale=float(config.input_rescale))


def _read_source(
    source: str, config: RunConfig, *, role: str
) -> tuple[Split, Split | None, Split | None, DataKind, tuple[str, ...], tuple[int, ...]]:
    """(train, val, test, kind, class names, per-sample input shape) for one source."""
    if source == DEMO:
        if role == "validation_data":
            raise DataError("'demo' cannot be validation data; it brings its own split.")
        digits, digit_labels = load_demo_arrays()
        rest, test = demo_split_indices(len(digits))
        x = (digits.astype(np.float32) / DEMO_MAX_VALUE)[..., None]
        y = digit_labels.astype(np.int32)
        origin = SampleOrigins.of_rows(DEMO, "demo", len(digits), digits.shape[1:])
        return (Arrays(x[rest], y[rest], origin.take(rest)), None,
                Arrays(x[test], y[test], origin.take(test)), DataKind.DEMO, (), x.shape[1:])
    path = Path(os.path.expanduser(source))
    if not path.exists():
        raise DataError(f"{role}: dataset not found: {path}. Give an .npz file, an image "
                        "folder, or 'demo'.")
    if path.is_dir():
        listing = list_images(path)
        paths = np.array(listing.paths)
        files = Files(paths, np.array(listing.labels, dtype=np.int32),
                      SampleOrigins.of_files(str(path), paths))
        return (files, None, None, DataKind.IMAGES, listing.class_names,
                image_x_shape(config.image_size))
    layout = read_npz_layout(path)
    arrays = read_npz_arrays(path, [k for pair in layout.pairs for k in pair])
    check_pairs(path.name, layout.pairs, layout.x_shapes, arrays)
    y_keys = [yk for _, yk in layout.pairs]
    sparse = describe_labels([arrays[k] for k in y_keys], y_keys).kind is LabelKind.SPARSE
    splits = {xk: _npz_arrays(arrays[xk], arrays[yk], config.input_rescale, sparse,
                              SampleOrigins.of_rows(str(path), xk, len(arrays[xk]),
                                                    layout.x_shapes[xk][1:]))
              for xk, yk in layout.pairs}
    if role == "validation_data":  # a separate file: its own x_val if any, else its x_train
        return (splits.get("x_val", splits["x_train"]), None, None, DataKind.NPZ, (),
                npz_x_shape(layout.x_shapes["x_train"], layout.x_dtypes["x_train"]))
    return (splits["x_train"], splits.get("x_val"), splits.get("x_test"), DataKind.NPZ, (),
            npz_x_shape(layout.x_shapes["x_train"], layout.x_dtypes["x_train"]))


def _npz_arrays(x: np.ndarray, y: np.ndarray, rescale: float, sparse: bool,
                origin: SampleOrigins) -> Arrays:
    if x.dtype == np.uint8:  # pixels: scale like an image folder, add the channel axis
        x = x.astype(np.float32) * np.float32(rescale)
        x = x[..., None] if x.ndim == 3 else x
    else:
        x = x.astype(np.float32, copy=False)
    if sparse:
        return Arrays(x, y.reshape(len(y)).astype(np.int32), origin)
    return Arrays(x, y.astype(np.float32, copy=False), origin)


def _split(data: Split, fraction: float, seed: int | None) -> tuple[Split, Split | None]:
    _, n_val = split_sizes(size(data), fraction)
    if n_val == 0:
        return data, None
    order = np.random.default_rng(seed).permutation(size(data))
    return take(data, order[n_val:]), take(data, order[:n_val])


def _label_stats(parts: list[tuple[Split, str]]) -> LabelStats:
    return describe_labels([labels(p) for p, _ in parts], [name for _, name in parts])
