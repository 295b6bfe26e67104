"""A classifier's figures from its predicted probabilities, as the field reports them.

The definitions are scikit-learn's (`confusion_matrix`, `classification_report`)
so a user can check them there: rows of the confusion matrix are true classes,
columns predicted; every class of the model is listed, samples or not; a ratio
whose denominator is 0 (a class never predicted, or with no samples) is 0.0,
scikit-learn's `zero_division=0`. Top-k counts a sample right when its true
class is among its k most probable; it is reported from 5 classes on, where it
says more than top-1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

TOP_K = 5


@dataclass(frozen=True)
class Scores:
    """Precision, recall and F1 of one class (or their average) over `support` samples."""

    precision: float
    recall: float
    f1: float
    support: int


@dataclass(frozen=True)
class ClassifierMetrics:
    class_names: tuple[str, ...]
    confusion_matrix: tuple[tuple[int, ...], ...]  # [true][predicted]
    per_class: tuple[Scores, ...]
    macro: Scores
    weighted: Scores
    accuracy: float  # top-1
    top_k: float | None  # top-TOP_K, from TOP_K classes on
    samples: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ClassifierMetrics:
        return cls(
            class_names=tuple(data["class_names"]),
            confusion_matrix=tuple(tuple(row) for row in data["confusion_matrix"]),
            per_class=tuple(Scores(**s) for s in data["per_class"]),
            macro=Scores(**data["macro"]), weighted=Scores(**data["weighted"]),
            accuracy=data["accuracy"], top_k=data["top_k"], samples=data["samples"])

    def normalised(self) -> np.ndarray:
        """The confusion matrix with each row divided by its true class's samples."""
        counts = np.asarray(self.confusion_matrix, dtype=np.float64)
        totals = counts.sum(axis=1, keepdims=True)
        return np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)


def classifier_metrics(labels: np.ndarray, probabilities: np.ndarray,
                       class_names: tuple[str, ...] | None = None) -> ClassifierMetrics:
    """Figures of `probabilities` (samples x classes) against integer `labels`."""
    labels = np.asarray(labels).reshape(-1).astype(np.int64)
    probabilities = np.asarray(probabilities)
    samples, classes = probabilities.shape
    if len(labels) != samples:
        raise ValueError(f"{len(labels)} labels for {samples} predictions")
    names = class_names or tuple(str(i) for i in range(classes))
    if len(names) != classes:
        raise ValueError(f"{len(names)} class names for {classes} model outputs")
    predicted = probabilities.argmax(axis=1)
    matrix = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(matrix, (labels, predicted), 1)
    hits = np.diag(matrix).astype(np.float64)
    support = matrix.sum(axis=1)
    precision = _ratio(hits, matrix.sum(axis=0))
    recall = _ratio(hits, support)
    f1 = _ratio(2 * precision * recall, precision + recall)
    per_class = tuple(Scores(float(p), float(r), float(f), int(s))
                      for p, r, f, s in zip(precision, recall, f1, support, strict=True))
    weights = support / max(int(support.sum()), 1)
    return ClassifierMetrics(
        class_names=tuple(names),
        confusion_matrix=tuple(tuple(int(v) for v in row) for row in matrix),
        per_class=per_class,
        macro=Scores(float(precision.mean()), float(recall.mean()), float(f1.mean()),
                     int(support.sum())),
        weighted=Scores(float(precision @ weights), float(recall @ weights),
                        float(f1 @ weights), int(support.sum())),
        accuracy=float(hits.sum() / max(samples, 1)),
        top_k=top_k_accuracy(labels, probabilities) if classes >= TOP_K else None,
        samples=int(samples),
    )


@dataclass(frozen=True)
class MultiLabelMetrics:
    """Independent yes/no labels, each said yes at a probability of `threshold`: per label
    and averaged as scikit-learn's `classification_report` does on multi-hot arrays
    (micro: over every label decision), with its `accuracy_score` (every label of a
    sample right) and `hamming_loss` (the share of label decisions wrong)."""

    label_names: tuple[str, ...]
    per_label: tuple[Scores, ...]  # support: the samples that have the label
    micro: Scores
    macro: Scores
    weighted: Scores
    subset_accuracy: float
    hamming_loss: float
    samples: int
    threshold: float = 0.5

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> MultiLabelMetrics:
        scores = {key: Scores(**data[key]) for key in ("micro", "macro", "weighted")}
        return cls(label_names=tuple(data["label_names"]),
                   per_label=tuple(Scores(**s) for s in data["per_label"]), **scores,
                   subset_accuracy=data["subset_accuracy"], hamming_loss=data["hamming_loss"],
                   samples=data["samples"], threshold=data["threshold"])


