"""Messages that must not contradict each other (issue 15, item 9).

"Resumable?" has one answer (`RunDir.resume_point()`): a failure without a backup
suggests no resume, a stop before the first epoch says there is nothing to resume,
`resume` refuses what cannot go on, and a run refused during setup leaves neither
folder nor row. `inspect` says what a `.py` builder is and lists every input. The
worker here is a stand-in (`python -c`), so no test starts TensorFlow.
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mgpu_gui.cli import common
from mgpu_gui.cli import main as cli
from mgpu_gui.core.children import supervisor
from mgpu_gui.core.children.supervisor import PreparedRun, WorkerProcess
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.devices.plan import plan_devices
from mgpu_gui.core.events import ExportNotMade, Phase, RunFailed, RunFinished, RunStatus
from mgpu_gui.core.eventtext import finished_line
from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.core.runs.folder import RunDir, create_run_dir
from mgpu_gui.core.runs.store import RunState, RunStore

HINT = "Continue it with: mgpu-train resume 1"
NOISE = "E0000 00:00:1 123 cuda_executor.cc:1] failed call to cuInit: UNKNOWN ERROR (303)"


def stored_run(tmp_path: Path, store: RunStore, *, backup_epochs: int = 0,
               data: str = "demo") -> PreparedRun:
    config = RunConfig(output_dir=str(tmp_path / "runs"), epochs=3, data=data,
                       devices=DeviceSelection(kind=DeviceKind.CPU, replicas=1))
    run_dir = create_run_dir(config)
    if backup_epochs:
        run_dir.backup.mkdir()
        ckpt.commit_backup(run_dir.backup, backup_epochs)
    run_id = store.add_run(run_dir, config)
    store.begin_attempt(run_id)
    plan = plan_devices(config.devices, GpuInventory(NvmlState.NO_DRIVER))
    return PreparedRun(config=config, plan=plan, run_dir=run_dir, run_id=run_id)


def fake_worker(monkeypatch, *events: RunFailed) -> None:
    """The training worker replaced by a child that prints TensorFlow-like noise, sends
    `events` and exits 1."""
    lines = "".join(event.to_json() + "\n" for event in events)
    code = (f"import os, sys; print({NOISE!r}, file=sys.stderr, flush=True); "
            f"os.write(int(sys.argv[1]), {lines.encode()!r}); sys.exit(1)")
    monkeypatch.setattr(supervisor, "worker_command",
                        lambda run_dir, events_fd, *args, **kw: [sys.executable, "-c", code,
                                                                 str(events_fd)])


def run_worker(run: PreparedRun, store: RunStore):
    worker = WorkerProcess(run, store=store)
    worker.start()
    list(worker.events())
    return worker.outcome()


def test_a_run_refused_during_setup_leaves_no_folder_and_no_row(monkeypatch, tmp_path):
    fake_worker(monkeypatch, RunFailed(message="m.py: build_model() failed", phase=Phase.SETUP,
                                       error_type="ModelError"))
    with RunStore() as store:
        run = stored_run(tmp_path, store)
        outcome = run_worker(run, store)
        assert outcome.status is RunStatus.FAILED and not outcome.resumable
        assert not run.run_dir.path.exists()
        assert store.runs() == []  # nothing for `resume` to call "not a run folder"


@pytest.mark.parametrize("backup_epochs", [0, 1])
def test_a_dead_worker_suggests_a_resume_only_with_a_backup(monkeypatch, tmp_path, capsys,
                                                           backup_epochs):
    fake_worker(monkeypatch)  # dies without a word
    with RunStore() as store:
        run = stored_run(tmp_path, store, backup_epochs=backup_epochs)
        outcome = run_worker(run, store)
        (record,) = store.runs()
    assert record.status is RunState.FAILED
    assert outcome.resumable is bool(backup_epochs)
    # The start-up noise stays in worker.log, which the message names.
    assert NOISE in run.run_dir.worker_log.read_text()
    assert f"Its full output is in {run.run_dir.worker_log}" in outcome.message
    assert common._report_outcome(outcome, sys.stdout, False, False, HINT) == common.EXIT_FAILED
    err = capsys.readouterr().err
    if backup_epochs:
        assert "The backup of the 1 completed epoch is kept" in err
        assert "a resume continues with epoch 2" in err and HINT in err
    else:
        assert "No epoch was completed, so there is no backup to resume from." in err
        assert HINT not in err and "resum" not in err.replace("no backup to resume", "")


@pytest.mark.parametrize("done, words, resumable", [
    (0, "Stopped before the first epoch; nothing to resume.", False),
    (2, "Stopped after 2 complete epoch(s). Stopped by request. The run can be resumed "
        "from its backup.", True),
])
def test_a_stop_says_resumable_only_with_a_complete_epoch(capsys, tmp_path, done, words,
                                                          resumable):
    stopped = RunFinished(status=RunStatus.STOPPED, epochs_done=done,
                          message="Stopped by request.")
    assert finished_line(stopped) == words
    outcome = supervisor.RunOutcome(RunStatus.STOPPED, "", events=[stopped],
                                    resumable=resumable)
    common._report_outcome(outcome, sys.stdout, False, True, HINT)
    out = capsys.readouterr().out
    assert words in out and (HINT in out) is resumable


@pytest.mark.parametrize("failed, code", [
    (RunFailed(message="m.py: build_model() returned None", phase=Phase.SETUP,
               error_type="ModelError", user_error=True), common.EXIT_USAGE),
    (RunFailed(message="unexpected", phase=Phase.SETUP, error_type="KeyError"),
     common.EXIT_FAILED),
    (RunFailed(message="NaN loss", phase=Phase.TRAINING, error_type="DataError",
               user_error=True), common.EXIT_FAILED),
])
def test_exit_codes_say_refused_failed_or_trained_without_an_export(capsys, failed, code):
    """`train --help`: 2 for a refusal, the worker's before its first step included (it
    said 1: issue 29, item 14); 1 for a failure; 3 when a requested format was not made."""
    outcome = supervisor.RunOutcome(RunStatus.FAILED, failed.message, events=[failed])
    assert common._report_outcome(outcome, sys.stdout, False, False, HINT) == code
    finished = RunFinished(status=RunStatus.COMPLETED, epochs_done=2)
    missing = ExportNotMade(format="savedmodel", message="differs by 0.51")
    for events, expected in (([finished], 0), ([missing, finished], 3)):
        outcome = supervisor.RunOutcome(RunStatus.COMPLETED, "", events=events)
        assert common._report_outcome(outcome, sys.stdout, False, False, HINT) == expected
    capsys.readouterr()


def test_resume_refuses_a_deleted_folder_and_a_run_without_a_backup(capsys, tmp_path):
    with RunStore() as store:
        gone = stored_run(tmp_path, store)
        empty = stored_run(tmp_path / "other", store)
    shutil.rmtree(gone.run_dir.path)
    assert cli.main(["resume", str(gone.run_id)]) == common.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"The run folder {gone.run_dir.path} was deleted: there is nothing to resume" in err
    assert "not a run folder" not in err and "mgpu-train runs --prune" in err
    assert cli.main(["resume", str(empty.run_id)]) == common.EXIT_USAGE
    err = capsys.readouterr().err
    assert "was completed, so there is no backup to resume from" in err
    assert f"mgpu-train --config {empty.run_dir.config_json}" in err
    # `runs` marks the deleted one and says how to remove it; --prune does.
    assert cli.main(["runs"]) == 0
    out = capsys.readouterr().out
    assert f"{gone.run_dir.path} (deleted)" in out and "--prune" in out
    assert cli.main(["runs", "--prune"]) == 0
    captured = capsys.readouterr()
    assert f"Removed run {gone.run_id}" in captured.err
    assert str(gone.run_dir.path) not in captured.out and str(empty.run_dir.path) in captured.out


@pytest.mark.parametrize("change, words", [
    (lambda data: np.savez(data, x_train=np.zeros((13, 4)), y_train=np.arange(13)),
     "data.npz is 1.0 KiB, 914 bytes when the run started"),  # numpy's .npz sizes
    (lambda data: data.unlink(), "cannot be read now: No such file or directory"),
])
def test_resume_after_the_data_changed_names_the_change_not_the_backup(
        capsys, tmp_path, change, words):
    """Issue 29, finding 5: the data grew from 10 classes to 13; resume blamed an intact
    backup ("cannot be read ... Start a new run") and offered a resume in the same output."""
    from mgpu_gui.core.runs.environment import RunEnvironment, environment_path, fingerprint

    data = tmp_path / "data.npz"
    np.savez(data, x_train=np.zeros((10, 4)), y_train=np.arange(10))
    with RunStore() as store:
        run = stored_run(tmp_path, store, backup_epochs=1, data=str(data))
    recorded = RunEnvironment(files=(fingerprint("data", data),))
    environment_path(run.run_dir.path).write_text(json.dumps(recorded.to_dict()))
    change(data)
    assert cli.main(["resume", str(run.run_id)]) == common.EXIT_USAGE
    err = capsys.readouterr().err
    assert "its data changed since it started" in err and words in err, err
    assert f"mgpu-train --config {run.run_dir.config_json}" in err
    assert "backup" not in err and "mgpu-train resume" not in err


def test_resume_point_says_the_same_everywhere(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    assert not run_dir.resume_point().exists
    assert "was deleted, so there is nothing to resume" in run_dir.resume_point().kept()
    run_dir.backup.mkdir(parents=True)
    point = run_dir.resume_point()
    assert point.exists and not point.resumable and point.refusal() is not None
    ckpt.commit_backup(run_dir.backup, 3)
    point = run_dir.resume_point()
    assert point.resumable and point.refusal() is None and point.epochs_done == 3
    assert point.kept() == (f"The backup of the 3 completed epochs is kept in "
                            f"{run_dir.backup}; a resume continues with epoch 4.")


# -- inspect --------------------------------------------------------------------------
def _layer(cls: str, name: str, **config) -> dict:
    return {"class_name": cls, "name": name, "config": {"name": name, **config}}


def test_inspect_says_what_a_builder_file_is(capsys, tmp_path):
    path = tmp_path / "raises.py"
    path.write_text("def build_model(input_shape, num_classes):\n    raise ValueError\n")
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("raises.py: a model builder file (Python): build_model(")
    assert "builds the model when a run starts" in out and "Show summary" in out
    assert "?" not in out and "saved by Keras" not in out and "compiled" not in out


def test_inspect_lists_every_input(capsys, tmp_path):
    config = {"class_name": "Functional", "config": {
        "name": "two", "layers": [
            _layer("InputLayer", "image", batch_shape=[None, 8, 8, 1]),
            _layer("InputLayer", "meta", batch_shape=[None, 2]),
            _layer("Concatenate", "joined"), _layer("Dense", "out", units=3,
                                                    activation="softmax")],
        "input_layers": [["image", 0, 0], ["meta", 0, 0]],
        "output_layers": [["out", 0, 0]]}}
    path = tmp_path / "two.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "two.keras: Keras model (.keras), Functional 'two', saved by Keras 3.15.1" in out
    assert "2 inputs: image (8, 8, 1), meta (2,)" in out and "single-input" in out
    assert "output: 3 units, activation softmax" in out
