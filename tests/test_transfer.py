"""Transfer learning as one run (--freeze-epochs): the frozen stage, fine-tuning, resume.

The model is a tiny `.py` builder with a nested `backbone` (two convolutions and a
BatchNormalization layer) on 8x8 images, trained on 2 CPU replicas by one replica
host (helpers/replica_host.py); the weights are read back from the run's `.keras`
files with h5py, so this process needs no TensorFlow.
"""

from __future__ import annotations

import json
import shutil
import textwrap
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.children.supervisor import prepare_run
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.events import (
    EpochEnd,
    Phase,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
    StageStarted,
)
from mgpu_gui.core.eventtext import event_lines

NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, gpus=(), driver_version=None,
                      cuda_driver_version=None, message="No NVIDIA driver (test).")
STEPS = 4  # 64 training samples, global batch 16
BACKBONE = "layers/functional/layers/"  # the nested model's group in a .keras file
BUILDER = """
    from pathlib import Path

    import keras
    from keras import layers

    def build_model(input_shape, num_classes):
        init = keras.initializers.GlorotUniform
        inputs = keras.Input(input_shape)
        x = layers.Conv2D(4, 3, padding="same", kernel_initializer=init(1))(inputs)
        # Moving statistics unlike a fresh layer's, as a pretrained backbone's would be.
        x = layers.BatchNormalization(moving_mean_initializer="ones",
                                      moving_variance_initializer=keras.initializers.Constant(2.0))(x)
        x = layers.ReLU()(x)
        x = layers.Conv2D(4, 3, padding="same", kernel_initializer=init(2))(x)
        x = layers.GlobalAveragePooling2D()(x)
        backbone = keras.Model(inputs, x, name="{name}")
        images = keras.Input(input_shape)
        outputs = layers.Dense(num_classes, activation="softmax", kernel_initializer=init(3))(
            backbone(images, training=False))
        model = keras.Model(images, outputs)
        initial = Path(__file__).with_name("initial.keras")
        if not initial.exists():  # the weights as built, for the test to compare with
            model.save(initial)
        return model
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("transfer")
    rng = np.random.default_rng(0)

    def images(n):
        y = rng.integers(0, 3, size=n)
        x = rng.normal(0, 1, size=(n, 8, 8, 3)) + y[:, None, None, None]
        return x.astype("float32"), y.astype("int64")

    x_train, y_train = images(64)
    x_val, y_val = images(16)
    np.savez(root / "images.npz", x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    made = {"data": root / "images.npz"}
    for name, backbone in (("tiny", "backbone"), ("plain", "features")):
        folder = root / name
        folder.mkdir()
        made[name] = folder / "model.py"
        made[name].write_text(textwrap.dedent(BUILDER).replace("{name}", backbone))
    return made


def start(files, model: str, tmp_path: Path, **overrides) -> Path:
    config = RunConfig(
        model=str(files[model]), data=str(files["data"]), epochs=4, freeze_epochs=2,
        unfreeze="4", learning_rate=1e-2, batch_per_replica=8, output_dir=str(tmp_path),
        devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2), batch_event_interval_s=0.0,
        seed=7,
    ).replace(**overrides)
    return prepare_run(config, NO_GPU).run_dir.path


def only(events, cls):
    return [e for e in events if isinstance(e, cls)]


def weights(path: Path) -> dict[str, np.ndarray]:
    """Every array of a `.keras` file by its place in the file."""
    found: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as archive, archive.open("model.weights.h5") as raw, \
            h5py.File(raw, "r") as file:
        file.visititems(lambda name, item: found.__setitem__(name, item[()])
                        if isinstance(item, h5py.Dataset) else None)
    return found


@pytest.mark.slow
def test_frozen_then_fine_tuned_with_batchnorm_kept_and_resumed_in_stage_2(
        host, files, tmp_path):
    run = start(files, "tiny", tmp_path)
    snapshot = tmp_path / "after_stage_1.keras"

    # Stopped in the first fine-tune epoch: the backup holds the end of stage 1.
    code, events = host.run(run, stop_at=(2, 1))
    assert code == 0, only(events, RunFailed)
    stages = only(events, StageStarted)
    assert [(s.stage, s.first_epoch) for s in stages] == [(1, 0), (2, 2)]
    assert stages[1].trainable_params > stages[0].trainable_params
    assert (stages[0].learning_rate, stages[1].learning_rate) == pytest.approx((1e-2, 1e-3))
    assert "Stage 2 of 2 from epoch 3 of 4: fine-tuning the top 4 of 5 layers" in (
        event_lines(stages[1])[0])
    assert only(events, RunFinished)[0].epochs_done == 2
    shutil.copy(run / "checkpoints" / "last.keras", snapshot)

    # Resumed at the stage boundary, stopped again in stage 2 after one of its epochs.
    code, events = host.run(run, stop_at=(3, 1))
    assert code == 0, only(events, RunFailed)
    assert only(events, RunStarted)[0].initial_epoch == 2
    assert [(s.stage, s.first_epoch) for s in only(events, StageStarted)] == [(2, 2)]
    assert only(events, RunFinished)[0].epochs_done == 3

    # Resumed in stage 2: it goes on as stage 2, with its optimizer's state.
    code, events = host.run(run)
    assert code == 0, only(events, RunFailed)
    assert only(events, RunStarted)[0].initial_epoch == 3
    assert [s.stage for s in only(events, StageStarted)] == [2]
    epochs = only(events, EpochEnd)
    assert [e.epoch for e in epochs] == [3]
    assert epochs[0].learning_rate == pytest.approx(1e-3)
    finished = only(events, RunFinished)[0]
    assert (finished.status, finished.epochs_done) == (RunStatus.COMPLETED, 4)

    initial = weights(files["tiny"].with_name("initial.keras"))
    frozen, final = weights(snapshot), weights(run / "checkpoints" / "last.keras")
    backbone = [name for name in initial if name.startswith(BACKBONE)]
    assert len(backbone) == 8  # 2 convolutions' kernel and bias, BatchNorm's 4
    head = [name for name in initial if name.startswith("layers/dense/")]
    # Stage 1: the backbone as built, the head trained.
    assert all(np.array_equal(frozen[name], initial[name]) for name in backbone)
    assert not any(np.array_equal(frozen[name], initial[name]) for name in head)
    # Stage 2: the top layers' convolution trained; the one below the top 4 and BatchNorm
    # (its scale, offset and moving statistics) as they were.
    batchnorm = [n for n in backbone if "batch_normalization" in n]
    below = [n for n in backbone if "/conv2d/" in n]
    top = [n for n in backbone if "/conv2d_1/" in n]
    assert len(batchnorm) == 4 and len(below) == 2 and len(top) == 2
    assert all(np.array_equal(final[n], initial[n]) for n in batchnorm + below)
    assert not any(np.array_equal(final[n], frozen[n]) for n in top)
    # The stage-2 optimizer's state came back on resume: 2 epochs of its steps, not 1.
    assert int(final["optimizer/vars/0"]) == 2 * STEPS


@pytest.mark.slow
def test_a_model_without_a_backbone_fails_before_training(host, files, tmp_path):
    code, events = host.run(start(files, "plain", tmp_path))
    assert code != 0
    failed = only(events, RunFailed)[0]
    assert "has no backbone to freeze" in failed.message
    assert "name='backbone'" in failed.message
    # Refused while setting up, before the run starts: the supervisor leaves no folder or row.
    assert failed.phase is Phase.SETUP and not only(events, RunStarted)


def saved_model(path: Path, nested: str) -> Path:
    """A .keras file as Keras 3 writes its config, with one nested model named `nested`."""
    layer = {"class_name": "Dense", "config": {"name": "dense", "units": 3}}
    inner = {"class_name": "Functional", "config": {"name": nested, "layers": [layer]}}
    config = {"class_name": "Functional", "config": {"name": "outer", "layers": [inner]}}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.15.0"}))
    return path


def test_a_saved_model_without_a_backbone_is_refused_before_anything_starts(
        capsys, files, tmp_path):
    from mgpu_gui.core.modelfiles.inspection import inspect_model_file

    assert inspect_model_file(saved_model(tmp_path / "tuned.keras", "backbone")).nested_models == (
        "backbone",)
    plain = saved_model(tmp_path / "plain.keras", "features")
    out_dir = tmp_path / "runs"
    code = cli.main(["train", "--model", str(plain), "--data", str(files["data"]),
                     "--freeze-epochs", "1", "--epochs", "2", "-o", str(out_dir)])
    err = capsys.readouterr().err
    assert code != 0 and "plain.keras has no backbone to freeze" in err, err
    assert "Traceback" not in err and not out_dir.exists()


def test_cli_refuses_transfer_learning_without_a_backbone_before_anything_starts(
        capsys, tmp_path):
    out_dir = tmp_path / "runs"
    code = cli.main(["train", "--model", "demo", "--epochs", "3", "--freeze-epochs", "1",
                     "-o", str(out_dir)])
    err = capsys.readouterr().err
    assert code != 0
    assert "--freeze-epochs: demo has no pretrained backbone to freeze" in err
    assert not out_dir.exists()
    code = cli.main(["train", "--model", "mobilenet_v3_small", "--epochs", "3",
                     "--freeze-epochs", "3", "--unfreeze", "top", "-o", str(out_dir)])
    err = capsys.readouterr().err
    assert code != 0
    assert "--freeze-epochs: 3 frozen epoch(s) leave none of the 3 to fine-tune" in err
    assert "--unfreeze: give a number of layers (1 or more) or 'all', got 'top'" in err


def test_curves_mark_where_fine_tuning_began_live_and_for_a_past_run(qtbot):
    from mgpu_gui.core.series import XAxis
    from mgpu_gui.gui.panels.curves import CurvesPanel
    from tests.helpers.training_events import synthetic_run

    panel = CurvesPanel()
    qtbot.addWidget(panel)
    events = synthetic_run(epochs=6, steps=10, every=2)
    stage = StageStarted(stage=2, first_epoch=3, epochs=6, trainable_params=10,
                         learning_rate=1e-4, t=events[0].t)
    at = next(i for i, e in enumerate(events) if isinstance(e, EpochEnd) and e.epoch == 2) + 1
    for event in [*events[:at], stage, *events[at:]]:
        panel.handle_event(event)
    lines = [panel._plots[f].stage_line for f in panel.families()] + [panel._lr_stage]
    assert all(line.isVisible() and line.value() == 3.0 for line in lines)
    assert lines[0].label.toPlainText() == "fine-tuning from epoch 4"
    panel.set_x_axis(XAxis.STEP)
    assert panel._plots["loss"].stage_line.value() == 30.0  # 3 epochs of 10 steps
    panel.set_x_axis(XAxis.WALL)
    end_of_frozen = panel.series("val_loss")[0][2]
    assert panel._plots["loss"].stage_line.value() == pytest.approx(end_of_frozen)

    panel.load_events(events)  # a past run: its stored events hold no StageStarted
    assert not panel._plots["loss"].stage_line.isVisible()
    panel.mark_fine_tuning(3)
    assert panel._plots["loss"].stage_line.isVisible()
    assert panel.fine_tune_x() == pytest.approx(end_of_frozen)
    panel.shutdown()


def test_run_setup_offers_freezing_for_a_model_with_a_backbone_only(panel):
    panel.model_edit.setText("demo")
    assert not panel.freeze_spin.isEnabled()
    panel.freeze_spin.setValue(2)
    assert panel.build_config().freeze_epochs == 0  # kept for the next model with one
    panel.model_edit.setText("mobilenet_v3_small")
    panel.pretrained_combo.setCurrentText("imagenet")
    assert panel.freeze_spin.isEnabled() and panel.unfreeze_combo.isEnabled()
    panel.unfreeze_combo.setCurrentText("20")
    panel.fine_tune_lr_edit.setText("1e-5")
    config = panel.build_config()
    assert (config.freeze_epochs, config.unfreeze, config.fine_tune_lr) == (2, "20", 1e-5)
    assert panel.sections["schedule"].note.text() == "2 frozen, then fine-tune"
    panel.pretrained_combo.setCurrentText("none")  # nothing pretrained to keep frozen
    assert not panel.freeze_spin.isEnabled() and not panel.fine_tune_lr_edit.isEnabled()
    panel.pretrained_combo.setCurrentText("imagenet")
    panel.epochs_spin.setValue(2)
    panel.fine_tune_lr_edit.setText("fast")
    panel.check_now()
    problems = panel.problems()
    assert "leave none of the 2 to fine-tune" in problems["freeze_epochs"]
    assert problems["fine_tune_lr"].startswith("fast is not a number")
    assert panel.freeze_spin.property("invalid") is True
    assert panel.fine_tune_lr_edit.property("invalid") is True
    panel.set_config(config)
    assert (panel.freeze_spin.value(), panel.unfreeze_combo.currentText(),
            panel.fine_tune_lr_edit.text()) == (2, "20", "1e-05")


@pytest.mark.slow
def test_the_model_probe_finds_a_builders_missing_backbone(files):
    """The run setup's build check: a .py builder shows its backbone only when built."""
    from mgpu_gui.core.events import ModelProbed, ModelProbeFailed
    from mgpu_gui.processes.model_probe import probe

    config = RunConfig(model=str(files["plain"]), data=str(files["data"]), epochs=4,
                       freeze_epochs=2)
    refused = probe(config)
    assert isinstance(refused, ModelProbeFailed), refused
    assert refused.error_type == "ModelError" and "model.py has no backbone" in refused.message
    assert isinstance(probe(config.replace(model=str(files["tiny"]))), ModelProbed)
    assert isinstance(probe(config.replace(freeze_epochs=0)), ModelProbed)
