"""inspect_model_file: instant, TensorFlow-free reading of model files.

The files are made by hand (zip + JSON, h5py attributes) in the shapes Keras 3
and Keras 2 write, so these tests need no Keras; real Keras files are read in
test_models.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from mgpu_gui.core.errors import ModelError
from mgpu_gui.core.modelfiles.builder import py_builder
from mgpu_gui.core.modelfiles.inspection import inspect_model_file


def _layer(cls: str, name: str, **cfg) -> dict:
    return {"module": "keras.layers", "class_name": cls, "config": {"name": name, **cfg},
            "name": name}


def _history(name: str) -> list:
    return [{"args": [{"class_name": "__keras_tensor__",
                       "config": {"keras_history": [name, 0, 0]}}], "kwargs": {}}]


def _functional_config() -> dict:
    """Keras 3 Functional: input (8, 8, 3) -> nested Sequential with a Lambda -> softmax(5)."""
    inner = {"module": "keras", "class_name": "Sequential", "config": {"name": "block", "layers": [
        _layer("InputLayer", "block_in", batch_shape=[None, 8, 8, 3]),
        _layer("Lambda", "scale", function={"class_name": "__lambda__"}),
        _layer("Flatten", "flat"),
    ]}}
    inner["name"] = "block"
    inner["inbound_nodes"] = _history("img")
    dense = _layer("Dense", "logits", units=5, activation="linear")
    dense["inbound_nodes"] = _history("block")
    act = _layer("Activation", "probs", activation="softmax")
    act["inbound_nodes"] = _history("logits")
    return {"module": "keras.src.models.functional", "class_name": "Functional", "config": {
        "name": "classifier",
        "layers": [_layer("InputLayer", "img", batch_shape=[None, 8, 8, 3]), inner, dense, act],
        "input_layers": [["img", 0, 0]], "output_layers": [["probs", 0, 0]],
    }, "compile_config": {"loss": "categorical_crossentropy", "optimizer": "adam"}}


def _write_keras(path: Path, config: dict, version: str = "3.15.1") -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", json.dumps({"keras_version": version}))
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.weights.h5", b"\0" * 4096)
    return path


def _write_h5(path: Path, config: dict | None, training: dict | None = None) -> Path:
    with h5py.File(path, "w") as h5:
        h5.attrs["keras_version"] = "2.21.0"
        h5.attrs["backend"] = "tensorflow"
        if config is not None:
            h5.attrs["model_config"] = json.dumps(config)
            h5.create_group("model_weights")
        else:  # what save_weights writes
            h5.attrs["layer_names"] = np.array([b"dense"])
        if training is not None:
            h5.attrs["training_config"] = json.dumps(training)
    return path


def _legacy_sequential() -> dict:
    return {"class_name": "Sequential", "config": {"name": "legacy", "layers": [
        {"class_name": "InputLayer", "config": {"batch_input_shape": [None, 4], "name": "in"}},
        {"class_name": "Dense", "config": {"name": "d", "units": 1, "activation": "sigmoid"}},
    ]}}


def test_keras_functional_with_nested_lambda(tmp_path):
    info = inspect_model_file(_write_keras(tmp_path / "m.keras", _functional_config()))
    assert info.format == "keras"
    assert (info.class_name, info.name) == ("Functional", "classifier")
    assert info.input_shape == (8, 8, 3)
    assert (info.output_units, info.output_activation) == (5, "softmax")
    assert info.compiled and info.loss == "categorical_crossentropy"
    assert info.has_lambda and info.lambda_layers == ("scale",)
    assert info.keras_version == "3.15.1"


def test_uncompiled_keras_file(tmp_path):
    config = _functional_config()
    config["compile_config"] = {}  # what Keras 3 writes for an uncompiled model
    info = inspect_model_file(_write_keras(tmp_path / "m.keras", config))
    assert not info.compiled and info.loss is None


def test_legacy_h5_with_training_config(tmp_path):
    training = {"loss": "binary_crossentropy", "optimizer_config": {"class_name": "Adam"}}
    path = _write_h5(tmp_path / "old.h5", _legacy_sequential(), training)
    info = inspect_model_file(path)
    assert (info.format, info.class_name, info.name) == ("h5", "Sequential", "legacy")
    assert info.input_shape == (4,)
    assert (info.output_units, info.output_activation) == (1, "sigmoid")
    assert info.compiled and info.loss == "binary_crossentropy"
    assert not info.has_lambda and info.keras_version == "2.21.0"


def test_py_file_is_parsed_not_run(tmp_path):
    path = tmp_path / "net.py"
    path.write_text("raise SystemExit('must not run')\n\ndef build_model(input_shape):\n    ...\n")
    info = inspect_model_file(path)
    assert (info.format, info.name, info.compiled) == ("py", "net", False)


def test_bad_py_file(tmp_path):
    path = tmp_path / "net.py"
    path.write_text("import keras\n\ndef build_model(:\n    pass\n")
    with pytest.raises(ModelError, match=r"net\.py, line 3: syntax error"):
        inspect_model_file(path)


@pytest.mark.parametrize(("text", "requested", "expected"), [
    ("def create_model():\n    pass\n", None, "create_model"),
    ("def make_model():\n    pass\ndef get_model():\n    pass\n", None, "get_model"),
    ("from nets import build_model\ndef create_model():\n    pass\n", None, "build_model"),
    ("def create_model():\n    pass\ndef net(n=1):\n    pass\n", "net", "net"),
])
def test_py_builder_names(tmp_path, text, requested, expected):
    """The classic notebooks' create_model(), get_model() or make_model() build the model
    when build_model() is missing (in that order), or the function --builder names."""
    path = tmp_path / "net.py"
    path.write_text(text)
    assert py_builder(inspect_model_file(path), requested) == expected


@pytest.mark.parametrize(("text", "requested", "expected"), [
    ("import keras\ndef make():\n    pass\nclass Net:\n    pass\ndef net():\n    pass\n",
     None, "net.py defines none of build_model(), create_model(), get_model(), make_model() "
     "(its functions: make, net). Give the function that returns the model one of these "
     "names, or name it with --builder NAME."),
    ("def outer():\n    def build_model():\n        pass\n", None, "(its functions: outer)"),
    ("x = 1\n", None, "(it defines no top-level function)"),
    ("def create_model():\n    pass\n", "net",
     "net.py defines no top-level function net() (its functions: create_model); check the "
     "name given to --builder."),
])
def test_py_without_builder(tmp_path, text, requested, expected):
    path = tmp_path / "net.py"
    path.write_text(text)
    with pytest.raises(ModelError) as error:
        py_builder(inspect_model_file(path), requested)
    assert expected in str(error.value)


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(ModelError, match="not found.*use 'demo'"):
        inspect_model_file(tmp_path / "gone.keras")
    (tmp_path / "model.onnx").write_bytes(b"x")
    with pytest.raises(ModelError, match=r"not a model file: use a \.keras or \.h5"):
        inspect_model_file(tmp_path / "model.onnx")


def test_text_file_renamed_keras(tmp_path):
    path = tmp_path / "notes.keras"
    path.write_text("just some notes\n")
    with pytest.raises(ModelError, match="not a Keras model file.*zip"):
        inspect_model_file(path)


def test_zip_without_config_json(tmp_path):
    path = tmp_path / "w.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model.weights.h5", b"\0")
    with pytest.raises(ModelError, match="no config.json"):
        inspect_model_file(path)


def test_truncated_keras_and_h5(tmp_path):
    full = _write_keras(tmp_path / "full.keras", _functional_config()).read_bytes()
    (tmp_path / "cut.keras").write_bytes(full[: len(full) // 2])
    with pytest.raises(ModelError, match="truncated or damaged"):
        inspect_model_file(tmp_path / "cut.keras")
    full = _write_h5(tmp_path / "full.h5", _legacy_sequential()).read_bytes()
    (tmp_path / "cut.h5").write_bytes(full[: len(full) // 2])
    with pytest.raises(ModelError, match="truncated or damaged"):
        inspect_model_file(tmp_path / "cut.h5")


def test_weights_only_h5(tmp_path):
    with pytest.raises(ModelError, match="only weights.*save_weights"):
        inspect_model_file(_write_h5(tmp_path / "w.h5", None))


def test_swapped_suffixes(tmp_path):
    h5 = _write_h5(tmp_path / "a.h5", _legacy_sequential())
    with pytest.raises(ModelError, match="rename it to .h5"):
        inspect_model_file(h5.rename(tmp_path / "a.keras"))
    keras_file = _write_keras(tmp_path / "b.keras", _functional_config())
    with pytest.raises(ModelError, match="rename it to .keras"):
        inspect_model_file(keras_file.rename(tmp_path / "b.h5"))
    (tmp_path / "c.h5").write_text("plain text")
    with pytest.raises(ModelError, match="not an HDF5 model file"):
        inspect_model_file(tmp_path / "c.h5")


def test_no_tensorflow_or_keras_import():
    code = (
        "import sys, mgpu_gui.core.modelfiles.inspection\n"
        "bad = [m for m in ('tensorflow', 'keras', 'tf_keras') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
