"""The Python input pipeline (no TensorFlow) and the choice of pipeline.

Its batches follow tf.data's rules (global batch, drop_remainder, the evaluation
batch, a new order each epoch that depends on the seed and the epoch alone, so
a resume sees the uninterrupted order). A real JAX run trains in a child that
cannot import TensorFlow, as on a machine where only JAX is installed.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from PIL import Image

from mgpu_gui.cli.common import add_train_arguments, config_from_args
from mgpu_gui.core import engines
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.engines import Engine, InputPipeline
from mgpu_gui.engine import inputs, py_pipeline
from tests.helpers.without_tensorflow import env_without_tensorflow

pytestmark = pytest.mark.slow  # Keras on JAX in this process

keras = pytest.importorskip("keras")


@pytest.fixture
def npz(tmp_path):
    def make(samples: int, name: str = "d.npz") -> str:
        rng = np.random.default_rng(1)
        x = rng.random((samples, 4), dtype=np.float32)
        x[:, 0] = np.arange(samples)  # each sample says which it is
        np.savez(tmp_path / name, x_train=x, y_train=np.arange(samples) % 3)
        return str(tmp_path / name)
    return make


def python_batches(data: str, replicas: int = 2, batch: int = 8, **changes) -> inputs.Batches:
    config = RunConfig(data=data, batch_per_replica=batch, engine="jax",
                       input_pipeline="python", **changes)
    prepared = py_pipeline.load_data(config)
    return inputs.batches(config, prepared, InputPipeline.PYTHON, None, replicas, None,
                          lambda *a, **k: None)


def ids(batch) -> list[int]:
    return [int(v) for v in batch[0][:, 0]]


def epoch(train, number: int) -> list[list[int]]:
    train.set_epoch(number)
    return [ids(train[i]) for i in range(len(train))]


def test_python_batches_are_global_full_and_reshuffled_by_seed_and_epoch(npz):
    made = python_batches(npz(103), validation_split=0.0)
    train = made.train
    assert len(train) == 6  # 103 // (8 x 2): the remainder of 7 is dropped
    first = epoch(train, 0)
    assert all(len(b) == 16 for b in first)
    seen = [i for b in first for i in b]
    assert len(set(seen)) == 96  # each sample at most once an epoch
    assert epoch(train, 1) != first  # a new order each epoch
    # The order of an epoch is the seed's and the epoch's: a fresh pipeline (a resumed
    # run) at epoch 1 gives the same batches as epoch 1 after epoch 0.
    assert epoch(python_batches(npz(103), validation_split=0.0).train, 1) == epoch(train, 1)
    assert epoch(python_batches(npz(103), validation_split=0.0, seed=7).train, 1) != epoch(
        train, 1)
    # Labels travel with their samples.
    x, y = train[0]
    np.testing.assert_array_equal(y, x[:, 0].astype(int) % 3)
    with pytest.raises(IndexError):
        train[len(train)]


def test_every_sample_once_per_epoch_without_a_remainder(npz):
    train = python_batches(npz(96), validation_split=0.0).train
    for number in range(3):
        assert sorted(i for b in epoch(train, number) for i in b) == list(range(96))


def test_validation_drops_less_than_a_sample_per_replica_and_is_not_shuffled(npz):
    made = python_batches(npz(185), validation_split=0.2)  # 148 train, 37 validation
    val = made.val
    assert val.global_batch == 12 and len(val) == 3  # batching.eval_batch(37, 8, 2)
    assert epoch(val, 0) == epoch(val, 5)
    assert isinstance(made.callbacks[0], py_pipeline.EpochOrder)
    assert made.callbacks[0].batches is made.train


def test_the_epoch_callback_sets_fits_epoch_number(npz):
    train = python_batches(npz(96), validation_split=0.0).train
    order = py_pipeline.EpochOrder(train)
    order.on_epoch_begin(4)  # a run resumed at epoch 5 (0-based 4)
    resumed = [ids(train[i]) for i in range(len(train))]
    assert resumed == epoch(python_batches(npz(96), validation_split=0.0).train, 4)


def test_image_folders_decode_and_resize_as_tf_data_does(tmp_path):
    tf_pipeline = pytest.importorskip("mgpu_gui.engine.pipeline")
    rng = np.random.default_rng(0)
    for index, size in enumerate([(13, 7), (40, 31), (9, 9), (64, 50)]):
        folder = tmp_path / f"c{index % 2}"
        folder.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(
            folder / f"{index}.png")
    config = RunConfig(data=str(tmp_path), image_size=(16, 12), validation_split=0.0)
    ours, theirs = py_pipeline.load_data(config), tf_pipeline.load_data(config)
    assert ours.x_sample.shape == (4, 16, 12, 3)
    np.testing.assert_array_equal(ours.x_sample, theirs.x_sample)


def test_what_the_python_pipeline_cannot_do_is_refused_at_setup(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    jax_python = RunConfig(data=str(tmp_path), engine="jax", input_pipeline="python")
    problems = dict(jax_python.replace(augment="flip", cache="disk").problems())
    assert "augmentation runs in tf.data" in problems["augment"]
    assert "the disk cache is tf.data's" in problems["cache"]
    assert "feeds the jax engine only" in dict(
        jax_python.replace(engine="tensorflow").problems())["input_pipeline"]
    assert "unknown input pipeline" in dict(
        jax_python.replace(input_pipeline="grain").problems())["input_pipeline"]
    # Where TensorFlow is not installed: auto means python, tf.data and SavedModel are refused.
    monkeypatch.setattr(engines, "installed", lambda engine: engine is Engine.JAX)
    auto = jax_python.replace(input_pipeline="auto")
    assert engines.resolve_pipeline("jax", "auto") is InputPipeline.PYTHON
    assert "TensorFlow is not installed" in dict(auto.replace(augment="flip").problems())[
        "augment"]
    assert "needs TensorFlow" in dict(auto.replace(input_pipeline="tf.data").problems())[
        "input_pipeline"]
    assert "SavedModel export needs TensorFlow" in dict(
        auto.replace(export_formats=("keras", "savedmodel")).problems())["export_formats"]
    with pytest.raises(Exception, match="augmentation runs in tf.data"):
        inputs.pipeline_for(auto.replace(augment="flip"))


def test_the_input_pipeline_flag_reaches_the_config():
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    assert config_from_args(parser.parse_args(["--input-pipeline", "python"])).input_pipeline \
        == "python"
    assert config_from_args(parser.parse_args([])).input_pipeline == "auto"


@pytest.mark.slow
@pytest.mark.jax
def test_a_jax_run_trains_and_exports_where_tensorflow_is_not_installed(tmp_path):
    pytest.importorskip("jax")
    from mgpu_gui.core.children.supervisor import WorkerProcess, prepare_run
    from mgpu_gui.core.datasets.inspection import load_demo_arrays
    from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
    from mgpu_gui.core.events import EpochEnd, LogMessage, ModelExported, RunStatus
    from mgpu_gui.core.runs.environment import read_environment

    digits, labels = load_demo_arrays()
    np.savez(tmp_path / "digits.npz", x_train=digits[:320].astype("float32") / 16.0,
             y_train=labels[:320].astype("int64"))
    config = RunConfig(model="demo", data=str(tmp_path / "digits.npz"), epochs=2,
                       batch_per_replica=16, engine="jax", output_dir=str(tmp_path / "runs"),
                       devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2))
    run = prepare_run(config, GpuInventory(NvmlState.NO_DRIVER))
    worker = WorkerProcess(run, env=env_without_tensorflow())
    worker.start()
    events = list(worker.events())
    assert worker.outcome().status is RunStatus.COMPLETED, worker.outcome().message
    assert len([e for e in events if isinstance(e, EpochEnd)]) == 2
    assert any(isinstance(e, LogMessage) and e.message.startswith("Input pipeline: python")
               for e in events)
    (exported,) = [e for e in events if isinstance(e, ModelExported)]
    assert exported.verified and exported.path.endswith("model.keras")
    # The worker never loaded TensorFlow (its hook would have failed the run had anything
    # needed it): its record names JAX instead.
    environment = read_environment(run.run_dir.path)
    assert environment is not None and environment.tensorflow is None
    assert (environment.engine, environment.input_pipeline, environment.jax_platform) == (
        "jax", "python", "cpu")
    assert environment.jax and environment.jaxlib
    assert json.loads(run.run_dir.config_json.read_text())["input_pipeline"] == "auto"
