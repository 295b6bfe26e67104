"""The evaluation's figures are scikit-learn's, exactly: the reference a user checks them by."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import (
    classification_report,
    confusion_matrix,
    mean_absolute_error,
    mean_squared_error,
    top_k_accuracy_score,
)

from mgpu_gui.core.evaluation.metrics import (
    ClassifierMetrics,
    classifier_metrics,
    regression_metrics,
    samples_in_cell,
)


def predictions(samples: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, samples)
    logits = rng.normal(size=(samples, classes))
    logits[np.arange(samples), labels] += 1.5  # a model better than chance
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return labels, probabilities.astype(np.float32)


@pytest.mark.parametrize("samples, classes", [(1001, 10), (37, 3), (50, 6)])
def test_figures_equal_scikit_learns(samples, classes):
    labels, probs = predictions(samples, classes, seed=classes)
    if classes == 6:
        probs[:, 4] = 0.0  # a class never predicted: its precision is 0/0
        labels[labels == 5] = 0  # and one with no samples: its recall is 0/0
    result = classifier_metrics(labels, probs)
    every = list(range(classes))
    predicted = probs.argmax(axis=1)
    assert np.array_equal(result.confusion_matrix,
                          confusion_matrix(labels, predicted, labels=every))
    report = classification_report(labels, predicted, labels=every, output_dict=True,
                                   zero_division=0)
    for index, scores in enumerate(result.per_class):
        expected = report[str(index)]
        assert (scores.precision, scores.recall, scores.f1, scores.support) == pytest.approx(
            (expected["precision"], expected["recall"], expected["f1-score"],
             expected["support"]), abs=1e-12)
    for ours, theirs in ((result.macro, "macro avg"), (result.weighted, "weighted avg")):
        expected = report[theirs]
        assert (ours.precision, ours.recall, ours.f1, ours.support) == pytest.approx(
            (expected["precision"], expected["recall"], expected["f1-score"],
             expected["support"]), abs=1e-12)
    assert result.accuracy == pytest.approx(float((predicted == labels).mean()), abs=1e-12)
    assert result.samples == samples
    if classes >= 5:
        assert result.top_k == pytest.approx(
            top_k_accuracy_score(labels, probs, k=5, labels=every), abs=1e-12)
    else:
        assert result.top_k is None  # top-5 of 3 classes says nothing
    assert ClassifierMetrics.from_dict(result.to_dict()) == result


def test_rows_normalise_to_the_true_class_and_an_empty_row_stays_zero():
    labels = np.array([0, 0, 1, 1, 1, 1])
    probs = np.eye(3)[[0, 1, 1, 1, 1, 0]]
    result = classifier_metrics(labels, probs, ("cat", "dog", "owl"))
    assert result.normalised().tolist() == [[0.5, 0.5, 0.0], [0.25, 0.75, 0.0], [0.0] * 3]
    assert result.class_names == ("cat", "dog", "owl")


def test_a_cell_lists_its_samples_most_confident_first():
    labels = np.array([3, 3, 3, 8, 3, 3])
    probs = np.full((6, 10), 0.01)
    probs[[0, 1, 3, 4], 8] = [0.6, 0.9, 0.99, 0.7]  # sample 3 is an 8 predicted as 8
    probs[[2, 5], 3] = 0.9
    assert samples_in_cell(labels, probs, true=3, predicted=8).tolist() == [1, 4, 0]
    assert samples_in_cell(labels, probs, true=3, predicted=3).tolist() == [2, 5]


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="3 labels for 2 predictions"):
        classifier_metrics(np.zeros(3), np.ones((2, 4)))
    with pytest.raises(ValueError, match="2 class names for 4 model outputs"):
        classifier_metrics(np.zeros(2), np.ones((2, 4)), ("a", "b"))


def test_regression_figures_equal_scikit_learns():
    rng = np.random.default_rng(0)
    targets, predicted = rng.normal(size=(40, 2)), rng.normal(size=(40, 2))
    result = regression_metrics(targets, predicted)
    assert result.mae == pytest.approx(mean_absolute_error(targets, predicted), abs=1e-12)
    assert result.mse == pytest.approx(mean_squared_error(targets, predicted), abs=1e-12)
    assert result.samples == 40


def test_every_head_is_read_from_its_loss_and_output():
    from mgpu_gui.core.evaluation.heads import Head, OutputMeaning, meaning_of

    assert meaning_of("binary_crossentropy", 1) == OutputMeaning(Head.BINARY)
    assert meaning_of("binary_crossentropy(from_logits=True)", 1) == OutputMeaning(
        Head.BINARY, logits=True)
    assert meaning_of("binary_crossentropy", 5, multi_hot_labels=True).head is Head.MULTI_LABEL
    assert meaning_of("sparse_categorical_crossentropy", 10) == OutputMeaning(Head.CLASSES)
    assert meaning_of("SparseCategoricalCrossentropy(from_logits=True)", 10).logits
    assert meaning_of("categorical_crossentropy", 4, linear_output=True).logits
    assert meaning_of("mean_squared_error", 1, linear_output=True) == OutputMeaning(Head.VALUES)
    assert meaning_of(None, 1, linear_output=True) == OutputMeaning(Head.BINARY, logits=True)
    assert meaning_of("my_loss", 3) == OutputMeaning(Head.CLASSES)


def test_class_heads_become_one_probability_per_class():
    from mgpu_gui.core.evaluation.heads import Head, OutputMeaning, class_probabilities

    sigmoid = np.array([[0.2], [0.9]])
    assert class_probabilities(sigmoid, OutputMeaning(Head.BINARY)) == pytest.approx(
        np.array([[0.8, 0.2], [0.1, 0.9]]))
    logits = np.array([[0.0], [1000.0], [-1000.0]])  # no overflow at either end
    assert class_probabilities(logits, OutputMeaning(Head.BINARY, logits=True)) == pytest.approx(
        np.array([[0.5, 0.5], [0.0, 1.0], [1.0, 0.0]]))
    softmax_logits = class_probabilities(np.array([[1.0, 1.0, 1.0 + np.log(2)]]),
                                         OutputMeaning(Head.CLASSES, logits=True))
    assert softmax_logits == pytest.approx(np.array([[0.25, 0.25, 0.5]]))
    values = np.array([[0.1, 0.7, 0.2]])
    assert (class_probabilities(values, OutputMeaning(Head.CLASSES)) == values).all()
