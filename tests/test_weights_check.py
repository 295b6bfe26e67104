"""A built-in's ImageNet weights that can be neither found nor downloaded are refused
before the run, in the form, the CLI and the queue (issue 30, finding 4: the form said
"Ready" and the run failed 24 s after Train, offline). No TensorFlow."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.errors import WeightsUnavailable
from mgpu_gui.core.modelfiles import builtins
from mgpu_gui.core.modelfiles.builtins import ARCHITECTURES, check_weights_obtainable

ARCH = ARCHITECTURES["mobilenet_v3_small"]


@pytest.fixture
def keras_home(monkeypatch, tmp_path):
    (tmp_path / "keras").mkdir()  # Keras (and the app) use /tmp/.keras where it is not
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    return tmp_path / "keras" / "models"


@pytest.fixture
def images(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(2):
        (tmp_path / "images" / f"c{c}").mkdir(parents=True)
        for i in range(8):
            Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(
                tmp_path / "images" / f"c{c}" / f"{i}.png")
    return tmp_path / "images"


def test_the_reach_check_connects_without_downloading(monkeypatch):
    """`unreachable` against real sockets here: a listening port, then a closed one."""
    monkeypatch.undo()  # the real check (the suite's is offline)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert builtins.unreachable(f"https://127.0.0.1:{port}/weights.h5") is None
    reason = builtins.unreachable(f"https://127.0.0.1:{port}/weights.h5", timeout=2)
    assert reason is not None and reason.startswith("127.0.0.1: ")


def test_imagenet_weights_missing_offline_are_refused_naming_where_to_put_them(
        keras_home, monkeypatch):
    with pytest.raises(WeightsUnavailable) as caught:
        check_weights_obtainable(ARCH, None)  # its default: imagenet
    message = str(caught.value)
    for words in ("mobilenet_v3_small", "not in Keras' cache", "no network in tests",
                  str(ARCH.weights_file), ARCH.weights_url.rsplit("/", 1)[0] + "/",
                  f"put it in {keras_home}/", "train from scratch"):
        assert words in message, (words, message)
    # Not asked when nothing needs downloading: no ImageNet, or the file in the cache.
    monkeypatch.setattr(builtins, "unreachable", lambda url, timeout=0: pytest.fail(url))
    check_weights_obtainable(ARCH, "none")
    check_weights_obtainable(ARCHITECTURES["small_convnet"], None)
    keras_home.mkdir(parents=True)
    (keras_home / str(ARCH.weights_file)).write_bytes(b"weights")
    check_weights_obtainable(ARCH, "imagenet")
    # Online: Keras downloads them on the first build.
    monkeypatch.setattr(builtins, "unreachable", lambda url, timeout=0: None)
    (keras_home / str(ARCH.weights_file)).unlink()
    check_weights_obtainable(ARCH, "imagenet")


def test_cli_refuses_at_once_with_the_command_from_scratch(capsys, keras_home, images,
                                                          tmp_path):
    out = tmp_path / "runs"
    for command in (["train"], ["queue", "add"]):
        code = cli.main([*command, "--model", "mobilenet_v3_small", "--data", str(images),
                         "--image-size", "40x40", "--replicas", "1", "--batch-per-replica",
                         "4", "-o", str(out)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "could not be downloaded (not in Keras' cache, and no network in tests)" in err
        assert err.rstrip().endswith(
            f"To train from scratch instead: mgpu-train {' '.join(command)} --model "
            f"mobilenet_v3_small --data {images} --image-size 40x40 --replicas 1 "
            f"--batch-per-replica 4 -o {out} --pretrained none"), err
    assert not out.exists()


def test_the_form_says_it_before_train(qtbot, keras_home):
    from mgpu_gui.gui.panels.run_setup import RunSetupPanel

    panel = RunSetupPanel()
    qtbot.addWidget(panel)
    panel.set_model_path("mobilenet_v3_small")
    panel.check_now()
    assert "could not be downloaded" in panel.problems().get("pretrained", "")
    panel.pretrained_combo.setCurrentText("none")
    panel.check_now()
    assert "pretrained" not in panel.problems()
    panel.shutdown()


def test_an_offline_lookup_never_holds_the_window(qtbot, keras_home, images, monkeypatch):
    """The reach check is a DNS lookup and a connection: offline, seconds. It ran on the
    GUI thread in every check of a built-in. It runs on a thread now: the form says what
    it is waiting for, Train stays off, and the answer arrives by itself."""
    import threading
    import time

    from mgpu_gui.core.config import RunConfig
    from mgpu_gui.gui.panels.run_setup import RunSetupPanel

    answer = threading.Event()

    def slow(url, timeout=0):
        answer.wait(10)
        return "no network in tests"

    monkeypatch.setattr(builtins, "unreachable", slow)
    panel = RunSetupPanel()
    qtbot.addWidget(panel)
    panel.set_config(RunConfig(model="mobilenet_v3_small", data=str(images),
                               image_size=(40, 40), batch_per_replica=2))
    since = time.perf_counter()
    panel.check_now()
    assert time.perf_counter() - since < 1.0
    assert panel.summary_label.text() == "Reading where the weights come from…"
    assert not panel.is_valid() and "pretrained" not in panel.problems()
    answer.set()
    qtbot.waitUntil(lambda: "could not be downloaded" in panel.problems().get("pretrained", ""))
    panel.shutdown()
