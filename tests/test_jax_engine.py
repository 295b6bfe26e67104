"""The JAX engine trains for real on 2 CPU devices (XLA's host platform device count).

Each run is a real worker process, as the app starts it. A model with BatchNorm
trains on a subset of the demo digits: on 1 and 2 devices with the same seed and
global batch the losses agree (DataParallel computes one global program, so
BatchNorm's statistics are the global batch's on any device count), and the
export is checked by the worker itself against a fresh process on Keras'
TensorFlow backend. A worker killed with SIGKILL resumes from its backup.
"""

from __future__ import annotations

import os
import signal
import textwrap

import numpy as np
import pytest

pytest.importorskip("jax", reason="the JAX engine's tests need jax: pip install -e '.[dev]'")

from mgpu_gui.core.children.supervisor import WorkerProcess, prepare_resume, prepare_run  # noqa: E402
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig  # noqa: E402
from mgpu_gui.core.datasets.inspection import load_demo_arrays  # noqa: E402
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState  # noqa: E402
from mgpu_gui.core.events import (  # noqa: E402
    BatchEnd,
    EpochEnd,
    LogMessage,
    ModelExported,
    RunStarted,
    RunStatus,
)

pytestmark = [pytest.mark.slow, pytest.mark.jax]
NO_GPU = GpuInventory(NvmlState.NO_DRIVER)
SAMPLES = 640  # of the demo's digits: 36 steps of 16 an epoch


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> RunConfig:
    root = tmp_path_factory.mktemp("jax")
    images, labels = load_demo_arrays()
    np.savez(root / "digits.npz", x_train=images[:SAMPLES].astype("float32") / 16.0,
             y_train=labels[:SAMPLES].astype("int64"))
    (root / "bn.py").write_text(textwrap.dedent("""
        import keras

        def build_model(input_shape, num_classes):
            return keras.Sequential([
                keras.Input(input_shape),
                keras.layers.Reshape((*input_shape, 1)),
                keras.layers.Conv2D(16, 3, padding="same"),
                keras.layers.BatchNormalization(),
                keras.layers.ReLU(),
                keras.layers.Flatten(),
                keras.layers.Dense(num_classes, activation="softmax"),
            ])
    """))
    return RunConfig(model=str(root / "bn.py"), data=str(root / "digits.npz"), epochs=2,
                     batch_per_replica=8, engine="jax", export_formats=(),
                     devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2))


def train(config: RunConfig) -> list:
    worker = WorkerProcess(prepare_run(config, NO_GPU))
    worker.start()
    events = list(worker.events())
    assert worker.outcome().status is RunStatus.COMPLETED, worker.outcome().message
    return events


def epoch_losses(events: list) -> list[float]:
    return [e.metrics["loss"] for e in events if isinstance(e, EpochEnd)]


@pytest.fixture(scope="module")
def two_devices(config, tmp_path_factory) -> list:
    return train(config.replace(output_dir=str(tmp_path_factory.mktemp("two")),
                                export_formats=("keras",)))


def test_two_jax_devices_train_and_export_for_tensorflow(two_devices):
    started = next(e for e in two_devices if isinstance(e, RunStarted))
    assert started.num_replicas == 2 and started.devices == ["cpu:0", "cpu:1"]
    assert "DataParallel over cpu:0, cpu:1 (JAX " in started.cross_device_ops
    assert len(epoch_losses(two_devices)) == 2
    assert any(isinstance(e, LogMessage) and "synchronised" in e.message for e in two_devices)
    (exported,) = [e for e in two_devices if isinstance(e, ModelExported)]
    # Reloaded by the export's verifier in a fresh process on Keras' TensorFlow backend.
    assert exported.verified and exported.max_abs_diff <= 1e-5


def test_one_and_two_devices_give_the_same_losses_with_batchnorm(config, two_devices,
                                                                  tmp_path):
    one = train(config.replace(output_dir=str(tmp_path), batch_per_replica=16,
                               devices=DeviceSelection(kind=DeviceKind.CPU, replicas=1)))
    assert next(e for e in one if isinstance(e, RunStarted)).devices == ["cpu:0"]
    np.testing.assert_allclose(epoch_losses(one), epoch_losses(two_devices), atol=1e-3)


def test_sigkill_of_the_jax_worker_then_resume(config, tmp_path):
    run = prepare_run(config.replace(output_dir=str(tmp_path), epochs=2,
                                     batch_event_interval_s=0.0), NO_GPU)
    worker = WorkerProcess(run)
    worker.start()
    for event in worker.events():
        if isinstance(event, BatchEnd) and event.epoch == 1 and event.batch >= 2:
            os.kill(worker.pid, signal.SIGKILL)
            break
    outcome = worker.outcome()
    assert outcome.status is RunStatus.FAILED
    assert "killed by signal 9 (SIGKILL)" in outcome.message
    assert run.run_dir.backup_epoch() == 1

    resumed = WorkerProcess(prepare_resume(run.run_dir.path, NO_GPU))
    resumed.start()
    events = list(resumed.events())
    assert resumed.outcome().status is RunStatus.COMPLETED, resumed.outcome().message
    assert next(e for e in events if isinstance(e, RunStarted)).initial_epoch == 1
    assert [e.epoch for e in events if isinstance(e, EpochEnd)] == [1]
