"""The scaling test and the batch finder on the JAX engine.

Pure checks first (how JAX says "out of memory", the GPU peak read from a device's
`memory_stats`, the tools' plans), then the real thing on XLA's host devices: a scaling
test on 1 and 2 JAX CPU devices and a batch search under a largest batch, each count
and probe a real child process as the app starts it (slow).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.tools.batch_finder import BatchFinder, BatchRequest, plan_search
from mgpu_gui.core.tools.batch_search import (
    Ended,
    ProbeStatus,
    SearchSettings,
    is_out_of_memory,
)
from mgpu_gui.core.tools.scaling import PointStatus
from mgpu_gui.core.tools.scaling_runner import JAX_NOTE, ScaleRequest, ScaleRunner, plan_scaling
from mgpu_gui.engine.device_memory import jax_peak_bytes
from tests.helpers.without_tensorflow import env_without_tensorflow

pytestmark = pytest.mark.slow  # JAX devices and allocators, in this process and in children

NO_GPU = GpuInventory(NvmlState.NO_DRIVER)
GB = 10 ** 9
# What jax 0.10.2 raised for an allocation larger than the host's memory (seen here).
JAX_OOM = ("JaxRuntimeError", "RESOURCE_EXHAUSTED: Out of memory allocating 40000000000000 "
                              "bytes.")


def cpu_config(replicas: int, **kw) -> RunConfig:
    return RunConfig(engine="jax", devices=DeviceSelection(kind=DeviceKind.CPU,
                                                           replicas=replicas), **kw)


# -- pure --------------------------------------------------------------------------------
def test_jax_resource_exhausted_counts_as_out_of_memory():
    assert is_out_of_memory(*JAX_OOM)
    # Older jaxlibs name the class XlaRuntimeError; the GPU allocator words it otherwise.
    assert is_out_of_memory("XlaRuntimeError", "RESOURCE_EXHAUSTED: Failed to allocate "
                                               "request for 1.00GiB (1073741824B) on device")
    assert not is_out_of_memory("JaxRuntimeError", "INVALID_ARGUMENT: shapes (8,) and (4,)")


def test_jax_running_out_of_memory_is_too_big_for_a_probe_and_a_scaling_count():
    from mgpu_gui.core.devices.plan import plan_devices
    from mgpu_gui.processes.batch_probe import Probe
    from mgpu_gui.processes.scaling_worker import failure_message

    error_class = type(JAX_OOM[0], (RuntimeError,), {})
    assert failure_message(error_class(JAX_OOM[1]), cpu_config(2, batch_per_replica=64), 2) == (
        "out of memory with 64 samples per device (global batch 128); a smaller batch may fit.")
    plan = plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=1), NO_GPU)
    probe = Probe(cpu_config(1, batch_per_replica=512), plan, 2, None, emit=lambda m: None)
    probe.stage = "training"
    result = probe._failed(error_class(JAX_OOM[1]))
    assert result.status is ProbeStatus.TOO_BIG and result.batch == 512
    assert result.message.startswith("out of memory while training: RESOURCE_EXHAUSTED")


class FakeJaxDevice:
    """What a JAX GPU device answers (the keys of XLA's BFC allocator), or a CPU's None."""

    def __init__(self, stats: dict[str, int] | None):
        self.stats = stats

    def memory_stats(self) -> dict[str, int] | None:
        return self.stats


def test_the_gpu_peak_is_the_jax_allocators_peak_bytes_in_use():
    gpu = FakeJaxDevice({"bytes_in_use": 1_000, "peak_bytes_in_use": 7_340_032,
                         "bytes_limit": 80 * GB, "num_allocs": 12})
    assert jax_peak_bytes(gpu) == 7_340_032
    assert jax_peak_bytes(FakeJaxDevice(None)) is None
    assert jax_peak_bytes(FakeJaxDevice({})) is None


@pytest.mark.jax
def test_jax_cpu_devices_keep_no_memory_statistics():
    """Why the probe measures its resident memory on CPU on JAX too (in a child: JAX
    must not start in the test host, whose workers set its variables first)."""
    pytest.importorskip("jax")
    code = ("import jax; from mgpu_gui.engine.device_memory import jax_peak_bytes; "
            "print(jax.devices()[0].memory_stats(), jax_peak_bytes(jax.devices()[0]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "None"]


def test_on_jax_the_scaling_test_warms_up_past_the_second_compile():
    """DataParallel over one device compiles its step a second time at step 2 (measured:
    4.3 s on the demo, against 10-30 ms steps), which one warm-up step would time."""
    assert dict(ScaleRequest(cpu_config(2), warmup=1).problems())["warmup"].startswith(
        "must be at least 2 (on the JAX engine the second step compiles again")
    assert ScaleRequest(cpu_config(2).replace(engine="tensorflow"), warmup=1).problems() == []


def test_the_tools_plan_a_jax_run_and_the_scaling_test_says_what_it_cannot_measure():
    scale = plan_scaling(ScaleRequest(cpu_config(2), counts=(1, 2)), NO_GPU)
    assert [c.devices for c in scale.counts] == [1, 2] and JAX_NOTE in scale.notes
    tensorflow = plan_scaling(ScaleRequest(cpu_config(2).replace(engine="tensorflow")), NO_GPU)
    assert JAX_NOTE not in tensorflow.notes
    search = plan_search(BatchRequest(cpu_config(1), memory_cap=GB), NO_GPU)
    assert search.kind is DeviceKind.CPU and search.cap_bytes == GB


# -- the real thing, on XLA's host devices ------------------------------------------------
TINY_NET = textwrap.dedent("""
    import keras


    def build_model(input_shape, num_classes):
        return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                                 keras.layers.Dense(16, activation="relu"),
                                 keras.layers.Dense(num_classes, activation="softmax")])
