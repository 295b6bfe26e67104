"""One evaluation: which model, which samples, the figures; kept as files of a run folder.

`evaluation.json` holds this result (reopening a run's evaluation reads nothing
else); the predictions it came from (`evaluation-predictions.npz`: the labels, as
class ids for a classifier, the model's outputs, one row per sample, and where each
sample came from) back the views that list and draw samples.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from mgpu_gui.core.errors import DataError
from mgpu_gui.core.evaluation.metrics import (
    ClassifierMetrics,
    MultiLabelMetrics,
    RegressionMetrics,
)
from mgpu_gui.core.evaluation.samples import SampleOrigins

RESULT_FILE = "evaluation.json"
PREDICTIONS_FILE = "evaluation-predictions.npz"


class Split(StrEnum):
    """Which samples are evaluated: the test set when there is one, else validation."""

    TEST = "test"
    VALIDATION = "val"

    @property
    def words(self) -> str:
        return "test" if self is Split.TEST else "validation"


def choose_split(wanted: Split | None, val_samples: int, test_samples: int) -> Split:
    """The split to evaluate: `wanted`, else test when there is one, else validation; a
    DataError when the data has none. The CLI asks it of the inspected layout before
    the evaluator starts, the evaluator of the loaded data."""
    available = {Split.TEST: test_samples, Split.VALIDATION: val_samples}
    for split in [wanted] if wanted is not None else [Split.TEST, Split.VALIDATION]:
        if available[split]:
            return split
    if wanted is Split.TEST:
        raise DataError("the data has no test set (x_test/y_test in an .npz, or the demo's); "
                        "evaluate the validation split with --split val.")
    raise DataError("the data has no validation or test samples to evaluate: add "
                    "x_test/y_test (or x_val/y_val) to the .npz, or give --val-split.")


@dataclass(frozen=True)
class EvaluationResult:
    model: str  # the model file evaluated
    data: str  # the data source, as the run (or --data) named it
    split: Split
    samples: int  # every sample of the split: none is dropped
    loss: float | None  # the model's own loss, when it has one
    classifier: ClassifierMetrics | None = None
    regression: RegressionMetrics | None = None
    seconds: float = 0.0
    multi_label: MultiLabelMetrics | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["split"] = self.split.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvaluationResult:
        classifier, regression = data.get("classifier"), data.get("regression")
        multi_label = data.get("multi_label")
        return cls(
            model=data["model"], data=data["data"], split=Split(data["split"]),
            samples=data["samples"], loss=data["loss"],
            classifier=None if classifier is None else ClassifierMetrics.from_dict(classifier),
            regression=None if regression is None else RegressionMetrics(**regression),
            seconds=data.get("seconds", 0.0),
            multi_label=None if multi_label is None else MultiLabelMetrics.from_dict(multi_label))

    def save(self, folder: Path, labels: np.ndarray, outputs: np.ndarray,
             origins: SampleOrigins) -> Path:
        """Write the result and its predictions (with where each sample came from) into
        `folder`; return the result's path."""
        np.savez(folder / PREDICTIONS_FILE, labels=labels, outputs=outputs,
                 **origins.to_arrays())
        path = folder / RESULT_FILE
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, folder: Path) -> EvaluationResult:
        return cls.from_dict(json.loads((folder / RESULT_FILE).read_text()))
