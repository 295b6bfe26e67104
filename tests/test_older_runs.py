"""Runs of versions that stored paths as typed (issue 29, finding 6: `resume` and
`evaluate` started in another folder said "model file not found: models/mnist_convnet.py").
Their relative paths are taken from the folder the run was started in, which the run
folder's place under its relative output folder tells; where the files are not there
either, the refusal names the path as stored and where it was looked for. No TensorFlow."""

from __future__ import annotations

import json

import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.runs.folder import RunDir


def older_run(lab, output_dir: str = "runs", **paths) -> RunDir:
    """A run folder as an earlier version left it: its config's paths as typed in `lab`."""
    stored = {**RunConfig().to_dict(), "model": "models/m.keras", "data": "data/d.npz",
              "output_dir": output_dir, **paths}
    folder = (lab / output_dir).resolve() / "20250101-120000-m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(stored))
    return RunDir(folder)


def test_relative_paths_are_taken_from_the_folder_the_run_was_started_in(tmp_path,
                                                                        monkeypatch):
    lab = tmp_path / "lab"
    monkeypatch.chdir(tmp_path)  # elsewhere: the current folder is not the lab
    for output_dir in ("runs", "./experiments/runs"):
        run = older_run(lab, output_dir)
        config = run.read_config()
        assert (config.model, config.data) == (str(lab / "models/m.keras"),
                                               str(lab / "data/d.npz"))
        assert run.started_in(RunConfig.from_json(run.config_json.read_text())) == lab
    # An absolute output folder says nothing of where the run started: the current folder.
    elsewhere = older_run(lab, str(tmp_path / "abs-runs"))
    assert elsewhere.read_config().model == str(tmp_path / "models/m.keras")
    # Written by this version: absolute already, read as written.
    absolute = RunConfig(model=str(lab / "x.keras"), data=str(lab / "d.npz"),
                         output_dir=str(lab / "runs")).to_json()
    elsewhere.config_json.write_text(absolute)
    assert elsewhere.read_config() == RunConfig.from_json(absolute)


def test_a_stored_path_found_in_neither_place_is_named_as_stored_and_as_looked_for(
        tmp_path, monkeypatch, capsys):
    lab = tmp_path / "lab"
    monkeypatch.chdir(tmp_path)
    run = older_run(lab)
    (lab / "models").mkdir(parents=True)
    (lab / "models" / "m.keras").write_bytes(b"a model")  # the model is there, the data not
    with pytest.raises(UserError) as caught:
        run.check_stored_paths()
    message = str(caught.value)
    assert f"'data/d.npz' (looked for at {lab / 'data' / 'd.npz'})" in message
    assert "models/m.keras" not in message and "earlier version" in message
    assert "from the folder the run was started in" in message
    # `evaluate` of that run refuses it the same way, before anything reads the files.
    run.checkpoints.mkdir()
    run.last_checkpoint.write_bytes(b"a checkpoint")
    assert cli.main(["evaluate", str(run.path)]) == 2
    assert "'data/d.npz' (looked for at" in capsys.readouterr().err
    (lab / "data").mkdir()
    (lab / "data" / "d.npz").write_bytes(b"data")
    run.check_stored_paths()  # both found: nothing to say
