"""`mgpu-train evaluate`: every test sample predicted on 2 CPU replicas, and figures equal
to scikit-learn's from a plain `keras.models.load_model(...).predict` on the same samples."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from sklearn.metrics import classification_report, confusion_matrix

from mgpu_gui.cli import main as cli
from mgpu_gui.core.datasets.inspection import (
    DEMO_MAX_VALUE,
    demo_split_indices,
    load_demo_arrays,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> dict:
    """A small classifier of the demo digits, trained a little so its predictions are clear,
    and an .npz whose 101 test samples fill no global batch of 2 replicas."""
    import keras

    root = tmp_path_factory.mktemp("evaluate")
    images, labels = load_demo_arrays()
    x = (images.astype(np.float32) / DEMO_MAX_VALUE)[..., None]
    y = labels.astype(np.int64)
    model = keras.Sequential([keras.Input(x.shape[1:]), keras.layers.Flatten(),
                              keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    keras.utils.set_random_seed(0)
    model.fit(x, y, epochs=3, batch_size=64, verbose=0)
    path = root / "digits.keras"
    model.save(path)
    npz = root / "odd.npz"
    np.savez(npz, x_train=x[:1000], y_train=y[:1000], x_test=x[1000:1101], y_test=y[1000:1101])
    _, test = demo_split_indices(len(images))
    return {"model": path, "npz": npz, "demo_test": (x[test], y[test]),
            "npz_test": (x[1000:1101], y[1000:1101])}


@pytest.mark.parametrize("data", ["demo", "npz"])
def test_evaluate_json_equals_scikit_learn_on_plain_keras_predict(digits, capsys, tmp_path,
                                                                  data):
    import keras

    source = "demo" if data == "demo" else str(digits["npz"])
    table = tmp_path / "classes.csv"
    code = cli.main(["evaluate", str(digits["model"]), "--data", source, "--cpu",
                     "--replicas", "2", "--json", "--csv", str(table)])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    x, y = digits[f"{data}_test"]
    assert result["samples"] == len(y) and result["split"] == "test"
    probabilities = keras.models.load_model(digits["model"]).predict(x, verbose=0)
    predicted = probabilities.argmax(axis=1)
    every = list(range(10))
    assert result["classifier"]["confusion_matrix"] == confusion_matrix(
        y, predicted, labels=every).tolist()
    expected = classification_report(y, predicted, labels=every, output_dict=True,
                                     zero_division=0)
    ours = result["classifier"]
    for index, scores in enumerate(ours["per_class"]):
        theirs = expected[str(index)]
        assert [scores["precision"], scores["recall"], scores["f1"], scores["support"]] == (
            pytest.approx([theirs["precision"], theirs["recall"], theirs["f1-score"],
                           theirs["support"]], abs=1e-12))
    assert ours["macro"]["f1"] == pytest.approx(expected["macro avg"]["f1-score"], abs=1e-12)
    assert ours["weighted"]["f1"] == pytest.approx(expected["weighted avg"]["f1-score"],
                                                   abs=1e-12)
    assert ours["accuracy"] == pytest.approx(expected["accuracy"], abs=1e-12)
    top5 = np.argsort(-probabilities, axis=1)[:, :5]
    assert ours["top_k"] == pytest.approx(float((top5 == y[:, None]).any(axis=1).mean()))
    loss = keras.losses.sparse_categorical_crossentropy(y, probabilities)
    assert result["loss"] == pytest.approx(float(np.mean(loss)), rel=1e-5)
    with open(table, newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["class", "precision", "recall", "f1", "support"]
    assert [r[0] for r in rows[1:]] == [str(i) for i in every] + ["macro avg", "weighted avg"]


@pytest.mark.parametrize("head", ["sigmoid", "logit"])
def test_a_binary_classifier_with_one_output_unit_is_judged_as_two_classes(
        digits, capsys, tmp_path, head):
    """The most common lab task (issue 29, finding 3): one sigmoid unit, or one linear unit
    trained from logits, on 0/1 labels. Its confusion matrix and loss equal scikit-learn's
    and Keras's on the plain model's P(class 1) > 0.5."""
    import keras

    x, y = digits["npz_test"]
    binary = (y >= 5).astype(np.int64)
    loss = ("binary_crossentropy" if head == "sigmoid"
            else keras.losses.BinaryCrossentropy(from_logits=True))
    model = keras.Sequential([keras.Input(x.shape[1:]), keras.layers.Flatten(),
                              keras.layers.Dense(1, activation="sigmoid" if head == "sigmoid"
                                                 else None)])
    model.compile("adam", loss, metrics=["accuracy"])
    keras.utils.set_random_seed(0)
    model.fit(x, binary, epochs=2, batch_size=32, verbose=0)
    path, data = tmp_path / "binary.keras", tmp_path / "binary.npz"
    model.save(path)
    np.savez(data, x_train=x, y_train=binary, x_test=x, y_test=binary)
    code = cli.main(["evaluate", str(path), "--data", str(data), "--cpu", "--replicas", "2",
                     "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    raw = model.predict(x, verbose=0)
    p = raw if head == "sigmoid" else 1 / (1 + np.exp(-raw))
    predicted = (p[:, 0] > 0.5).astype(np.int64)
    assert result["classifier"]["confusion_matrix"] == confusion_matrix(
        binary, predicted, labels=[0, 1]).tolist()
    assert result["classifier"]["accuracy"] == pytest.approx(float((predicted == binary).mean()))
    expected = keras.losses.BinaryCrossentropy(from_logits=head == "logit")(binary[:, None], raw)
    assert result["loss"] == pytest.approx(float(expected), rel=1e-4)


def test_a_multi_label_head_is_judged_per_label_as_scikit_learn_does(capsys, tmp_path):
    """Four sigmoid units trained with binary cross-entropy on multi-hot labels (a lab's
    "which of these are in the picture"): once refused by evaluate after training. Each
    label is said yes at 0.5; the per-label table, its micro/macro/weighted averages,
    the subset accuracy and the Hamming loss equal scikit-learn's."""
    import keras
    from sklearn.metrics import accuracy_score, hamming_loss

    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 6)).astype(np.float32)
    y = (x[:, :4] + 0.5 * rng.normal(size=(120, 4)) > 0).astype(np.float32)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, activation="sigmoid")])
    model.compile("adam", "binary_crossentropy")
    keras.utils.set_random_seed(0)
    model.fit(x, y, epochs=5, verbose=0)
    model.save(tmp_path / "tags.keras")
    np.savez(tmp_path / "tags.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    args = ["evaluate", str(tmp_path / "tags.keras"), "--data", str(tmp_path / "tags.npz"),
            "--cpu", "--replicas", "1"]
    assert cli.main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["classifier"] is None and result["regression"] is None
    ours = result["multi_label"]
    said = (model.predict(x, verbose=0) >= 0.5).astype(int)
    expected = classification_report(y.astype(int), said, output_dict=True, zero_division=0)
    for index, scores in enumerate(ours["per_label"]):
        theirs = expected[str(index)]
        assert [scores["precision"], scores["recall"], scores["f1"], scores["support"]] == (
            pytest.approx([theirs["precision"], theirs["recall"], theirs["f1-score"],
                           theirs["support"]], abs=1e-12))
    for average in ("micro", "macro", "weighted"):
        assert ours[average]["f1"] == pytest.approx(expected[f"{average} avg"]["f1-score"],
                                                    abs=1e-12)
    assert ours["subset_accuracy"] == pytest.approx(accuracy_score(y.astype(int), said))
    assert ours["hamming_loss"] == pytest.approx(hamming_loss(y.astype(int), said))
    assert result["loss"] == pytest.approx(float(np.mean(keras.losses.binary_crossentropy(
        y, model.predict(x, verbose=0)))), rel=1e-5)
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "every label right" in out and "micro avg" in out
    assert re.search(r"^label +precision  recall", out, re.MULTILINE), out


