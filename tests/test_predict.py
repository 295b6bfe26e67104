"""`mgpu-train predict`: image files prepared as training prepared them, from the card its
export wrote; the same top classes as the exported model's own predict on the file
decoded independently (tf.io.decode_image, tf.image.resize, the recorded rescale)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mgpu_gui.cli import main as cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """One epoch on an image folder of three classes, images of several sizes."""
    root = tmp_path_factory.mktemp("predict")
    rng = np.random.default_rng(0)
    for index, name in enumerate(("cat", "dog", "owl")):
        (root / "imgs" / name).mkdir(parents=True)
        for i in range(8):
            size = (12 + 4 * (i % 3), 16)
            pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
            pixels[..., index] = 255  # a class is a colour: something to learn
            Image.fromarray(pixels).save(root / "imgs" / name / f"{i}.png")
    code = cli.main(["train", "--data", str(root / "imgs"), "--image-size", "16x16",
                     "--epochs", "1", "--cpu", "--replicas", "1", "--batch", "4",
                     "--val-split", "0", "-o", str(root / "runs"), "--quiet"])
    assert code == 0
    run = next((root / "runs").iterdir())
    return {"root": root, "model": run / "model.keras", "card": run / "model.classes.json"}


def test_the_export_records_how_images_were_prepared(trained):
    card = json.loads(trained["card"].read_text())
    assert card["class_names"] == ["cat", "dog", "owl"]
    assert card["inputs"] == {"kind": "images", "channels": 3, "image_size": [16, 16],
                              "rescale": pytest.approx(1 / 255)}


def test_predict_gives_the_exported_models_own_top_k(trained, capsys, tmp_path):
    import keras
    import tensorflow as tf

    folder = trained["root"] / "imgs" / "dog"
    table = tmp_path / "out.csv"
    code = cli.main(["predict", str(trained["model"]), str(folder), "--top", "3",
                     "--csv", str(table)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Inputs: images decoded to 3 channels, resized to 16x16, times 0.00392157 (as its " \
           "card records)" in out
    with open(table, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["file"] for r in rows] == [str(p) for p in sorted(folder.glob("*.png"))]
    model = keras.models.load_model(trained["model"])
    names = ["cat", "dog", "owl"]
    for row in rows:
        image = tf.io.decode_image(Path(row["file"]).read_bytes(), channels=3,
                                   expand_animations=False)
        x = tf.image.resize(image, (16, 16)) * (1 / 255)
        probabilities = model.predict(x[None], verbose=0)[0]
        order = np.argsort(-probabilities)
        assert [row[f"class_{k + 1}"] for k in range(3)] == [names[i] for i in order]
        assert [float(row[f"probability_{k + 1}"]) for k in range(3)] == pytest.approx(
            probabilities[order].tolist(), abs=1e-5)
        assert row["error"] == ""


def test_a_bad_file_gets_its_own_error_and_a_bare_model_says_what_it_assumed(
        trained, capsys, tmp_path):
    bare = tmp_path / "bare.keras"
    shutil.copy(trained["model"], bare)  # no card beside it
    broken = tmp_path / "broken.png"
    broken.write_bytes(next((trained["root"] / "imgs" / "cat").glob("*.png")).read_bytes()[:40])
    good = next((trained["root"] / "imgs" / "owl").glob("*.png"))
    code = cli.main(["predict", str(bare), str(good), str(broken)])
    out, err = capsys.readouterr()
    assert code == 2
    assert "ASSUMED, bare.keras has no card" in out
    assert f"{good}: " in out and "%" in out.split(f"{good}: ")[1].splitlines()[0]
    assert f"{broken}: the image {broken} cannot be decoded" in out
    assert "1 of 2 file(s) could not be read" in err and "Traceback" not in out + err


def test_a_binary_model_saved_elsewhere_names_both_classes(trained, capsys, tmp_path):
    """One sigmoid unit (issue 29, finding 3): its P(class 1) becomes the two classes' shares,
    not one column for a card's two names; a linear unit is a logit."""
    import keras

    good = next((trained["root"] / "imgs" / "owl").glob("*.png"))
    for activation, expected in (("sigmoid", 0.75), (None, 1 / (1 + np.exp(-0.75)))):
        model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.GlobalAveragePooling2D(),
                                  keras.layers.Dense(1, activation=activation)])
        model.layers[-1].set_weights([np.zeros((3, 1)), np.full(1, 0.75 if activation is None
                                                                else np.log(3.0))])
        path = tmp_path / f"binary-{activation}.keras"
        model.save(path)
        table = tmp_path / f"binary-{activation}.csv"
        code = cli.main(["predict", str(path), str(good), "--top", "2", "--csv", str(table)])
        out, err = capsys.readouterr()
        assert code == 0, err
        with open(table, newline="") as handle:
            (row,) = csv.DictReader(handle)
        assert [row["class_1"], row["class_2"]] == ["1", "0"]
        assert [float(row["probability_1"]), float(row["probability_2"])] == pytest.approx(
            [expected, 1 - expected], abs=1e-6)


def test_a_grey_model_saved_elsewhere_takes_grey_and_rgb_files(capsys, tmp_path):
    """Issue 29, finding 10: a model with a 28x28x1 input and no card (saved outside the
    app) once failed on every file with a raw `Sequential.call()` error. Files are read
    as RGB, then made grey for a one-channel input (the ITU-R 601 weights Keras' own
    grayscale loading uses), at the input layer's size and times 1/255, as said."""
    import keras
    from PIL import Image

    model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(3, activation="softmax")])
    model.save(tmp_path / "grey.keras")
    rng = np.random.default_rng(0)
    grey = rng.integers(0, 256, (28, 28), dtype=np.uint8)
    Image.fromarray(grey).save(tmp_path / "grey.png")
    Image.fromarray(np.stack([grey] * 3, axis=-1)).save(tmp_path / "rgb.png")
    table = tmp_path / "top.csv"
    code = cli.main(["predict", str(tmp_path / "grey.keras"), str(tmp_path / "grey.png"),
                     str(tmp_path / "rgb.png"), "--csv", str(table)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "images decoded to 1 channel (grey), resized to 28x28" in out
    with open(table, newline="") as handle:
        rows = list(csv.DictReader(handle))
    expected = model.predict((grey / 255.0).astype(np.float32)[None, ..., None], verbose=0)[0]
    for row in rows:  # a grey file and its RGB copy: the same pixels, the same answer
        assert row["error"] == ""
        assert float(row["probability_1"]) == pytest.approx(float(expected.max()), abs=1e-5)


def test_try_a_sample_in_the_evaluation_view_gives_the_same_top_k(trained):
    """The view's "Try a sample" runs the predict child on the run's own model."""
    import keras
    import tensorflow as tf

    from mgpu_gui.core.runs.folder import RunDir
    from mgpu_gui.gui.dialogs.evaluation import Subject, TryFileJob

    image = next((trained["root"] / "imgs" / "owl").glob("*.png"))
    made = TryFileJob(Subject("run", RunDir(trained["model"].parent)), image).run()
    x = tf.image.resize(tf.io.decode_image(image.read_bytes(), channels=3), (16, 16)) / 255
    probabilities = keras.models.load_model(trained["model"]).predict(x[None], verbose=0)[0]
    order = np.argsort(-probabilities)
    assert [name for name, _ in made.rows[0]["top"]] == [["cat", "dog", "owl"][i]
                                                         for i in order]
    assert [p for _, p in made.rows[0]["top"]] == pytest.approx(probabilities[order].tolist(),
                                                                abs=1e-5)
