"""The Run panel: live global batch, instant checks on the right field, settings, drops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, QRect, QSettings, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QComboBox,
    QLineEdit,
    QWidget,
)

from mgpu_gui.core.config import (
    DeviceKind,
    DeviceSelection,
    EarlyStoppingConfig,
    LRScalingConfig,
    RunConfig,
)
from mgpu_gui.core.datasets.inspection import inspect_data
from mgpu_gui.core.devices.nvml import GpuInfo
from mgpu_gui.core.errors import DataError, ModelError
from mgpu_gui.core.modelfiles.inspection import inspect_model_file
from mgpu_gui.gui.panels.run_setup import RunSetupPanel
from mgpu_gui.gui.widgets.form_scroll import FormScrollArea
from tests.helpers.file_reads import count_reads


def keras_file(path: Path, units: int, input_shape=(8, 8, 1), *, lambda_layer=False) -> Path:
    """A .keras archive holding only the architecture: all the instant checks read."""
    code = [{"class_name": "Lambda", "config": {"name": "double"}}] if lambda_layer else []
    config = {"class_name": "Sequential", "config": {"name": "tiny", "layers": [
        {"class_name": "InputLayer", "config": {"name": "in", "batch_shape": [None,
                                                                              *input_shape]}},
        *code,
        {"class_name": "Flatten", "config": {"name": "flat"}},
        {"class_name": "Dense", "config": {"name": "out", "units": units,
                                           "activation": "softmax"}},
    ]}}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
    return path


def core_message(call) -> str:
    with pytest.raises((ModelError, DataError)) as info:
        call()
    return str(info.value)


def test_global_batch_follows_replicas_and_batch(panel):
    panel.batch_spin.setValue(64)
    panel.set_replicas(2)
    assert "× 2 replicas = 128 global" in panel.batch_text.text()
    panel.batch_spin.setValue(100)
    assert "= 200 global" in panel.batch_text.text()
    panel.set_replicas(1)
    assert "× 1 replica = 100 global" in panel.batch_text.text()
    panel.check_now()
    assert "dropped per epoch" in panel.batch_hint.text()


def test_checks_are_debounced_and_flag_the_field(panel, qtbot, tmp_path):
    missing = tmp_path / "nope.keras"
    with qtbot.waitSignal(panel.validity_changed, timeout=2000) as signal:
        panel.model_edit.setText(str(missing))
    assert signal.args == [False]
    message = core_message(lambda: inspect_model_file(missing))
    assert panel.problems()["model"] == message
    assert panel.model_combo.property("invalid") is True
    assert message in panel.problems_label.text()
    assert panel.problems_label.isVisibleTo(panel)
    assert message in panel.model_combo.toolTip()
    assert message in panel.summary_label.toolTip()
    with qtbot.waitSignal(panel.validity_changed, timeout=2000) as signal:
        panel.model_edit.setText("demo")
    assert signal.args == [True]
    assert panel.model_combo.property("invalid") is False
    assert not panel.problems_label.isVisibleTo(panel)
    assert "Ready" in panel.summary_label.text()


@pytest.mark.parametrize("name", ["model.txt", "model.onnx"])
def test_wrong_suffix_flags_model(panel, tmp_path, name):
    path = tmp_path / name
    path.write_text("hello")
    panel.model_edit.setText(str(path))
    panel.check_now()
    assert "is not a model file" in panel.problems()["model"]
    assert not panel.is_valid()


def test_text_file_named_keras_flags_model_with_core_message(panel, tmp_path):
    path = tmp_path / "notes.keras"
    path.write_text("not a zip")
    panel.model_edit.setText(str(path))
    panel.check_now()
    assert panel.problems() == {"model": core_message(lambda: inspect_model_file(path))}


def test_npz_with_mismatched_x_y_flags_data(panel, tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, x_train=np.zeros((10, 4), np.float32), y_train=np.zeros(9, np.int64))
    panel.set_data_path(path)
    panel.check_now()
    assert panel.data_kind.currentData() == "npz"
    assert panel.problems() == {"data": core_message(lambda: inspect_data(path))}
    assert panel.data_edit.property("invalid") is True


def test_labels_out_of_range_for_keras_model_flag_data(panel, tmp_path):
    model = keras_file(tmp_path / "three.keras", units=3)  # the demo digits have 10 classes
    panel.set_model_path(model)
    panel.check_now()
    problems = panel.problems()
    assert list(problems) == ["data"]
    assert "labels go up to 9" in problems["data"]
    assert "3 unit(s)" in problems["data"]


def test_input_shape_mismatch_flags_model(panel, tmp_path):
    panel.set_model_path(keras_file(tmp_path / "big.keras", units=10, input_shape=(32, 32, 3)))
    panel.check_now()
    assert "expects inputs of shape (32, 32, 3)" in panel.problems()["model"]


def test_code_consent_shows_only_for_a_file_whose_lambda_layers_would_run(panel, tmp_path):
    """Issue 30, item 9: the box showed for the demo, where it decides nothing."""
    def consent_shown(model: str | Path) -> bool:
        panel.set_model_path(model)
        panel.check_now()
        return panel.allow_code.isVisibleTo(panel)

    plain = keras_file(tmp_path / "plain.keras", units=10)
    code = keras_file(tmp_path / "code.keras", units=10, lambda_layer=True)
    assert not consent_shown("demo")
    assert consent_shown(code)
    assert "Lambda layer (double)" in panel.problems()["model"]
    panel.allow_code.setChecked(True)
    panel.check_now()
    assert panel.is_valid() and panel.allow_code.isVisibleTo(panel)
    assert not consent_shown(plain)
    assert not consent_shown("small_convnet")  # a built-in: its weights instead
    assert panel.weights_box.isVisibleTo(panel)
    assert not consent_shown("demo") and not panel.weights_box.isVisibleTo(panel)


def test_batch_larger_than_data_flags_batch(panel):
    panel.set_replicas(4)
    panel.batch_spin.setValue(1000)
    panel.check_now()
    assert list(panel.problems()) == ["batch_per_replica"]
    assert "fewer than one global batch (4000" in panel.problems()["batch_per_replica"]


def test_bad_learning_rate_and_image_folder_widgets(panel, tmp_path):
    panel.lr_edit.setText("fast")
    panel.check_now()
    assert "not a number" in panel.problems()["learning_rate"]
    assert panel.lr_edit.property("invalid") is True
    folder = tmp_path / "images"
    (folder / "cat").mkdir(parents=True)
    panel.set_data_path(folder)
    assert panel.data_kind.currentData() == "images"
    assert panel.size_row.isVisibleTo(panel)
    panel.check_now()
    assert "no images" in panel.problems()["data"]


def test_valid_demo_config_round_trips(panel, qtbot, tmp_path):
    wanted = RunConfig(
        model="demo", data="demo", validation_split=0.2, allow_unsafe_code=True,
        devices=DeviceSelection(DeviceKind.GPU, ("0", "1")), batch_per_replica=32, epochs=7,
        optimizer="sgd", learning_rate=3e-4, image_size=(48, 40), sync_batchnorm=True,
        output_dir=str(tmp_path / "runs"),
        early_stopping=EarlyStoppingConfig(enabled=True, patience=2),
    )
    panel.set_config(wanted)
    panel.check_now()
    assert panel.is_valid(), panel.problems()
    assert panel.build_config(wanted.devices) == wanted
    assert panel.width_spin.value() == 40 and panel.height_spin.value() == 48


def test_settings_the_form_has_no_field_for_come_back_whole(panel):
    """A past run's settings shown in the form (Use these settings, a loaded file): its
    export formats, metrics, custom objects, seed and TensorBoard were dropped to the
    defaults by the next Train; now only what the form shows is taken from the form."""
    past = RunConfig(export_formats=("h5", "savedmodel"), metrics=("mae",), seed=7,
                     custom_objects="/lab/objects.py", tensorboard=True, epochs=3)
    panel.set_config(past)
    panel.epochs_spin.setValue(5)
    assert panel.build_config() == past.replace(epochs=5)


def test_speed_options_round_trip_and_their_hints_follow_live(panel):
    wanted = RunConfig(precision="mixed_bfloat16", jit_compile=True, learning_rate=1e-3,
                       lr_scaling=LRScalingConfig(enabled=True, warmup_epochs=3))
    panel.set_config(wanted)
    assert panel.build_config() == wanted
    volta = GpuInfo(index=0, name="Tesla V100", uuid="GPU-0", pci_bus_id=None,
                    memory_total=None, compute_capability=(7, 0))
    panel.set_replicas(2, gpus=[volta, volta])
    assert panel.lr_hint.text() == "base LR 0.001 → scaled 0.002 (× 2 replicas), warm-up 3 epochs"
    panel.lr_edit.setText("0.01")  # no check needed: the hint follows each keystroke
    assert panel.lr_hint.text().startswith("base LR 0.01 → scaled 0.02 (× 2 replicas)")
    assert "needs compute capability 8.0 (Ampere)" in panel.precision_hint.text()
    assert "color" in panel.precision_hint.styleSheet()  # shown as a warning
    panel.precision_combo.setCurrentIndex(panel.precision_combo.findData("mixed_float16"))
    assert "supports mixed_float16" not in panel.precision_hint.text()
    assert "support mixed_float16 (float16 tensor cores)" in panel.precision_hint.text()
    assert panel.precision_hint.styleSheet() == ""
    panel.scale_lr.setChecked(False)
    assert panel.lr_hint.text() == "not scaled: trains at 0.01 on any number of replicas"
    assert not panel.warmup_spin.isEnabled()
    panel.set_replicas(1, gpus=[])  # CPU replicas: the hint reads the CPU
    assert "CPU" in panel.precision_hint.text()
    panel.epochs_spin.setValue(3)
    panel.scale_lr.setChecked(True)
    panel.check_now()
    assert "leaves no epoch" in panel.problems()["lr_scaling.warmup_epochs"]
    assert panel.warmup_spin.property("invalid") is True


def test_settings_and_recent_files_persist(qtbot, tmp_path):
    model = keras_file(tmp_path / "ten.keras", units=10)
    first = RunSetupPanel()
    qtbot.addWidget(first)
    first.set_model_path(model)
    first.epochs_spin.setValue(33)
    first.save_settings()
    first.shutdown()
    assert QSettings().value("run_setup/recent_models") in ([str(model)], str(model))

    second = RunSetupPanel()
    qtbot.addWidget(second)
    assert second.recent_models() == [str(model)]
    second.restore_settings()
    assert second.model_edit.text() == str(model)
    assert second.epochs_spin.value() == 33
    assert second.is_valid(), second.problems()
    second.shutdown()


def test_dropping_a_file_sets_the_model(panel, tmp_path):
    model = keras_file(tmp_path / "dropped.keras", units=10)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(model))])
    event = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime,
                       Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    panel.dropEvent(event)
    assert event.isAccepted()
    assert panel.model_edit.text() == str(model)
    assert panel.recent_models()[0] == str(model)
    panel.check_now()
    assert panel.is_valid(), panel.problems()


def test_set_enabled_for_run_locks_the_inputs(panel):
    panel.set_enabled_for_run(False)
    assert not panel.batch_spin.isEnabled() and not panel.model_combo.isEnabled()
    panel.set_enabled_for_run(True)
    assert panel.batch_spin.isEnabled()


def test_every_interactive_widget_has_a_name_and_tooltip(panel):
    kinds = (QAbstractButton, QAbstractSpinBox, QComboBox)
    widgets = [w for w in panel.findChildren(QWidget) if isinstance(w, kinds)]
    widgets += [w for w in panel.findChildren(QLineEdit) if w is not panel.model_edit
                and not isinstance(w.parent(), QAbstractSpinBox)]
    assert len(widgets) > 15
    for widget in widgets:
        assert widget.accessibleName(), widget
        assert widget.toolTip(), widget.accessibleName()


PY_BUILDER = """
import keras

