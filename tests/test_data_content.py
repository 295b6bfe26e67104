"""The data check: every value and image read before a run exists, and an image that
breaks later stops the run naming itself, with no resume offered.

Each bad input goes through `mgpu-train train` in-process (the check runs in its
child, as it does for the app): a non-zero exit, one message naming the file and
the samples, no traceback, no run folder, no row in the run history. The data
sets hold 40 samples, fewer than the default global batch: their damage must be
what is reported, not their size.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mgpu_gui.cli import main as cli
from mgpu_gui.core.children.data_check import DataCheckJob, check_data_content
from mgpu_gui.core.children.supervisor import WorkerProcess, prepare_run
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.datasets import content
from mgpu_gui.core.datasets.content import check_content
from mgpu_gui.core.datasets.content_request import ContentRequest
from mgpu_gui.core.datasets.images import CorruptImageError, check_header, decode_image
from mgpu_gui.core.errors import DataError
from mgpu_gui.core.events import DataCheckFailed, EpochEnd, Phase, RunFailed, RunStatus
from mgpu_gui.core.modelfiles.info import ModelFileInfo
from mgpu_gui.core.runs import preflight
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.gui.panels.run_setup import RunSetupPanel

SAMPLES = 40


def images(folder: Path, counts: dict[str, int], size=(10, 10)) -> Path:
    rng = np.random.default_rng(0)
    for name, n in counts.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / name / f"{i:02d}.png")
    return folder


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, Path]:
    """One of each bad input a new user's files hold."""
    root = tmp_path_factory.mktemp("bad")
    rng = np.random.default_rng(0)
    x = rng.random((SAMPLES, 6, 6, 1)).astype(np.float32)
    y = np.arange(SAMPLES) % 4
    nan_x = x.copy()
    nan_x[3, 0, 0, 0] = nan_x[3, 1, 1, 0] = nan_x[17, 2, 2, 0] = np.nan
    inf_y = y.astype(np.float32)
    inf_y[29] = np.inf
    files = {name: root / f"{name}.npz" for name in ("nan_x", "inf_y", "half", "one_class")}
    np.savez(files["nan_x"], x_train=nan_x, y_train=y)
    np.savez_compressed(files["inf_y"], x_train=x, y_train=inf_y)
    np.savez(files["half"], x_train=x, y_train=(y % 10 + 0.5).astype(np.float32))
    np.savez(files["one_class"], x_train=x, y_train=np.full(SAMPLES, 3))
    files["truncated"] = images(root / "truncated", {"cat": 6, "dog": 6})
    truncate(files["truncated"] / "dog" / "03.png")
    files["one_folder"] = images(root / "one_folder", {"cat": 6})
    (root / "one_folder" / "dog").mkdir()
    files["empty_class"] = images(root / "empty_class", {"cat": 6, "dog": 6})
    (root / "empty_class" / "owl").mkdir()
    return files


# -- the CLI: one message, nothing left behind ---------------------------------
@pytest.mark.parametrize("name, words", [
    ("nan_x", ["nan_x.npz", "x_train holds 3 NaN value(s) in 2 of its 40 samples",
               "first at samples 3, 17", "drop those samples"]),
    ("inf_y", ["inf_y.npz", "y_train holds 1 infinite value(s)", "first at sample 29"]),
    ("half", ["half.npz", "40 label(s) that are not whole numbers", "e.g. 0.5",
              "the demo model", "--loss mean_squared_error"]),
    ("one_class", ["one_class.npz", "every label in y_train is 3 (one class)",
                   "at least 2 classes"]),
    ("truncated", ["dog/03.png cannot be decoded", "truncated", "replace it"]),
    ("one_folder", ["only the class folder 'cat' holds images", "1 other class folder",
                    "at least 2 classes"]),
    # Trained on 2 classes, then failed at the export: "2 values per sample but 3 class
    # names" (issue 29, finding 2).
    ("empty_class", ["the class subfolder 'owl' holds no images", "every subfolder is a "
                     "class", "move it out of the data folder"]),
])
def test_train_refuses_bad_data_before_the_run(capsys, bad, tmp_path, name, words):
    out_dir = tmp_path / "runs"
    code = cli.main(["train", "--data", str(bad[name]), "--image-size", "8x8", "--epochs", "1",
                     "-o", str(out_dir)])
    captured = capsys.readouterr()
    assert code != 0
    assert captured.err.startswith("error: ") and captured.err.count("error:") == 1
    for word in words:
        assert word in captured.err, f"{word!r} not in: {captured.err}"
    assert "global batch" not in captured.err  # the damage is named, not the size
    assert "resume" not in captured.err and "Traceback" not in captured.out + captured.err
    assert not out_dir.exists()
    store = RunStore(Path(os.environ["MGPU_GUI_STORE"]))
    assert store.runs() == []
    store.close()


