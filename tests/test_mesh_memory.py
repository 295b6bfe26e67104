"""The memory plan refuses a run that cannot fit its GPUs, and `--mesh auto` picks the mesh
that does (issue 31, third step).

Two fake GPUs of 4 MiB each (MGPU_GUI_FAKE_GPUS: they train on CPU replicas, and their
memory is what the plan is judged against) and an MLP whose "wide" kernel (640x512
float32, 1.25 MiB) the automatic layout splits: with Adam, parameters + 2 slots +
gradients take 5.7 MiB per GPU as data parallel, 3.2 MiB on a 1x2 mesh. The pure
parts (the refusal's and the note's words, the smallest GPU, --mesh auto's choice from
a probe's answer) are checked without an engine.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap

import numpy as np
import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.children.model_probe import choose_auto_mesh
from mgpu_gui.core.config import DeviceKind, RunConfig
from mgpu_gui.core.devices.nvml import FAKE_GPUS_VAR, GpuInfo
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import ModelProbed
from mgpu_gui.core.mesh.layout import VariableInfo
from mgpu_gui.core.mesh.memory import fit_note, fit_refusal, plan_memory, smallest_gpu
from mgpu_gui.core.mesh.shape import MeshShape
from mgpu_gui.core.plain import to_plain
from mgpu_gui.core.runs.store import RunStore

MiB = 2**20
GPU_MEMORY = 4 * MiB
MLP = """
    import keras

    def build_model(input_shape, num_classes):
        return keras.Sequential([
            keras.Input(input_shape),
            keras.layers.Dense(640, activation="relu", name="hidden"),
            keras.layers.Dense(512, activation="relu", name="wide"),
            keras.layers.Dense(num_classes, activation="softmax", name="head"),
        ])