print("user code may print to stdout")

def build_model(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(num_classes, activation="softmax")])
"""


@pytest.mark.slow
def test_py_model_is_probed_in_background(panel, qtbot, tmp_path):
    builder = tmp_path / "tiny.py"
    builder.write_text(PY_BUILDER)
    # summary_ready("") withdraws the summary of the model picked before.
    with qtbot.waitSignal(panel.summary_ready, timeout=60_000, check_params_cb=bool) as signal:
        panel.set_model_path(builder)
        qtbot.waitUntil(lambda: "Building model" in panel.model_status.text(), timeout=2000)
    assert "Total params" in signal.args[0] or "params" in signal.args[0].lower()
    assert "build_model(): 650 params" in panel.model_status.text()  # 64 * 10 + 10
    assert panel.is_valid()


@pytest.mark.slow
def test_py_model_that_raises_flags_model(panel, qtbot, tmp_path):
    builder = tmp_path / "broken.py"
    builder.write_text("def build_model(input_shape, num_classes):\n"
                       "    raise ValueError('no such layer: Densse')\n")
    panel.set_model_path(builder)
    qtbot.waitUntil(lambda: "model" in panel.problems(), timeout=60_000)
    message = panel.problems()["model"]
    assert "build_model() failed at line 2" in message
    assert "no such layer: Densse" in message
    assert not panel.is_valid()
    assert panel.model_combo.property("invalid") is True


def test_newer_probe_request_kills_the_older(panel, qtbot, tmp_path):
    builder = tmp_path / "slow.py"
    builder.write_text("import time\ntime.sleep(60)\ndef build_model():\n    pass\n")
    panel.set_model_path(builder)
    panel.check_now()
    first = panel._build.probe._thread
    assert first is not None
    panel.model_edit.setText("demo")
    panel.check_now()
    assert panel._build.probe._thread is None
    qtbot.waitUntil(lambda: not panel._build.probe._retired, timeout=10_000)
    assert panel.model_status.text() == ""


@pytest.mark.slow
def test_panel_never_imports_tensorflow(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from PySide6.QtWidgets import QApplication
        from PySide6.QtCore import QCoreApplication, QSettings
        QSettings.setDefaultFormat(QSettings.Format.IniFormat)
        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, {str(tmp_path)!r})
        QCoreApplication.setOrganizationName("t"); QCoreApplication.setApplicationName("t")
        from mgpu_gui.gui.panels.run_setup import RunSetupPanel
        app = QApplication([])
        panel = RunSetupPanel()
        panel.set_replicas(2)
        panel.set_model_path({str(keras_file(tmp_path / "m.keras", units=10))!r})
        panel.check_now()
        panel.model_edit.setText("missing.h5")
        panel.check_now()
        print(panel.is_valid(), ",".join(m for m in ("tensorflow", "keras") if m in sys.modules))
        panel.shutdown()
    """)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False"]