""")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> RunConfig:
    root = tmp_path_factory.mktemp("jax_tools")
    (root / "net.py").write_text(TINY_NET)
    rng = np.random.default_rng(0)
    np.savez(root / "data.npz", x_train=rng.random((256, 8, 8), dtype=np.float32),
             y_train=rng.integers(0, 4, 256))
    return cpu_config(2, model=str(root / "net.py"), data=str(root / "data.npz"),
                      validation_split=0.0, batch_per_replica=16)


@pytest.fixture
def no_tensorflow_children(monkeypatch):
    """The tools' children start as on the GPU machine, where only JAX is installed."""
    hidden = env_without_tensorflow()
    for name in ("PYTHONPATH", "MGPU_GUI_TEST_HIDE_TENSORFLOW"):
        monkeypatch.setenv(name, hidden[name])


@pytest.mark.slow
@pytest.mark.jax
def test_a_scaling_test_on_one_and_two_jax_cpu_devices(tiny_run, no_tensorflow_children):
    pytest.importorskip("jax")
    report = ScaleRunner(ScaleRequest(tiny_run, counts=(1, 2), steps=2, warmup=2),
                         inventory=NO_GPU).run()
    assert [p.status for p in report.points] == [PointStatus.OK] * 2, report.points
    assert [(p.devices, p.global_batch, p.timed_steps) for p in report.points] == [
        (1, 16, 2), (2, 32, 2)]
    assert all(p.samples_per_s > 0 for p in report.points)
    assert report.points[0].speedup == 1 and report.points[1].efficiency == pytest.approx(
        report.points[1].speedup / 2)
    # Not measured on JAX (TensorFlow's CPU replicas time every step): None, never 0.
    assert [p.input_wait for p in report.points] == [None, None]
    assert JAX_NOTE in report.notes and report.recommendation is not None


@pytest.mark.slow
@pytest.mark.jax
def test_a_batch_search_on_a_jax_cpu_device_stops_at_the_largest_batch(tiny_run,
                                                                       no_tensorflow_children):
    pytest.importorskip("jax")
    settings = SearchSettings(start=32, max_batch=32, min_steps=1, steps=1)
    report = BatchFinder(BatchRequest(tiny_run.replace(devices=DeviceSelection(
        kind=DeviceKind.CPU, replicas=1)), settings, memory_cap=8 * GB),
        inventory=NO_GPU).run()
    [probe] = report.probes
    assert probe.status is ProbeStatus.FITS, probe
    # The process's peak resident memory: JAX, Keras, the Python pipeline, the step.
    assert probe.base_bytes is not None and 100 * 10 ** 6 < probe.base_bytes <= probe.peak_bytes
    assert probe.peak_bytes < 8 * GB
    assert report.ended is Ended.MAX_BATCH and report.largest_fit == 32
    assert report.recommended == 24
