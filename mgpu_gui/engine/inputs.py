"""Which input pipeline feeds a run (tf.data or the Python one), and the run's batches.

Imports no TensorFlow itself: the tf.data modules load only for a run that uses
them, so a JAX run on the Python pipeline trains where TensorFlow is not
installed. The rules both follow are here once: a split with fewer samples than
replicas is skipped, the training batch is per-replica x replicas, and
validation and test take `batching.eval_batch`, dropping less than one sample
per replica.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mgpu_gui.core.augment import parse_augment
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.datasets import batching
from mgpu_gui.core.datasets.inspection import DataKind, read_npz_layout
from mgpu_gui.core.engines import InputPipeline, pipeline_problems, resolve_pipeline
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.engine.data_source import LabelMap, PreparedData


@dataclass(frozen=True)
class Batches:
    """What `fit` and `evaluate` read, and the callbacks the training batches need."""

    train: Any
    val: Any | None
    test: Any | None
    callbacks: tuple[Any, ...] = ()  # keras callbacks


def pipeline_for(config: RunConfig) -> InputPipeline:
    """The run's pipeline here (AUTO resolved by this process's TensorFlow); a ConfigError
    when it, or the run's other settings, cannot work here (see `pipeline_problems`)."""
    found = pipeline_problems(config.engine, config.input_pipeline, augment=config.augmenting,
                              cache=config.cache, export_formats=config.export_formats)
    if found:
        raise ConfigError(found)
    return resolve_pipeline(config.engine, config.input_pipeline)


def load(config: RunConfig, pipeline: InputPipeline) -> PreparedData:
    if pipeline is InputPipeline.PYTHON:
        from mgpu_gui.engine import py_pipeline

        return py_pipeline.load_data(config)
    from mgpu_gui.engine import pipeline as tf_pipeline

    return tf_pipeline.load_data(config)


def batches(config: RunConfig, prepared: PreparedData, pipeline: InputPipeline,
            relabel: LabelMap | None, replicas: int, cache_dir: Path | None,
            log: Callable[..., None]) -> Batches:
    """Batch `prepared`'s splits for `replicas` (an image folder too large for memory is
    cached in `cache_dir` by tf.data, when given)."""
    callbacks: tuple[Any, ...] = ()
    if pipeline is InputPipeline.PYTHON:
        from mgpu_gui.engine import py_pipeline

        log("Input pipeline: python (keras.utils.PyDataset; no TensorFlow).")
        make = py_pipeline.batches_of(config, prepared, relabel, log)
    else:
        from mgpu_gui.engine.pipeline import EpochShuffle

        log("Input pipeline: tf.data.")
        callbacks = (EpochShuffle(),)  # the training batches' epoch (their shuffle's seed)
        make = _tf_batches(config, prepared, relabel, cache_dir, log, callbacks[0])

    def batched(ds: Any, samples: int, batch: int, what: str) -> Any:
        if ds is None or samples < replicas:
            return None
        return make(ds, samples, batch, what, replicas)

    def evaluation(ds: Any, samples: int, what: str) -> Any:
        return batched(ds, samples, batching.eval_batch(samples, config.batch_per_replica,
                                                        replicas), what)

    if prepared.val is not None and prepared.val_samples < replicas:
        log(f"The validation set has {prepared.val_samples} samples, fewer than the "
            f"{replicas} replicas (each must get one); validation is skipped.", "warning")
    train = batched(prepared.train, prepared.train_samples,
                    config.batch_per_replica * replicas, "training")
    if pipeline is InputPipeline.PYTHON:
        from mgpu_gui.engine.py_pipeline import EpochOrder

        callbacks = (EpochOrder(train),)
    return Batches(train, evaluation(prepared.val, prepared.val_samples, "validation"),
                   evaluation(prepared.test, prepared.test_samples, "test"), callbacks)


def _tf_batches(config: RunConfig, prepared: PreparedData, relabel: LabelMap | None,
                cache_dir: Path | None, log: Callable[..., None],
                epochs: Any) -> Callable[..., Any]:
    from mgpu_gui.engine import augmentation
    from mgpu_gui.engine import pipeline as data_mod

    if config.augment:
        log(f"Augmentation: {parse_augment(config.augment).describe()} (training only).")

    def make(ds: Any, samples: int, batch: int, what: str, replicas: int) -> Any:
        if relabel is not None:
            ds = data_mod.relabeled(ds, relabel, prepared.num_classes)
        training = what == "training"
        cache = data_mod.cache_for(prepared, "train" if training else what, cache_dir,
                                   config.cache)
        if training and "train" in prepared.files:
            where = ("in memory" if cache is True else f"on local disk in {cache_dir}" if cache
                     else "nowhere: decoded again every epoch")
            log(f"Decoded training images are cached {where} (cache: {config.cache}).")
        finish = prepared.finish
        if training and finish is not None:  # augmentation: training images only
            finish = augmentation.training_finish(finish, config.augment, config.seed)
        return data_mod.batch_for_training(ds, samples, batch, shuffle=training, repeat=training,
                                           seed=config.seed, cache=cache, replicas=replicas,
                                           what=what, finish=finish,
                                           epochs=epochs if training else None)

    return make


def _rescales_pixels(config: RunConfig, prepared: PreparedData) -> bool:
    """Whether the pipeline multiplies the inputs by the run's rescale: an image folder's
    pixels, and an .npz's uint8 ones (its header says)."""
    if prepared.kind is DataKind.NPZ:
        return read_npz_layout(Path(config.data)).x_dtypes["x_train"] == np.uint8
    return prepared.kind is DataKind.IMAGES


def note_own_rescaling(config: RunConfig, model: Any, prepared: PreparedData,
                       log: Callable[[str], None]) -> None:
    """A model that starts with its own Rescaling (as Keras' examples do) would get pixels
    rescaled twice: say so, and how to feed it raw pixels."""
    # Here, not at the top: the worker imports this module before its device settings
    # (KERAS_BACKEND, the visible devices), which Keras reads once, when it is imported.
    import keras

    if not _rescales_pixels(config, prepared):
        return
    first = next((layer for layer in model.layers
                  if not isinstance(layer, keras.layers.InputLayer)), None)
    if isinstance(first, keras.layers.Rescaling) and config.input_rescale != 1.0:
        log(f"Warning: the model rescales its inputs itself (its first layer, {first.name}, "
            f"multiplies by {first.scale:g}), and the pipeline multiplies pixels by "
            f"{config.input_rescale:g} before that: rescaled twice. Give --rescale 1 to "
            "feed it raw pixels, as its own Rescaling expects.")
