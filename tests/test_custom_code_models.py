"""A `.py` model whose classes are its own (a custom layer, a subclassed `keras.Model`)
trains to the end: its export reloads in a fresh process with the model file's classes
(issue 29, finding 1: every epoch trained, then "Could not locate class 'TinyNet'", the
run failed, and resume failed the same way)."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from mgpu_gui.cli import main as cli

pytestmark = pytest.mark.slow

MODELS = {
    "custom_layer": """
        import keras

        class Scale(keras.layers.Layer):
            def __init__(self, factor=2.0, **kwargs):
                super().__init__(**kwargs)
                self.factor = factor

            def call(self, x):
                return x * self.factor

            def get_config(self):
                return {**super().get_config(), "factor": self.factor}

        def build_model(input_shape, num_classes):
            return keras.Sequential([keras.Input(input_shape), Scale(0.5),
                                     keras.layers.Dense(num_classes, activation="softmax")])
    """,
    "subclassed_model": """
        import keras

        @keras.saving.register_keras_serializable(package="lab")
        class TinyNet(keras.Model):
            def __init__(self, num_classes=3, **kwargs):
                super().__init__(**kwargs)
                self.num_classes = num_classes
                self.hidden = keras.layers.Dense(8, activation="relu")
                self.out = keras.layers.Dense(num_classes, activation="softmax")

            def call(self, x):
                return self.out(self.hidden(x))

            def get_config(self):
                return {**super().get_config(), "num_classes": self.num_classes}

        def build_model(input_shape, num_classes):
            model = TinyNet(num_classes)
            model.build((None, *input_shape))
            return model
    """,
}


@pytest.mark.parametrize("kind", list(MODELS))
def test_a_py_models_own_classes_reload_its_export_evaluate_and_export(kind, tmp_path,
                                                                        capsys):
    model = tmp_path / f"{kind}.py"
    model.write_text(textwrap.dedent(MODELS[kind]))
    rng = np.random.default_rng(0)
    data = tmp_path / "data.npz"
    np.savez(data, x_train=rng.random((48, 6), dtype=np.float32), y_train=rng.integers(0, 3, 48))
    code = cli.main(["train", "--model", str(model), "--data", str(data), "--epochs", "1",
                     "--batch-per-replica", "8", "--cpu", "--replicas", "1", "--json",
                     "-o", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert code == 0, err + out[-3000:]
    (exported,) = [e for e in events if e["type"] == "model_exported"]
    assert exported["verified"] and exported["max_abs_diff"] == 0
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed"
    # Both end in softmax: trained on probabilities, not as logits (a subclassed model
    # names no output layer; its outputs show it).
    logs = [e["message"] for e in events if e["type"] == "log"]
    assert any("(softmax output): sparse_categorical_crossentropy" in m for m in logs), logs
    # The run's model evaluated and exported again later, by the run's folder: each
    # loads it with the run's classes (the zoo's custom-layer, ViT and subclassed models
    # failed there: "could not be deserialized", "Could not locate class").
    (run,) = (tmp_path / "runs").iterdir()
    assert cli.main(["evaluate", str(run), "--cpu", "--replicas", "1", "--json"]) == 0, (
        capsys.readouterr().err)
    assert json.loads(capsys.readouterr().out)["samples"] > 0
    assert cli.main(["export", str(run), "-o", str(tmp_path / "again.keras")]) == 0, (
        capsys.readouterr().err)
    assert (tmp_path / "again.keras").is_file()
    # The copy, out of the run folder, still finds its classes: its card names their file.
    card = json.loads((tmp_path / "again.classes.json").read_text())
    assert card["custom_objects"] == str(model)
    assert cli.main(["evaluate", str(tmp_path / "again.keras"), "--data", str(data),
                     "--cpu", "--replicas", "1", "--json"]) == 0, capsys.readouterr().err
    if kind != "custom_layer":
        return
    # Without its card (a file passed on): refused at once, then --custom-objects loads it.
    (tmp_path / "again.classes.json").unlink()
    again = ["evaluate", str(tmp_path / "again.keras"), "--data", str(data), "--cpu",
             "--replicas", "1", "--json"]
    assert cli.main(again) == 2 and "give --custom-objects FILE" in capsys.readouterr().err
    assert cli.main([*again, "--custom-objects", str(model)]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["samples"] > 0


def test_a_model_with_its_own_rescaling_is_told_its_pixels_are_rescaled_twice(tmp_path, capsys):
    """Keras' image examples start the model with Rescaling(1/255); the pipeline's rescale
    applied too, without a word (issue 29, item 14). The log says so and what to give."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
                tmp_path / "imgs" / name / f"{i}.png")
    model = tmp_path / "own_rescaling.py"
    model.write_text(textwrap.dedent("""
        import keras

        def build_model(input_shape, num_classes):
            return keras.Sequential([keras.Input(input_shape), keras.layers.Rescaling(1 / 255),
                                     keras.layers.Flatten(),
                                     keras.layers.Dense(num_classes, activation="softmax")])
    """))
    args = ["train", "--model", str(model), "--data", str(tmp_path / "imgs"), "--image-size",
            "8x8", "--epochs", "1", "--batch-per-replica", "4", "--cpu", "--replicas", "1",
            "--export", "none", "-o", str(tmp_path / "runs")]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "the model rescales its inputs itself (its first layer, rescaling, multiplies by " \
           "0.00392157)" in out, out
    assert "Give --rescale 1" in out
    assert cli.main([*args, "--rescale", "1"]) == 0
    assert "rescales its inputs itself" not in capsys.readouterr().out
    # An .npz of uint8 pixels is rescaled by the pipeline as a folder is: said too; float
    # inputs are not rescaled, so nothing is said.
    for dtype, said in ((np.uint8, True), (np.float32, False)):
        x = rng.integers(0, 256, (12, 8, 8, 3)).astype(dtype)
        np.savez(tmp_path / "pixels.npz", x_train=x, y_train=np.arange(12) % 2)
        assert cli.main([*args[:4], str(tmp_path / "pixels.npz"), *args[7:]]) == 0
        assert ("rescales its inputs itself" in capsys.readouterr().out) is said, dtype
