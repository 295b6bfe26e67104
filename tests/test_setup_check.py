"""The run setup's file checks: no Qt, and each file read again only when it changed."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from mgpu_gui.core.config import RunConfig
from mgpu_gui.gui.jobs.setup_check import SetupChecker
from tests.helpers.file_reads import count_reads


@pytest.fixture
def reads(monkeypatch):
    return count_reads(monkeypatch)


def test_an_edited_file_is_read_again(tmp_path, reads):
    path = tmp_path / "data.npz"
    np.savez(path, x_train=np.zeros((40, 4), np.float32), y_train=np.zeros(40, np.int64))
    config = RunConfig(data=str(path), output_dir=str(tmp_path / "runs"), batch_per_replica=8)
    checker = SetupChecker()
    first = checker.check(config, 1, {})
    assert first.problems == {} and first.data.train_samples == 40
    for batch in (4, 8, 16, 32):  # arithmetic only
        checker.check(config.replace(batch_per_replica=batch, validation_split=0.5), 2, {})
    checker.check(config.replace(image_size=(9, 9)), 1, {})  # no image folder: no matter
    assert reads == {"data": 1, "model": 0}
    np.savez(path, x_train=np.zeros((4, 4), np.float32), y_train=np.zeros(4, np.int64))
    os.utime(path, ns=(0, 0))
    again = checker.check(config, 1, {})
    assert reads["data"] == 2
    assert "fewer than one global batch" in again.problems["batch_per_replica"]


def test_a_failed_read_is_kept_too_and_known_problems_skip_reads(tmp_path, reads):
    checker = SetupChecker()
    config = RunConfig(model=str(tmp_path / "gone.keras"), output_dir=str(tmp_path))
    for batch in range(1, 5):
        found = checker.check(config.replace(batch_per_replica=batch), 1, {})
        assert "model" in found.problems and found.model is None
    assert reads == {"data": 1, "model": 1}
    found = checker.check(config, 1, {"data": "choose the .npz file"})
    assert found.problems["data"] == "choose the .npz file" and found.data is None
    assert reads == {"data": 1, "model": 1}


def test_a_py_file_without_a_builder_is_a_model_problem(tmp_path, reads):
    """Shown on the model field whatever the data; the file is read once (the builder
    choice is decided from what was read)."""
    path = tmp_path / "net.py"
    path.write_text("def net(input_shape):\n    pass\n")
    checker = SetupChecker()
    config = RunConfig(model=str(path), data=str(tmp_path / "gone.npz"),
                       output_dir=str(tmp_path))
    found = checker.check(config, 1, {})
    assert "defines none of build_model(), create_model()" in found.problems["model"]
    assert "(its functions: net)" in found.problems["model"]
    assert "model" not in checker.check(config.replace(builder="net"), 1, {}).problems
    assert reads["model"] == 1


def test_a_slow_folder_listing_is_waited_for_briefly_then_followed(tmp_path, monkeypatch):
    """Listing 20,000 images took 231 ms of the GUI thread. A check now waits 50 ms for
    it, then answers without it, naming what it reads, and `on_ready` asks again."""
    import threading
    import time

    from mgpu_gui.core.datasets import inspection

    for name in ("a", "b"):
        (tmp_path / "images" / name).mkdir(parents=True)
        (tmp_path / "images" / name / "1.png").write_bytes(b"")
    listed, ready = threading.Event(), threading.Event()
    real = inspection.list_images
    monkeypatch.setattr(inspection, "list_images",
                        lambda folder: (listed.wait(10), real(folder))[1])
    checker = SetupChecker(on_ready=ready.set)
    config = RunConfig(data=str(tmp_path / "images"), output_dir=str(tmp_path / "runs"),
                       batch_per_replica=1, validation_split=0.0)
    since = time.perf_counter()
    first = checker.check(config, 1, {})
    assert time.perf_counter() - since < 1.0
    assert first.reading == ("the image folder",) and first.data is None
    assert "data" not in first.problems
    assert checker.check(config.replace(data=str(tmp_path / "gone.npz")), 1, {}).reading == ()
    listed.set()
    assert ready.wait(10)
    again = checker.check(config, 1, {})  # the folder's listing was asked for again
    while again.reading:
        time.sleep(0.01)
        again = checker.check(config, 1, {})
    assert again.data.num_classes == 2 and again.problems == {}
    checker.shutdown()


def test_no_qt_and_no_tensorflow():
    code = ("import sys, mgpu_gui.gui.jobs.setup_check; "
            "print(sorted(m for m in ('PySide6', 'tensorflow', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"
