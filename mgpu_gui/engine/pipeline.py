"""Datasets -> unbatched tf.data pipelines, and batching that is safe under a strategy.

Runs in the worker. Reading and splitting the sources is `data_source.py`'s (shared
with the Python pipeline, `py_pipeline.py`). The batch arithmetic the GUI also needs (steps, dropped
samples, evaluation batch) is `mgpu_gui.core.datasets.batching`. Batching
always drops the partial last batch: under MirroredStrategy a partial batch
can leave a replica with 0 samples, which breaks Conv2D and BatchNorm (see
docs/architecture.md, "Partial last batch").
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from mgpu_gui.core.config import DEMO, RunConfig
from mgpu_gui.core.datasets import batching, images
from mgpu_gui.core.datasets.batching import SAMPLE_BATCH
from mgpu_gui.core.datasets.inspection import (
    DataInfo,
    DataKind,
    LabelKind,
    inspect_data,
    list_images,
)
from mgpu_gui.core.runs.preflight import data_sources
from mgpu_gui.engine.data_source import (
    Arrays,
    LabelMap,
    PreparedData,
    Split,
    check_one_batch,
    input_record,
    read_data,
    size,
    take,
)

__all__ = ["DataInfo", "DataKind", "EpochShuffle", "LabelKind", "PreparedData",
           "batch_for_training", "input_record", "inspect_data", "load_data", "relabeled"]

SHUFFLE_BUFFER_BYTES = 256 << 20  # uncached data: bound the shuffle buffer, not the dataset


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
    epochs: EpochShuffle | None = None,
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

    Repeated with a `seed`, epoch e's order is a function of (seed, e) alone, as in the
    Python pipeline: a new iterator starts at the epoch `epochs` (its callback) was told
    last, else at 0. A seeded `reshuffle_each_iteration` draws each pass's seed from a
    generator that every iterator of the dataset shares, so the order depended on how
    many passes other iterators had begun: `fit`'s extra iterator (its symbolic build),
    or the previous `fit`'s iterator, read ahead by its prefetch thread, began a pass
    before or after the next one was made depending on thread timing (measured with the
    processes of tests/test_multiworker.py sharing one core: 6 of 18 runs trained on
    other orders, their losses off by 0.003-0.1).
    """

    check_one_batch(samples, global_batch, replicas, what)
    if cache:
        ds = ds.cache() if cache is True else ds.cache(cache)
    buffer = _shuffle_buffer(ds, samples, cache is True) if shuffle else 0
    if shuffle and repeat and seed is not None:
        whole = ds

        def one_pass(epoch: tf.Tensor) -> tf.data.Dataset:
            # The seed is the tensor epoch_seed alone: TensorFlow pairs a tensor seed with
            # the global one (keras.utils.set_random_seed) in a Python comparison, which
            # fails in this function's graph when the global seed is 0 (`--seed 0`).
            graph = tf.compat.v1.get_default_graph()
            global_seed, graph.seed = graph.seed, None
            try:
                order = whole.shuffle(buffer, seed=epoch_seed(seed, epoch),
                                      reshuffle_each_iteration=False)
            finally:
                graph.seed = global_seed
            return order.batch(global_batch, drop_remainder=True)

        start = (tf.data.Dataset.range(1).map(lambda _: epochs.first.read_value())
                 if epochs is not None else tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)))
        ds = start.flat_map(lambda first: tf.data.Dataset.counter(first).flat_map(one_pass))
    else:
        if shuffle:
            ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
        ds = ds.batch(global_batch, drop_remainder=True)
        if repeat:
            ds = ds.repeat()
    if finish is not None:  # a batch at a time: one cast per batch, not one per image
        ds = ds.map(finish, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def epoch_seed(seed: int, epoch: tf.Tensor) -> tf.Tensor:
    """The shuffle's seed for one epoch of a run seeded `seed`."""
    return tf.constant(seed, tf.int64) * 1_000_003 + tf.cast(epoch, tf.int64)


class EpochShuffle(keras.callbacks.Callback):
    """Which epoch the next iterator of the training batches starts at (`batch_for_training`):
    set as each epoch begins, before `fit` (or the cluster's loop) makes the iterator it
    trains on. An iterator reads it once, as it starts, then counts on by itself."""

    async_safe = True

    def __init__(self) -> None:
        super().__init__()
        with tf.device("/cpu:0"):  # read by tf.data, which runs on the host
            self.first = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_epoch")

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.first.assign(epoch)


def relabeled(ds: tf.data.Dataset, mapping: LabelMap, num_classes: int | None
              ) -> tf.data.Dataset:
    """`ds` (unbatched) with its labels in the form the loss takes (`models.label_mapper`)."""
    if mapping is LabelMap.TO_ONEHOT:
        def change(x, y):
            return x, tf.one_hot(tf.cast(tf.reshape(y, [-1])[0], tf.int32), num_classes)
    else:
        def change(x, y):
            return x, tf.argmax(y, axis=-1)
    return ds.map(change, num_parallel_calls=tf.data.AUTOTUNE)


def _shuffle_buffer(ds: tf.data.Dataset, samples: int, in_memory: bool) -> int:
    # A full-size buffer holds every decoded sample; only do that when they are in memory.
    if in_memory:
        return samples
    x_spec = ds.element_spec[0]
    per_sample = int(np.prod(x_spec.shape.as_list() or [1])) * x_spec.dtype.size
    return max(1, min(samples, max(1024, SHUFFLE_BUFFER_BYTES // max(per_sample, 1))))


# -- loading -------------------------------------------------------------------
def load_data(config: RunConfig) -> PreparedData:
    """`config`'s data (see `data_source.read_data`) as unbatched tf.data datasets; an
    image folder's decode in parallel, in the pipeline."""
    source = read_data(config)
    to_ds = _Converter(config, source.input_shape)
    return PreparedData.of(source, to_ds, to_ds.sample(source.train if source.val is None
                                                       else source.val),
                           finish=to_ds.finish if source.kind is DataKind.IMAGES else None)


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

    def __call__(self, data: Split) -> tf.data.Dataset:

        if isinstance(data, Arrays):
            return tf.data.Dataset.from_tensor_slices((data.x, data.y))
        ds = tf.data.Dataset.from_tensor_slices((data.paths, data.labels))
        return ds.map(self._decode, num_parallel_calls=tf.data.AUTOTUNE)

    def _decode(self, path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = resized(decode_contents(tf.io.read_file(path)), self.size)
        return tf.ensure_shape(image, self.shape), label

    def finish(self, image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        pixels = tf.cast(image, tf.float32)  # a built-in rescales in the model: no multiply
        return (pixels if self.rescale == 1.0 else pixels * self.rescale), label

    def sample(self, data: Split) -> np.ndarray:
        n = min(SAMPLE_BATCH, size(data))
        if isinstance(data, Arrays):
            return np.array(data.x[:n])
        head = self(take(data, np.arange(n))).map(self.finish)
        return np.stack([x.numpy() for x, _ in head])
