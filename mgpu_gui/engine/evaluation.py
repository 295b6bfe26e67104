"""Predict every sample of a split and judge the model by it (inside the evaluator child).

No sample is dropped, unlike training's batches: the part of the split that fills
whole global batches is predicted under the strategy, the remainder on one device
in batches of the per-replica size (an empty share on some replica breaks Conv2D
and BatchNorm, and one device at the per-replica batch fits in memory as training
did). The figures are computed from the collected outputs (core/evaluation).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from mgpu_gui.core.datasets.inspection import DataKind, LabelKind, class_ids
from mgpu_gui.core.errors import ModelError
from mgpu_gui.core.evaluation.result import EvaluationResult, Split, choose_split
from mgpu_gui.core.evaluation.samples import SampleOrigins
from mgpu_gui.core.events import EvaluationProgress
from mgpu_gui.core.runs.folder import custom_objects_of
from mgpu_gui.core.tools.evaluate_job import EvaluateRequest
from mgpu_gui.engine import judging, models
from mgpu_gui.engine import pipeline as data_mod
from mgpu_gui.engine.output_head import output_layer_info

PROGRESS_EVERY_S = 0.25
Log = Callable[[str], None]


def evaluate(request: EvaluateRequest, strategy: tf.distribute.Strategy,
             progress: Callable[[EvaluationProgress], None], log: Log
             ) -> tuple[EvaluationResult, Path | None]:
    """The result, and the evaluation.json it was kept in (None: `request.output` unset)."""
    started = time.monotonic()
    config = request.config.replace(model=str(request.model), override_compile=False,
                                    sync_batchnorm=False)
    prepared = data_mod.load_data(config)
    split, dataset, labels, origins = _split(prepared, request.split)
    samples = len(labels)
    # What loading says is about training (its optimizer, its compile settings): not here.
    model = models.load_run_model(
        config, strategy, input_shape=prepared.input_shape,
        num_classes=prepared.num_classes or 1, log=lambda message: None,
        custom_objects_file=request.custom_objects or custom_objects_of(request.model)).model
    heads = getattr(model, "outputs", None) or ()  # a subclassed model's are not known
    if len(heads) > 1:
        raise ModelError(f"{request.model.name} has {len(heads)} outputs; the "
                         "evaluation judges models with one output.")
    _check_fits(model, prepared)
    names = _class_names(model, prepared)
    outputs = predict_every_sample(model, prepared.finished(dataset).map(lambda x, y: x), samples,
                                   config.batch_per_replica, progress)
    judged = judging.judge(model, request.model.name, labels, outputs,
                           prepared.label_kind, len(names) if names else prepared.num_classes,
                           names)
    result = EvaluationResult(
        model=str(request.model), data=config.data, split=split, samples=samples,
        loss=judged.loss, classifier=judged.classifier, regression=judged.regression,
        seconds=round(time.monotonic() - started, 3), multi_label=judged.multi_label)
    if judged.regression is not None:
        log("The model does not classify (its loss predicts values): MAE and MSE instead of "
            "a confusion matrix.")
    path = None
    if request.output is not None:
        path = result.save(request.output, judged.labels, judged.outputs, origins)
    return result, path


def _check_fits(model: keras.Model, prepared: data_mod.PreparedData) -> None:
    """The data checked against the model as training checks it."""
    models.check_model_fits_data(model, prepared.input_shape, prepared.num_classes,
                                 prepared.label_max if prepared.label_kind is LabelKind.SPARSE
                                 else None,
                                 prepared.class_names if prepared.kind is DataKind.IMAGES else ())


def _class_names(model: keras.Model, prepared: data_mod.PreparedData
                 ) -> tuple[str, ...] | None:
    """The classes the figures name. Arrays name classes by index up to their largest
    label, but a split may lack the last classes a model knows (a test set without class
    9): the model's outputs count them then."""
    units = output_layer_info(model)[0]
    names = tuple(prepared.class_names) or None
    if names and prepared.kind is DataKind.NPZ and units and units > max(len(names), 2):
        return class_ids(units)
    return names


def predict_every_sample(model: keras.Model, inputs: tf.data.Dataset, samples: int,
                         per_replica: int, progress: Callable[[EvaluationProgress], None]
                         ) -> np.ndarray:
    """The model's outputs for all `samples` of `inputs` (unbatched), in order."""
    replicas = model.distribute_strategy.num_replicas_in_sync
    global_batch = per_replica * replicas
    whole = samples // global_batch * global_batch
    reporter = _Progress(progress, global_batch, samples)
    parts = []
    if whole:
        batches = inputs.take(whole).batch(global_batch, drop_remainder=True)
        parts.append(model.predict(batches, verbose=0, callbacks=[reporter]))
    for chunk in inputs.skip(whole).batch(per_replica):  # the remainder, on one device
        parts.append(keras.ops.convert_to_numpy(model(chunk, training=False)))
    reporter.done(samples)
    return np.concatenate(parts)[:samples]


class _Progress(keras.callbacks.Callback):
    def __init__(self, emit: Callable[[EvaluationProgress], None], global_batch: int,
                 total: int):
        super().__init__()
        self.emit, self.global_batch, self.total = emit, global_batch, total
        self._last = 0.0

    def on_predict_batch_end(self, batch, logs=None):
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY_S:
            self._last = now
            self.emit(EvaluationProgress(done=(batch + 1) * self.global_batch, total=self.total))

    def done(self, samples: int) -> None:
        self.emit(EvaluationProgress(done=samples, total=self.total))


def _split(prepared: data_mod.PreparedData, wanted: Split | None
           ) -> tuple[Split, tf.data.Dataset, np.ndarray, SampleOrigins]:
    """The split to evaluate: its dataset, its labels and where each sample came from."""
    split = choose_split(wanted, prepared.val_samples if prepared.val is not None else 0,
                         prepared.test_samples if prepared.test is not None else 0)
    if split is Split.TEST:
        assert prepared.test is not None and prepared.test_labels is not None
        assert prepared.test_origins is not None
        return split, prepared.test, prepared.test_labels, prepared.test_origins
    assert prepared.val is not None and prepared.val_labels is not None
    assert prepared.val_origins is not None
    return split, prepared.val, prepared.val_labels, prepared.val_origins
