"""A run's --mesh and --layout (issue 31, second step): checked with the other settings
and against the planned devices before a run folder or a history row exists; a bad
value is one message, exit 2, nothing left behind, from a flag or a --config file alike.
No TensorFlow starts here."""

from __future__ import annotations

import json

import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInfo
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.runs.preflight import check_mesh


def _refused(words, tmp_path, capsys) -> str:
    runs = tmp_path / "runs"
    code = cli.main(["train", "--cpu", "-o", str(runs), "--epochs", "1", *words])
    assert code == 2
    assert not runs.exists() or not any(runs.iterdir())
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(("words", "expected"), [
    (["--mesh", "2x2", "--replicas", "2", "--engine", "jax"],
     "--mesh 2x2 spans 4 devices (2 data x 2 model), but the run has 2 CPU replicas "
     "(--replicas): give 4, or a mesh of 2 (2x1, 1x2)"),
    (["--mesh", "2x2", "--replicas", "4"],
     "Keras 3's ModelParallel (variables split over the devices) runs on the JAX backend "
     "only; add --engine jax"),
    (["--mesh", "2x1", "--layout", "d=(data,)"],
     "--layout: layout rules lay variables out over a mesh: Keras 3's ModelParallel"),
    (["--mesh", "auto", "--replicas", "4", "--engine", "jax"],
     "--mesh auto picks the smallest model axis that fits the devices' memory, and CPU "
     "replicas have no memory of their own to plan by: give --mesh DATAxMODEL"),
    (["--mesh", "two", "--engine", "jax"], "--mesh: --mesh 'two': give DATAxMODEL"),
    (["--mesh", "0x2", "--engine", "jax"], "both sizes must be at least 1"),
    (["--layout", "dense.*=(None,model)", "--engine", "jax"],
     "--layout: layout rules say how variables split over a mesh: give --mesh DATAxMODEL"),
    (["--mesh", "1x2", "--layout", "dense=(None,shard)", "--engine", "jax"],
     "--layout: layout rule 'dense=(None,shard)': unknown axis 'shard'"),
    (["--mesh", "1x2", "--layout", "no-such-rules.txt", "--engine", "jax"],
     "no such file, and not a rule REGEX=(AXES)"),
])
def test_a_bad_mesh_is_refused_before_anything_starts(words, expected, tmp_path, capsys):
    assert expected in _refused(words, tmp_path, capsys)


def test_a_config_file_mesh_is_refused_as_the_flag_is(tmp_path, capsys):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"mesh": "2x2", "devices": {"kind": "cpu", "replicas": 4}}))
    err = _refused(["--config", str(path)], tmp_path, capsys)
    assert "--mesh: --mesh 2x2 splits variables over 2 devices: Keras 3's ModelParallel" in err
    path.write_text(json.dumps({"mesh": 4}))
    assert "mesh: must be a string" in _refused(["--config", str(path)], tmp_path, capsys)


def test_data_parallel_meshes_pass_on_both_engines():
    for mesh in (None, "2x1", "4x1"):
        assert not [p for p in RunConfig(mesh=mesh).problems() if p[0] in ("mesh", "layout")]
    assert not [p for p in RunConfig(mesh="1x2", engine="jax").problems() if p[0] == "mesh"]


def test_a_layout_file_becomes_absolute_rules_stay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert RunConfig(layout="rules.txt").with_absolute_paths().layout == str(
        tmp_path / "rules.txt")
    assert RunConfig(layout="d.*=(None,model)").with_absolute_paths().layout == (
        "d.*=(None,model)")


def _gpu(memory: int | None) -> GpuInfo:
    return GpuInfo(index=0, name="GPU", uuid="GPU-0", pci_bus_id="0", memory_total=memory,
                   compute_capability=None)


@pytest.mark.parametrize(("mesh", "plan", "config", "expected"), [
    ("1x4", DevicePlan(DeviceKind.GPU, 2, gpus=(_gpu(2**34),) * 2), {"gpus": ("0", "1")},
     "--mesh 1x4 spans 4 devices (1 data x 4 model), but the run has 2 GPUs (--gpus)"),
    ("2x2", DevicePlan(DeviceKind.GPU, 8, gpus=(_gpu(2**34),) * 8), {},
     "the run has 8 GPUs (all NVML sees): give 4, or a mesh of 8 (8x1, 4x2, 2x4, 1x8)"),
    ("auto", DevicePlan(DeviceKind.GPU, 2, gpus=(_gpu(None),) * 2), {},
     "NVML did not say how much memory the GPUs have"),
])
def test_check_mesh_names_the_run_and_the_mesh(mesh, plan, config, expected):
    devices = DeviceSelection(kind=DeviceKind.GPU, gpus=config.get("gpus", ()))
    with pytest.raises(UserError) as caught:
        check_mesh(RunConfig(mesh=mesh, engine="jax", devices=devices), plan)
    assert expected in str(caught.value)


def test_check_mesh_passes_what_fits():
    plan = DevicePlan(DeviceKind.GPU, 4, gpus=(_gpu(2**34),) * 4)
    for mesh in (None, "2x2", "1x4", "4x1", "auto"):  # auto: prepare_run resolves it
        check_mesh(RunConfig(mesh=mesh, engine="jax"), plan)


@pytest.mark.parametrize(("command", "words"), [
    ("scale", "the scaling test times data parallelism"),
    ("find-batch", "the batch finder probes one device holding the whole model"),
])
def test_the_tools_that_time_whole_model_replicas_refuse_a_mesh(command, words, capsys):
    """They took --mesh with train's flags and ran data parallel without a word."""
    code = cli.main([command, "--cpu", "--replicas", "4", "--engine", "jax", "--mesh", "2x2"])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "drop --mesh 2x2" in err, err
    assert "Traceback" not in err