def multi_label_metrics(labels: np.ndarray, probabilities: np.ndarray,
                        label_names: tuple[str, ...] | None = None,
                        threshold: float = 0.5) -> MultiLabelMetrics:
    """Figures of `probabilities` (samples x labels, each in 0..1) against multi-hot
    `labels` of the same shape."""
    truth = np.asarray(labels).reshape(len(labels), -1) > 0.5
    said = np.asarray(probabilities).reshape(truth.shape) >= threshold
    samples, count = truth.shape
    names = (label_names if label_names and len(label_names) == count
             else tuple(str(i) for i in range(count)))
    hits = (truth & said).sum(axis=0).astype(np.float64)
    support = truth.sum(axis=0)
    precision, recall = _ratio(hits, said.sum(axis=0)), _ratio(hits, support)
    f1 = _ratio(2 * precision * recall, precision + recall)
    micro_p = float(_ratio(hits.sum(), said.sum()))
    micro_r = float(_ratio(hits.sum(), support.sum()))
    micro_f = float(_ratio(2 * micro_p * micro_r, micro_p + micro_r))
    weights = support / max(int(support.sum()), 1)
    total = int(support.sum())
    return MultiLabelMetrics(
        label_names=tuple(names),
        per_label=tuple(Scores(float(p), float(r), float(f), int(n))
                        for p, r, f, n in zip(precision, recall, f1, support, strict=True)),
        micro=Scores(micro_p, micro_r, micro_f, total),
        macro=Scores(float(precision.mean()), float(recall.mean()), float(f1.mean()), total),
        weighted=Scores(float(precision @ weights), float(recall @ weights),
                        float(f1 @ weights), total),
        subset_accuracy=float((truth == said).all(axis=1).mean()),
        hamming_loss=float((truth != said).mean()), samples=int(samples), threshold=threshold)


def top_k_accuracy(labels: np.ndarray, probabilities: np.ndarray, k: int = TOP_K) -> float:
    """The share of samples whose true class is among their k most probable."""
    best = np.argpartition(-probabilities, k - 1, axis=1)[:, :k]
    return float((best == labels.reshape(-1, 1)).any(axis=1).mean())


def samples_in_cell(labels: np.ndarray, probabilities: np.ndarray, true: int,
                    predicted: int) -> np.ndarray:
    """Indices of the samples of class `true` predicted as `predicted`, the most
    confident first: in an off-diagonal cell, the worst mistakes lead."""
    labels = np.asarray(labels).reshape(-1)
    chosen = np.flatnonzero((labels == true) & (probabilities.argmax(axis=1) == predicted))
    confidence = probabilities[chosen, predicted]
    return chosen[np.argsort(-confidence, kind="stable")]


def top_classes(probabilities: np.ndarray, names: Sequence[str], k: int = TOP_K
                ) -> list[tuple[str, float]]:
    """One sample's `k` most probable classes, (name, probability), most probable first
    (ties in class order)."""
    best = np.argsort(-probabilities, kind="stable")[:k]
    return [(names[i], float(probabilities[i])) for i in best]


@dataclass(frozen=True)
class RegressionMetrics:
    """What a model that predicts values (not classes) is judged by."""

    mae: float
    mse: float
    samples: int


def regression_metrics(targets: np.ndarray, predictions: np.ndarray) -> RegressionMetrics:
    targets = np.asarray(targets, dtype=np.float64).reshape(len(targets), -1)
    error = np.asarray(predictions, dtype=np.float64).reshape(targets.shape) - targets
    return RegressionMetrics(mae=float(np.abs(error).mean()), mse=float((error ** 2).mean()),
                             samples=len(targets))


def _ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    top, bottom = np.asarray(top, dtype=np.float64), np.asarray(bottom, dtype=np.float64)
    return np.divide(top, bottom, out=np.zeros_like(top), where=bottom > 0)
