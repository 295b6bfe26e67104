"""An evaluation as text: the per-class (per-label) table, the confusion matrix, CSV rows."""

from __future__ import annotations

from mgpu_gui.core.evaluation.metrics import (
    TOP_K,
    ClassifierMetrics,
    MultiLabelMetrics,
    Scores,
)
from mgpu_gui.core.evaluation.result import EvaluationResult

CSV_HEADER = ("class", "precision", "recall", "f1", "support")


def summary(result: EvaluationResult) -> str:
    """The headline: what was evaluated on how many samples, and its overall figures."""
    head = (f"Evaluated {result.model} on {result.samples:,} {result.split.words} samples "
            f"of {result.data} ({result.seconds:.1f} s)")
    figures = []
    if result.loss is not None:
        figures.append(f"loss {result.loss:.4g}")
    if result.classifier is not None:
        figures.append(f"top-1 {result.classifier.accuracy:.2%}")
        if result.classifier.top_k is not None:
            figures.append(f"top-{TOP_K} {result.classifier.top_k:.2%}")
    if result.multi_label is not None:
        figures.append(f"every label right {result.multi_label.subset_accuracy:.2%}  "
                       f"labels wrong {result.multi_label.hamming_loss:.2%}  "
                       f"micro F1 {result.multi_label.micro.f1:.4f}")
    if result.regression is not None:
        figures.append(f"MAE {result.regression.mae:.4g}  MSE {result.regression.mse:.4g}")
    return head + (":\n  " + "  ".join(figures) if figures else ".")


def class_table(metrics: ClassifierMetrics | MultiLabelMetrics) -> str:
    """Per class (or label) precision, recall, F1 and support, then the averages."""
    rows = _rows(metrics)
    width = max(len(name) for name, _ in rows)
    what = "label" if isinstance(metrics, MultiLabelMetrics) else "class"
    lines = [f"{what:<{width}}  precision  recall     f1  support"]
    for index, (name, s) in enumerate(rows):
        if index == len(rows) - len(_averages(metrics)):
            lines.append("")
        lines.append(f"{name:<{width}}  {s.precision:9.4f}  {s.recall:6.4f}  {s.f1:5.4f}  "
                     f"{s.support:7d}")
    return "\n".join(lines)


def confusion_text(metrics: ClassifierMetrics) -> str:
    """Rows: true classes; columns: predicted classes (headed by their index)."""
    names = metrics.class_names
    cells = [[str(v) for v in row] for row in metrics.confusion_matrix]
    width = max(len(c) for row in cells for c in row)
    width = max(width, len(str(len(names) - 1)))
    name_width = max(len(n) for n in names) + 4
    head = " " * name_width + " ".join(f"{i:>{width}}" for i in range(len(names)))
    lines = ["Confusion matrix (rows: true class, columns: predicted class)", head]
    for index, (name, row) in enumerate(zip(names, cells, strict=True)):
        label = name if name == str(index) else f"{index}: {name}"
        lines.append(f"{label:<{name_width}}" + " ".join(f"{c:>{width}}" for c in row))
    return "\n".join(lines)


def csv_rows(metrics: ClassifierMetrics | MultiLabelMetrics
             ) -> list[tuple[str, float, float, float, int]]:
    """The per-class (per-label) table as rows for a CSV file: one per class, then the
    averages."""
    return [(name, s.precision, s.recall, s.f1, s.support) for name, s in _rows(metrics)]


def _averages(metrics: ClassifierMetrics | MultiLabelMetrics) -> list[tuple[str, Scores]]:
    if isinstance(metrics, MultiLabelMetrics):
        return [("micro avg", metrics.micro), ("macro avg", metrics.macro),
                ("weighted avg", metrics.weighted)]
    return [("macro avg", metrics.macro), ("weighted avg", metrics.weighted)]


def _rows(metrics: ClassifierMetrics | MultiLabelMetrics) -> list[tuple[str, Scores]]:
    names, scores = ((metrics.label_names, metrics.per_label)
                     if isinstance(metrics, MultiLabelMetrics)
                     else (metrics.class_names, metrics.per_class))
    return [*zip(names, scores, strict=True), *_averages(metrics)]
