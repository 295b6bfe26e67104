"""Built-in architectures (`--model NAME`), their pretrained weights, and the offline path.

The settings, the refusals before a run and the GUI's choices need no TensorFlow.
The offline test builds each backbone in-process with Keras' download made to
fail (never a network). The slow tests build every architecture for a 3-class
64x64 image folder and train one step on 2 CPU replicas in one helper process,
and run `mgpu-train train --model mobilenet_v3_small ...` as the issue writes it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import urllib.error
from pathlib import Path

import numpy as np
import pytest

from mgpu_gui.cli import common
from mgpu_gui.cli import main as cli
from mgpu_gui.core.children.supervisor import RunOutcome
from mgpu_gui.core.config import DEFAULT_RESCALE, RunConfig, is_model_file
from mgpu_gui.core.datasets.inspection import inspect_data
from mgpu_gui.core.errors import DataError, WeightsUnavailable
from mgpu_gui.core.events import EpochEnd, Phase, RunFailed, RunStarted, RunStatus
from mgpu_gui.core.modelfiles.builtins import ARCHITECTURES, keras_cache_dir
from mgpu_gui.core.modelfiles.card import ARRAYS, IMAGES, InputRecord, card_path, read_card
from mgpu_gui.core.runs import preflight
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.processes.training_worker import failure_event

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["small_convnet", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_v2_b0",
         "resnet50_v2", "convnext_tiny"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """3 classes of 48 RGB images of varied sizes: 130 training samples fill the default
    global batch of 2 replicas (128)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for c in range(3):
        (root / f"class{c}").mkdir()
        for i in range(48):
            pixels = rng.integers(0, 256, (40 + i % 30, 50, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"class{c}" / f"{i}.png")
    return root


# -- settings (no TensorFlow) ---------------------------------------------------
def test_builtins_are_settings_the_config_checks_and_keeps():
    assert list(ARCHITECTURES) == NAMES
    config = RunConfig(model="mobilenet_v3_small", pretrained="none")
    assert config.problems() == [] and not is_model_file(config.model)
    assert RunConfig.from_json(config.to_json()) == config
    # The model normalises raw pixels itself: the pipeline (and the export's card) use 1.
    assert config.input_rescale == 1.0 and RunConfig().input_rescale == DEFAULT_RESCALE
    problems = dict(RunConfig(model="small_convnet", pretrained="imagenet", rescale=0.5)
                    .problems())
    assert "small_convnet has no ImageNet weights; use 'none'" in problems["pretrained"]
    assert "leave the rescale at its default" in problems["rescale"]
    assert "only a built-in architecture" in dict(RunConfig(pretrained="none").problems())[
        "pretrained"]
    assert "weights file not found" in dict(RunConfig(
        model="resnet50_v2", pretrained="/no/such.h5").problems())["pretrained"]
    assert "not found" in dict(RunConfig(model="no_such_net").problems())["model"]


def test_a_card_with_no_rescale_says_so_and_not_times_1():
    """Issue 30, item 9: "Try a sample" said a built-in's inputs were "times 1"."""
    assert InputRecord(IMAGES, (224, 224), 3, 1.0).describe() == (
        "images decoded to 3 channels, resized to 224x224, pixels left at 0-255")
    assert InputRecord(ARRAYS, rescale=1.0).describe() == (
        "arrays as float32 (uint8 pixels left at 0-255)")
    assert InputRecord(IMAGES, (16, 16), 3, DEFAULT_RESCALE).describe().endswith(
        ", times 0.00392157")


def test_inputs_a_builtin_cannot_take_are_refused_before_the_run(capsys, folder, tmp_path):
    out = tmp_path / "runs"
    code = cli.main(["train", "--model", "mobilenet_v3_small", "--pretrained", "none",
                     "-o", str(out)])
    err = capsys.readouterr().err
    assert code == common.EXIT_USAGE and "takes RGB images" in err and "8x8x1" in err, err
    code = cli.main(["train", "--model", "small_convnet", "--data", str(folder),
                     "--image-size", "16x40", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == common.EXIT_USAGE and "at least 32x32" in err and "16x40" in err, err
    assert not out.exists()
    gray = tmp_path / "gray.npz"
    np.savez(gray, x_train=np.zeros((8, 40, 40), np.uint8), y_train=np.arange(8) % 2)
    with pytest.raises(DataError, match="takes RGB images .* 40x40x1"):
        preflight.check_builtin_fits(RunConfig(model="convnext_tiny"), inspect_data(gray))


def test_models_command_lists_the_builtins(capsys):
    assert cli.main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["name", "family"]
    assert [line.split()[0] for line in lines[1:7]] == NAMES
    assert "23.6 M" in lines[5] and "224x224" in lines[5] and " no " in lines[1]
    assert cli.main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["imagenet"] for r in rows} == {n: n != "small_convnet" for n in NAMES}


# -- no pretrained weights reachable ----------------------------------------------
@pytest.mark.slow  # Keras Applications, in this process
def test_offline_imagenet_weights_fail_saying_where_to_put_them(monkeypatch, tmp_path):
    """Keras' download fails as it does without a network; the message names the file Keras
    wanted, its URL and the exact cache folder, and training from scratch."""
    import keras.src.backend.config as keras_config
    from keras.src.utils import file_utils

    from mgpu_gui.engine.builtins import build_builtin

    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    monkeypatch.setattr(keras_config, "_KERAS_DIR", str(tmp_path / "keras"))
    tried: list[tuple[str, Path]] = []

    def offline(url, target, *args, **kwargs):
        tried.append((url, Path(target)))
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(file_utils, "urlretrieve", offline)
    for arch in (a for a in ARCHITECTURES.values() if a.has_imagenet):
        with pytest.raises(WeightsUnavailable) as caught:
            build_builtin(arch, None, (32, 32, 3), 3, lambda message: None)
        url, target = tried[-1]
        assert (url, target) == (arch.weights_url, keras_cache_dir() / str(arch.weights_file))
        message = str(caught.value)
        folder_url = url.rsplit("/", 1)[0] + "/"
        for words in (arch.name, "Name or service not known", arch.weights_file, folder_url,
                      f"put it in {target.parent}/", "train from scratch"):
            assert words in message, (words, message)
    failed = failure_event(caught.value, started=False)
    assert (failed.phase, failed.error_type, failed.resumable) == (
        Phase.SETUP, "WeightsUnavailable", False)  # setup: the supervisor leaves no folder


def test_cli_offers_the_same_command_without_pretrained_weights(capsys):
    argv = ["train", "--model", "convnext_tiny", "--data", "my images", "--pretrained=imagenet"]
    assert common.scratch_command(argv) == (
        "mgpu-train train --model convnext_tiny --data 'my images' --pretrained none")
    failed = RunFailed(message="The ImageNet weights of convnext_tiny could not be downloaded",
                       phase=Phase.SETUP, error_type="WeightsUnavailable", resumable=False)
    outcome = RunOutcome(RunStatus.FAILED, failed.message, events=[failed])
    assert common._report_outcome(outcome, sys.stdout, False, False, "", argv) == 1
    err = capsys.readouterr().err
    assert "could not be downloaded" in err
    assert err.rstrip().endswith("To train from scratch instead: mgpu-train train --model "
                                 "convnext_tiny --data 'my images' --pretrained none"), err


# -- the GUI -----------------------------------------------------------------------
def test_run_setup_offers_the_builtins_and_their_weights(qtbot):
    from mgpu_gui.gui.panels.run_setup import RunSetupPanel
    from mgpu_gui.gui.widgets.error_banner import ErrorBanner

    panel = RunSetupPanel()
    qtbot.addWidget(panel)
    combo = panel.model_combo
    assert [combo.itemText(i) for i in range(combo.count())][:7] == ["demo", *NAMES]
    assert "ImageNet weights" in combo.itemData(2, 3)  # Qt.ToolTipRole
    panel.set_model_path("mobilenet_v3_small")
    assert panel.weights_box.isVisibleTo(panel) and not panel.allow_code.isVisibleTo(panel)
    assert panel.build_config().pretrained == "imagenet"
    panel.set_model_path("small_convnet")  # no ImageNet weights: 'none', fixed
    assert not panel.pretrained_combo.isEnabled()
    assert panel.pretrained_combo.currentText() == "none"
    assert panel.build_config().pretrained is None and panel.recent_models() == []
    panel.set_model_path("convnext_tiny")  # the choice comes back
    assert panel.pretrained_combo.currentText() == "imagenet"

    banner = ErrorBanner()
    qtbot.addWidget(banner)
    failed = RunFailed(message="could not be downloaded", phase=Phase.SETUP,
                       error_type="WeightsUnavailable")
    started = []
    assert panel.failure_offer(RunFailed(message="x", phase=Phase.SETUP,
                                         error_type="DataError"), started.append) is None
    banner.show_error(failed.message, "",
                      panel.failure_offer(failed, lambda: started.append(panel.build_config())))
    assert banner.action_button.text() == "Train from scratch"
    banner.action_button.click()
    assert banner.isHidden() and panel.build_config().pretrained == "none"
    # It trains, as it says (issue 30, finding 4: it only changed the setting).
    assert [c.pretrained for c in started] == ["none"]
    panel.shutdown()


# -- real builds and steps (TensorFlow in child processes) --------------------------
@pytest.mark.slow
def test_each_builtin_builds_and_trains_a_step_on_2_replicas(folder):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-m", "tests.helpers.builtin_steps", str(folder),
                           "64x64"], capture_output=True, text=True, timeout=300, env=env,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    results = {r["name"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert list(results) == NAMES
    for r in results.values():
        assert r["replicas"] == 2 and r["output_shape"] == [None, 3], r
        assert math.isfinite(r["loss"]) and r["changed"] >= 0.8 * r["trainable"], r
        # Raw 0-255 pixels in; what the first layers make of them is normalised.
        assert r["input_max"] > 200, r
        low, high = r["normalised"]
        assert -3 < low < high < 3 and high - low > 0.9, r
    assert results["resnet50_v2"]["first_layer"][0] == "Rescaling"  # its own preprocessing
    assert results["convnext_tiny"]["first_layer"] == ["Normalization"]


@pytest.mark.slow
def test_cli_trains_a_builtin_as_the_issue_writes_it(folder, tmp_path):
    exe = shutil.which("mgpu-train", path=os.path.dirname(sys.executable))
    assert exe is not None, "the mgpu-train console script is not installed next to Python"
    out = tmp_path / "runs"
    done = subprocess.run([exe, "train", "--model", "mobilenet_v3_small", "--pretrained", "none",
                           "--data", str(folder), "--image-size", "64x64", "--replicas", "2",
                           "--epochs", "1", "-o", str(out)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = out.iterdir()
    run_dir = RunDir(run)
    events = run_dir.events()
    started = next(e for e in events if isinstance(e, RunStarted))
    assert (started.num_replicas, started.model_name) == (2, "mobilenet_v3_small")
    assert len([e for e in events if isinstance(e, EpochEnd)]) == 1
    assert run_dir.read_config().pretrained == "none"
    card = read_card(card_path(run_dir.export_path("keras"), "keras"))
    assert card is not None and card.inputs is not None and card.inputs.rescale == 1.0
    _exported_model_takes_raw_pixels(run_dir)


def _exported_model_takes_raw_pixels(run_dir: RunDir) -> None:
    """The exported model on an image file decoded and resized independently, with no
    rescale, predicts what the trained model (its last checkpoint) predicts on the
    training pipeline's own input for that file (the validation split's, unshuffled; the
    pipeline rounds to whole levels)."""
    import keras
    import tensorflow as tf

    from mgpu_gui.engine import pipeline

    prepared = pipeline.load_data(run_dir.read_config())
    x = np.stack([x for x, _ in prepared.val.map(prepared.finish).take(6).as_numpy_iterator()])
    files = prepared.val_origins.files[:6]
    raw = np.stack([tf.image.resize(tf.io.decode_image(Path(f).read_bytes(), channels=3,
                                                       expand_animations=False), (64, 64))
                    for f in files])
    assert np.abs(raw - x).max() <= 0.5 and raw.max() > 200  # raw pixels, not rescaled
    exported = keras.models.load_model(run_dir.export_path("keras"))
    trained = keras.models.load_model(run_dir.last_checkpoint)
    np.testing.assert_allclose(exported.predict(raw, verbose=0), trained.predict(x, verbose=0),
                               atol=2e-3)
