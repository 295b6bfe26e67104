"""Datasets -> unbatched tf.data pipelines, and batching that is safe under a strategy.

Runs in the worker. The batch arithmetic the GUI also needs (steps, dropped
samples, evaluation batch) is `mgpu_gui.core.datasets.batching`. Batching
always drops the partial last batch: under MirroredStrategy a partial batch
can leave a replica with 0 samples, which breaks Conv2D and BatchNorm (see
docs/architecture.md, "Partial last batch").
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tensorflow as tf

from mgpu_gui.core.config import DEMO, RunConfig
from mgpu_gui.core.datasets import batching, images
from mgpu_gui.core.datasets.batching import SAMPLE_BATCH
from mgpu_gui.core.datasets.inspection import (
    DEMO_MAX_VALUE,
    DataInfo,
    DataKind,
    LabelKind,
    LabelStats,
    check_pairs,
    class_ids,
    demo_split_indices,
    describe_labels,
    image_x_shape,
    inspect_data,
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
from mgpu_gui.core.runs.preflight import data_sources

__all__ = ["DataInfo", "DataKind", "LabelKind", "PreparedData", "batch_for_training",
           "inspect_data", "load_data"]

SHUFFLE_BUFFER_BYTES = 256 << 20  # uncached data: bound the shuffle buffer, not the dataset


@dataclass(frozen=True, eq=False)
class PreparedData:
    """Unbatched (x, y) datasets plus what the model and the UI need to know.

    An image folder's datasets yield uint8 pixels, resized: that is what a cache
    holds (a quarter of float32); `finish` makes them the model's float32 input
    and must follow them (`batch_for_training` maps it after the cache and the
    shuffle). Other data yields float32 already, and `finish` is None.
    `x_sample` is a few validation (else training) inputs, finished, kept in numpy
    so an exported model can be checked against the trained one without the pipeline.
    """

    kind: DataKind
    train: tf.data.Dataset
    val: tf.data.Dataset | None
    test: tf.data.Dataset | None
    train_samples: int
    val_samples: int
    test_samples: int
    input_shape: tuple[int, ...]
    num_classes: int | None
    class_names: tuple[str, ...]
    label_kind: LabelKind
    label_max: float | None
    x_sample: np.ndarray
    val_source: str  # where validation came from, for the run log
    # The labels of `val` and `test` in their order, without decoding a sample (evaluation).
    val_labels: np.ndarray | None = None
    test_labels: np.ndarray | None = None
    # Where each of them was read (a file, a row of an array): the evaluation draws them.
    val_origins: SampleOrigins | None = None
    test_origins: SampleOrigins | None = None
    finish: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None = None
    # Each split's image files (image folders): a disk cache is named for them.
    files: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def cached_itemsize(self) -> int:
        """Bytes per value a cache holds: uint8 pixels, or float32."""
        return 1 if self.finish is not None else 4

    def finished(self, ds: tf.data.Dataset | None) -> tf.data.Dataset | None:
        """`ds` as the model takes it (float32), for a single pass such as an evaluation."""
        if ds is None or self.finish is None:
            return ds
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


# -- batching ------------------------------------------------------------------
def batch_for_training(
    ds: tf.data.Dataset,
    samples: int,
    global_batch: int,
    *,
    shuffle: bool,
    seed: int | None,
    cache: bool | str,
    replicas: int | None = None,
    what: str = "training",
    repeat: bool = False,
    finish: Callable | None = None,
) -> tf.data.Dataset:
    """Cache (True: in memory; a file name: on disk, see `cache_for`), shuffle (anew each
    epoch), batch with drop_remainder, `finish` (an image folder's uint8 to float32: after
    the cache and the shuffle, so both hold uint8), prefetch.

    `replicas` and `what` only shape the error message (`what` is "training",
    "validation" or "test": evaluation under a strategy drops remainders too).

    `repeat=True` (training; give `fit` steps_per_epoch = `batching.steps(...)`) keeps one
    iterator for the whole run. Without it Keras builds a new iterator every epoch,
    whose first batch waits for the shuffle buffer to refill: measured on 2 cores,
    0.05-3.8 s per epoch against 17 ms per step. Batching before repeating keeps
    epochs whole: each is one reshuffled pass minus the partial last batch.
    """

    if samples < global_batch:
        split = (f"{global_batch // replicas} per replica x {replicas} replicas" if replicas
                 else "batch per replica x replicas")
        raise DataError(
            f"the {what} set has {samples} samples, fewer than one global batch "
            f"({global_batch} = {split}); lower the batch per replica or use fewer replicas"
        )
    if cache:
        ds = ds.cache() if cache is True else ds.cache(cache)
    if shuffle:
        ds = ds.shuffle(_shuffle_buffer(ds, samples, cache is True), seed=seed,
                        reshuffle_each_iteration=True)
    ds = ds.batch(global_batch, drop_remainder=True)
    if finish is not None:  # a batch at a time: one cast per batch, not one per image
        ds = ds.map(finish, num_parallel_calls=tf.data.AUTOTUNE)
    if repeat:
        ds = ds.repeat()
    return ds.prefetch(tf.data.AUTOTUNE)


def _shuffle_buffer(ds: tf.data.Dataset, samples: int, in_memory: bool) -> int:
    # A full-size buffer holds every decoded sample; only do that when they are in memory.
    if in_memory:
        return samples
    x_spec = ds.element_spec[0]
    per_sample = int(np.prod(x_spec.shape.as_list() or [1])) * x_spec.dtype.size
    return max(1, min(samples, max(1024, SHUFFLE_BUFFER_BYTES // max(per_sample, 1))))


# -- loading -------------------------------------------------------------------
@dataclass(frozen=True)
class _Arrays:
    x: np.ndarray
    y: np.ndarray
    origin: SampleOrigins


@dataclass(frozen=True)
class _Files:
    paths: np.ndarray
    labels: np.ndarray
    origin: SampleOrigins


_Split = _Arrays | _Files


def load_data(config: RunConfig) -> PreparedData:
    """Read `config.data` (+ `config.validation_data`) into unbatched datasets.

    Validation comes from, in order: `config.validation_data` when given (an
    explicit choice), `x_val`/`y_val` in the `.npz`, else a seeded split of
    `config.validation_split` of the training samples. `.npz` inputs become
    float32; uint8 inputs are treated as pixels: multiplied by
    `config.input_rescale`, and (N, H, W) gets a channel axis. Image folders decode
    in the pipeline (3 channels, resized to `config.image_size`, x rescale).
    The demo is scaled to [0, 1] with a fixed held-out test set.
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
    named = ((train, "train"), (val, "validation"), (test, "test"))  # cache_for's names
    parts = [(s, n) for s, n in named if s is not None]
    stats = _label_stats(parts)
    if kind is not DataKind.IMAGES:
        class_names = class_ids(stats.num_classes)
    to_ds = _Converter(config, shape)
    from_files = kind is DataKind.IMAGES
    return PreparedData(
        kind=kind, train=to_ds(train), val=None if val is None else to_ds(val),
        test=None if test is None else to_ds(test), train_samples=_len(train),
        val_samples=0 if val is None else _len(val), test_samples=0 if test is None else _len(test),
        input_shape=shape, num_classes=stats.num_classes, class_names=class_names,
        label_kind=stats.kind, label_max=stats.maximum,
        x_sample=to_ds.sample(train if val is None else val), val_source=val_source or "none",
        val_labels=None if val is None else _labels(val),
        test_labels=None if test is None else _labels(test),
        val_origins=None if val is None else val.origin,
        test_origins=None if test is None else test.origin,
        finish=to_ds.finish if from_files else None,
        files={name: part.paths for part, name in parts if isinstance(part, _Files)},
    )


