"""The JAX engine on one real GPU with mixed precision, through `mgpu-train` as a user
runs it: 2 epochs of the demo. Where TensorFlow is not installed the run is fed by the
Python input pipeline; the run itself chooses that, nothing here does."""

from __future__ import annotations

import json
import math

import pytest

from mgpu_gui.core.devices.nvml import GpuInfo

pytestmark = pytest.mark.gpu

SANE_ACCURACY = 0.8  # the demo after 2 epochs; 1 CPU epoch at twice the batch gives ~0.81


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_jax_engine_trains_on_one_gpu(precision: str, gpu: GpuInfo, mgpu_train, tmp_path,
                                      figure):
    done = mgpu_train("train", "--engine", "jax", "--gpus", gpu.uuid or str(gpu.index),
                      "--precision", precision, "--epochs", "2", "--output-dir",
                      str(tmp_path / "runs"), "--name", f"gpu-{precision}", "--json",
                      # the GPU is this test's: a process left by another must not stop it
                      "--allow-busy")
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    def of(kind: str) -> list[dict]:
        return [e for e in events if e["type"] == kind]

    [started] = of("run_started")
    assert (started["device_kind"], started["num_replicas"]) == ("gpu", 1)
    assert started["device_names"] == [gpu.label]  # the CUDA device, as NVML names it
    assert "DataParallel over gpu:0" in started["cross_device_ops"], started["cross_device_ops"]
    assert any(f"precision {precision}" in e["message"] for e in of("log")), of("log")
    epochs = of("epoch_end")
    assert len(epochs) == 2
    assert all(math.isfinite(e["metrics"]["loss"]) for e in epochs)
    assert epochs[-1]["metrics"]["val_accuracy"] >= SANE_ACCURACY, epochs[-1]
    [exported] = of("model_exported")
    assert exported["verified"] is True, exported  # reloaded in a fresh process, predicts alike
    [finished] = of("run_finished")
    assert finished["status"] == "completed", finished
    figure(f"{precision} on {started['device_names'][0]}: "
           + ", ".join(f"epoch {e['epoch'] + 1} {e['samples_per_s']:.0f} samples/s in "
                       f"{e['duration_s']:.1f} s" for e in epochs)
           + f"; val_accuracy {epochs[-1]['metrics']['val_accuracy']:.4f}; global batch "
             f"{started['global_batch']}; export max difference {exported['max_abs_diff']}; "
             f"{started['cross_device_ops']}")