def test_batch_and_replica_changes_do_not_read_the_files_again(panel, tmp_path, monkeypatch):
    folder = tmp_path / "images"
    for label in ("cat", "dog"):
        (folder / label).mkdir(parents=True)
        for n in range(20):
            (folder / label / f"{n}.png").write_bytes(b"")
    calls = count_reads(monkeypatch)
    panel.set_model_path(keras_file(tmp_path / "m.keras", units=2, input_shape=(8, 8, 3)))
    panel.set_data_path(folder)
    panel.width_spin.setValue(8)
    panel.height_spin.setValue(8)
    panel.check_now()
    assert calls == {"data": 1, "model": 1}, panel.problems()
    for batch in range(1, 21):
        panel.batch_spin.setValue(batch)
        panel.check_now()
    panel.set_replicas(4)
    panel.check_now()
    assert calls == {"data": 1, "model": 1}
    assert "(80 = 20 per replica x 4 replicas)" in panel.problems()["batch_per_replica"]
    assert "= 80 global" in panel.batch_text.text()
    panel.set_replicas(1)
    panel.check_now()
    assert panel.is_valid(), panel.problems()
    assert "36 training samples: 1 step per epoch, 16 samples dropped" in panel.batch_hint.text()
    panel.height_spin.setValue(16)  # the image size decides the folder's input shape
    panel.check_now()
    assert calls == {"data": 2, "model": 1}


