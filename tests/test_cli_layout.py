"""`mgpu-train layout`: the layout table and the memory plan of a model from a terminal.

The probe child is replaced by a canned answer (what it reports, through the
event's JSON form) for everything but one real probe of a tiny `.py` model.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from mgpu_gui.cli import layout as layout_command
from mgpu_gui.cli import main as cli
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, NvmlState
from mgpu_gui.core.events import ModelProbed, ModelProbeFailed, parse_event

PROGRESS = "Building the model on the CPU to read its variables...\n"
VARIABLES = [  # as the probe child reports them: 16000, 160 and 3200 bytes
    {"path": "dense/kernel", "shape": [100, 40], "dtype": "float32", "layer": "Dense",
     "trainable": True},
    {"path": "dense/bias", "shape": [40], "dtype": "float32", "layer": "Dense",
     "trainable": True},
    {"path": "embedding/embeddings", "shape": [50, 16], "dtype": "float32",
     "layer": "Embedding", "trainable": True},
]


class CannedProbe:
    """Stands in for `ModelProbeJob`: answers at once, through the event's JSON form."""

    answer: ModelProbed | ModelProbeFailed = ModelProbed("", 4840, [8], 10,
                                                         variables=VARIABLES)

    def __init__(self, config: RunConfig):
        self.config = config

    def cancel(self) -> None:
        pass

    def run(self) -> ModelProbed | ModelProbeFailed:
        return parse_event(self.answer.to_json())


@pytest.fixture
def canned(monkeypatch):
    monkeypatch.setattr(layout_command, "ModelProbeJob", CannedProbe)
    monkeypatch.setattr(layout_command, "query_inventory",
                        lambda: GpuInventory(NvmlState.NO_DRIVER))
    return CannedProbe


