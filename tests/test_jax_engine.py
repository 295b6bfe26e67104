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
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("jax", reason="the JAX engine's tests need jax: pip install -e '.[dev]'")

from mgpu_gui.core.children.supervisor import WorkerProcess, prepare_resume, prepare_run  # noqa: E402
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig  # noqa: E402
from mgpu_gui.core.datasets.inspection import load_demo_arrays  # noqa: E402
from mgpu_gui.core.events import (  # noqa: E402
    BatchEnd,
    EpochEnd,
    LogMessage,
    ModelExported,
    RunStarted,
    RunStatus,
)
from mgpu_gui.core.runs.folder import RunDir  # noqa: E402
from mgpu_gui.core.runs.store import RunState, RunStore  # noqa: E402
from tests.helpers.worker_runs import NO_GPU, epoch_losses, train  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.jax]
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


def test_tensorflow_ops_in_a_model_fail_on_jax_at_the_first_step_in_plain_words(config,
                                                                                tmp_path):
    """A layer written for TensorFlow (tf.* in its training branch) builds on JAX, then
    fails while JAX traces the first step: the CLI says so, naming the line, with no
    traceback; the run folder keeps worker.log and the store records the failure."""
    model = tmp_path / "tf_layer.py"
    model.write_text(textwrap.dedent("""
        import keras
        import tensorflow as tf


        class Noisy(keras.layers.Layer):
            def call(self, x, training=None):
                if training:
                    return x + tf.random.normal(tf.shape(x), stddev=0.1)
                return x


        def build_model(input_shape, num_classes):
            return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                                     Noisy(), keras.layers.Dense(num_classes)])
    """))
    out = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "mgpu_gui.cli.main", "train", "--engine", "jax", "--cpu",
         "--replicas", "2", "--model", str(model), "--data", config.data, "--epochs", "1",
         "--batch-per-replica", "8", "-o", str(out)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith(
        "error: This model's code runs on the tensorflow engine but not on JAX: it calls "
        "TensorFlow on the model's tensors in epoch 1 at step 1 of 36 (tf_layer.py, line 9, "
        "in Noisy.call: `return x + tf.random.normal(tf.shape(x), stddev=0.1)`)")
    assert "--engine tensorflow" in done.stderr and "Traceback" not in done.stdout + done.stderr
    (run_dir,) = [RunDir(p) for p in out.iterdir()]
    assert "TracerArrayConversionError" in run_dir.worker_log.read_text()
    assert run_dir.backup_epoch() == 0
    (record,) = RunStore().runs()
    assert record.status is RunState.FAILED and record.message == done.stderr[7:].strip()
