"""Export: every format written atomically, verified in a fresh process, reloadable anywhere.

The models are built and trained one step under `MirroredStrategy` (one CPU
replica is enough: the variables are MirroredVariables all the same). Each
fresh-process check costs ~3-4 s of TensorFlow import, so the six real
exports are made once per module and checked by several tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mgpu_gui.core.config import EXPORT_FORMATS
from mgpu_gui.core.errors import ExportError
from mgpu_gui.engine import export
from mgpu_gui.engine.export import default_export_path, export_file, export_model

pytestmark = pytest.mark.slow  # models trained and exported with TensorFlow here and in children

CLASSES = ["cat", "dog"]


@dataclass(frozen=True)
class Trained:
    model: Any
    x: np.ndarray
    reference: np.ndarray


def _train_one_step(build: Any, x: np.ndarray, y: np.ndarray) -> Trained:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = build(keras)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=len(x), epochs=1, verbose=0)
    return Trained(model, x, np.asarray(model(x, training=False)))


def _dense(keras: Any) -> Any:
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
         keras.layers.Dense(3, activation="softmax")]
    )


def _conv_bn(keras: Any) -> Any:
    inputs = keras.Input((8, 8, 1))
    h = keras.layers.Conv2D(4, 3)(inputs)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.ReLU()(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(h))


@pytest.fixture(scope="module")
def models() -> dict[str, Trained]:
    rng = np.random.default_rng(0)
    return {
        "dense": _train_one_step(
            _dense, rng.random((16, 4), dtype=np.float32), rng.integers(0, 3, 16)
        ),
        "conv": _train_one_step(
            _conv_bn, rng.random((16, 8, 8, 1), dtype=np.float32), rng.integers(0, 2, 16)
        ),
    }


@pytest.fixture(scope="module")
def exports(models: dict[str, Trained], tmp_path_factory: pytest.TempPathFactory):
    """All six exports, each into its own folder, two of them over stale targets."""
    results = {}
    for name, trained in models.items():
        for fmt in EXPORT_FORMATS:
            folder = tmp_path_factory.mktemp(f"{name}-{fmt}")
            out = default_export_path(folder, fmt)
            if fmt == "savedmodel":
                out.mkdir()
                (out / "stale.txt").write_text("old export")
            else:
                out.write_bytes(b"old export")
            results[name, fmt] = export_model(
                trained.model, out, fmt, sample_x=trained.x,
                class_names=CLASSES if name == "conv" else None,
            )
    return results


def _listing(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


@pytest.mark.slow
def test_every_format_is_verified_and_replaces_the_old_export(exports) -> None:
    for (name, fmt), result in exports.items():
        assert result.verified, (name, fmt)
        assert result.format == fmt
        assert result.max_abs_diff <= export.TOLERANCE
        if fmt == "savedmodel":
            assert (result.path / "saved_model.pb").is_file()
            assert not (result.path / "stale.txt").exists()
        else:
            assert result.path.read_bytes() != b"old export"


@pytest.mark.slow
def test_no_temporary_files_remain(exports) -> None:
    for (name, fmt), result in exports.items():
        expected = {result.path.name}
        if name == "conv" and fmt != "savedmodel":
            expected.add(f"{result.path.stem}.classes.json")
        assert _listing(result.path.parent) == expected, (name, fmt)


@pytest.mark.slow
def test_class_names_are_written_beside_files_and_inside_folders(exports) -> None:
    for (name, fmt), result in exports.items():
        if name != "conv":
            assert result.classes_path is None
            continue
        expected = (result.path / "classes.json" if fmt == "savedmodel"
                    else result.path.with_name("model.classes.json"))
        assert result.classes_path == expected
        assert json.loads(expected.read_text()) == {"class_names": CLASSES}


@pytest.mark.slow
def test_exports_reload_in_a_plain_process_with_equal_predictions(
    exports, models: dict[str, Trained], tmp_path: Path
) -> None:
    """What a user does with the files: plain Keras/TF, no strategy, no GPU, no mgpu_gui."""
    cases = []
    for (name, fmt), result in exports.items():
        np.save(tmp_path / f"{name}-x.npy", models[name].x)
        np.save(tmp_path / f"{name}-y.npy", models[name].reference)
        cases.append([name, fmt, str(result.path)])
    script = textwrap.dedent(
        """
        import json, sys
        import numpy as np, tensorflow as tf, keras
        assert not tf.distribute.has_strategy()
        diffs = {}
        for name, fmt, path in json.loads(sys.argv[1]):
            x, y = np.load(f"{name}-x.npy"), np.load(f"{name}-y.npy")
            if fmt == "savedmodel":
                loaded = tf.saved_model.load(path)  # keep it: its variables die with it
                got = loaded.serve(x)
            else:
                got = keras.saving.load_model(path).predict(x, verbose=0)
            diffs[f"{name}/{fmt}"] = float(np.max(np.abs(np.asarray(got) - y)))
        print(json.dumps(diffs))
        """
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cases)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    diffs = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(diffs) == 6
    assert all(d <= 1e-5 for d in diffs.values()), diffs


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_failed_verification_leaves_no_output_and_the_target_untouched(
    fmt: str, models: dict[str, Trained], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trained = models["conv"]
    out = default_export_path(tmp_path, fmt)
    if fmt == "savedmodel":
        out.mkdir()
        (out / "keep.txt").write_text("previous export")
    else:
        out.write_bytes(b"previous export")
    before = _listing(tmp_path)

    def reloaded_differs(fmt_: str, path: Path, x: np.ndarray, *options) -> list[np.ndarray]:
        assert path.exists() and path != out  # verification sees the temporary export
        return [trained.reference + 1e-3]

    monkeypatch.setattr(export, "_run_verifier", reloaded_differs)
    with pytest.raises(ExportError, match="Verification failed.*Nothing was saved"):
        export_model(trained.model, out, fmt, sample_x=trained.x, class_names=CLASSES)
    assert _listing(tmp_path) == before
    if fmt == "savedmodel":
        assert _listing(out) == {"keep.txt"}
    else:
        assert out.read_bytes() == b"previous export"


@pytest.mark.slow
def test_reload_failure_reports_the_load_error(tmp_path: Path) -> None:
    """A Lambda saves fine but safe_mode refuses to load it: caught before it ships."""
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Lambda(lambda t: t * 2.0)])
    out = tmp_path / "lambda.keras"
    with pytest.raises(ExportError, match="could not be reloaded.*(safe_mode|Lambda)"):
        export_model(model, out, "keras", sample_x=np.ones((2, 3), np.float32))
    assert _listing(tmp_path) == set()


@pytest.mark.parametrize(
    ("name", "fmt", "hint"),
    [("m.h5", "keras", r"m\.keras"), ("m.keras", "h5", r"m\.h5"), ("m", "h5", r"m\.h5"),
     ("m.keras", "savedmodel", "folder name without .keras")],
)
def test_wrong_suffix_says_which_to_use(name: str, fmt: str, hint: str, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=hint):
        export_model(object(), tmp_path / name, fmt, sample_x=np.ones((1, 4)))
    assert _listing(tmp_path) == set()


def test_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="keras, h5, savedmodel"):
        default_export_path(tmp_path, "onnx")


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_target_folder_that_cannot_exist_writes_nothing(
    fmt: str, models: dict[str, Trained], tmp_path: Path
) -> None:
    (tmp_path / "afile").write_text("a regular file")
    out = default_export_path(tmp_path / "afile", fmt)
    with pytest.raises(ExportError, match=r"afile is not a folder\. Choose an existing"):
        export_model(models["dense"].model, out, fmt, sample_x=models["dense"].x)
    assert _listing(tmp_path) == {"afile"}

    missing = default_export_path(tmp_path / "nope", fmt)
    with pytest.raises(ExportError, match="nope does not exist"):
        export_model(models["dense"].model, missing, fmt, sample_x=models["dense"].x)
    assert _listing(tmp_path) == {"afile"}


def test_class_names_must_fit_the_outputs(models: dict[str, Trained], tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="outputs 3 values per sample but 2 class names"):
        export_model(models["dense"].model, tmp_path / "m.keras", "keras",
                     sample_x=models["dense"].x, class_names=CLASSES)
    assert _listing(tmp_path) == set()


def test_sample_that_does_not_fit_the_model(models: dict[str, Trained], tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="does not fit the model"):
        export_model(models["dense"].model, tmp_path / "m.keras", "keras",
                     sample_x=np.ones((2, 5), np.float32))
    assert _listing(tmp_path) == set()


@pytest.mark.slow
def test_export_file_converts_a_run_model_with_a_random_sample(exports, tmp_path: Path) -> None:
    src = exports["conv", "keras"].path
    out = tmp_path / "converted_savedmodel"
    result = export_file(src, out, "savedmodel")
    assert result.verified and result.max_abs_diff <= export.TOLERANCE
    assert (out / "saved_model.pb").is_file()
    assert _listing(tmp_path) == {"converted_savedmodel"}
    # The run's class names travel with the model.
    assert json.loads((out / "classes.json").read_text()) == {"class_names": CLASSES}


def test_export_file_refuses_code_in_the_file(tmp_path: Path) -> None:
    import keras

    src = tmp_path / "lambda.keras"
    keras.Sequential([keras.Input((3,)), keras.layers.Lambda(lambda t: t + 1.0)]).save(src)
    with pytest.raises(ExportError, match="Could not load.*lambda.keras"):
        export_file(src, tmp_path / "out.h5", "h5")
    with pytest.raises(ExportError, match="not found"):
        export_file(tmp_path / "missing.keras", tmp_path / "out.h5", "h5")
    assert _listing(tmp_path) == {"lambda.keras"}


def test_random_sample_is_deterministic(models: dict[str, Trained]) -> None:
    model = models["conv"].model
    a, b = export.random_sample(model), export.random_sample(model)
    assert a.shape == (8, 8, 8, 1) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)


def test_importing_the_export_parent_side_does_not_load_tensorflow() -> None:
    """The GUI and the CLI start exports through this module; TensorFlow stays in the child."""
    code = ("import sys, mgpu_gui.core.tools.export_job; "
            "assert not {'tensorflow', 'keras'} & set(sys.modules), 'TF imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_without_class_names_an_existing_classes_file_is_kept(
    models: dict[str, Trained], tmp_path: Path
) -> None:
    """`model.keras` and `model.h5` share `model.classes.json`; exporting one keeps it."""
    (tmp_path / "model.classes.json").write_text('{"class_names": ["a", "b", "c"]}')
    result = export_model(models["dense"].model, tmp_path / "model.h5", "h5",
                          sample_x=models["dense"].x, class_names=[], verify=False)
    assert not result.verified and np.isnan(result.max_abs_diff)
    assert result.classes_path is None
    assert _listing(tmp_path) == {"model.h5", "model.classes.json"}


# -- the export child (core/tools/export_job.py) --------------------------------
def test_export_events_and_requests_survive_their_json() -> None:
    from mgpu_gui.core.events import ExportDone, ExportFailed, ExportReloaded, parse_event
    from mgpu_gui.core.tools.export_job import ExportMode, ExportRequest

    for event in (ExportDone("/a/m.keras", "keras", True, 1e-7, "/a/m.classes.json"),
                  ExportFailed("no such file", "ModelError", user_error=True, traceback="tb"),
                  ExportReloaded("/tmp/y.npz")):
        assert parse_event(event.to_json()) == event
    request = ExportRequest(ExportMode.UNWRAP, Path("/a/w.h5"), Path("/a/p.keras"), "keras",
                            Path("/a/custom.py"))
    assert ExportRequest.from_dict(json.loads(json.dumps(request.to_dict()))) == request


def test_an_export_child_that_dies_without_a_word_is_reported(monkeypatch, tmp_path) -> None:
    from mgpu_gui.core.tools import export_job

    monkeypatch.setattr(export_job, "export_command", lambda fd: [
        sys.executable, "-c", "import sys; print('the last words'); sys.exit(3)"])
    request = export_job.ExportRequest(export_job.ExportMode.EXPORT, tmp_path / "m.keras",
                                       tmp_path / "o.keras", "keras")
    failed = export_job.ExportJob(request).run()
    assert not failed.user_error and not failed.error_type
    assert "exited with code 3" in failed.message and "the last words" in failed.message