def cache_for(prepared: PreparedData, split: str, folder: Path | None,
              mode: str = "auto") -> bool | str:
    """Where to cache `split` ("train", "validation" or "test") between epochs: True, in
    memory, when it fits the budget (or `mode` is "memory"); else, for an image folder, a
    file in `folder` (local disk: decoding every epoch again is what starves the GPUs; or
    `mode` is "disk"); else (or `mode` is "off") nowhere.

    A disk cache survives a killed worker: one complete from an earlier pass is read
    again (its name is its files' fingerprint, so changed data gets a new one), and one
    cut short, which tf.data leaves with a lock file that would refuse the next
    iterator ("a concurrently running iterator"), is removed and rebuilt.
    """
    if mode == "off":
        return False
    samples = {"train": prepared.train_samples, "validation": prepared.val_samples,
               "test": prepared.test_samples}[split]
    if mode == "memory" or mode == "auto" and batching.fits_in_memory(
            samples, prepared.input_shape, itemsize=prepared.cached_itemsize):
        return True
    if folder is None or split not in prepared.files:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    name = folder / f"{split}-{prepared.fingerprint(split)}"
    if not Path(f"{name}.index").is_file():  # never finished: whatever is there is partial
        for leftover in folder.glob(f"{name.name}*"):
            leftover.unlink()
    for stale in folder.glob(f"{split}-*"):  # other fingerprints: data since changed
        if not stale.name.startswith(name.name):
            stale.unlink()
    return str(name)


