"""The life cycle rehearsed before epoch 1 (engine/rehearsal.py, issue 29): what would fail
at a run's end fails at its start, named, and leaves no run folder and no row, as a
setup refusal does. Each test is one tiny CLI run on one CPU replica."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.runs.store import RunStore

pytestmark = pytest.mark.slow

AUGMENTING = """
    import keras

    def build_model(input_shape, num_classes):
        return keras.Sequential([
            keras.Input(input_shape), keras.layers.RandomFlip(),
            keras.layers.RandomRotation(0.2), keras.layers.Flatten(),
            keras.layers.Dense(num_classes, activation="softmax")])
"""

# A custom layer whose get_config() leaves out its factor: a reloaded model scales by 1.
FORGETFUL = """
    import keras

    @keras.saving.register_keras_serializable(package="lab")
    class Scale(keras.layers.Layer):
        def __init__(self, factor=1.0, **kwargs):
            super().__init__(**kwargs)
            self.factor = factor

        def call(self, x):
            return x * self.factor

        def get_config(self):
            return super().get_config()

    def build_model(input_shape, num_classes):
        return keras.Sequential([
            keras.Input(input_shape), keras.layers.Flatten(), Scale(3.0),
            keras.layers.Dense(num_classes, activation="softmax")])
"""


def train(tmp_path, capsys, model: str, *flags: str, shape=(8, 8, 3)):
    """(exit code, JSON events, stderr) of a 1-epoch run of the `.py` `model` on 32 samples."""
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(model))
    rng = np.random.default_rng(0)
    data = tmp_path / "data.npz"
    np.savez(data, x_train=rng.random((32, *shape), dtype=np.float32),
             y_train=rng.integers(0, 3, 32))
    code = cli.main(["train", "--model", str(path), "--data", str(data), "--epochs", "1",
                     "--batch-per-replica", "8", "--cpu", "--replicas", "1", "--json",
                     "-o", str(tmp_path / "runs"), *flags])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.startswith("{")], err


def assert_left_nothing(tmp_path):
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert RunStore().runs() == []


def test_an_export_that_would_not_reload_refuses_the_run_in_its_first_epoch(tmp_path, capsys):
    """Issue 29, finding 4's kind: an export that reloads as another model (a custom layer
    that forgets its factor in get_config). Found while the first epoch ran, not after
    the last one: exit 2 naming the format, the layer and `--export`; nothing left."""
    code, events, err = train(tmp_path, capsys, FORGETFUL, "--export", "savedmodel,keras")
    assert code == 2, err
    assert events[-1]["type"] == "run_failed" and events[-1]["phase"] == "setup"
    message = events[-1]["message"]
    assert message.startswith("Rehearsal before epoch 1: the keras export of the "
                              "untrained model fails its check"), message
    assert "a custom layer (Scale) whose get_config() leaves out an argument" in message
    assert "Drop keras from the export formats (--export)" in message
    assert not events[-1]["resumable"] and "resume" not in err
    assert not [e for e in events if e["type"] == "epoch_end"]
    assert_left_nothing(tmp_path)


def test_a_format_that_fails_only_once_trained_is_named_and_the_run_completes(tmp_path,
                                                                              capsys):
    """What the rehearsal cannot see (zero weights hide the forgotten factor until
    training moves them) is still no failed run: the other formats are made, the one
    that was not is named, exit 3 (`train --help`), no resume offered. The log says
    what was rehearsed, and the rehearsal's scratch folder is gone."""
    zero_dense = FORGETFUL.replace('activation="softmax")',
                                   'activation="softmax", kernel_initializer="zeros")')
    code, events, err = train(tmp_path, capsys, zero_dense, "--export", "savedmodel,keras")
    made = {e["format"] for e in events if e["type"] == "model_exported"}
    missing = [e for e in events if e["type"] == "export_not_made"]
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed", err
    assert made == {"savedmodel"}, (made, missing)
    assert [e["format"] for e in missing] == ["keras"]
    assert code == 3, err
    assert "Not exported as keras: " in err and "resume" not in err
    said = [e["message"] for e in events if e["type"] == "log"
            and e["message"].startswith("Rehearsed before epoch 1")]
    assert len(said) == 1, said
    assert "loss " in said[0] and "the evaluation reads it as exclusive classes" in said[0]
    assert "the savedmodel and keras exports of the untrained model" in said[0]
    [run] = (tmp_path / "runs").iterdir()
    assert not (run / ".rehearsal").exists()