"""
# The MLP's variables as the probe reports them.
VARIABLES = [VariableInfo("hidden/kernel", (64, 640), "float32", "Dense"),
             VariableInfo("hidden/bias", (640,), "float32", "Dense"),
             VariableInfo("wide/kernel", (640, 512), "float32", "Dense"),
             VariableInfo("wide/bias", (512,), "float32", "Dense"),
             VariableInfo("head/kernel", (512, 10), "float32", "Dense"),
             VariableInfo("head/bias", (10,), "float32", "Dense")]
DATA_PARALLEL, SPLIT = MeshShape(2, 1), MeshShape(1, 2)


def test_the_refusal_names_the_need_the_gpus_and_the_mesh_that_fits():
    plan = plan_memory(VARIABLES, 2, "adam", GPU_MEMORY)
    jax = fit_refusal(plan, DATA_PARALLEL, on_jax=True)
    assert jax is not None and jax.startswith(
        "The model will not fit the GPUs: it needs 5.7 MiB per GPU as data parallel; your "
        "GPUs have 4.0 MiB: --mesh 1x2 needs 3.2 MiB each."), jax
    assert "activations come on top" in jax and jax.endswith("Train with --mesh 1x2.")
    tensorflow = fit_refusal(plan, DATA_PARALLEL, on_jax=False)
    assert "the JAX engine's --mesh 1x2 needs 3.2 MiB each" in tensorflow
    assert tensorflow.endswith("Train on the JAX engine: --engine jax --mesh 1x2.")
    assert fit_refusal(plan, SPLIT, on_jax=True) is None
    assert fit_note(plan, SPLIT).startswith(
        "Memory plan: 3.2 MiB per GPU as --mesh 1x2 (parameters 824.5 KiB + adam state")


def test_nothing_fits_and_unknown_memory():
    tiny = plan_memory(VARIABLES, 2, "adam", MiB)
    refusal = fit_refusal(tiny, DATA_PARALLEL, on_jax=True)
    assert "no mesh of 2 devices fits: the least is --mesh 1x2" in refusal
    assert "Train with" not in refusal
    assert fit_refusal(plan_memory(VARIABLES, 2, "adam"), DATA_PARALLEL, on_jax=True) is None
    assert smallest_gpu([8 * MiB, GPU_MEMORY]) == GPU_MEMORY
    assert smallest_gpu([]) is None and smallest_gpu([GPU_MEMORY, None]) is None


@pytest.fixture
def small_gpus(tmp_path, monkeypatch):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"gpus": [
        {"index": i, "uuid": f"GPU-fake-{i}", "name": "Fake GPU", "memory_total": GPU_MEMORY}
        for i in range(2)]}))
    monkeypatch.setenv(FAKE_GPUS_VAR, str(path))


def train(tmp_path, capsys, *flags: str) -> tuple[int, list[dict], str, str]:
    """(exit code, JSON events, stdout's other lines, stderr) of a 1-epoch run of the MLP
    on 256 samples of 64 features, on both fake GPUs."""
    (tmp_path / "mlp.py").write_text(textwrap.dedent(MLP))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", x_train=rng.random((256, 64), dtype=np.float32),
             y_train=rng.integers(0, 10, 256))
    code = cli.main(["train", "--model", str(tmp_path / "mlp.py"), "--data",
                     str(tmp_path / "data.npz"), "--epochs", "1", "--batch-per-replica", "16",
                     "--export", "none", "--json", "-o", str(tmp_path / "runs"), *flags])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    return code, events, "\n".join(line for line in lines if not line.startswith("{")), err


@pytest.mark.slow
def test_a_data_parallel_run_that_cannot_fit_is_refused_before_epoch_1(
        tmp_path, capsys, small_gpus):
    """On TensorFlow, whose --mesh cannot split variables, the JAX engine's mesh is named
    (the JAX wording: test_the_refusal_names_the_need_the_gpus_and_the_mesh_that_fits)."""
    engine, fits = "tensorflow", "the JAX engine's --mesh 1x2 needs 3.2 MiB each"
    code, events, _, err = train(tmp_path, capsys, "--engine", engine)
    assert code == 2, err
    failed = events[-1]
    assert failed["type"] == "run_failed" and failed["phase"] == "setup", failed
    assert failed["message"].startswith(
        f"The model will not fit the GPUs: it needs 5.7 MiB per GPU as data parallel; your "
        f"GPUs have 4.0 MiB: {fits}."), failed
    assert "activations come on top" in failed["message"]
    assert not [e for e in events if e["type"] in ("run_started", "epoch_end")]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert RunStore().runs() == []


@pytest.mark.slow
@pytest.mark.jax
def test_mesh_auto_picks_the_mesh_that_fits_and_trains_on_it(tmp_path, capsys, small_gpus):
    """The model probed before the run folder exists; the folder's config says 1x2; the
    chosen mesh trains within the plan (a mesh given as --mesh 1x2 runs the same path)."""
    pytest.importorskip("jax")
    code, events, out, err = train(tmp_path, capsys, "--engine", "jax", "--mesh", "auto",
                                   "--input-pipeline", "python")
    assert code == 0, err
    assert ("--mesh auto chose 1x2: 3.2 MiB per GPU of the GPUs' 4.0 MiB; data parallel "
            "would need 5.7 MiB") in out + err
    started = next(e for e in events if e["type"] == "run_started")
    assert started["mesh"] == "1x2"
    assert [e["epoch"] for e in events if e["type"] == "epoch_end"] == [0]
    said = [e["message"] for e in events if e["type"] == "log"]
    assert any(m.startswith("Memory plan: 3.2 MiB per GPU as --mesh 1x2") for m in said), said
    (folder,) = (tmp_path / "runs").iterdir()
    assert json.loads((folder / "config.json").read_text())["mesh"] == "1x2"


class _Probe:
    """Stands in for the probe child: the MLP's variables, compiled with Adam."""

    def __init__(self, config):
        pass

    def run(self):
        return ModelProbed(summary="", params=0, input_shape=[64], output_units=10,
                           variables=[to_plain(dataclasses.asdict(v)) for v in VARIABLES],
                           optimizer="adam")


def _gpu_plan(memory: int | None) -> DevicePlan:
    gpu = GpuInfo(index=0, name="GPU", uuid="GPU-0", pci_bus_id="0", memory_total=memory,
                  compute_capability=None)
    return DevicePlan(DeviceKind.GPU, 2, gpus=(gpu, gpu), note="Two GPUs.")


def test_auto_writes_the_chosen_mesh_and_says_why(monkeypatch):
    monkeypatch.setattr("mgpu_gui.core.children.model_probe.ModelProbeJob", _Probe)
    config, plan = choose_auto_mesh(RunConfig(mesh="auto", engine="jax"), _gpu_plan(GPU_MEMORY))
    assert config.mesh == "1x2"
    assert plan.note == ("Two GPUs. --mesh auto chose 1x2: 3.2 MiB per GPU of the GPUs' "
                         "4.0 MiB; data parallel would need 5.7 MiB (parameters + adam state "
                         "+ gradients; activations come on top).")
    config, _ = choose_auto_mesh(RunConfig(mesh="auto", engine="jax"), _gpu_plan(8 * MiB))
    assert config.mesh == "2x1"  # data parallel fits: the smallest model axis
    with pytest.raises(UserError) as caught:
        choose_auto_mesh(RunConfig(mesh="auto", engine="jax"), _gpu_plan(MiB))
    assert str(caught.value).startswith(
        "--mesh auto found no mesh that fits. The model will not fit the GPUs: it needs "
        "5.7 MiB per GPU as data parallel; your GPUs have 1.0 MiB, and no mesh of 2 devices "
        "fits"), caught.value
    unchanged = RunConfig(mesh="1x2", engine="jax")
    assert choose_auto_mesh(unchanged, _gpu_plan(MiB)) == (unchanged, _gpu_plan(MiB))
