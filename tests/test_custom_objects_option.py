"""A model file saved outside this app's runs, with classes of its own: predict and evaluate
take `--custom-objects FILE`, and without it refuse before any engine starts, naming the
classes (issue 29: such a file failed in the evaluator with Keras' "Could not locate
class"). A run's models find their classes themselves (tests/test_custom_code_models.py)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from mgpu_gui.cli import main as cli
from mgpu_gui.cli.common import EXIT_USAGE
from mgpu_gui.core.modelfiles.inspection import inspect_model_file

# As Keras 3 writes a layer of the user's (module None) and a registered activation.
OWN_LAYER = {"module": None, "class_name": "Scale", "registered_name": "Scale",
             "config": {"name": "scale"}}
OWN_ACTIVATION = {"module": "builtins", "class_name": "function", "registered_name": "function",
                  "config": "lab>act"}


def keras_file(path: Path, *layers: dict) -> Path:
    built_in = [
        {"module": "keras.layers", "class_name": "InputLayer", "registered_name": None,
         "config": {"name": "in", "batch_shape": [None, 8, 8, 3]}},
        {"module": "keras.layers", "class_name": "Flatten", "registered_name": None,
         "config": {"name": "flat"}},
        {"module": "keras.layers", "class_name": "Dense", "registered_name": None,
         "config": {"name": "out", "units": 2, "activation": "softmax"}},
    ]
    config = {"module": "keras", "class_name": "Sequential", "registered_name": None,
              "config": {"name": "tiny", "layers": [*built_in[:2], *layers, built_in[2]]}}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.13.0"}))
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.weights.h5", b"\0" * 4096)
    return path


def test_the_inspection_names_a_files_own_objects_and_none_of_keras(tmp_path):
    own = keras_file(tmp_path / "own.keras", OWN_LAYER,
                     {**OWN_LAYER, "class_name": "Dense", "module": "keras.layers",
                      "registered_name": None, "config": {"activation": OWN_ACTIVATION}})
    assert inspect_model_file(own).custom_objects == ("Scale", "lab>act")
    assert inspect_model_file(keras_file(tmp_path / "plain.keras")).custom_objects == ()


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_without_custom_objects_the_file_is_refused_before_any_engine(command, tmp_path,
                                                                      capsys):
    model = keras_file(tmp_path / "own.keras", OWN_LAYER)
    image = tmp_path / "cat.png"
    Image.new("RGB", (8, 8)).save(image)
    tail = [str(image)] if command == "predict" else ["--data", "demo"]
    assert cli.main([command, str(model), *tail]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "own.keras uses objects of its own (Scale)" in err, err
    assert "give --custom-objects FILE" in err and "Traceback" not in err
    assert cli.main([command, str(model), *tail, "--custom-objects",
                     str(tmp_path / "missing.py")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "missing.py is not a .py file" in err, err