def run(capsys, *args: object) -> tuple[int, str, str]:
    code = cli.main(["layout", *map(str, args)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    err = captured.err.removeprefix(PROGRESS)  # said while the child builds the model
    return code, captured.out, err


def test_table_and_plan(capsys, canned):
    code, out, _ = run(capsys, "demo", "--mesh", "1x4", "--shard-above", "1000",
                       "--gpu-memory", "1")
    assert code == 0
    assert "dense/kernel" in out and "(None,model)" in out and "3.9 KiB" in out
    assert "1x4 *" in out and "FITS 1.0 GiB" in out and "--mesh auto picks 4x1." in out
    assert "activations are not estimated" in out


def test_auto_picks_by_the_gpus_nvml_sees(capsys, canned, monkeypatch):
    gpus = tuple(GpuInfo(i, "Small", None, None, 40000, (8, 0)) for i in range(2))
    monkeypatch.setattr(layout_command, "query_inventory",
                        lambda: GpuInventory(NvmlState.OK, gpus))
    code, out, _ = run(capsys, "demo", "--shard-above", "1000", "--json")
    data = json.loads(out)
    # 19360 bytes, all trainable, x4 (Adam's two slots and the gradients) as data parallel;
    # on 1x2 the kernel and the embeddings are halved: 9760 x 4.
    assert [(p["mesh"], p["total"], p["fits"]) for p in data["plan"]] == [
        ("2x1", 77440, False), ("1x2", 39040, True)]
    assert (code, data["mesh"], data["auto_pick"], data["gpu_memory"]) == (0, "1x2", "1x2", 40000)


def test_auto_without_a_fit_is_refused_with_the_plan(capsys, canned):
    code, out, err = run(capsys, "demo", "--devices", "2", "--gpu-memory", "30KB",
                         "--shard-above", "1000")
    assert (code, out) == (2, "")
    assert err == ("error: needs 75.6 KiB per GPU as data parallel; your GPUs have 29.3 KiB, "
                   "and no mesh of 2 devices fits: the least is --mesh 1x2 at 38.1 KiB each "
                   "(more GPUs, a smaller model, or an optimizer with less state)\n")


def test_without_gpu_memory_no_verdict(capsys, canned):
    code, out, _ = run(capsys, "demo", "--mesh", "2x1")
    assert code == 0 and "No verdict" in out and "FITS" not in out


@pytest.mark.parametrize("args, message", [
    (("--mesh", "3x"), "error: --mesh '3x': give DATAxMODEL"),
    (("--mesh", "3x2", "--devices", "4"), "error: --mesh 3x2 needs 6 devices; the run has 4"),
    (("--mesh", "auto"), "error: --mesh auto needs the run's device count"),
    (("--mesh", "auto", "--devices", "2"), "error: --mesh auto picks by the GPUs' memory"),
    (("--mesh", "1x4", "--layout", "embedding/.*=(model,None)"),
     "error: layout rule embedding/.*=(model,None): the model axis (4) does not divide "
     "dimension 0 (50) of variable embedding/embeddings"),
    (("--mesh", "1x2", "--layout", "dense=(modl,)"), "error: layout rule 'dense=(modl,)': "
                                                     "unknown axis"),
    (("--mesh", "1x2", "--gpu-memory", "lots"), "error: memory size 'lots'"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, canned, args, message):
    code, _, err = run(capsys, "demo", *args)
    assert code == 2 and err.startswith(message) and err.count("\n") == 1, err


def test_unknown_model_file(capsys, canned, tmp_path):
    code, _, err = run(capsys, tmp_path / "nope.py", "--mesh", "1x2")
    assert code == 2 and err.startswith("error: MODEL: model file not found") and (
        err.count("\n") == 1)


def test_model_that_cannot_be_built(capsys, canned, monkeypatch):
    monkeypatch.setattr(CannedProbe, "answer", ModelProbeFailed("no build_model", "ModelError"))
    code, _, err = run(capsys, "demo", "--mesh", "1x2")
    assert (code, err) == (2, "error: the model could not be built: no build_model\n")


@pytest.mark.slow
def test_real_probe_of_a_py_model(capsys, tmp_path):
    model = tmp_path / "tiny.py"
    model.write_text(textwrap.dedent("""
        import keras

        def build_model(input_shape, num_classes):
            return keras.Sequential([
                keras.Input(input_shape), keras.layers.Flatten(),
                keras.layers.Dense(32), keras.layers.BatchNormalization(),
                keras.layers.Dense(num_classes, activation="softmax")])
        """), encoding="utf-8")
    code, out, _ = run(capsys, model, "--mesh", "1x2", "--shard-above", "0", "--gpu-memory",
                       "1", "--optimizer", "sgd", "--json")
    assert code == 0
    data = json.loads(out)
    found = {v["path"]: (v["layer"], v["shape"], v["layout"], v["bytes_per_device"])
             for v in data["variables"]}
    # The demo data: 8x8 digits, 10 classes.
    assert found == {
        "sequential/dense/kernel": ("Dense", [64, 32], [None, "model"], 64 * 16 * 4),
        "sequential/dense/bias": ("Dense", [32], ["model"], 16 * 4),
        "sequential/batch_normalization/gamma": ("BatchNormalization", [32], [None], 128),
        "sequential/batch_normalization/beta": ("BatchNormalization", [32], [None], 128),
        "sequential/batch_normalization/moving_mean": ("BatchNormalization", [32], [None], 128),
        "sequential/batch_normalization/moving_variance": (
            "BatchNormalization", [32], [None], 128),
        "sequential/dense_1/kernel": ("Dense", [32, 10], [None, "model"], 32 * 5 * 4),
        "sequential/dense_1/bias": ("Dense", [10], ["model"], 5 * 4),
    }
    frozen = sum(not v["trainable"] for v in data["variables"])
    assert frozen == 2  # the moving statistics: no gradient
    per_device = sum(entry[3] for entry in found.values())
    assert data["plan"][1] == {"mesh": "1x2", "params": per_device, "optimizer": 0,
                               "gradients": per_device - 256, "total": 2 * per_device - 256,
                               "fits": True}


def test_probe_event_keeps_its_variables():
    event = ModelProbed("", 1, [8], 10, variables=VARIABLES)
    assert parse_event(event.to_json()) == event
    old = json.loads(event.to_json())
    del old["variables"]  # from a probe before they were reported
    assert parse_event(json.dumps(old)).variables == []
