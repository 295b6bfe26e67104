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

from mgpu_gui.core.datasets.inspection import LabelKind, label_classes
from mgpu_gui.core.errors import ModelError
from mgpu_gui.core.evaluation.heads import Head, OutputMeaning, class_probabilities, meaning_of
from mgpu_gui.core.evaluation.metrics import classifier_metrics, regression_metrics
from mgpu_gui.core.evaluation.result import EvaluationResult, Split, choose_split
from mgpu_gui.core.evaluation.samples import SampleOrigins
from mgpu_gui.core.events import EvaluationProgress
from mgpu_gui.core.runs.preflight import loss_is_classifier
from mgpu_gui.core.tools.evaluate_job import EvaluateRequest
from mgpu_gui.engine import models
from mgpu_gui.engine import pipeline as data_mod
from mgpu_gui.engine.legacy_compile import describe_loss

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
    model = models.load_run_model(config, strategy, input_shape=prepared.input_shape,
                                  num_classes=prepared.num_classes or 1,
                                  log=lambda message: None).model
    if len(model.outputs) != 1:
        raise ModelError(f"{request.model.name} has {len(model.outputs)} outputs; the "
                         "evaluation judges models with one output.")
    outputs = predict_every_sample(model, prepared.finished(dataset).map(lambda x, y: x), samples,
                                   config.batch_per_replica, progress)
    loss = _loss(model, labels, outputs, prepared.label_kind, prepared.num_classes)
    meaning = _meaning(model, outputs, prepared.label_kind)
    if meaning.head is Head.MULTI_LABEL:
        raise ModelError(f"{request.model.name} has a multi-label head ({meaning.describe()}); "
                         "the evaluation judges exclusive classes and values, not yet "
                         "independent labels.")
    classifier = meaning.head is not Head.VALUES
    # A classifier's labels are kept as class ids, whatever form the data gave them, and
    # its outputs as one probability per class, whatever its head.
    kept = label_classes(labels, prepared.label_kind) if classifier else labels
    if classifier:
        outputs = class_probabilities(outputs, meaning)
    result = EvaluationResult(
        model=str(request.model), data=config.data, split=split, samples=samples, loss=loss,
        classifier=classifier_metrics(kept, outputs, tuple(prepared.class_names) or None)
        if classifier else None,
        regression=None if classifier else regression_metrics(labels, outputs),
        seconds=round(time.monotonic() - started, 3))
    if not classifier:
        log("The model does not classify (its loss predicts values): MAE and MSE instead of "
            "a confusion matrix.")
    path = None
    if request.output is not None:
        path = result.save(request.output, kept, outputs, origins)
    return result, path


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


def _meaning(model: keras.Model, outputs: np.ndarray, kind: LabelKind) -> OutputMeaning:
    """The model's head, from its loss and last activation; a loss nobody knows on labels
    that are no classes is taken for a regression."""
    described = describe_loss(getattr(model, "loss", None))
    if loss_is_classifier(described) is None and kind is LabelKind.OTHER:
        return OutputMeaning(Head.VALUES)
    units = int(np.prod(outputs.shape[1:]))
    linear = models.output_layer_info(model)[1] == "linear"
    return meaning_of(described, units, linear_output=linear,
                      multi_hot_labels=kind is LabelKind.OTHER)


def _loss(model: keras.Model, labels: np.ndarray, outputs: np.ndarray, kind: LabelKind,
          num_classes: int | None) -> float | None:
    """The model's own loss over every sample; None when it has none."""
    loss = getattr(model, "loss", None)
    if loss is None:
        return None
    function = loss if callable(loss) else keras.losses.get(loss)
    wants_onehot = models.loss_wants_onehot(model)
    targets = labels
    if wants_onehot is True and kind is LabelKind.SPARSE and num_classes:
        targets = np.eye(num_classes, dtype=np.float32)[label_classes(labels, kind)]
    elif wants_onehot is False and kind is LabelKind.ONEHOT:
        targets = labels.argmax(axis=-1)
    if targets.ndim == outputs.ndim - 1 and outputs.shape[-1] == 1:
        targets = targets[..., None]  # one unit per sample (a binary head): (N,) -> (N, 1)
    values = keras.ops.convert_to_numpy(function(targets, outputs))
    return float(np.mean(values))
