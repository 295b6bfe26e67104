"""unwrap: legacy multi-GPU wrappers found without TensorFlow, recovered without running code.

The legacy files are written during the session by Keras 2 itself (tf_keras),
with multi_gpu_model's structure rebuilt by hand (tests/legacy_models.py); the
Keras 3 ones with the `to_multi_gpu` recipe. The reference is always the
template as trained inside its wrapper.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")
tf_keras = pytest.importorskip("tf_keras")

from mgpu_gui.cli import main as cli  # noqa: E402
from mgpu_gui.core.config import RunConfig  # noqa: E402
from mgpu_gui.core.errors import ModelError  # noqa: E402
from mgpu_gui.core.events import RunStarted  # noqa: E402
from mgpu_gui.core.modelfiles.inspection import inspect_model_file  # noqa: E402
from mgpu_gui.core.runs.folder import RunDir  # noqa: E402
from mgpu_gui.engine import models  # noqa: E402
from mgpu_gui.engine.unwrap import recover_model  # noqa: E402
from tests import legacy_models as lm  # noqa: E402

TOL = 1e-5


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, tuple[Path, np.ndarray]]:
    """name -> (file, the template's predictions on lm.X when the file was saved)."""
    folder = tmp_path_factory.mktemp("legacy")
    out: dict[str, tuple[Path, np.ndarray]] = {}

    def keep(name: str, wrapper, template, epochs: int = 2) -> None:
        path = lm.train_and_save(wrapper, folder / f"{name}.h5", epochs)
        out[name] = (path, wrapper.predict(lm.X, verbose=0) if template is None
                     else template.predict(lm.X, verbose=0))

    f2 = lm.functional_template("template")
    keep("functional2", lm.multi_gpu_model(f2, 2), f2)
    out["keras22"] = (lm.as_keras22(out["functional2"][0], folder / "keras22.h5"),
                      out["functional2"][1])
    s3 = lm.sequential_template("seq_template", softmax=False)
    # Standard layers after the Concatenate: the wrapper's output is the reference.
    keep("sequential3", lm.multi_gpu_model(
        s3, 3, after=[tf_keras.layers.Dense(3, name="extra"),
                      tf_keras.layers.Softmax(name="soft")]), None)
    out["keras21"] = (lm.as_keras21_sequential(out["sequential3"][0], folder / "keras21.h5"),
                      out["sequential3"][1])
    inner = lm.functional_template("inner_template")
    keep("double", lm.multi_gpu_model(lm.multi_gpu_model(inner, 2), 3), inner)
    f3 = lm.functional_template("lambda_after")
    keep("lambda_after", lm.multi_gpu_model(
        f3, 3, after=[tf_keras.layers.Lambda(lambda t: t * 2.0, name="double_it")]), f3)

    t3 = lm.keras3_template()
    w3 = lm.to_multi_gpu_keras3(t3, 2)
    w3.compile("adam", "sparse_categorical_crossentropy")
    w3.fit(lm.X, lm.Y, batch_size=12, epochs=2, verbose=0)
    reference = t3.predict(lm.X, verbose=0)
    w3.save(folder / "keras3.keras")
    with warnings.catch_warnings():  # Keras 3 warns that .h5 is legacy: that is the point
        warnings.filterwarnings("ignore", message=".*HDF5 file.*legacy", category=UserWarning)
        w3.save(folder / "keras3.h5")
    out["keras3"] = (folder / "keras3.keras", reference)
    out["keras3_h5"] = (folder / "keras3.h5", reference)
    t3b = lm.keras3_template()
    w3b = lm.to_multi_gpu_keras3(t3b, 3, after=[keras.layers.Dense(4, name="extra"),
                                                keras.layers.Activation("softmax", name="act")])
    w3b.compile("adam", "sparse_categorical_crossentropy")
    w3b.fit(lm.X, lm.Y, batch_size=12, epochs=2, verbose=0)
    w3b.save(folder / "keras3_after.keras")
    out["keras3_after"] = (folder / "keras3_after.keras", w3b.predict(lm.X, verbose=0))
    return out


EXPECTED = {  # towers, template, class, layers, depth, after
    "functional2": ((2,), "template", "Functional", 4, 1, ()),
    "keras22": ((2,), "template", "Functional", 4, 1, ()),
    "sequential3": ((3,), "seq_template", "Sequential", 4, 1,
                    (("extra", "Dense"), ("soft", "Softmax"))),
    "keras21": ((3,), "seq_template", "Sequential", 4, 1,
                (("extra", "Dense"), ("soft", "Softmax"))),
    "double": ((3, 2), "inner_template", "Functional", 4, 2, ()),
    "keras3": ((2,), "template3", "Functional", 4, 1, ()),
    "keras3_h5": ((2,), "template3", "Functional", 4, 1, ()),
    "keras3_after": ((3,), "template3", "Functional", 4, 1,
                     (("extra", "Dense"), ("act", "Activation"))),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_inspection_reports_the_wrapper(files, name):
    info = inspect_model_file(files[name][0])
    wrapper = info.wrapper
    assert wrapper is not None
    found = (wrapper.towers, wrapper.template_name, wrapper.template_class,
             wrapper.template_layers, wrapper.depth, wrapper.after_layers)
    assert found == EXPECTED[name]
    assert wrapper.code_layers == ()
    if name == "keras22":
        assert info.keras_version == "2.2.4"


@pytest.mark.parametrize("name", list(EXPECTED))
def test_unwrapped_model_predicts_like_the_template_and_reloads(files, name, tmp_path):
    path, reference = files[name]
    lines: list[str] = []
    recovered = recover_model(path, log=lines.append)
    model = recovered.model
    assert not any(isinstance(layer, keras.layers.Lambda) for layer in model.layers)
    assert model.name == EXPECTED[name][1]
    got = model.predict(lm.X, verbose=0)
    assert np.max(np.abs(got - reference)) <= TOL
    assert model.compiled and "optimizer state" in "\n".join(lines)
    saved = tmp_path / "plain.keras"
    model.save(saved)
    again = keras.saving.load_model(saved)  # safe_mode on: nothing to run
    assert np.max(np.abs(again.predict(lm.X, verbose=0) - reference)) <= TOL


def test_doubly_wrapped_gives_the_same_template_as_once_wrapped(files, tmp_path):
    path, _ = files["double"]
    double = recover_model(path).model
    with h5py.File(path) as h5:
        template = json.loads(h5.attrs["model_config"])["config"]["layers"][4]
    assert template["class_name"] == "Functional"  # the inner wrapper, itself a wrapper
    assert [type(layer).__name__ for layer in double.layers] == [
        "InputLayer", "Dense", "BatchNormalization", "Dropout", "Dense"]


def test_keras3_wrapper_loaded_unsafely_agrees(files):
    # Tests only: the wrapper itself, evaluated with safe_mode off, as a second reference.
    path, _ = files["keras3"]
    wrapper = keras.saving.load_model(path, safe_mode=False, compile=False,
                                      custom_objects={"_slice_batch3": lm._slice_batch3})
    recovered = recover_model(path).model
    assert np.max(np.abs(wrapper.predict(lm.X[:12], verbose=0)
                         - recovered.predict(lm.X[:12], verbose=0))) <= TOL


def test_lambda_after_the_concatenate_is_reported_by_name(files):
    path, reference = files["lambda_after"]
    info = inspect_model_file(path)
    assert info.wrapper.code_layers == ("double_it",)
    recovered = recover_model(path)
    assert recovered.skipped == ("double_it",)
    assert "double_it" in recovered.summary()
    got = recovered.model.predict(lm.X, verbose=0)
    assert np.max(np.abs(got - reference)) <= TOL  # the template, without the Lambda


def test_plain_files_have_no_wrapper(files, tmp_path):
    model = lm.functional_template("plain")
    path = tmp_path / "plain.h5"
    lm.train_and_save(model, path, epochs=1)
    assert inspect_model_file(path).wrapper is None
    with pytest.raises(ModelError, match="not a multi-GPU wrapper"):
        recover_model(path)


@pytest.mark.parametrize("name", ["sequential3", "keras3"])
def test_training_uses_the_recovered_template(files, name):
    lines: list[str] = []
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    model = models.load_model(RunConfig(model=str(files[name][0])), strategy,
                              input_shape=(6,), num_classes=3, log=lines.append)
    assert model.name == EXPECTED[name][1]
    assert not any("lambda" in layer.name for layer in model.layers)
    text = "\n".join(lines)
    towers = EXPECTED[name][0][0]
    assert f"multi-GPU wrapper ({towers} towers)" in text
    assert f"recovered '{EXPECTED[name][1]}'" in text and "compiled" in text
    if name == "sequential3":  # a compiled legacy .h5: compiled as saved, said once
        assert "compiled as saved" in text and "not compiled" not in text
    model.fit(lm.X, lm.Y, batch_size=12, epochs=1, verbose=0)


# -- bad input ------------------------------------------------------------------
def _copy(files, name: str, tmp_path: Path) -> Path:
    dst = tmp_path / f"{name}.h5"
    shutil.copyfile(files[name][0], dst)
    return dst


def test_missing_weights_are_named(files, tmp_path):
    path = _copy(files, "functional2", tmp_path)
    with h5py.File(path, "r+") as h5:
        del h5["model_weights/template/norm"]
    with pytest.raises(ModelError, match=r"model_weights/template/norm/gamma"):
        recover_model(path)
    with h5py.File(path, "r+") as h5:
        del h5["model_weights/template"]
    with pytest.raises(ModelError, match=r"weight group 'model_weights/template' is missing"):
        recover_model(path)


def test_truncated_file(files, tmp_path):
    path = _copy(files, "functional2", tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="truncated or damaged"):
        recover_model(path)


def test_h5_that_is_not_a_keras_model(tmp_path):
    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as h5:
        h5["x"] = np.arange(4)
    with pytest.raises(ModelError, match="no model architecture"):
        recover_model(path)


def test_unavailable_custom_layer_is_named(files, tmp_path):
    path = _copy(files, "functional2", tmp_path)
    with h5py.File(path, "r+") as h5:
        text = h5.attrs["model_config"]
        h5.attrs["model_config"] = text.replace('"class_name": "BatchNormalization"',
                                                '"class_name": "MyNorm"')
    with pytest.raises(ModelError, match=r"'MyNorm'.*custom_objects"):
        recover_model(path)
    # Provided through custom_objects, the class is used (here the standard one).
    recovered = recover_model(path, custom_objects={"MyNorm": keras.layers.BatchNormalization})
    assert np.max(np.abs(recovered.model.predict(lm.X, verbose=0)
                         - files["functional2"][1])) <= TOL


# -- CLI ------------------------------------------------------------------------
def test_cli_inspect_and_unwrap(files, tmp_path, capsys):
    assert cli.main(["inspect", str(files["double"][0])]) == 0
    out = capsys.readouterr().out
    assert "3 x 2 towers" in out and "inner_template" in out
    target = tmp_path / "plain.keras"
    assert cli.main(["unwrap", str(files["double"][0]), "-o", str(target)]) == 0
    out = capsys.readouterr().out
    assert "reloaded in a fresh process" in out and "optimizer state" in out
    model = keras.saving.load_model(target)
    assert np.max(np.abs(model.predict(lm.X, verbose=0) - files["double"][1])) <= TOL


def test_cli_unwrap_of_a_plain_file_converts_it(files, tmp_path, capsys):
    assert cli.main(["unwrap", str(tmp_path / "plain.keras"), "-o",
                     str(tmp_path / "x.h5")]) == cli.EXIT_USAGE  # no such file
    capsys.readouterr()
    plain = tmp_path / "plain.keras"
    keras.saving.save_model(recover_model(files["functional2"][0]).model, plain)
    assert cli.main(["unwrap", str(plain), "-o", str(tmp_path / "x.h5")]) == 0
    out = capsys.readouterr().out
    assert "already a plain model" in out and (tmp_path / "x.h5").is_file()


def test_inspection_runs_without_tensorflow(files):
    import subprocess
    import sys

    code = ("import sys; from mgpu_gui.core.modelfiles.inspection import inspect_model_file; "
            f"info = inspect_model_file({str(files['double'][0])!r}); "
            "assert info.wrapper.depth == 2; "
            "assert not {'tensorflow', 'keras', 'tf_keras'} & set(sys.modules), 'TF imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.slow
def test_mgpu_train_trains_a_wrapped_file_on_two_replicas(files, tmp_path):
    """The wrapper's slicing Lambdas are no reason to ask for consent: they never run."""
    data = tmp_path / "six.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x_train=rng.normal(size=(96, 6)).astype("float32"),
             y_train=rng.integers(0, 3, size=96))
    code = cli.main(["train", "--model", str(files["functional2"][0]), "--data", str(data),
                     "--cpu", "--replicas", "2", "--batch-per-replica", "8", "--epochs", "2",
                     "-o", str(tmp_path / "runs"), "--quiet"])
    assert code == 0
    (run,) = (tmp_path / "runs").iterdir()
    events = RunDir(run).events()
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.model_name == "template" and started.num_replicas == 2
