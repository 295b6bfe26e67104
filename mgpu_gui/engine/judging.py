"""A model's outputs judged against labels: its loss, its head and the figures that head
gets. One place for the evaluation (evaluation.py, on every sample of a split) and the
rehearsal before epoch 1 (rehearsal.py, on one batch), so that whatever the evaluation
would fail on at a run's end fails before its first epoch. Imports no TensorFlow: a JAX
run rehearses where it is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass

import keras
import numpy as np

from mgpu_gui.core.datasets.inspection import LabelKind, label_classes
from mgpu_gui.core.errors import ModelError
from mgpu_gui.core.evaluation.heads import Head, OutputMeaning, class_probabilities, meaning_of
from mgpu_gui.core.evaluation.metrics import (
    ClassifierMetrics,
    MultiLabelMetrics,
    RegressionMetrics,
    classifier_metrics,
    multi_label_metrics,
    regression_metrics,
)
from mgpu_gui.core.runs.preflight import loss_is_classifier
from mgpu_gui.engine import models
from mgpu_gui.engine.legacy_compile import describe_loss
from mgpu_gui.engine.output_head import output_layer_info


@dataclass(frozen=True)
class Judgement:
    loss: float | None  # the model's own loss; None when it has none
    meaning: OutputMeaning
    labels: np.ndarray  # class ids for a classifier, the values otherwise
    outputs: np.ndarray  # one probability per class for a classifier
    classifier: ClassifierMetrics | None
    regression: RegressionMetrics | None
    multi_label: MultiLabelMetrics | None = None


def judge(model: keras.Model, name: str, labels: np.ndarray, outputs: np.ndarray,
          kind: LabelKind, num_classes: int | None,
          class_names: tuple[str, ...] | None) -> Judgement:
    """`outputs` (one row per sample) against `labels`, by the model's head: exclusive
    classes, independent labels or values. `name` names the model in a ModelError."""
    loss = _loss(model, labels, outputs, kind, num_classes)
    meaning = _meaning(model, outputs, kind)
    if meaning.head is Head.MULTI_LABEL:
        if np.shape(labels) != np.shape(outputs):
            raise ModelError(f"{name} gives {np.shape(outputs)[1:]} outputs per sample for "
                             f"labels of shape {np.shape(labels)[1:]}: a multi-label head "
                             "has one output per label.")
        probabilities = class_probabilities(outputs, meaning)
        return Judgement(loss, meaning, labels, probabilities, None, None,
                         multi_label_metrics(labels, probabilities, class_names))
    if meaning.head is Head.VALUES:
        return Judgement(loss, meaning, labels, outputs, None,
                         regression_metrics(labels, outputs))
    # A classifier's labels are kept as class ids, whatever form the data gave them, and
    # its outputs as one probability per class, whatever its head.
    kept, probabilities = label_classes(labels, kind), class_probabilities(outputs, meaning)
    return Judgement(loss, meaning, kept, probabilities,
                     classifier_metrics(kept, probabilities, class_names), None)


def _meaning(model: keras.Model, outputs: np.ndarray, kind: LabelKind) -> OutputMeaning:
    """The model's head, from its loss and last activation; a loss nobody knows on labels
    that are no classes is taken for a regression."""
    described = describe_loss(getattr(model, "loss", None))
    if loss_is_classifier(described) is None and kind is LabelKind.OTHER:
        return OutputMeaning(Head.VALUES)
    units = int(np.prod(outputs.shape[1:]))
    linear = output_layer_info(model)[1] == "linear"
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
