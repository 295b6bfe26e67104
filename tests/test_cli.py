"""`mgpu-train` on bad input: a non-zero exit, a message that says what is wrong and
what to do (no traceback), and no run folder left behind. Plus one acceptance run
of the demo through the installed console script.

Most bad input is refused by the TensorFlow-free preflight, so those cases call
`cli.main()` in-process (milliseconds). What only the built model can tell (a `.py`
builder that raises, returns None or ignores its input shape) needs a real worker:
those run the CLI in a subprocess and are marked slow.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mgpu_gui.cli import common
from mgpu_gui.cli import main as cli
from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, NvmlState, query_inventory
from mgpu_gui.core.events import EpochEnd
from mgpu_gui.core.runs.folder import RunDir

TINY = ["--epochs", "1", "--batch-per-replica", "4"]  # 36 training samples, global batch 8
CPU = ["--cpu", "--replicas", "2"]  # the same devices with or without GPUs
WORKER_TIMEOUT_S = 120


# -- files ---------------------------------------------------------------------
@pytest.fixture(scope="session")
def files(tmp_path_factory) -> dict[str, Path]:
    """Tiny datasets and `.py` builders (no Keras needed to write them)."""
    root = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 8)).astype("float32")
    y = rng.integers(0, 3, size=40).astype("int64")
    np.savez(root / "data.npz", x_train=x, y_train=y)
    np.savez(root / "labels9.npz", x_train=x, y_train=np.arange(40) % 10)
    np.savez(root / "short_y.npz", x_train=x, y_train=y[:30])
    np.savez(root / "empty.npz", x_train=np.zeros((0, 8), "float32"),
             y_train=np.zeros((0,), "int64"))
    (root / "text.keras").write_text("this is not a model\n")
    (root / "afile").write_text("a regular file, not a folder\n")
    builders = {
        "raises": """
            import keras

            def build_model(input_shape, num_classes):
                raise RuntimeError("boom in user code")
            """,
        "syntax": """
            import keras

            def build_model(input_shape:
                pass
            """,
        "nobuild": """
            import keras

            def make_net(input_shape, num_classes):
                return None
            """,
        "returns_none": """
            import keras

            def build_model(input_shape, num_classes):
                model = keras.Sequential([keras.Input(input_shape),
                                          keras.layers.Dense(num_classes)])
            """,
        "fixed5": """
            import keras

            def build_model(input_shape, num_classes):
                return keras.Sequential([keras.Input((5,)),
                                         keras.layers.Dense(num_classes, activation="softmax")])
            """,
    }
    for name, text in builders.items():
        (root / f"{name}.py").write_text(textwrap.dedent(text).lstrip())
    return {"root": root, "data": root / "data.npz", "labels9": root / "labels9.npz",
            "short_y": root / "short_y.npz", "empty": root / "empty.npz",
            "text.keras": root / "text.keras", "afile": root / "afile",
            **{name: root / f"{name}.py" for name in builders}}


@pytest.fixture(scope="session")
def models(files) -> dict[str, Path]:
    """Real Keras files: compiled and trained one step (else Keras warns on reload)."""
    import keras

    root = files["root"]
    x = np.random.default_rng(1).normal(size=(8, 8)).astype("float32")
    y = np.arange(8) % 3

    def save(layers, name: str, xs: np.ndarray) -> Path:
        model = keras.Sequential(layers)
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit(xs, y, epochs=1, batch_size=8, verbose=0)
        model.save(root / name)
        return root / name

    made = {
        "in4": save([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")],
                    "in4.keras", x[:, :4]),
        "three": save([keras.Input((8,)), keras.layers.Dense(3, activation="softmax")],
                      "three.keras", x),
        "h5": save([keras.Input((8,)), keras.layers.Dense(3, activation="softmax")],
                   "three.h5", x),
        "lambda": save([keras.Input((8,)), keras.layers.Lambda(lambda t: t * 2.0),
                        keras.layers.Dense(3, activation="softmax")], "lambda.keras", x),
    }
    for kind in ("keras", "h5"):
        source = made["three" if kind == "keras" else "h5"]
        cut = root / f"cut.{kind}"
        full = source.read_bytes()
        cut.write_bytes(full[: len(full) // 2])
        made[f"cut_{kind}"] = cut
    return made


# -- helpers -------------------------------------------------------------------
def run_in_process(capsys, *args: object) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_subprocess(*args: object, cwd: Path | None = None) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "mgpu_gui.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, cwd=cwd)
    return done.returncode, done.stdout, done.stderr


def assert_refused(code: int, out: str, err: str, out_dir: Path, *words: str) -> None:
    """Non-zero exit, every key word in the message, no traceback, no run folder."""
    assert code != 0, (out, err)
    assert err.startswith("error: "), err
    for word in words:
        assert word in err, f"{word!r} not in: {err}"
    assert "Traceback" not in out + err
    assert not out_dir.exists() or not any(out_dir.iterdir()), list(out_dir.iterdir())


# -- refused by the preflight (in-process, instant) ------------------------------
def test_missing_model_file(capsys, files, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--model", tmp_path / "nope.keras", "--data", files["data"],
                            *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, "model file not found", "nope.keras",
                   "Check the path")


def test_text_file_named_keras(capsys, files, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--model", files["text.keras"], "--data", files["data"],
                            *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, "text.keras is not a Keras model file",
                   "model.save('name.keras')")


@pytest.mark.slow  # the `models` fixture saves Keras files
@pytest.mark.parametrize("kind", ["keras", "h5"])
def test_truncated_model_file(capsys, files, models, tmp_path, kind):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--model", models[f"cut_{kind}"], "--data", files["data"],
                            *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, f"cut.{kind} is truncated or damaged",
                   "copy or save it again")
    # evaluate and predict check it the same way (issue 29, finding 10: predict said
    # "File not found" of a file that was there).
    for command in (["evaluate", models[f"cut_{kind}"], "--data", files["data"]],
                    ["predict", models[f"cut_{kind}"], tmp_path / "photo.png"]):
        code = cli.main([str(arg) for arg in command])
        err = capsys.readouterr().err
        assert code == cli.EXIT_USAGE, err
        assert f"cut.{kind} is truncated or damaged" in err and "copy or save it again" in err


def test_py_with_syntax_error(capsys, files, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--model", files["syntax"], "--data", files["data"],
                            *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, "syntax.py, line 3: syntax error", "Fix the file")


def test_py_without_build_model(capsys, files, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--model", files["nobuild"], "--data", files["data"],
                            *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, "nobuild.py defines none of build_model(), "
                   "create_model(), get_model(), make_model() (its functions: make_net)",
                   "name it with --builder NAME")
    result = run_in_process(capsys, "--model", files["nobuild"], "--builder", "make_model",
                            "--data", files["data"], *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, "nobuild.py defines no top-level function make_model() "
                   "(its functions: make_net); check the name given to --builder")


@pytest.mark.slow  # the `models` fixture saves Keras files
def test_keras_model_input_shape_mismatch(capsys, files, models, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--model", models["in4"], "--data", files["data"],
                            *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, "expects inputs of shape (4,)", "the data has (8,)",
                   "use a model built for this shape")


@pytest.mark.slow  # the `models` fixture saves Keras files
def test_labels_out_of_range(capsys, files, models, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--model", models["three"], "--data", files["labels9"],
                            *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, "labels go up to 9", "3 unit(s)", "labels must be 0..2",
                   "one output per class")


def test_x_and_y_lengths_differ(capsys, files, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--data", files["short_y"], *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, "x_train has 40 samples but y_train has 30 labels",
                   "must have the same length")


def test_empty_dataset(capsys, files, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--data", files["empty"], *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, "empty.npz is empty", "0 samples")


def test_batch_per_replica_below_one(capsys, files, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--data", files["data"], "--batch-per-replica", "0",
                            "-o", out_dir)
    assert_refused(*result, out_dir, "--batch-per-replica", "must be at least 1, got 0")


def test_output_folder_through_a_file(capsys, files, tmp_path):
    out_dir = files["afile"] / "runs"  # root ignores chmod; a file in the path cannot be passed
    result = run_in_process(capsys, "--data", files["data"], *TINY, *CPU, "-o", out_dir)
    assert_refused(*result, out_dir, "Cannot write to output folder", str(out_dir),
                   "Choose a folder you can write to (--output-dir)")
    assert files["afile"].is_file()


@pytest.mark.slow  # the `models` fixture saves Keras files
def test_lambda_layer_refused_without_consent(capsys, files, models, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--model", models["lambda"], "--data", files["data"],
                            *TINY, "-o", out_dir)
    assert_refused(*result, out_dir, "Lambda layer", "Only if you trust the file",
                   "--allow-unsafe-code")


def test_gpus_on_a_machine_without_gpus(capsys, files, tmp_path):
    if query_inventory().gpus:
        pytest.skip("this machine has GPUs")
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--data", files["data"], *TINY, "--gpus", "0,1",
                            "-o", out_dir)
    assert_refused(*result, out_dir, "Cannot train on GPUs", "NVIDIA driver", "--cpu")


def _fake_gpu(index: int) -> GpuInfo:
    return GpuInfo(index=index, name="NVIDIA Test GPU", uuid=f"GPU-test-{index}",
                   pci_bus_id=f"00000000:0{index}:00.0", memory_total=80 * 2**30,
                   compute_capability=(9, 0))


@pytest.mark.parametrize("ask, words", [
    (["--gpus", "0,1,2,3"], ["There is no GPU with index '2' on this machine",
                             "GPUs found: 0 = NVIDIA Test GPU (GPU-test-0); "
                             "1 = NVIDIA Test GPU (GPU-test-1)",
                             "Choose GPUs by these indices or UUIDs"]),
    (["--replicas", "4"], ["4 GPUs asked for, but this machine has 2 GPUs",
                           "GPUs found: 0 = NVIDIA Test GPU", "Ask for at most 2", "--cpu"]),
])
def test_more_gpus_than_exist(capsys, monkeypatch, files, tmp_path, ask, words):
    two = GpuInventory(NvmlState.OK, (_fake_gpu(0), _fake_gpu(1)), "550.54", "12.4")
    monkeypatch.setattr("mgpu_gui.core.children.supervisor.query_inventory", lambda: two)
    out_dir = tmp_path / "runs"
    result = run_in_process(capsys, "--data", files["data"], *TINY, *ask, "-o", out_dir)
    assert_refused(*result, out_dir, *words)


def test_relative_output_folder_is_made_absolute(files, tmp_path, monkeypatch):
    """The worker and the export verifier run in other folders than the CLI."""
    from mgpu_gui.core.children.supervisor import prepare_run
    from mgpu_gui.core.config import RunConfig

    monkeypatch.chdir(tmp_path)
    run = prepare_run(RunConfig(data=str(files["data"]), batch_per_replica=4, output_dir="rel"),
                      GpuInventory(NvmlState.NO_DRIVER))
    assert run.run_dir.path.is_absolute()
    assert run.run_dir.path.parent == tmp_path / "rel"
    assert Path(run.run_dir.read_config().output_dir).is_absolute()


# -- refused by the worker (the built model tells) -------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("builder, words", [
    ("raises", ["raises.py: build_model() failed at line 4", "RuntimeError: boom in user code"]),
    ("returns_none", ["returns_none.py: build_model() returned None",
                      "must return a keras.Model", "`return model` missing"]),
    ("fixed5", ["expects inputs of shape (5,)", "the data has (8,)",
                "build_model(input_shape) adapts by itself"]),
])
def test_py_model_fails_in_the_worker(files, tmp_path, builder, words):
    out_dir = tmp_path / "runs"
    result = run_subprocess("--model", files[builder], "--data", files["data"], *TINY, *CPU,
                            "-o", out_dir)
    # A refusal, as `train --help` says: exit 2, not 1 (issue 29, item 14).
    assert result[0] == cli.EXIT_USAGE
    assert_refused(*result, out_dir, *words)
    from mgpu_gui.core.runs.store import RunStore

    with RunStore() as store:
        assert store.runs() == []  # no row left pointing at the removed folder
    assert "mgpu-train resume" not in result[1] + result[2]


@pytest.mark.slow
def test_lambda_layer_with_consent_trains(files, models, tmp_path):
    # Relative -o from another folder: the export verifier must still find the files.
    code, out, err = run_subprocess("--model", models["lambda"], "--data", files["data"],
                                    *TINY, *CPU, "--allow-unsafe-code", "-o", "runs",
                                    cwd=tmp_path)
    assert "Traceback" not in out + err
    assert "loading with safe_mode off (allowed by the user)" in out, out + err
    assert "Epoch 1/1" in out, out + err
    (folder,) = (tmp_path / "runs").iterdir()
    run_dir = RunDir(folder)
    assert [e.epoch for e in run_dir.events() if isinstance(e, EpochEnd)] == [0]
    assert run_dir.last_checkpoint.exists()
    # The user's consent carries over to the export's verification reload.
    assert code == 0, err
    assert run_dir.export_path("keras").exists()


@pytest.mark.slow
def test_export_command_with_relative_paths(models, tmp_path):
    shutil.copy(models["three"], tmp_path / "model.keras")
    code, out, err = run_subprocess("export", "model.keras", "-o", "copy.keras", cwd=tmp_path)
    assert code == 0, out + err
    assert "Exported keras model" in out and (tmp_path / "copy.keras").is_file()
    from mgpu_gui.core.eventtext import is_noise

    assert not [line for line in (out + err).splitlines() if is_noise(line)], err


# -- acceptance ----------------------------------------------------------------
@pytest.mark.slow
def test_demo_acceptance_run(tmp_path):
    exe = shutil.which("mgpu-train", path=os.path.dirname(sys.executable))
    assert exe is not None, "the mgpu-train console script is not installed next to Python"
    out_dir = tmp_path / "runs"
    told = tmp_path / "told.json"  # the on-finish command: what it was told, then it fails
    hook = shlex.join([sys.executable, "-c", "import json, os, sys; json.dump({k: v for k, v "
                       f"in os.environ.items() if k.startswith('MGPU_RUN_')}}, open({str(told)!r}"
                       ", 'w')); print('mail server down'); sys.exit(3)"])
    done = subprocess.run([exe, "--replicas", "2", "--epochs", "10", "-o", str(out_dir),
                           "--on-finish", hook], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "num_replicas_in_sync = 2" in done.stdout
    assert "Global batch 128" in done.stdout
    (folder,) = out_dir.iterdir()
    run_dir = RunDir(folder)
    epochs = [e for e in run_dir.events() if isinstance(e, EpochEnd)]
    assert len(epochs) == 10
    assert epochs[-1].metrics["val_accuracy"] >= 0.95, epochs[-1].metrics

    # The hook ran once, told about this run; its failure is logged, the run completed.
    environment = json.loads(told.read_text())
    assert environment["MGPU_RUN_STATUS"] == "completed"
    assert environment["MGPU_RUN_FOLDER"] == str(folder) and environment["MGPU_RUN_ID"]
    assert environment["MGPU_RUN_BEST"].startswith("val_loss ")
    assert "(epoch " in environment["MGPU_RUN_BEST"]
    logged = run_dir.worker_log.read_text()
    assert logged.count("On-finish command") == 1
    assert "failed (exit 3); it said: mail server down" in logged

    model_path = run_dir.export_path("keras")
    code = ("import keras, numpy as np; "
            f"m = keras.saving.load_model({str(model_path)!r}); "
            "print(m.predict(np.zeros((2, 8, 8, 1))).shape)")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip().splitlines()[-1] == "(2, 10)", loaded.stdout


# -- the one list of train flags ------------------------------------------------
def _sample(action: argparse.Action) -> list[str]:
    """A value the flag accepts (none for a switch)."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [list(action.choices)[-1]]
    return ["3"] if action.type in (int, float) else ["x"]


@pytest.mark.parametrize("command", [["scale"], ["find-batch"], ["queue", "add"],
                                     ["worker", "--cluster", "127.0.0.1:2222", "--index", "0"]])
def test_every_train_flag_is_taken_as_train_takes_it(command):
    """scale, find-batch, queue add and worker take the train command's flags from the one
    list (common.add_train_arguments): none is missing, none means something else."""
    parser = cli.build_parser()
    flags = common.add_train_arguments(argparse.ArgumentParser())
    assert len(flags) > 30
    for action in flags:
        for flag in action.option_strings:
            args = [flag, *_sample(action)]
            expected = getattr(parser.parse_args(["train", *args]), action.dest)
            try:
                parsed = parser.parse_args([*command, *args])
            except SystemExit:
                pytest.fail(f"`{' '.join(command[:2])}` refuses the train flag {flag}")
            assert getattr(parsed, action.dest) == expected, flag


def test_scale_refuses_xla_with_a_reason(capsys):
    code, out, err = run_in_process(capsys, "scale", "--cpu", "--xla")
    assert code == cli.EXIT_USAGE and err.startswith("error: --xla: the scaling test times "
                                                     "steps without XLA"), err


# -- run history ---------------------------------------------------------------
def _stored_run(tmp_path: Path, status: str = "completed") -> Path:
    from mgpu_gui.core.config import RunConfig
    from mgpu_gui.core.events import RunFinished, RunStatus
    from mgpu_gui.core.runs.folder import create_run_dir
    from mgpu_gui.core.runs.store import RunStore
    from tests.test_store import epoch_events, started

    run_dir = create_run_dir(RunConfig(output_dir=str(tmp_path / "runs"), run_name="hist",
                                       epochs=3))
    with RunStore() as store:
        recorder = store.recorder(store.add_run(run_dir))
        for event in [started(), *epoch_events(0, 0.8), *epoch_events(1, 0.6),
                      RunFinished(status=RunStatus(status), epochs_done=2, best_epoch=1,
                                  best_metric="val_loss", best_value=0.6)]:
            recorder.handle(event)
        recorder.close()
    return run_dir.path


def test_runs_lists_the_history(capsys, tmp_path):
    code, out, _ = run_in_process(capsys, "runs")
    assert code == 0 and "No runs yet" in out
    folder = _stored_run(tmp_path, "stopped")
    code, out, _ = run_in_process(capsys, "runs")
    header, row = out.splitlines()
    assert header.split() == ["ID", "STATUS", "STARTED", "MODEL", "DIFFERS", "DEVICES",
                              "EPOCHS", "BEST", "TAGS", "SIZE", "FOLDER"]
    assert "stopped" in row and "2 CPU replicas" in row and "2/3" in row
    assert "val_loss 0.6 (epoch 2)" in row and row.endswith(str(folder))
    code, out, _ = run_in_process(capsys, "runs", "--json")
    (record,) = json.loads(out)
    assert record["status"] == "stopped" and record["run_dir"] == str(folder)


def test_store_option_goes_before_or_after_the_command(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("MGPU_GUI_STORE")
    elsewhere = tmp_path / "other.sqlite3"
    for args in (["--store", elsewhere, "runs"], ["runs", "--store", elsewhere]):
        code, out, err = run_in_process(capsys, *args)
        assert code == 0 and "No runs yet" in out, err
    assert elsewhere.exists()


def test_unusable_store_is_explained(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    code, _, err = run_in_process(capsys, "--store", tmp_path / "file" / "runs.db", "runs")
    assert code == cli.EXIT_USAGE
    assert err.startswith("error: Cannot open the run store") and "MGPU_GUI_STORE" in err


def test_resume_refuses_what_it_cannot_resume(capsys, tmp_path):
    code, _, err = run_in_process(capsys, "resume", "nosuchrun")
    assert code == cli.EXIT_USAGE and "No run 'nosuchrun'" in err
    folder = _stored_run(tmp_path, "completed")
    code, _, err = run_in_process(capsys, "resume", "hist")
    assert code == cli.EXIT_USAGE
    assert "already completed (0 of 3 epochs); there is nothing to resume" in err
    code, _, err = run_in_process(capsys, "resume", tmp_path)
    assert code == cli.EXIT_USAGE and "No run" in err  # a folder, but not a run's
    assert folder.exists()