def input_record(config: RunConfig, prepared: PreparedData) -> InputRecord:
    """What this pipeline did to a sample before the model saw it, for the export's card."""
    if prepared.kind is DataKind.IMAGES:
        size = tuple(int(s) for s in config.image_size)
        return InputRecord(IMAGES, (size[0], size[1]), channels=3,
                           rescale=float(config.input_rescale))
    return InputRecord(ARRAYS, rescale=float(config.input_rescale))


def _read_source(
    source: str, config: RunConfig, *, role: str
) -> tuple[_Split, _Split | None, _Split | None, DataKind, tuple[str, ...], tuple[int, ...]]:
    """(train, val, test, kind, class names, per-sample input shape) for one source."""
    if source == DEMO:
        if role == "validation_data":
            raise DataError("'demo' cannot be validation data; it brings its own split.")
        digits, labels = load_demo_arrays()
        rest, test = demo_split_indices(len(digits))
        x = (digits.astype(np.float32) / DEMO_MAX_VALUE)[..., None]
        y = labels.astype(np.int32)
        origin = SampleOrigins.of_rows(DEMO, "demo", len(digits), digits.shape[1:])
        return (_Arrays(x[rest], y[rest], origin.take(rest)), None,
                _Arrays(x[test], y[test], origin.take(test)), DataKind.DEMO, (), x.shape[1:])
    path = Path(os.path.expanduser(source))
    if not path.exists():
        raise DataError(f"{role}: dataset not found: {path}. Give an .npz file, an image "
                        "folder, or 'demo'.")
    if path.is_dir():
        listing = list_images(path)
        paths = np.array(listing.paths)
        files = _Files(paths, np.array(listing.labels, dtype=np.int32),
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
                origin: SampleOrigins) -> _Arrays:
    if x.dtype == np.uint8:  # pixels: scale like an image folder, add the channel axis
        x = x.astype(np.float32) * np.float32(rescale)
        x = x[..., None] if x.ndim == 3 else x
    else:
        x = x.astype(np.float32, copy=False)
    if sparse:
        return _Arrays(x, y.reshape(len(y)).astype(np.int32), origin)
    return _Arrays(x, y.astype(np.float32, copy=False), origin)


def _split(data: _Split, fraction: float, seed: int | None) -> tuple[_Split, _Split | None]:
    _, n_val = split_sizes(_len(data), fraction)
    if n_val == 0:
        return data, None
    order = np.random.default_rng(seed).permutation(_len(data))
    return _take(data, order[n_val:]), _take(data, order[:n_val])


def _take(data: _Split, index: np.ndarray) -> _Split:
    if isinstance(data, _Arrays):
        return _Arrays(data.x[index], data.y[index], data.origin.take(index))
    return _Files(data.paths[index], data.labels[index], data.origin.take(index))


def _len(data: _Split) -> int:
    return len(data.y) if isinstance(data, _Arrays) else len(data.labels)