def test_bad_targets_are_refused_with_what_to_do(digits, capsys, tmp_path):
    assert cli.main(["evaluate", str(digits["model"])]) == 2
    assert "give the data to evaluate digits.keras on: --data" in capsys.readouterr().err
    no_test = tmp_path / "no_test.npz"
    x, y = digits["npz_test"]
    np.savez(no_test, x_train=x, y_train=y)
    assert cli.main(["evaluate", str(digits["model"]), "--data", str(no_test),
                     "--split", "test", "--cpu", "--replicas", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the data has no test set") and "--split val" in err, err
    assert "Traceback" not in err and "full output" not in err  # refused before the child


def test_data_that_does_not_fit_the_model_is_refused_before_the_evaluator(digits, capsys,
                                                                          tmp_path):
    """Issue 29, finding 8: evaluate checks the data against the model as train does, in
    the command before the evaluator (TensorFlow) starts: labels beyond the model's
    outputs, inputs of another shape, NaN inputs, an image folder with another class
    count. Each once gave a raw Keras error and "This is a bug", or (NaN) figures."""
    import keras
    from PIL import Image

    x, y = digits["npz_test"]
    rng = np.random.default_rng(0)
    cases = {
        "labels.npz": (x, (y + 10) % 20, "the labels go up to 19 (20 classes), but the "
                       "model's output has 10 unit(s), so labels must be 0..9"),
        "shape.npz": (rng.normal(size=(40, 16, 16, 1)).astype(np.float32), y[:40],
                      "expects inputs of shape (8, 8, 1), but the data has (16, 16, 1)"),
        "nan.npz": (np.full_like(x, np.nan), y, "x_train holds 6464 NaN value(s)"),
    }
    for name, (xs, ys, words) in cases.items():
        np.savez(tmp_path / name, x_train=xs, y_train=ys, x_test=xs, y_test=ys)
        code = cli.main(["evaluate", str(digits["model"]), "--data", str(tmp_path / name),
                         "--cpu", "--replicas", "1"])
        err = capsys.readouterr().err
        assert code == 2 and words in err, (name, err)
        assert "full output" not in err and "This is a bug" not in err, err  # no child ran
    rgb = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                            keras.layers.Dense(10, activation="softmax")])
    rgb.compile("adam", "sparse_categorical_crossentropy")
    rgb.save(tmp_path / "rgb.keras")
    for c in ("cat", "dog", "owl"):
        (tmp_path / "folder" / c).mkdir(parents=True)
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
            tmp_path / "folder" / c / "0.png")
    code = cli.main(["evaluate", str(tmp_path / "rgb.keras"), "--data",
                     str(tmp_path / "folder"), "--cpu", "--replicas", "1"])
    err = capsys.readouterr().err
    assert code == 2 and ("the image folder has 3 class subfolders (cat, dog, owl), but the "
                          "model has 10 output unit(s)") in err, err


