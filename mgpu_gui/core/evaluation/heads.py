"""What a model's output means, so that evaluate, predict and the Evaluation view judge
every head the app trains by the same figures.

Keras leaves the meaning to the loss and the last activation: one sigmoid unit trained
with binary cross-entropy is a binary classifier (the probability of class 1), K units
with softmax or categorical cross-entropy are K exclusive classes, `from_logits=True`
(or a linear last layer) the same before the activation, K sigmoid units with binary
cross-entropy and multi-hot labels K independent labels, and a regression loss values.
Class heads are turned into one probability per class (`class_probabilities`), so that
a binary classifier gets the confusion matrix, per-class scores and top classes of any
two-class softmax.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from mgpu_gui.core.evaluation.metrics import TOP_K, top_classes


class Head(StrEnum):
    CLASSES = "classes"  # K >= 2 exclusive classes
    BINARY = "binary"  # one unit: class 1's probability
    MULTI_LABEL = "multi-label"  # K independent yes/no labels
    VALUES = "values"  # regression


@dataclass(frozen=True)
class OutputMeaning:
    head: Head
    logits: bool = False  # before the activation (from_logits=True, or a linear last layer)

    def describe(self) -> str:
        words = {Head.CLASSES: "exclusive classes", Head.BINARY: "a binary classifier "
                 "(one unit: the probability of class 1)", Head.MULTI_LABEL:
                 "independent labels", Head.VALUES: "values (regression)"}[self.head]
        return f"{words}, as logits" if self.logits else words


def loss_key(loss: str) -> str:
    """A Keras loss as named in a config or a log ("Binary_Crossentropy(from_logits=True)")
    reduced to the key loss tables use ("binarycrossentropy")."""
    return loss.split("(")[0].replace("_", "").replace(" ", "").lower()


def meaning_of(loss: str | None, units: int, *, multi_hot_labels: bool = False,
               linear_output: bool = False) -> OutputMeaning:
    """The head of a model with `units` outputs per sample compiled with `loss` (as
    `describe_loss` names it; None or unknown: judged by the output alone).

    `multi_hot_labels`: the data's labels have several ones per row; `linear_output`:
    the last layer has no activation, so its values are logits unless the loss is a
    regression loss.
    """
    described = loss or ""
    key = loss_key(described)
    logits = "from_logits=true" in described.replace(" ", "").lower() or (
        linear_output and not key.startswith(("mean", "huber", "logcosh")))
    if "crossentropy" in key and key.startswith("binary"):
        if units == 1:
            return OutputMeaning(Head.BINARY, logits)
        return OutputMeaning(Head.MULTI_LABEL if multi_hot_labels else Head.CLASSES, logits)
    if "crossentropy" in key or "hinge" in key:
        return OutputMeaning(Head.BINARY if units == 1 else Head.CLASSES, logits)
    if key.startswith(("mean", "huber", "logcosh", "cosinesimilarity", "poisson")):
        return OutputMeaning(Head.VALUES)
    if multi_hot_labels:
        return OutputMeaning(Head.MULTI_LABEL, logits)
    return OutputMeaning(Head.BINARY if units == 1 else Head.CLASSES, logits)


def class_probabilities(outputs: np.ndarray, meaning: OutputMeaning) -> np.ndarray:
    """(samples, classes) probabilities of exclusive classes: a binary head's one value
    becomes the two columns P(0), P(1); logits go through their activation."""
    values = np.asarray(outputs, dtype=np.float64)
    values = values.reshape(len(values), -1)
    if meaning.head is Head.BINARY:
        p = _sigmoid(values[:, :1]) if meaning.logits else values[:, :1]
        return np.concatenate([1 - p, p], axis=1)
    if meaning.head is Head.CLASSES and meaning.logits:
        shifted = np.exp(values - values.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)
    if meaning.head is Head.MULTI_LABEL and meaning.logits:
        return _sigmoid(values)
    return values


def top_predictions(outputs: np.ndarray, units: int | None, *, linear_output: bool,
                    names: Sequence[str] = (), k: int = TOP_K) -> list[list[tuple[str, float]]]:
    """Each sample's `k` most probable classes as `predict` reads a saved model: loaded
    without its compile settings, so the head is judged by its last layer alone (`units`
    outputs, linear or not); classes are named by index where the model's card has no
    names. One function, so that the rehearsal before epoch 1 tries what `predict` runs."""
    probabilities = class_probabilities(
        outputs, meaning_of(None, units or 1, linear_output=linear_output))
    names = tuple(names) or tuple(str(i) for i in range(probabilities.shape[-1]))
    return [top_classes(row, names, k) for row in probabilities]


def _sigmoid(values: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(values / 2))  # no overflow for large logits
