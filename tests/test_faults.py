"""Real faults inside a running worker, driven through `mgpu-train` in a subprocess.

Each test asserts the message the user reads on stderr, a non-zero exit, and
what the run folder keeps. Most faults come from the test-only hook
`MGPU_GUI_FAULT=KIND@EPOCH:STEP` (testing/faults.py); a NaN comes from the data
and a model-code exception from a real `tf.numpy_function` in a `.py` model.
Full and read-only disks are small tmpfs mounts in a user namespace
(`unshare --user --map-root-user --mount`); where that is not permitted those
tests are skipped. Every run is 1-2 epochs of 4 steps on 36 samples.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.testing.faults import ENV_VAR, FILL_NAME, Fault, FaultKind, FaultSpecError, from_env

EXIT_FAILED, EXIT_USAGE = 1, 2
TIMEOUT_S = 120
# 40 samples, 10 % validation: 36 training samples, global batch 8, 4 steps an epoch.
# No export: these runs fail on purpose, and an export's check is a TensorFlow start.
TRAIN = ["--cpu", "--replicas", "2", "--epochs", "2", "--batch-per-replica", "4",
         "--export", "none"]


# -- files -----------------------------------------------------------------------
@pytest.fixture(scope="session")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("faults")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 8)).astype("float32")
    y = rng.integers(0, 3, size=40).astype("int64")
    np.savez(root / "data.npz", x_train=x, y_train=y)
    builders = {
        # No ReLU, which would hide NaN inputs from the loss.
        "linear": """
            import keras

            def build_model(input_shape, num_classes):
                return keras.Sequential([
                    keras.Input(input_shape),
                    keras.layers.Dense(num_classes, activation="softmax"),
                ])
            """,
        # ~150 KiB checkpoints: larger than the fill_disk hook's reserve of 64 KiB.
        "wide": """
            import keras

            def build_model(input_shape, num_classes):
                return keras.Sequential([
                    keras.Input(input_shape),
                    keras.layers.Dense(1024, activation="relu"),
                    keras.layers.Dense(num_classes, activation="softmax"),
                ])
            """,
        # A custom layer whose Python code fails on its 13th training call: with 2
        # replicas that is the third step of epoch 2 (each step calls it twice).
        "usercode": """
            import keras
            import tensorflow as tf

            CALLS = [0]


            def check(x):
                CALLS[0] += 1
                if CALLS[0] > 12:
                    raise ValueError(f"bad value after {CALLS[0] - 1} calls")
                return x


            class Checked(keras.layers.Layer):
                def call(self, x, training=None):
                    if not training:
                        return x
                    y = tf.numpy_function(check, [x], tf.float32)
                    y.set_shape(x.shape)
                    return y


            def build_model(input_shape, num_classes):
                return keras.Sequential([
                    keras.Input(input_shape),
                    Checked(),
                    keras.layers.Dense(16, activation="relu"),
                    keras.layers.Dense(num_classes, activation="softmax"),
                ])
            """,
    }
    for name, text in builders.items():
        (root / f"{name}.py").write_text(textwrap.dedent(text).lstrip())
    return {"root": root, "data": root / "data.npz",
            **{name: root / f"{name}.py" for name in builders}}


@pytest.fixture(scope="session")
def trained_keras(files) -> Path:
    """The wide model trained one step and saved: a `.keras` file with optimizer state."""
    path = files["root"] / "wide.keras"
    code = textwrap.dedent(f"""
        import keras, numpy as np, runpy
        model = runpy.run_path({str(files["wide"])!r})["build_model"]((8,), 3)
        model.compile("adam", "sparse_categorical_crossentropy")
        model.fit(np.zeros((8, 8)), np.zeros(8), epochs=1, verbose=0)
        model.save({str(path)!r})
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                   timeout=TIMEOUT_S, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    return path


# -- helpers ---------------------------------------------------------------------
def _no_core_files() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # abort() must not dump a core