def test_train_help_says_how_bad_data_is_handled(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the data's content first (every value for NaN/Inf" in text
    assert "headers only beyond 5,000 files), then the batch arithmetic" in text
    assert "An image damaged later stops the run naming the file." in text


# -- the check itself ----------------------------------------------------------
def test_regression_labels_and_integer_inputs_pass(tmp_path, bad):
    request = ContentRequest((str(bad["half"]),), classifier=False)
    assert check_content(request).values == SAMPLES * 36 + SAMPLES
    ints = tmp_path / "ints.npz"
    np.savez(ints, x_train=np.zeros((4, 3), np.uint8), y_train=np.array([0, 1, 0, 1]))
    assert check_content(ContentRequest((str(ints),))).values == 16


def test_one_class_is_refused_for_training_and_judged_in_an_evaluation(bad):
    """A classifier cannot learn from one class; a trained one is judged on a test set of
    cats alone (the evaluation's check, `learns=False`)."""
    with pytest.raises(DataError, match="one class"):
        check_content(ContentRequest((str(bad["one_class"]),)))
    assert check_content(ContentRequest((str(bad["one_class"]),), learns=False)).values > 0


def test_fortran_order_and_validation_arrays_name_the_right_samples(tmp_path):
    x = np.asfortranarray(np.ones((30, 5), np.float32))
    x[22, 4] = np.inf
    path = tmp_path / "f.npz"
    np.savez(path, x_train=np.ones((6, 5), np.float32), y_train=np.arange(6) % 2,
             x_val=x, y_val=np.arange(30) % 2)
    with pytest.raises(DataError, match=r"x_val holds 1 infinite value\(s\) in 1 of its 30 "
                                        r"samples \(first at sample 22\)"):
        check_content(ContentRequest((str(path),)), progress=None)


def test_one_hot_labels_of_one_class(tmp_path):
    path = tmp_path / "onehot.npz"
    np.savez(path, x_train=np.zeros((4, 2), np.float32), y_train=np.eye(3)[[1, 1, 1, 1]])
    with pytest.raises(DataError, match="uses only class 1 of its 3 one-hot columns"):
        check_content(ContentRequest((str(path),)))


def test_large_folders_get_a_header_check(bad, monkeypatch):
    monkeypatch.setattr(content, "DECODE_LIMIT", 5)
    report = check_content(ContentRequest((str(bad["truncated"]),)))
    assert (report.images_decoded, report.images_header_only) == (0, 12)
    not_png = bad["truncated"] / "cat" / "99.png"
    not_png.write_text("not an image")
    try:
        with pytest.raises(CorruptImageError, match="99.png cannot be decoded"):
            check_content(ContentRequest((str(bad["truncated"]),)))
    finally:
        not_png.unlink()


def test_the_decoder_gives_what_tensorflow_gives(tmp_path):
    modes = {"rgb.png": ("RGB", (1, 2, 3)), "grey.png": ("L", 7), "alpha.png": ("RGBA",
             (9, 8, 7, 0)), "palette.gif": ("P", 5), "deep.png": ("I;16", 0x1234)}
    for name, (mode, colour) in modes.items():
        Image.new(mode, (3, 2), colour).save(tmp_path / name)
        decoded = decode_image(tmp_path / name)
        assert decoded.shape == (2, 3, 3) and decoded.dtype == np.uint8, name
        check_header(tmp_path / name)
    assert decode_image(tmp_path / "rgb.png")[0, 0].tolist() == [1, 2, 3]
    assert decode_image(tmp_path / "grey.png")[0, 0].tolist() == [7, 7, 7]
    assert decode_image(tmp_path / "alpha.png")[0, 0].tolist() == [9, 8, 7]
    assert decode_image(tmp_path / "deep.png")[0, 0].tolist() == [0x12] * 3


# -- the child -------------------------------------------------------------------
def test_a_decoders_message_is_kept_whole_without_tensorflows_op_names():
    """TensorFlow's message was cut mid-list at 160 characters ("One of JPEG, JPEG )"),
    after its op's name (issue 29, item 14)."""
    from mgpu_gui.core.datasets.images import corrupt

    said = ("{{function_node __wrapped__DecodeImage_device_/job:localhost/replica:0/task:0/"
            "device:CPU:0}} Unknown image file format. One of JPEG, JPEG XL, PNG, GIF, BMP, "
            "WebP required. [Op:DecodeImage]")
    message = str(corrupt("/data/a/1.png", ValueError(said)))
    assert message == ("the image /data/a/1.png cannot be decoded (Unknown image file format. "
                       "One of JPEG, JPEG XL, PNG, GIF, BMP, WebP required.); replace it with "
                       "a readable image or delete it.")
    long = str(corrupt("x.png", ValueError("word " * 100)))
    assert "word …)" in long and len(long) < 340


def test_child_answers_and_caches(bad, monkeypatch):
    request = ContentRequest((str(bad["one_folder"] / "cat"),), classifier=False)
    with pytest.raises(DataError, match="no class subfolders"):
        check_data_content(request)
    good = ContentRequest((str(bad["half"]),), classifier=False)
    first = check_data_content(good)
    monkeypatch.setattr(DataCheckJob, "run", lambda self: pytest.fail("not cached"))
    assert check_data_content(good) is first


def test_a_stalled_read_is_stopped_and_named(tmp_path):
    fifo = tmp_path / "stuck.npz"
    os.mkfifo(fifo)  # opening it blocks until a writer comes: a hung drive
    outcome = DataCheckJob(ContentRequest((str(fifo),)), stall_s=1.0).run()
    assert isinstance(outcome, DataCheckFailed) and outcome.error_type == "Stalled"
    assert "read nothing for 1 s" in outcome.message and "stuck.npz" in outcome.message


def test_classifier_is_known_from_the_loss_or_the_file(tmp_path):
    def info(**kw) -> ModelFileInfo:
        return ModelFileInfo(path=tmp_path / "m.keras", format="keras", **kw)

    config = RunConfig(model=str(tmp_path / "m.keras"))
    assert preflight.classifier_of(config.replace(loss="mse"), None)[0] is False
    assert preflight.classifier_of(RunConfig(), None) == (True, "the demo model")
    assert preflight.classifier_of(config, info(compiled=True, loss="huber"))[0] is False
    assert preflight.classifier_of(config, info(compiled=True, loss="categorical_crossentropy")
                                   )[0] is True
    assert preflight.classifier_of(config, info())[0] is True  # a chosen loss classifies
    py = ModelFileInfo(path=tmp_path / "b.py", format="py")
    assert preflight.classifier_of(config.replace(model=str(py.path)), py)[0] is None


def test_built_labels_are_checked_against_the_built_loss(bad):
    """What a `.py` builder's worker checks once its loss is known: labels only."""
    request = ContentRequest((str(bad["one_class"]), "demo"), classifier=True,
                             why="net.py (loss sparse_categorical_crossentropy)")
    with pytest.raises(DataError, match=r"one_class.npz: every label in y_train is 3 \(one "
                                        r"class\); a classifier \(net.py \(loss sparse"):
        content.check_built_labels(request)
    content.check_built_labels(ContentRequest((str(bad["truncated"]),)))  # no image is read


@pytest.mark.slow
def test_a_py_builders_own_classifier_loss_refuses_half_integer_labels(capsys, bad, tmp_path):
    """The data check cannot know a `.py` builder's loss; its worker checks the labels
    once the model is built, before the first step, and leaves no folder or row."""
    builder = tmp_path / "net.py"
    builder.write_text(
        "import keras\n\n\ndef create_model():\n"
        "    model = keras.Sequential([keras.Input((6, 6, 1)), keras.layers.Flatten(),\n"
        "                              keras.layers.Dense(10, activation='softmax')])\n"
        "    model.compile('adam', 'sparse_categorical_crossentropy')\n"
        "    return model\n")
    out_dir = tmp_path / "runs"
    code = cli.main(["train", "--model", str(builder), "--data", str(bad["half"]), "--cpu",
                     "--replicas", "1", "--batch", "4", "--epochs", "1", "-o", str(out_dir)])
    err = capsys.readouterr().err
    assert code != 0 and err.count("error:") == 1, err
    assert "half.npz: y_train holds 40 label(s) that are not whole numbers" in err
    assert "net.py (loss sparse_categorical_crossentropy) trains a classifier" in err
    assert "resume" not in err and "Traceback" not in err
    assert not out_dir.exists() or not any(out_dir.iterdir())
    store = RunStore(Path(os.environ["MGPU_GUI_STORE"]))
    assert store.runs() == []
    store.close()


# -- mid-run: the one training run ----------------------------------------------
@pytest.mark.slow
def test_an_image_damaged_after_the_check_stops_the_run_naming_it(tmp_path):
    folder = images(tmp_path / "imgs", {"a": 20, "b": 20}, size=(8, 8))
    config = RunConfig(data=str(folder), image_size=(8, 8), validation_split=0.0, epochs=2,
                       batch_per_replica=4, output_dir=str(tmp_path / "runs"),
                       devices=DeviceSelection(kind=DeviceKind.CPU, replicas=1))
    run = prepare_run(config)  # the check passed: every image decoded
    late = folder / "b" / "19.png"  # past the setup's sample batch (the first 32 files)
    truncate(late)
    worker = WorkerProcess(run)
    worker.start()
    events = list(worker.events())
    outcome = worker.outcome()
    failed = [e for e in events if isinstance(e, RunFailed)]
    assert outcome.status is RunStatus.FAILED and len(failed) == 1, outcome.message
    event = failed[0]
    assert event.phase is Phase.TRAINING and event.error_type == "DataError", event.message
    assert event.message.startswith("Training stopped in epoch 1"), event.message
    assert f"the image {late} cannot be decoded" in event.message
    assert "Then start a new run." in event.message and "resume" not in event.message
    assert not any(isinstance(e, EpochEnd) for e in events)  # no sample was skipped


# -- the app: the same message on the Data field, before Train --------------------
def test_run_setup_shows_the_damage_on_the_data_field(qtbot, bad):
    panel = RunSetupPanel()
    qtbot.addWidget(panel)
    try:
        panel.set_data_path(bad["truncated"])
        panel.check_now()  # instant checks pass; the batch (64) is larger than 12 images
        with qtbot.waitSignal(panel._content.finished, timeout=30_000):
            pass
        message = panel.problems()["data"]
        assert "dog/03.png cannot be decoded" in message and "truncated" in message
        assert list(panel.problems()) == ["data"]  # the damage, not the batch
        assert panel.data_edit.property("invalid") is True and not panel.is_valid()
        panel.set_data_path(bad["half"])  # another file: the old answer goes at once
        assert "data" not in panel.problems()
        panel.check_now()
        with qtbot.waitSignal(panel._content.finished, timeout=30_000):
            pass
        assert "not whole numbers" in panel.problems()["data"]
    finally:
        panel.shutdown()
