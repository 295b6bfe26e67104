"""The Python input pipeline: `keras.utils.PyDataset` batches, no TensorFlow.

It lets the JAX engine train where only JAX is installed, with tf.data's
batching rules (`pipeline.batch_for_training`): a global batch of per-replica x
replicas, drop_remainder for training and for the evaluation batch
(`batching.eval_batch`), the training set reshuffled every epoch.

Unlike tf.data's seeded shuffle, whose order depends on how many iterators were
made before, epoch e's order is a function of (seed, e) alone, set by a
callback as each epoch begins (`EpochOrder`): a resumed run sees the order the
uninterrupted run would have.

Workers: 2 threads (`WORKERS`), which make the next batches while JAX runs the
step. Measured on the demo with 2 CPU devices (tests/benchmarks/pipelines.py,
samples/s against tf.data's): no workers x0.80 (each batch is made on the
training thread, between steps), 2 threads x0.97, 4 threads x0.98, 2 processes
x0.70 (Keras starts a fresh pool every epoch, by fork, in a process that runs
JAX's threads), grain (a MapDataset read ahead by its threads) x0.76. On an
image folder decoded every epoch (640 PNGs, no cache; one round, noisy): no
workers x0.73, 2 threads x0.78, 4 threads x0.66, 2 processes x0.61: tf.data's
decoder runs in C++ threads, Pillow's holds the GIL for part of each image.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.datasets import batching, images
from mgpu_gui.core.datasets.batching import SAMPLE_BATCH
from mgpu_gui.core.datasets.inspection import DataKind
from mgpu_gui.engine.data_source import (
    Arrays,
    Files,
    LabelMap,
    PreparedData,
    Split,
    check_one_batch,
    read_data,
    relabeled,
    size,
    take,
)

WORKERS = 2  # threads making batches ahead of the step (see the module's measurements)


def load_data(config: RunConfig) -> PreparedData:
    """`config`'s data (see `data_source.read_data`); each dataset is its split, batched
    later by `batch_for_training`."""
    source = read_data(config)
    reader = ImageReader(config)
    sample = source.train if source.val is None else source.val
    head = take(sample, np.arange(min(SAMPLE_BATCH, size(sample))))
    x_sample = head.x.copy() if isinstance(head, Arrays) else reader.read(head.paths)
    return PreparedData.of(source, lambda split: split, x_sample)


class ImageReader:
    """Image files as the model's float32 input: decoded with Pillow, resized as tf.data
    resizes them, rescaled."""

    def __init__(self, config: RunConfig):
        self.size = tuple(int(s) for s in config.image_size)
        self.rescale = np.float32(config.input_rescale)

    def pixels(self, path: str) -> np.ndarray:
        return images.resized(images.decode_image(path), self.size)

    def finish(self, pixels: np.ndarray) -> np.ndarray:
        x = pixels.astype(np.float32)
        return x if self.rescale == 1 else x * self.rescale

    def read(self, paths: np.ndarray) -> np.ndarray:
        return self.finish(np.stack([self.pixels(p) for p in paths]))


class SplitBatches(keras.utils.PyDataset):
    """One split's full batches: `steps` of them, the partial last one dropped.

    `shuffle`: a new order each epoch, set by `set_epoch` (the `EpochOrder` callback);
    `cache`: keep an image folder's decoded pixels for later epochs (uint8, in memory;
    shared by worker threads).
    """

    def __init__(self, data: Split, global_batch: int, *, shuffle: bool, seed: int | None,
                 labels: np.ndarray, reader: ImageReader | None = None, cache: bool = False,
                 workers: int = WORKERS):
        super().__init__(workers=workers, use_multiprocessing=False)
        self.data, self.labels, self.reader = data, labels, reader
        self.global_batch, self.shuffle, self.seed = global_batch, shuffle, seed
        self.steps = batching.steps(size(data), global_batch)
        self.order = np.arange(size(data))
        self._cached = None
        if cache and isinstance(data, Files) and reader is not None:
            self._cached = np.zeros((size(data), *reader.size, 3), np.uint8)
            self._filled = np.zeros(size(data), bool)

    def set_epoch(self, epoch: int) -> None:
        """Epoch `epoch`'s order (counted from 0 over the whole run, resumes included)."""
        if self.shuffle:
            seed = None if self.seed is None else [self.seed, epoch]
            self.order = np.random.default_rng(seed).permutation(size(self.data))

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= index < self.steps:
            raise IndexError(f"batch {index} of {self.steps}")
        rows = self.order[index * self.global_batch:(index + 1) * self.global_batch]
        return self._inputs(rows), self.labels[rows]

    def _inputs(self, rows: np.ndarray) -> np.ndarray:
        if isinstance(self.data, Arrays):
            return self.data.x[rows]
        assert self.reader is not None
        if self._cached is None:
            return self.reader.read(self.data.paths[rows])
        for row in rows[~self._filled[rows]]:
            self._cached[row] = self.reader.pixels(self.data.paths[row])
            self._filled[row] = True
        return self.reader.finish(self._cached[rows])


class EpochOrder(keras.callbacks.Callback):
    """Sets the training batches' order as each epoch begins, before its first batch is
    read (Keras reads them after the callbacks' `on_epoch_begin`)."""

    def __init__(self, batches: SplitBatches):
        super().__init__()
        self.batches = batches

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.batches.set_epoch(epoch)


def batch_for_training(data: Split, global_batch: int, *, shuffle: bool, seed: int | None,
                       labels: np.ndarray, reader: ImageReader, cache: bool,
                       replicas: int | None = None, what: str = "training") -> SplitBatches:
    """`data`'s batches under tf.data's rules (see the module); a DataError when it holds
    less than one global batch."""
    check_one_batch(size(data), global_batch, replicas, what)
    return SplitBatches(data, global_batch, shuffle=shuffle, seed=seed, labels=labels,
                        reader=reader if isinstance(data, Files) else None, cache=cache)


def batches_of(config: RunConfig, prepared: PreparedData, relabel: LabelMap | None,
               log: Callable[[str], None]) -> Callable[..., SplitBatches]:
    """A `make(split, samples, batch, what, replicas)` that batches `prepared`'s splits for
    the run (`inputs.batches`)."""
    reader = ImageReader(config)

    def make(data: Split, samples: int, batch: int, what: str, replicas: int) -> SplitBatches:
        training = what == "training"
        cache = prepared.kind is DataKind.IMAGES and (
            config.cache == "memory" or config.cache == "auto" and batching.fits_in_memory(
                samples, prepared.input_shape, itemsize=1))
        if training and prepared.kind is DataKind.IMAGES:
            log("Decoded training images are " + ("kept in memory after their first epoch"
                if cache else "decoded again every epoch") + f" (cache: {config.cache}).")
        labels = relabeled(data.y if isinstance(data, Arrays) else data.labels, relabel,
                           prepared.num_classes)
        return batch_for_training(data, batch, shuffle=training, seed=config.seed,
                                  labels=labels, reader=reader, cache=cache,
                                  replicas=replicas, what=what)

    return make