def run_cli(*args: object, fault: str | None = None,
            prefix: list[str] | None = None) -> tuple[int, str, str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop(ENV_VAR, None)
    if fault is not None:
        env[ENV_VAR] = fault
    command = [*(prefix or []), sys.executable, "-m", "mgpu_gui.cli.main", *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env,
                          preexec_fn=_no_core_files)
    return done.returncode, done.stdout, done.stderr


def the_run(out_dir: Path) -> RunDir:
    (folder,) = [p for p in out_dir.iterdir() if p.is_dir()]
    return RunDir(folder)


def assert_message(code: int, out: str, err: str, expected_code: int, *words: str) -> None:
    assert code == expected_code, (code, out, err)
    assert err.startswith("error: "), out + err
    for word in words:
        assert word in err, f"{word!r} not in: {err}"


def assert_backup_of(run_dir: RunDir, epochs: int) -> None:
    """The backup says `epochs` are done and its model file is complete; no temp files."""
    assert run_dir.backup_epoch() == epochs
    state = ckpt.read_backup(run_dir.backup)
    assert state is not None and state.model is not None and state.model.is_file()
    assert state.model.name == ckpt.backup_model_name(epochs)
    assert [p.name for p in run_dir.backup.glob("epoch-*.keras")] == [state.model.name]
    assert os.path.samefile(state.model, run_dir.last_checkpoint)
    assert not ckpt.temp_files(run_dir.path)


# -- the hook itself (no TensorFlow) -----------------------------------------------
def test_fault_spec_parses_and_refuses_clearly():
    assert Fault.parse("oom@2:3") == Fault(FaultKind.OOM, 2, 3)
    assert Fault.parse(" fill_disk@1:10 ") == Fault(FaultKind.FILL_DISK, 1, 10)
    assert from_env({}) is None and from_env({ENV_VAR: ""}) is None
    assert from_env({ENV_VAR: "kill@3:1"}) == Fault(FaultKind.KILL, 3, 1)
    for bad, words in (("oom", "is not KIND@EPOCH:STEP"), ("oom@2", "is not KIND@EPOCH:STEP"),
                       ("boom@1:1", "unknown kind 'boom'"), ("oom@0:1", "count from 1")):
        with pytest.raises(FaultSpecError, match=words):
            Fault.parse(bad)


# -- crash-safe files (no TensorFlow) --------------------------------------------------
def test_failed_write_keeps_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "last.keras"
    path.write_bytes(b"complete old model")

    def partial(tmp: Path) -> None:
        assert tmp.parent == tmp_path and tmp.name.endswith(".keras")  # Keras needs the suffix
        tmp.write_bytes(b"half a mod")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        ckpt.write_atomically(path, partial)
    assert path.read_bytes() == b"complete old model"
    assert not ckpt.temp_files(tmp_path)


def test_links_fall_back_to_copies(tmp_path, monkeypatch):
    source, linked, copied = tmp_path / "a.keras", tmp_path / "b.keras", tmp_path / "c.keras"
    source.write_bytes(b"model")
    ckpt.link_atomically(source, linked)
    assert linked.samefile(source)

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    ckpt.link_atomically(source, copied)
    assert copied.read_bytes() == b"model" and not copied.samefile(source)
    assert not ckpt.temp_files(tmp_path)


def test_backup_metadata_written_last_and_old_files_pruned(tmp_path):
    backup = tmp_path / "backup"
    for epoch in (1, 2):
        ckpt.write_backup_model(backup, epoch, lambda p, e=epoch: p.write_bytes(b"%d" % e))
        assert ckpt.read_backup(backup) == (
            None if epoch == 1 else ckpt.BackupState(1, backup / "epoch-0001.keras"))
        ckpt.commit_backup(backup, epoch)
        model = backup / ckpt.backup_model_name(epoch)
        assert ckpt.read_backup(backup) == ckpt.BackupState(epoch, model)
    assert sorted(p.name for p in backup.iterdir()) == ["epoch-0002.keras", ckpt.METADATA_NAME]


def test_write_failures_are_recognised():
    h5py_text = OSError("Unable to synchronously create file (file write failed: ..., "
                        "errno = 28, error message = 'No space left on device')")
    assert ckpt.write_failure(OSError(errno.ENOSPC, "No space left on device")) == "full"
    assert ckpt.write_failure(h5py_text) == "full"
    wrapped = RuntimeError("export failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert ckpt.write_failure(wrapped) == "full"
    assert ckpt.write_failure(OSError(errno.EROFS, "Read-only file system")) == "unwritable"
    run = Path("/runs/20260101-000000-demo")
    inside = OSError(errno.EACCES, "Permission denied", str(run / "backup" / "x.keras"))
    unreadable_input = OSError(errno.EACCES, "Permission denied", "/data/train.npz")
    assert ckpt.write_failure(inside, run) == "unwritable"
    assert ckpt.write_failure(unreadable_input, run) is None
    assert ckpt.write_failure(ValueError("shapes differ")) is None
    assert ckpt.format_bytes(64 * 1024) == "64.0 KiB" and ckpt.format_bytes(12) == "12 bytes"


# -- faults from the hook -------------------------------------------------------------
@pytest.mark.slow
def test_out_of_memory_names_batch_and_step(files, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_cli("--model", files["wide"], "--data", files["data"], *TRAIN, "-o", out_dir,
                     fault="oom@2:3")
    assert_message(*result, EXIT_FAILED,
                   "Out of memory in epoch 2 at step 3 of 4 on the 2 CPU replicas in use",
                   "with a batch of 4 per replica (global batch 8 = 4 x 2 replicas)",
                   "Use a smaller batch per replica, e.g. 2 (--batch-per-replica 2",
                   "The backup of the 1 completed epoch is kept",
                   "TensorFlow said: OOM when allocating tensor with shape[")
    assert_backup_of(the_run(out_dir), 1)


@pytest.mark.slow
def test_error_in_training_names_step_type_and_log(files, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_cli("--model", files["wide"], "--data", files["data"], *TRAIN, "-o", out_dir,
                     fault="error@2:3")
    assert_message(*result, EXIT_FAILED,
                   "Training failed in epoch 2 at step 3 of 4 with RuntimeError: injected by "
                   "MGPU_GUI_FAULT=error@2:3",
                   "most likely the model's own (custom layers, losses or metrics)",
                   "The backup of the 1 completed epoch is kept",
                   "The full traceback is in worker.log in the run folder")
    run_dir = the_run(out_dir)
    assert_backup_of(run_dir, 1)
    log = run_dir.worker_log.read_text()
    assert "Traceback (most recent call last)" in log and "RuntimeError: injected" in log


@pytest.mark.slow
@pytest.mark.parametrize("kind, signal_number", [("abort", 6), ("kill", 9)])
def test_hard_crash_keeps_the_backup(files, tmp_path, kind, signal_number):
    out_dir = tmp_path / "runs"
    result = run_cli("--model", files["wide"], "--data", files["data"], *TRAIN, "-o", out_dir,
                     fault=f"{kind}@2:3")
    assert_message(*result, EXIT_FAILED,
                   f"The training process was killed by signal {signal_number}",
                   "without reporting an error", "Last output lines:",
                   f"MGPU_GUI_FAULT: injecting {kind} in epoch 2 at step 3")
    assert_backup_of(the_run(out_dir), 1)


# -- faults from the data and the model's code -------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("model, words", [
    ("linear", ["The loss became NaN or infinite in epoch 1 at step 1 of 4"]),
    # A ReLU turns the NaN kernel's outputs into 0s: the loss stays finite, the weights not.
    ("wide", ["The model's weights became NaN or infinite in epoch 1, though the loss "
              "stayed finite", "Training stopped without saving them."]),
])
def test_nan_weights_mid_run(files, tmp_path, model, words):
    """NaN reaching the weights during training (data with NaN are refused before a run:
    tests/test_data_content.py) stops the run without saving them."""
    out_dir = tmp_path / "runs"
    result = run_cli("--model", files[model], "--data", files["data"], *TRAIN, "-o", out_dir,
                     fault="nan@1:1")
    # Not resumable: the same backup and settings would meet the same NaN again.
    assert_message(*result, EXIT_FAILED, *words, "No epoch was completed.",
                   "heck the data for NaN values")
    assert "resume" not in result[1] + result[2]
    run_dir = the_run(out_dir)
    assert run_dir.backup_epoch() == 0  # nothing NaN was saved
    assert not run_dir.last_checkpoint.exists()
    assert not ckpt.temp_files(run_dir.path)


@pytest.mark.slow
def test_exception_in_the_models_code(files, tmp_path):
    out_dir = tmp_path / "runs"
    result = run_cli("--model", files["usercode"], "--data", files["data"], *TRAIN,
                     "-o", out_dir)
    assert_message(*result, EXIT_FAILED,
                   "The model's code raised ValueError: bad value after 12 calls in epoch 2 "
                   "at step 3 of 4 (usercode.py, line 10, in check)",
                   "inside a tf.numpy_function or tf.py_function",
                   "The backup of the 1 completed epoch is kept",
                   "The full traceback is in worker.log in the run folder")
    run_dir = the_run(out_dir)
    assert_backup_of(run_dir, 1)
    assert "ValueError: bad value after 12 calls" in run_dir.worker_log.read_text()


# -- disks: small tmpfs mounts in a user namespace ---------------------------------
@pytest.fixture(scope="session")
def tmpfs_ok(tmp_path_factory) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to mount a small tmpfs")
    mount = tmp_path_factory.mktemp("probe")
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "mount", "-t",
                           "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"this machine does not permit a tmpfs in a user namespace "
                    f"(unshare --user --map-root-user --mount): {done.stderr.strip()}")


def run_on_tmpfs(mount: Path, options: str, *args: object, fault: str | None = None,
                 keep: Path | None = None, prefill: int = 0) -> tuple[int, str, str]:
    """The CLI with `mount` a fresh tmpfs; `keep` receives a copy of it afterwards."""
    mount.mkdir(parents=True, exist_ok=True)
    then = ""
    if prefill:
        then += (f"head -c {prefill} /dev/zero > {shlex.quote(str(mount / 'other-data'))} && ")
    script = (f"mount -t tmpfs -o {options} tmpfs {shlex.quote(str(mount))} && {then}"
              f'"$@"; code=$?; ')
    if keep is not None:  # the filler is no use there
        script += (f"rm -f {shlex.quote(str(mount / 'runs' / FILL_NAME))}; "
                   f"cp -a {shlex.quote(str(mount))}/. {shlex.quote(str(keep))}/; ")
    script += "exit $code"
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    prefix = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"]
    return run_cli(*args, fault=fault, prefix=prefix)


@pytest.mark.slow
def test_disk_filling_up_mid_run(files, tmp_path, tmpfs_ok):
    mount, kept = tmp_path / "disk", tmp_path / "kept"
    result = run_on_tmpfs(mount, "size=32m", "--model", files["wide"], "--data", files["data"],
                          *TRAIN, "-o", mount / "runs", fault="fill_disk@2:2", keep=kept)
    run_path = the_run(kept / "runs").path
    folder = mount / "runs" / run_path.name
    assert_message(*result, EXIT_FAILED,
                   f"The disk holding the run folder {folder} is full (",
                   "a write failed while saving the checkpoint of epoch 2 "
                   "(No space left on device).",
                   "The backup of the 1 completed epoch is kept",
                   "Free some space on that disk, then resume the run.")
    run_dir = RunDir(run_path)
    assert_backup_of(run_dir, 1)
    meta = json.loads((run_dir.backup / ckpt.METADATA_NAME).read_text())
    assert meta == {"epoch": 1, "model": "epoch-0001.keras"}


@pytest.mark.slow
def test_nearly_full_disk_is_refused_before_training(files, trained_keras, tmp_path, tmpfs_ok):
    mount = tmp_path / "disk"
    size = trained_keras.stat().st_size
    code, out, err = run_on_tmpfs(mount, "size=20m", "--model", trained_keras, "--data",
                                  files["data"], *TRAIN, "--export", "keras", "-o",
                                  mount / "runs", prefill=12 * 2**20, keep=tmp_path / "kept")
    need = ckpt.format_bytes(16 * 2**20 + 4 * size)
    assert_message(code, out, err, EXIT_USAGE,
                   f"Not enough free disk space for this run in {mount / 'runs'}: it needs "
                   f"about {need} (4 copies of a {ckpt.format_bytes(size)} model checkpoint",
                   "and 1 export(s)) plus 16.0 MiB for logs",
                   "but only 8.0 MiB is free on that disk",
                   "Free some space there, or choose another output folder (--output-dir)")
    assert not (tmp_path / "kept" / "runs").exists()  # refused before any run folder


@pytest.mark.slow
def test_read_only_output_folder_is_refused_before_training(files, tmp_path, tmpfs_ok):
    mount = tmp_path / "disk"
    code, out, err = run_on_tmpfs(mount, "ro,size=1m", "--model", files["wide"], "--data",
                                  files["data"], *TRAIN, "-o", mount / "runs")
    assert_message(code, out, err, EXIT_USAGE,
                   f"Cannot write to output folder {mount / 'runs'}: Read-only file system",
                   "Choose a folder you can write to (--output-dir)")