def test_a_test_set_without_the_last_classes_is_judged_on_every_class_of_the_model(
        digits, capsys, tmp_path):
    """A split whose labels stop at 2 for a 10-class model (an .npz names classes up to its
    largest label) is judged as 10 classes, not refused as "3 class names for 10 model
    outputs" (issue 29, finding 8)."""
    x, y = digits["npz_test"]
    few = y < 3
    np.savez(tmp_path / "few.npz", x_train=x[few], y_train=y[few], x_test=x[few],
             y_test=y[few])
    code = cli.main(["evaluate", str(digits["model"]), "--data", str(tmp_path / "few.npz"),
                     "--cpu", "--replicas", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    classifier = json.loads(out)["classifier"]
    assert classifier["class_names"] == [str(i) for i in range(10)]
    assert [s["support"] for s in classifier["per_class"]][3:] == [0] * 7


def test_a_runs_evaluation_is_kept_in_its_folder(digits, capsys, tmp_path):
    """A run is evaluated on its own data, on its own settings, and keeps the result."""
    import shutil

    from mgpu_gui.core.config import RunConfig
    from mgpu_gui.core.evaluation.result import PREDICTIONS_FILE, EvaluationResult
    from mgpu_gui.core.evaluation.samples import SampleOrigins
    from mgpu_gui.core.runs.folder import create_run_dir
    from mgpu_gui.core.runs.store import RunStore

    run_dir = create_run_dir(RunConfig(data=str(digits["npz"]), output_dir=str(tmp_path),
                                       run_name="digits"))
    shutil.copy(digits["model"], run_dir.export_path("keras"))
    code = cli.main(["evaluate", str(run_dir.path), "--cpu", "--replicas", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "on 101 test samples of" in out and "top-5" in out and "weighted avg" in out
    assert "Confusion matrix (rows: true class, columns: predicted class)" in out
    printed = EvaluationResult.load(run_dir.path)
    assert printed.samples == 101 and f"Kept in {run_dir.path / 'evaluation.json'}" in out
    with RunStore() as store:  # conftest points MGPU_GUI_STORE at this test's own file
        assert store.evaluation(store.find_dir(run_dir.path).id) == printed
    kept = np.load(run_dir.path / PREDICTIONS_FILE)
    assert kept["outputs"].shape == (101, 10) and kept["labels"].tolist() == (
        digits["npz_test"][1].tolist())
    origins = SampleOrigins.from_arrays(kept)
    assert origins.source == str(digits["npz"]) and origins.key == "x_test"
    assert origins.rows.tolist() == list(range(101))


def test_the_pipeline_knows_where_each_held_out_sample_came_from(digits):
    """Through the validation split's shuffle, and the demo's held-out test set."""
    from mgpu_gui.core.config import RunConfig
    from mgpu_gui.engine.pipeline import load_data

    prepared = load_data(RunConfig(data=str(digits["npz"]), validation_split=0.2, seed=3))
    rows = prepared.val_origins.rows
    with np.load(digits["npz"]) as data:
        assert prepared.val_origins.key == "x_train" and len(rows) == prepared.val_samples
        assert sorted(set(rows.tolist())) != list(range(len(rows)))  # shuffled, not the head
        assert np.array_equal(data["y_train"][rows], prepared.val_labels)
    demo = load_data(RunConfig(data="demo"))
    images, labels = load_demo_arrays()
    assert demo.test_origins.source == "demo"
    assert np.array_equal(labels[demo.test_origins.rows], demo.test_labels)


def test_evaluate_where_tensorflow_is_not_installed_says_so_before_starting(tmp_path):
    """A JAX-only machine trains, but evaluate needs TensorFlow: said plainly, no child."""
    import keras

    from mgpu_gui.core.tools.evaluate_job import NO_TENSORFLOW
    from tests.helpers.without_tensorflow import env_without_tensorflow

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(loss="sparse_categorical_crossentropy")
    model.save(tmp_path / "m.keras")
    zeros = {"x": np.zeros((8, 4), np.float32), "y": np.zeros(8, int)}
    np.savez(tmp_path / "d.npz", **{f"{k}_{split}": v for split in ("train", "test")
                                    for k, v in zeros.items()})
    done = subprocess.run([sys.executable, "-m", "mgpu_gui.cli.main", "evaluate",
                           str(tmp_path / "m.keras"), "--data", str(tmp_path / "d.npz"), "--cpu"],
                          capture_output=True, text=True, timeout=120,
                          env=env_without_tensorflow())
    assert done.returncode != 0
    assert NO_TENSORFLOW in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr
