"""unwrap: legacy multi-GPU wrappers found without TensorFlow, recovered without running code.

The legacy files are written during the session by Keras 2 itself (tf_keras),
with multi_gpu_model's structure rebuilt by hand (tests/legacy_models.py); the
Keras 3 ones with the `to_multi_gpu` recipe. The reference is always the
template as trained inside its wrapper.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import NamedTuple

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
from mgpu_gui.core.events import LogMessage, RunStarted  # noqa: E402
from mgpu_gui.core.modelfiles.inspection import inspect_model_file  # noqa: E402
from mgpu_gui.core.runs.folder import RunDir  # noqa: E402
from mgpu_gui.engine import models  # noqa: E402
from mgpu_gui.engine.unwrap import recover_model  # noqa: E402
from mgpu_gui.engine.unwrap_weights import SkippedState  # noqa: E402
from tests import legacy_models as lm  # noqa: E402

pytestmark = pytest.mark.slow  # legacy files rebuilt with Keras in this process

TOL = 1e-5


class Built(NamedTuple):
    path: Path
    reference: np.ndarray  # the template's predictions on lm.X when the file was saved
    weights: list[np.ndarray] | None = None  # the template's own weights then


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Built]:
    folder = tmp_path_factory.mktemp("legacy")
    out: dict[str, Built] = {}

    def keep(name: str, wrapper, template, epochs: int = 2) -> None:
        path = lm.train_and_save(wrapper, folder / f"{name}.h5", epochs)
        out[name] = (Built(path, wrapper.predict(lm.X, verbose=0)) if template is None
                     else Built(path, template.predict(lm.X, verbose=0), template.get_weights()))

    f2 = lm.functional_template("template")
    keep("functional2", lm.multi_gpu_model(f2, 2), f2)
    out["keras22"] = out["functional2"]._replace(
        path=lm.as_keras22(out["functional2"].path, folder / "keras22.h5"))
    s3 = lm.sequential_template("seq_template", softmax=False)
    # Standard layers after the Concatenate: the wrapper's output is the reference.
    keep("sequential3", lm.multi_gpu_model(
        s3, 3, after=[tf_keras.layers.Dense(3, name="extra"),
                      tf_keras.layers.Softmax(name="soft")]), None)
    out["keras21"] = out["sequential3"]._replace(
        path=lm.as_keras21_sequential(out["sequential3"].path, folder / "keras21.h5"))
    inner = lm.functional_template("inner_template")
    keep("double", lm.multi_gpu_model(lm.multi_gpu_model(inner, 2), 3), inner)
    f3 = lm.functional_template("lambda_after")
    keep("lambda_after", lm.multi_gpu_model(
        f3, 3, after=[tf_keras.layers.Lambda(lambda t: t * 2.0, name="double_it")]), f3)
    p2 = lm.sequential_template("par_template")
    keep("make_parallel", lm.make_parallel(p2, 2), p2)

    for name, train_first in (("keras3", False), ("keras3_trained", True)):
        w3, t3 = lm.to_multi_gpu_recipe(2, train_first=train_first)
        built = Built(folder / f"{name}.keras", t3.predict(lm.X, verbose=0), t3.get_weights())
        w3.save(built.path)
        out[name] = built
        out[f"{name}_h5"] = built._replace(path=folder / f"{name}.h5")
        with warnings.catch_warnings():  # Keras 3 warns that .h5 is legacy: that is the point
            warnings.filterwarnings("ignore", message=".*HDF5 file.*legacy", category=UserWarning)
            w3.save(out[f"{name}_h5"].path)
    t3b = lm.keras3_template()
    w3b = lm.to_multi_gpu_keras3(t3b, 3, after=[keras.layers.Dense(4, name="extra"),
                                                keras.layers.Activation("softmax", name="act")])
    w3b.compile("adam", "sparse_categorical_crossentropy")
    w3b.fit(lm.X, lm.Y, batch_size=12, epochs=2, verbose=0)
    w3b.save(folder / "keras3_after.keras")
    out["keras3_after"] = Built(folder / "keras3_after.keras", w3b.predict(lm.X, verbose=0))
    return out


EXPECTED = {  # towers, template, class, layers, depth, after
    "functional2": ((2,), "template", "Functional", 4, 1, ()),
    "keras22": ((2,), "template", "Functional", 4, 1, ()),
    "sequential3": ((3,), "seq_template", "Sequential", 4, 1,
                    (("extra", "Dense"), ("soft", "Softmax"))),
    "keras21": ((3,), "seq_template", "Sequential", 4, 1,
                (("extra", "Dense"), ("soft", "Softmax"))),
    "double": ((3, 2), "inner_template", "Functional", 4, 2, ()),
    "make_parallel": ((2,), "par_template", "Sequential", 4, 1, ()),
    "keras3": ((2,), "template3", "Functional", 4, 1, ()),
    "keras3_h5": ((2,), "template3", "Functional", 4, 1, ()),
    "keras3_trained": ((2,), "template3", "Functional", 4, 1, ()),
    "keras3_trained_h5": ((2,), "template3", "Functional", 4, 1, ()),
    "keras3_after": ((3,), "template3", "Functional", 4, 1,
                     (("extra", "Dense"), ("act", "Activation"))),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_inspection_reports_the_wrapper(files, name):
    info = inspect_model_file(files[name].path)
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
    path, reference, weights = files[name]
    lines: list[str] = []
    recovered = recover_model(path, log=lines.append)
    model = recovered.model
    assert not any(isinstance(layer, keras.layers.Lambda) for layer in model.layers)
    assert model.name == EXPECTED[name][1]
    if not isinstance(model, keras.Sequential):  # one input, not a list of one (Keras
        assert not isinstance(model.input, list | tuple)  # 2's), which SavedModel wanted
    if weights is not None:  # the template's own arrays, bit for bit
        got_weights = model.get_weights()
        assert len(got_weights) == len(weights)
        assert all(np.array_equal(a, b) for a, b in zip(got_weights, weights, strict=True))
    got = model.predict(lm.X, verbose=0)
    assert np.max(np.abs(got - reference)) <= TOL
    assert model.compiled and "optimizer state" in "\n".join(lines)
    saved = tmp_path / "plain.keras"
    model.save(saved)
    again = keras.saving.load_model(saved)  # safe_mode on: nothing to run
    assert np.max(np.abs(again.predict(lm.X, verbose=0) - reference)) <= TOL


def test_doubly_wrapped_gives_the_same_template_as_once_wrapped(files, tmp_path):
    path = files["double"].path
    double = recover_model(path).model
    with h5py.File(path) as h5:
        template = json.loads(h5.attrs["model_config"])["config"]["layers"][4]
    assert template["class_name"] == "Functional"  # the inner wrapper, itself a wrapper
    assert [type(layer).__name__ for layer in double.layers] == [
        "InputLayer", "Dense", "BatchNormalization", "Dropout", "Dense"]


def test_keras3_wrapper_loaded_unsafely_agrees(files):
    # Tests only: the wrapper itself, evaluated with safe_mode off, as a second reference.
    path = files["keras3"].path
    wrapper = keras.saving.load_model(path, safe_mode=False, compile=False,
                                      custom_objects={"_slice_batch3": lm._slice_batch3})
    recovered = recover_model(path).model
    assert np.max(np.abs(wrapper.predict(lm.X[:12], verbose=0)
                         - recovered.predict(lm.X[:12], verbose=0))) <= TOL


def test_lambda_after_the_concatenate_is_reported_by_name(files):
    path, reference, _ = files["lambda_after"]
    info = inspect_model_file(path)
    assert info.wrapper.code_layers == ("double_it",)
    recovered = recover_model(path)
    assert recovered.skipped == ("double_it",)
    assert "double_it" in recovered.summary()
    got = recovered.model.predict(lm.X, verbose=0)
    assert np.max(np.abs(got - reference)) <= TOL  # the template, without the Lambda


def test_optimizer_state_of_a_template_trained_before_wrapping_is_skipped_and_said(files):
    # Adam's step count and learning rate, and two slots per trainable weight (6).
    lines: list[str] = []
    recovered = recover_model(files["keras3_trained"].path, log=lines.append)
    assert recovered.skipped_state == (
        SkippedState("layers/functional/optimizer", "'template3'", 14),)
    assert recovered.weights_set == 8
    assert any(line.startswith("skipped (stored in the file, but no layer's weights): "
                               "optimizer variables of 'template3', 14 arrays") for line in lines)
    # Untrained before wrapping, or as .h5 (whose template group holds weights only): nothing.
    for name in ("keras3", "keras3_trained_h5"):
        assert recover_model(files[name].path).skipped_state == ()


def test_plain_files_have_no_wrapper(files, tmp_path):
    model = lm.functional_template("plain")
    path = tmp_path / "plain.h5"
    lm.train_and_save(model, path, epochs=1)
    assert inspect_model_file(path).wrapper is None
    with pytest.raises(ModelError, match="not a multi-GPU wrapper"):
        recover_model(path)


@pytest.mark.parametrize("name", ["sequential3", "keras3_trained", "make_parallel"])
def test_training_uses_the_recovered_template(files, name):
    lines: list[str] = []
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    model = models.load_model(RunConfig(model=str(files[name].path)), strategy,
                              input_shape=(6,), num_classes=3, log=lines.append)
    assert model.name == EXPECTED[name][1]
    assert not any("lambda" in layer.name for layer in model.layers)
    text = "\n".join(lines)
    towers = EXPECTED[name][0][0]
    assert f"multi-GPU wrapper ({towers} towers)" in text
    assert f"recovered '{EXPECTED[name][1]}'" in text and "compiled" in text
    assert ("optimizer variables of 'template3'" in text) == (name == "keras3_trained")
    if name == "sequential3":  # a compiled legacy .h5: compiled as saved, said once
        assert "compiled as saved" in text and "not compiled" not in text
    model.fit(lm.X, lm.Y, batch_size=12, epochs=1, verbose=0)


# -- bad input ------------------------------------------------------------------
def _copy(files, name: str, tmp_path: Path) -> Path:
    dst = tmp_path / f"{name}.h5"
    shutil.copyfile(files[name].path, dst)
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


def _edited_keras(files, tmp_path: Path, edit) -> Path:
    """A copy of the trained-before-wrapping .keras whose weights file `edit(h5)` changed."""
    src = files["keras3_trained"].path
    with zipfile.ZipFile(src) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    weights = io.BytesIO(entries["model.weights.h5"])
    with h5py.File(weights, "r+") as h5:
        edit(h5)
    entries["model.weights.h5"] = weights.getvalue()
    dst = tmp_path / "edited.keras"
    with zipfile.ZipFile(dst, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return dst


def test_keras_arrays_of_no_layer_are_refused_not_skipped(files, tmp_path):
    # An array under a layer the config does not have is not state to skip: the file is wrong.
    def add_layer(h5):
        h5["layers/functional/layers/dense_9/vars/0"] = np.zeros(3, "float32")

    path = _edited_keras(files, tmp_path, add_layer)
    with pytest.raises(ModelError, match=r"edited\.keras: arrays stored under "
                       r"'layers/functional' belong to no layer .*\(1, first "
                       r"'layers/functional/layers/dense_9/vars/0'\).*save the model again"):
        recover_model(path)


def test_keras_missing_layer_weights_are_named(files, tmp_path):
    def drop_bias(h5):
        del h5["layers/functional/layers/dense/vars/1"]

    path = _edited_keras(files, tmp_path, drop_bias)
    with pytest.raises(ModelError, match=r"edited\.keras: the weights under 'layers/functional' "
                       r"do not fit 'template3' \(.*'hidden'.*save the model again"):
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
                         - files["functional2"].reference)) <= TOL


# -- CLI ------------------------------------------------------------------------
def test_cli_inspect_and_unwrap(files, tmp_path, capsys):
    assert cli.main(["inspect", str(files["double"].path)]) == 0
    out = capsys.readouterr().out
    assert "3 x 2 towers" in out and "inner_template" in out
    # The user's file: to_multi_gpu around a model trained first, saved as .keras.
    source = files["keras3_trained"].path
    assert cli.main(["inspect", str(source)]) == 0
    assert f"mgpu-train unwrap {source}" in capsys.readouterr().out
    target = tmp_path / "plain.keras"
    assert cli.main(["unwrap", str(source), "-o", str(target)]) == 0
    out = capsys.readouterr().out
    assert "reloaded in a fresh process" in out and "optimizer state" in out
    assert ("skipped (stored in the file, but no layer's weights): optimizer variables of "
            "'template3', 14 arrays at 'layers/functional/optimizer'") in out
    model = keras.saving.load_model(target)
    assert all(np.array_equal(a, b) for a, b in zip(
        model.get_weights(), files["keras3_trained"].weights, strict=True))
    assert np.max(np.abs(model.predict(lm.X, verbose=0)
                         - files["keras3_trained"].reference)) <= TOL


def test_cli_unwrap_of_a_plain_file_converts_it(files, tmp_path, capsys):
    assert cli.main(["unwrap", str(tmp_path / "plain.keras"), "-o",
                     str(tmp_path / "x.h5")]) == cli.EXIT_USAGE  # no such file
    capsys.readouterr()
    plain = tmp_path / "plain.keras"
    keras.saving.save_model(recover_model(files["functional2"].path).model, plain)
    assert cli.main(["unwrap", str(plain), "-o", str(tmp_path / "x.h5")]) == 0
    out = capsys.readouterr().out
    assert "already a plain model" in out and (tmp_path / "x.h5").is_file()


def test_inspection_runs_without_tensorflow(files):
    import subprocess
    import sys

    code = ("import sys; from mgpu_gui.core.modelfiles.inspection import inspect_model_file; "
            f"info = inspect_model_file({str(files['double'].path)!r}); "
            "assert info.wrapper.depth == 2; "
            "assert not {'tensorflow', 'keras', 'tf_keras'} & set(sys.modules), 'TF imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.slow
def test_mgpu_train_trains_a_wrapped_file_on_two_replicas(files, tmp_path):
    """The wrapper's slicing Lambdas are no reason to ask for consent: they never run; the
    optimizer state of the model trained before wrapping is skipped, and the run says so."""
    data = tmp_path / "six.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x_train=rng.normal(size=(96, 6)).astype("float32"),
             y_train=rng.integers(0, 3, size=96))
    code = cli.main(["train", "--model", str(files["keras3_trained"].path), "--data",
                     str(data), "--cpu", "--replicas", "2", "--batch-per-replica", "8",
                     "--epochs", "1", "-o", str(tmp_path / "runs"), "--quiet"])
    assert code == 0
    (run,) = (tmp_path / "runs").iterdir()
    events = RunDir(run).events()
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.model_name == "template3" and started.num_replicas == 2
    assert any(isinstance(e, LogMessage) and "optimizer variables of 'template3', 14 arrays"
               in e.message for e in events)