def test_random_augmentation_inside_the_model_is_served_as_keras_infers(tmp_path, capsys):
    """Issue 29, finding 4: RandomFlip and RandomRotation inside the model made the
    SavedModel differ from Keras' inference by 0.3 (its `serve` left `training` unset,
    so the layers augmented every served sample); it now serves inference, verified."""
    code, events, err = train(tmp_path, capsys, AUGMENTING, "--export", "keras,savedmodel")
    assert code == 0, err
    made = {e["format"]: e for e in events if e["type"] == "model_exported"}
    assert sorted(made) == ["keras", "savedmodel"], err
    assert all(e["verified"] for e in made.values()), made


@pytest.mark.jax
def test_the_jax_backends_savedmodel_serves_inference_too(tmp_path):
    """Where the defect was found (the zoo's Xception-like, 0.2 off): the JAX backend's
    export of the same model, written and verified in a fresh TensorFlow process as a run's
    end does, without a run around it."""
    pytest.importorskip("jax")
    script = textwrap.dedent(f"""
        import sys, types
        from pathlib import Path
        import numpy as np
        module = types.ModuleType("augmenting")
        exec({textwrap.dedent(AUGMENTING)!r}, module.__dict__)
        from mgpu_gui.engine.export import export_model
        model = module.build_model((8, 8, 3), 3)
        x = np.random.default_rng(0).random((16, 8, 8, 3), dtype=np.float32)
        result = export_model(model, Path(sys.argv[1]), "savedmodel", sample_x=x)
        print("verified", result.verified, result.max_abs_diff)
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "model_savedmodel")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KERAS_BACKEND": "jax", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout.split()
    assert said[:2] == ["verified", "True"] and float(said[2]) <= 1e-5, done.stdout
def test_a_loss_that_cannot_take_the_labels_is_refused_before_the_run_exists(tmp_path,
                                                                             capsys):
    """A builder's own loss the app cannot classify (so its labels are not converted) that
    wants one-hot labels: it failed at the first step, after the folder and the row
    existed, blaming the model's code (finding 13's kind). Now the loss on one batch
    fails in setup, named."""
    code, events, err = train(tmp_path, capsys, """
        import keras

        def strict_loss(y_true, y_pred):
            return keras.losses.categorical_crossentropy(y_true, y_pred)

        def build_model(input_shape, num_classes):
            model = keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                                      keras.layers.Dense(num_classes, activation="softmax")])
            model.compile(optimizer="adam", loss=strict_loss)
            return model
    """, "--export", "keras")
    assert code == 2, err
    message = events[-1]["message"]
    assert message.startswith("Rehearsal before epoch 1 failed at the loss and metrics on "
                              "one batch of "), message
    assert "check the labels against the model's loss" in message
    assert "for 3 outputs: a loss the app does not know may want them one-hot" in message
    assert "np.eye(3)[y]" in message and ".." not in message
    assert not [e for e in events if e["type"] == "run_started"]
    assert_left_nothing(tmp_path)


def test_a_saved_files_custom_loss_that_cannot_take_the_labels_is_refused(tmp_path, capsys):
    """Finding 13 as filed: a `.keras` compiled with a one-hot loss (its own, registered,
    brought by --custom-objects), given integer labels, failed at the first step after
    the folder and row existed. Saved files get the rehearsal's loss check as builders do."""
    import keras

    code = textwrap.dedent("""
        import keras

        @keras.saving.register_keras_serializable(package="lab")
        def onehot_loss(y_true, y_pred):
            return keras.ops.mean(keras.ops.sum(-y_true * keras.ops.log(y_pred + 1e-7), -1))

        custom_objects = {"lab>onehot_loss": onehot_loss}
    """)
    (tmp_path / "custom_objects.py").write_text(code)
    namespace: dict = {}
    exec(code, namespace)  # registers the loss in this process, as the file does in the run
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", namespace["onehot_loss"])
    model.save(tmp_path / "saved.keras")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "ints.npz", x_train=rng.normal(size=(32, 8)).astype(np.float32),
             y_train=rng.integers(0, 3, 32))
    code_ = cli.main(["train", "--model", str(tmp_path / "saved.keras"), "--custom-objects",
                      str(tmp_path / "custom_objects.py"), "--data", str(tmp_path / "ints.npz"),
                      "--epochs", "1", "--batch-per-replica", "8", "--cpu", "--replicas", "1",
                      "--export", "none", "-o", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code_ == 2, err
    assert "Rehearsal before epoch 1 failed at the loss and metrics" in err
    assert "may want them one-hot" in err
    assert_left_nothing(tmp_path)