# -- issue 30, finding 9 -------------------------------------------------------------------
def test_a_blank_field_is_outlined_only_once_the_user_typed_in_it(panel):
    """9f: choosing 'Image folder' outlined its empty path red before anything was typed."""
    panel.data_kind.setCurrentIndex(panel.data_kind.findData("images"))
    panel.check_now()
    assert "choose the image folder" in panel.problems()["data"] and not panel.is_valid()
    assert not panel.data_edit.property("invalid")
    assert not panel.problems_label.isVisibleTo(panel)  # the red list: nothing wrong yet
    line = panel.summary_label.text()
    assert "choose the image folder" in line and "⚠" not in line  # the next step, not red
    panel.data_edit.setText("x")
    panel.data_edit.clear()  # typed, then erased: now it is missing
    panel.check_now()
    assert panel.data_edit.property("invalid") is True
    assert "⚠" in panel.summary_label.text() and panel.problems_label.isVisibleTo(panel)


@pytest.fixture
def scroll(panel, qtbot):
    """The panel in the window's scroll area, in a laptop's room for it."""
    area = FormScrollArea(panel)
    area.resize(420, 320)
    area.show()
    qtbot.waitExposed(area)
    yield area
    area.takeWidget()  # the panel goes back to its own fixture, which shuts it down
    area.deleteLater()


def test_the_line_beside_train_says_the_problem_and_goes_to_its_field(panel, scroll, qtbot,
                                                                      tmp_path):
    """9g: "1 problem to fix: Model (see below)" pointed at a list off screen at 720p."""
    panel.sections["optimization"].set_open(False)
    panel.lr_edit.setText("fast")
    panel.check_now()
    line = panel.summary_label
    assert "see below" not in line.text()
    assert "⚠" in line.text() and "fast is not a number" in line.text()
    line.linkActivated.emit("learning_rate")  # a click on its name
    assert panel.sections["optimization"].is_open()
    assert panel.focusWidget() is panel.lr_edit
    viewport = scroll.viewport()
    qtbot.waitUntil(lambda: viewport.rect().contains(
        QRect(panel.lr_edit.mapTo(viewport, QPoint(0, 0)), panel.lr_edit.size())))
    # A long message is cut to the two lines kept beside Train: the rows below stay put.
    panel.set_model_path(tmp_path / ("a-long-folder-name-" * 8) / "model.keras")
    panel.check_now()
    assert list(panel.problems())[0] == "model" and "…" in line.text()
    two_lines = 2 * line.fontMetrics().lineSpacing()
    assert line.heightForWidth(line.width()) <= two_lines < line.height() + 1
    assert panel.problems()["model"] in line.toolTip()
