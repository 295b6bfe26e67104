"""What the run setup shows about the picked model is about the model picked now.

Issue 14, defects 2 and 3: the facts read or built from a model (parameter
count, build error, summary, sample counts) go the moment the path changes; a
model file compiled with its own optimizer says so, disables the form's
optimizer and learning rate, and "Override" (`--override-compile`) really
overrides. The files are written by hand (JSON in a zip, attributes in an HDF5
file) as Keras 3 and tf_keras write them: no TensorFlow in this module, and
the probe child is replaced by a canned answer where only its answer matters.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from mgpu_gui.cli import common
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.events import ModelProbed, ModelProbeFailed
from mgpu_gui.core.eventtext import started_lines
from mgpu_gui.core.modelfiles.compile_facts import CompileFacts, CompileSource, compile_facts
from mgpu_gui.gui.jobs import build_check
from mgpu_gui.gui.panels.log import LogPanel
from tests.test_store import started

LAYERS = [
    {"class_name": "InputLayer", "config": {"name": "in", "batch_shape": [None, 8, 8, 1]}},
    {"class_name": "Flatten", "config": {"name": "flat"}},
    {"class_name": "Dense", "config": {"name": "out", "units": 10, "activation": "softmax"}},
]
# As Keras 3.15 writes it for compile(RMSprop(0.002), "categorical_crossentropy", ["accuracy"]).
KERAS_COMPILE = {
    "optimizer": {"module": "keras.optimizers", "class_name": "RMSprop", "registered_name": None,
                  "config": {"name": "rm_sprop", "learning_rate": 0.0020000000949949026,
                             "rho": 0.9}},
    "loss": "categorical_crossentropy", "loss_weights": None, "metrics": ["accuracy"],
    "weighted_metrics": None, "run_eagerly": False, "steps_per_execution": 1,
    "jit_compile": False,
}
# As tf_keras 2.21 writes the same compile into a legacy .h5.
H5_TRAINING = {
    "loss": "categorical_crossentropy", "weighted_metrics": None, "loss_weights": None,
    "metrics": [[{"class_name": "MeanMetricWrapper", "config": {
        "name": "accuracy", "dtype": "float32", "fn": "categorical_accuracy"}}]],
    "optimizer_config": {"class_name": "Custom>RMSprop", "config": {
        "name": "RMSprop", "learning_rate": 0.0020000000949949026, "rho": 0.9}},
}


def keras_file(path: Path, compile_config: dict[str, Any] | None = None) -> Path:
    config: dict[str, Any] = {"class_name": "Sequential",
                              "config": {"name": "tiny", "layers": LAYERS}}
    if compile_config is not None:
        config["compile_config"] = compile_config
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
    return path


def legacy_h5(path: Path, training: dict[str, Any] | None = H5_TRAINING) -> Path:
    """A Keras 2.2.4 Sequential as its .h5 root attributes describe it."""
    layers = [{"class_name": "Flatten", "config": {"name": "flat",
                                                  "batch_input_shape": [None, 8, 8, 1]}},
              LAYERS[2]]
    with h5py.File(path, "w") as h5:
        h5.attrs["model_config"] = json.dumps(
            {"class_name": "Sequential", "config": {"name": "legacy", "layers": layers}})
        h5.attrs["keras_version"] = "2.2.4"
        if training is not None:
            h5.attrs["training_config"] = json.dumps(training)
        h5.create_group("model_weights")
    return path


class CannedProbe:
    """Stands in for `ModelProbeJob`: answers at once, as a probe child would."""

    answer: ModelProbed | ModelProbeFailed

    def __init__(self, config: RunConfig) -> None:
        self.config = config

    def run(self) -> ModelProbed | ModelProbeFailed:
        return self.answer

    def cancel(self) -> None:
        """Nothing runs to be killed."""


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.setattr(build_check, "ModelProbeJob", CannedProbe)
    return CannedProbe


@pytest.fixture
def log(qtbot, panel):
    """The Model summary tab, wired as the main window wires it."""
    widget = LogPanel()
    qtbot.addWidget(widget)
    panel.summary_ready.connect(widget.set_summary)
    return widget


def built(qtbot, panel, probe, params: int) -> None:
    """"Show summary" answered with a model of `params` parameters."""
    probe.answer = ModelProbed(summary=f"Total params: {params:,}", params=params,
                               input_shape=[8, 8, 1], output_units=10)
    panel.show_summary()
    qtbot.waitUntil(lambda: f"{params:,} parameters" in panel.model_status.text(), timeout=5000)


# -- defect 2: the old model's facts go at once ---------------------------------------
def test_a_legacy_h5_after_a_counted_model_shows_none_of_its_facts(qtbot, panel, log, probe,
                                                                    tmp_path):
    panel.set_model_path(keras_file(tmp_path / "big.keras"))
    built(qtbot, panel, probe, 388_170)
    assert "388,170" in log.summary.toPlainText()
    panel.set_model_path(legacy_h5(tmp_path / "old.h5"))
    # At once, before the checks' pause: nothing about big.keras is left.
    assert panel.model_status.text() == ""
    assert log.summary.toPlainText() == ""
    assert panel.model_info is None
    panel.check_now()
    assert panel.model_info is not None and panel.model_info.format == "h5"
    assert panel.model_status.text() == ""
    assert panel.is_valid(), panel.problems()


def test_a_truncated_file_after_a_counted_model_shows_only_its_own_problem(
        qtbot, panel, log, probe, tmp_path):
    panel.set_model_path(keras_file(tmp_path / "small.keras"))
    built(qtbot, panel, probe, 21_514)
    whole = keras_file(tmp_path / "whole.keras").read_bytes()
    cut = tmp_path / "cut.keras"
    cut.write_bytes(whole[: len(whole) // 2])
    panel.set_model_path(cut)
    assert "21,514" not in panel.model_status.text()
    assert log.summary.toPlainText() == ""
    panel.check_now()
    assert "truncated or damaged" in panel.problems()["model"]
    assert panel.model_status.text() == ""


def test_back_to_demo_drops_the_build_error_at_once(qtbot, panel, probe, tmp_path):
    probe.answer = ModelProbeFailed("build_model() failed at line 2: boom", "ModelError")
    builder = tmp_path / "broken.py"
    builder.write_text("def build_model(input_shape, num_classes):\n    raise ValueError\n")
    panel.set_model_path(builder)
    qtbot.waitUntil(lambda: "model" in panel.problems(), timeout=5000)
    assert "could not be built" in panel.model_status.text()
    assert panel._fields["model"].widgets[0].property("invalid")  # outlined
    panel.model_edit.setText("demo")
    assert panel.model_status.text() == ""
    assert "model" not in panel.problems()
    assert not panel._fields["model"].widgets[0].property("invalid")
    assert "could not be built" not in panel.summary_label.text()


def test_new_data_drop_the_old_sample_counts_at_once(qtbot, panel, tmp_path):
    for name, samples in (("a.npz", 300), ("b.npz", 40)):
        np.savez(tmp_path / name, x_train=np.zeros((samples, 8, 8, 1), "float32"),
                 y_train=np.arange(samples) % 10)
    panel.set_data_path(tmp_path / "a.npz")
    panel.check_now()
    assert "270 training samples" in panel.batch_hint.text()  # 300 less 10 % validation
    # Ready once the data's content was read in its child.
    qtbot.waitUntil(lambda: "300 samples" in panel.summary_label.text(), timeout=10_000)
    panel.set_data_path(tmp_path / "b.npz")
    assert "training samples" not in panel.batch_hint.text()
    assert "300" not in panel.summary_label.text()
    panel.check_now()
    assert "36 training samples" in panel.batch_hint.text()


def test_a_probe_of_the_old_path_is_dropped(qtbot, panel, log, probe, tmp_path):
    """A summary that arrives for a model no longer picked is never shown."""
    panel.set_model_path(keras_file(tmp_path / "a.keras"))
    probe.answer = ModelProbed(summary="Total params: 5", params=5, input_shape=[8, 8, 1],
                               output_units=10)
    panel.show_summary()
    panel.model_edit.setText("demo")  # before the queued answer is delivered
    qtbot.waitUntil(lambda: not panel._build.probe._retired, timeout=5000)
    assert panel.model_status.text() == "" and log.summary.toPlainText() == ""


# -- defect 3: a compiled file's own optimizer ------------------------------------------
@pytest.mark.parametrize("make", [
    lambda folder: keras_file(folder / "rms.keras", KERAS_COMPILE),
    lambda folder: legacy_h5(folder / "rms.h5"),
], ids=["keras", "legacy-h5"])
def test_a_compiled_file_shows_its_optimizer_and_disables_the_forms(panel, tmp_path, make):
    panel.set_model_path(make(tmp_path))
    panel.check_now()
    row = panel.compile_source
    assert not row.isHidden()  # in the Optimization section (closed: its header says so)
    assert row.label.text() == "From the file: RMSprop, lr 0.002, categorical_crossentropy"
    assert "accuracy" in row.label.toolTip()
    assert not panel.optimizer_combo.isEnabled() and not panel.lr_edit.isEnabled()
    assert not panel.build_config().override_compile
    # The Optimization section starts closed: its header says so too.
    assert panel.sections["optimization"].note.text() == "RMSprop from the model file"

    row.override.setChecked(True)
    assert panel.sections["optimization"].note.text() == "overriding the file's RMSprop"
    assert panel.optimizer_combo.isEnabled() and panel.lr_edit.isEnabled()
    panel.optimizer_combo.setCurrentText("sgd")
    panel.lr_edit.setText("0.01")
    config = panel.build_config()
    assert (config.override_compile, config.optimizer, config.learning_rate) == (
        True, "sgd", 0.01)
    panel.set_config(config)  # the choice survives a round trip through the settings
    assert row.override.isChecked()

    panel.model_edit.setText("demo")
    assert row.isHidden() and not panel.sections["optimization"].note.text()
    assert panel.optimizer_combo.isEnabled() and panel.lr_edit.isEnabled()
    # The override was about that file: the next compiled file starts with its own optimizer.
    assert not row.override.isChecked() and not panel.build_config().override_compile


def test_an_uncompiled_file_leaves_the_form_in_charge(panel, tmp_path):
    panel.set_model_path(legacy_h5(tmp_path / "plain.h5", training=None))
    panel.check_now()
    assert panel.compile_source.isHidden()
    assert panel.optimizer_combo.isEnabled() and panel.lr_edit.isEnabled()


def test_compile_facts_from_older_and_odder_files():
    keras22 = compile_facts({"class_name": "Adam", "config": {"lr": 0.01}}, "mse", ["acc"])
    assert keras22 == CompileFacts("Adam", 0.01, "mse", ("acc",))
    schedule = compile_facts({"class_name": "SGD", "config": {"learning_rate": {
        "class_name": "ExponentialDecay", "config": {}}}}, None, {"out": ["accuracy"]})
    assert schedule.describe() == "SGD, lr schedule" and schedule.metrics == ("accuracy",)
    assert compile_facts("rmsprop", "mse", None).describe() == "rmsprop, mse"  # default lr
    assert compile_facts(None, "mse", None) is None


def test_override_compile_in_the_config_and_on_the_command_line():
    assert RunConfig().override_compile is False
    config = RunConfig(override_compile=True)
    assert RunConfig.from_json(config.to_json()) == config
    old = RunConfig().to_dict()
    del old["override_compile"]  # settings saved before the field existed still load
    assert RunConfig.from_dict(old) == RunConfig()
    parser = argparse.ArgumentParser()
    common.add_train_arguments(parser)
    assert common.config_from_args(parser.parse_args(["--override-compile"])).override_compile
    assert not common.config_from_args(parser.parse_args([])).override_compile


def test_the_run_log_names_the_optimizer_used_and_where_it_came_from():
    def line(**fields: Any) -> str:
        return started_lines(dataclasses.replace(started(), **fields))[-1]

    assert line(optimizer="RMSprop", learning_rate=0.001, optimizer_source="file",
                file_optimizer="RMSprop") == "Optimizer: RMSprop, lr 0.001 (from the model file)"
    assert line(optimizer="Adam", learning_rate=0.01, optimizer_source=CompileSource.OVERRIDE,
                file_optimizer="RMSprop") == (
        "Optimizer: Adam, lr 0.01 (overriding the file's RMSprop)")
    assert line(optimizer="Adam", learning_rate=0.001, optimizer_source="run") == (
        "Optimizer: Adam, lr 0.001")
    assert not line().startswith("Optimizer")  # a record from before: no such line