def _labels(data: _Split) -> np.ndarray:
    return data.y if isinstance(data, _Arrays) else data.labels


def _label_stats(parts: list[tuple[_Split, str]]) -> LabelStats:
    ys = [_labels(p) for p, _ in parts]
    return describe_labels(ys, [name for _, name in parts])


_DECODE_FAILED = re.compile(r"Invalid (?:JPEG|PNG|GIF|BMP) data|Unknown image file format|"
                            r"jpeg::Uncompress failed|Input size should match")
FIND_BUDGET_S = 120.0  # looking again for the file that failed, one by one


def decode_contents(contents: tf.Tensor) -> tf.Tensor:
    """An image file's bytes as 8-bit RGB, TensorFlow's own decoder: the first frame of an
    animation, alpha dropped, grey repeated, 16 bits cut to 8 (what the data check's
    `images.decode_image` gives too); in parallel, without holding Python's lock, which
    Pillow in a `tf.numpy_function` did: a third of the speed on a first epoch."""
    image = tf.io.decode_image(contents, channels=3, expand_animations=False, dtype=tf.uint8)
    image.set_shape((None, None, 3))
    return image


def decode_file(path: str | os.PathLike[str]) -> tf.Tensor:
    """One file, eagerly; a CorruptImageError naming it when it cannot be decoded."""
    try:
        return decode_contents(tf.io.read_file(os.fspath(path)))
    except tf.errors.OpError as error:
        raise images.corrupt(path, error) from error


def resized(image: tf.Tensor, size: tuple[int, ...]) -> tf.Tensor:
    """Decoded pixels resized to `size` (height, width) as an image folder's pipeline caches
    them, and the augmentation preview shows them."""
    image = tf.image.resize(image, size)  # float32
    # Back to whole pixels, so a cache holds a quarter of the bytes: a difference of at
    # most half a level, below what 8-bit images resolve.
    return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)


def is_decode_failure(error: BaseException) -> bool:
    """Whether `error` is TensorFlow's decoder failing inside the pipeline: its text names
    no file (`undecodable_file` finds it)."""
    return isinstance(error, tf.errors.OpError) and bool(_DECODE_FAILED.search(str(error)))


def undecodable_file(config: RunConfig, budget_s: float = FIND_BUDGET_S) -> str | None:
    """The message for the first image file of the run's folders that does not decode,
    looked for one by one within `budget_s`; None when none failed in that time."""
    deadline = time.monotonic() + budget_s
    for source in data_sources(config):
        folder = Path(os.path.expanduser(source))
        if source == DEMO or not folder.is_dir():
            continue
        for path in list_images(folder).paths:
            if time.monotonic() > deadline:
                return None
            try:
                decode_file(path)
            except images.CorruptImageError as error:
                return str(error)
    return None


class _Converter:
    """Turns a split into an unbatched tf.data.Dataset; images decode in parallel."""

    def __init__(self, config: RunConfig, shape: tuple[int, ...]):
        self.size = tuple(int(s) for s in config.image_size)
        self.rescale = float(config.input_rescale)
        self.shape = shape

    def __call__(self, data: _Split) -> tf.data.Dataset:

        if isinstance(data, _Arrays):
            return tf.data.Dataset.from_tensor_slices((data.x, data.y))
        ds = tf.data.Dataset.from_tensor_slices((data.paths, data.labels))
        return ds.map(self._decode, num_parallel_calls=tf.data.AUTOTUNE)

    def _decode(self, path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = resized(decode_contents(tf.io.read_file(path)), self.size)
        return tf.ensure_shape(image, self.shape), label

    def finish(self, image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        pixels = tf.cast(image, tf.float32)  # a built-in rescales in the model: no multiply
        return (pixels if self.rescale == 1.0 else pixels * self.rescale), label

    def sample(self, data: _Split) -> np.ndarray:
        n = min(SAMPLE_BATCH, _len(data))
        if isinstance(data, _Arrays):
            return np.array(data.x[:n])
        head = self(_take(data, np.arange(n))).map(self.finish)
        return np.stack([x.numpy() for x, _ in head])
