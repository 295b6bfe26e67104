"""`--config` files are checked as strictly as flags (issue 29, finding 7): every bad file
is refused before anything starts, naming the file, the setting and what to give, with
exit 2, no traceback, and nothing left under the runs folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.errors import ConfigError

BAD_FILES = [
    ('{"epochs": "ten"}', ["epochs: must be a whole number", '"ten"']),
    ('{"batch_per_replica": "64"}', ["batch_per_replica: must be a whole number"]),
    ('{"devices": "all"}', ["devices: must be a JSON object"]),
    ('{"epochs": 10,\n "lr": 0.1,}', ["not valid JSON", "line 2, column 12"]),
    ("", ["is empty"]),
    ('{"epochs": NaN}', ["NaN is not a number"]),
    ('{"learning_rate": Infinity}', ["Infinity is not a number"]),
    ('{"epochs": 1.5}', ["epochs: must be a whole number, got a number (1.5)"]),
    ('{"epochs": true}', ["epochs: must be a whole number, got true or false"]),
    ('[{"epochs": 2}]', ["must be a JSON object of settings, got a list"]),
    ('{"devices": {"replicas": "2"}}', ["devices.replicas: must be a whole number"]),
    ('{"devices": {"kind": "tpu"}}', ["devices.kind: must be one of auto, gpu, cpu"]),
    ('{"image_size": [64]}', ["image_size: must be a list of 2 values"]),
    ('{"metrics": "accuracy"}', ["metrics: must be a list"]),
    ('{"early_stopping": {"patience": false}}', ["early_stopping.patience: must be a whole"]),
    ('{"epoch": 3}', ["epoch: unknown setting"]),
]


@pytest.mark.parametrize(("text", "words"), BAD_FILES)
def test_a_bad_config_file_is_refused_before_anything_starts(text, words, tmp_path, capsys):
    path = tmp_path / "settings.json"
    path.write_text(text)
    runs = tmp_path / "runs"
    code = cli.main(["train", "--config", str(path), "--cpu", "-o", str(runs)])
    err = capsys.readouterr().err
    assert code == 2, err
    for word in words:
        assert word in err, err
    assert "Traceback" not in err and "This is a bug" not in err and "unexpected" not in err
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: None, "no such file"),
    (lambda p: p.write_bytes(b"\xff\xfe{"), "cannot be read"),
])
def test_a_config_file_that_cannot_be_read_is_named(make, words, tmp_path, capsys):
    path = tmp_path / "settings.json"
    make(path)
    code = cli.main(["train", "--config", str(path), "--cpu", "-o", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and f"--config {path}" in err and words in err, err
    assert not (tmp_path / "runs").exists()


def test_good_values_load_and_every_problem_is_named_at_once():
    config = RunConfig.from_json('{"epochs": 3, "learning_rate": 1, "seed": null, '
                                 '"image_size": [32, 48], '
                                 '"devices": {"kind": "gpu", "gpus": [0, "1"]}}')
    assert (config.epochs, config.learning_rate, config.seed) == (3, 1, None)
    assert config.devices.gpus == ("0", "1")
    assert config.image_size == (32, 48) and config.devices.kind == "gpu"
    with pytest.raises(ConfigError) as refused:
        RunConfig.from_json('{"epochs": "3", "seed": 1.0, "bogus": 1}')
    assert [field for field, _ in refused.value.problems] == ["bogus", "epochs", "seed"]
    assert RunConfig.from_json(RunConfig().to_json()) == RunConfig()


def test_relative_paths_become_absolute_where_they_enter(tmp_path, monkeypatch):
    """Issue 29, finding 6: a relative --model/--data was stored as given, so `resume`,
    `evaluate` and a queue runner started in another folder could not find the files."""
    import argparse

    from mgpu_gui.cli.common import add_train_arguments, config_from_args

    here, shared = tmp_path / "here", tmp_path / "shared"
    here.mkdir()
    shared.mkdir()
    monkeypatch.chdir(here)
    (shared / "settings.json").write_text('{"data": "data/train.npz", "model": "net.py", '
                                          '"custom_objects": "../objects.py"}')
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    from_file = config_from_args(parser.parse_args(["--config", str(shared / "settings.json"),
                                                    "--val-data", "val.npz", "-o", "runs"]))
    assert from_file.data == str(shared / "data" / "train.npz")  # the file's own folder
    assert from_file.model == str(shared / "net.py")
    assert from_file.custom_objects == str(tmp_path / "objects.py")
    assert from_file.validation_data == str(here / "val.npz")  # a flag's: from here
    assert from_file.output_dir == str(here / "runs")
    named = RunConfig(model="mobilenet_v3_small", data="demo").with_absolute_paths()
    assert (named.model, named.data) == ("mobilenet_v3_small", "demo")
    home = RunConfig(output_dir="~/runs").with_absolute_paths()
    assert home.output_dir == str(Path.home() / "runs")
    assert home.with_absolute_paths() == home


@pytest.mark.parametrize(("flag", "formats"), [("none", ()), ("keras, h5", ("keras", "h5")),
                                               (None, ("keras",))])
def test_export_none_keeps_the_checkpoints_only(flag, formats):
    """`--export none`: no export at the run's end (nor its rehearsal), for a run exported
    later with `mgpu-train export`."""
    import argparse

    from mgpu_gui.cli.common import add_train_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args([] if flag is None else ["--export", flag])
    assert config_from_args(args).export_formats == formats
