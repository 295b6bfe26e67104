"""MirroredStrategy over logical CPU replicas, each count in a fresh process.

Logical CPU devices can only be configured before TensorFlow initialises its
devices, so every replica count needs a process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from mgpu_gui.core.config import DeviceKind, DeviceSelection
from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, NvmlState
from mgpu_gui.core.devices.plan import plan_devices
from mgpu_gui.core.errors import DeviceError
from mgpu_gui.engine import strategy as strategy_module
from mgpu_gui.engine.strategy import apply_device_env

CHILD = textwrap.dedent(
    """
    import json, sys
    from mgpu_gui.core.config import DeviceKind, DeviceSelection
    from mgpu_gui.core.devices.plan import plan_devices
    from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
    from mgpu_gui.engine.strategy import apply_device_env, make_strategy

    replicas = int(sys.argv[1])
    plan = plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=replicas),
                        GpuInventory(NvmlState.NO_DRIVER))
    apply_device_env(plan)
    assert "tensorflow" not in sys.modules
    strategy, ops = make_strategy(plan)
    import tensorflow as tf

    # Each replica really gets its own slice of work: sum of replica ids.
    ids = strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)
    total = int(strategy.reduce(tf.distribute.ReduceOp.SUM, ids, axis=None))
    try:  # a second, different split in the same process must fail clearly
        make_strategy(plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=replicas + 1),
                                   GpuInventory(NvmlState.NO_DRIVER)))
        second = "no error"
    except RuntimeError as exc:
        second = str(exc)
    print("RESULT " + json.dumps({
        "replicas": strategy.num_replicas_in_sync, "ops": ops, "total": total,
        "devices": list(strategy.extended.worker_devices), "second": second,
    }))
    """
)

pytestmark = pytest.mark.slow  # TensorFlow strategies in this process and in fresh ones


@pytest.mark.parametrize("replicas", [2, 4])
def test_cpu_replicas_in_a_fresh_process(replicas):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(replicas)], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result["replicas"] == replicas
    assert result["ops"] == "ReductionToOneDevice"
    assert result["total"] == sum(range(replicas))
    assert [d.rsplit("/", 1)[-1] for d in result["devices"]] == [
        f"device:CPU:{i}" for i in range(replicas)
    ]
    assert result["second"].startswith(f"Cannot split the CPU into {replicas + 1} replicas: "
                                       "TensorFlow already initialised its devices")


def test_importing_devices_and_strategy_loads_neither_tensorflow_nor_cuda():
    code = ("import sys, mgpu_gui.core.devices.nvml, mgpu_gui.engine.strategy; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras', 'PySide6')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip() == "[]"


def cpu_plan():
    return plan_devices(DeviceSelection(kind=DeviceKind.CPU), GpuInventory(NvmlState.NO_DRIVER))


def test_apply_device_env_sets_the_plan_environment(monkeypatch):
    # As in a fresh worker (the whole suite has imported both): KERAS_BACKEND is set too.
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    environ = {"CUDA_VISIBLE_DEVICES": "0,1", "HOME": "/home/x"}
    apply_device_env(cpu_plan(), environ)
    assert environ == {"CUDA_VISIBLE_DEVICES": "", "HOME": "/home/x",
                       "KERAS_BACKEND": "tensorflow"}


def test_apply_device_env_refuses_after_tensorflow_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", object())
    with pytest.raises(RuntimeError, match="before importing TensorFlow"):
        apply_device_env(cpu_plan(), {"CUDA_VISIBLE_DEVICES": "0"})
    environ = {"CUDA_VISIBLE_DEVICES": "", "KERAS_BACKEND": "tensorflow"}
    apply_device_env(cpu_plan(), environ)  # nothing changes: allowed
    assert environ == {"CUDA_VISIBLE_DEVICES": "", "KERAS_BACKEND": "tensorflow"}


# -- the GPU path, against a fake `tf` (this machine has no GPU) ----------------


class FakeTF:
    """Just the `tf` surface `_gpu_strategy` uses; records what it was asked."""

    def __init__(self, gpus: int, cuda_build: bool = True):
        self.growth: list[str] = []
        physical = [f"/physical_device:GPU:{i}" for i in range(gpus)]
        logical = [SimpleNamespace(name=f"/device:GPU:{i}") for i in range(gpus)]
        self.config = SimpleNamespace(
            list_physical_devices=lambda kind: physical,
            list_logical_devices=lambda kind: logical,
            experimental=SimpleNamespace(
                set_memory_growth=lambda dev, on: self.growth.append(dev)),
        )
        self.test = SimpleNamespace(is_built_with_cuda=lambda: cuda_build)
        self.distribute = SimpleNamespace(
            MirroredStrategy=lambda devices, cross_device_ops=None: SimpleNamespace(
                devices=devices, ops=cross_device_ops, num_replicas_in_sync=len(devices)),
            NcclAllReduce=lambda: "nccl",
            HierarchicalCopyAllReduce=lambda: "hierarchical",
        )


def gpu_plan(count: int):
    gpus = tuple(GpuInfo(i, "NVIDIA H100", f"GPU-{i}", None, None, (9, 0)) for i in range(count))
    return plan_devices(DeviceSelection(kind=DeviceKind.GPU),
                        GpuInventory(NvmlState.OK, gpus))


@pytest.mark.parametrize(("nccl", "name"), [(True, "NcclAllReduce"),
                                            (False, "HierarchicalCopyAllReduce")])
def test_gpu_strategy_picks_cross_device_ops(monkeypatch, nccl, name):
    monkeypatch.setattr(strategy_module, "nccl_available", lambda tf: nccl)
    tf = FakeTF(2)
    strategy, ops = strategy_module._gpu_strategy(tf, gpu_plan(2))
    assert ops == name
    assert strategy.ops == ("nccl" if nccl else "hierarchical")
    assert strategy.devices == ["/device:GPU:0", "/device:GPU:1"]
    assert tf.growth == ["/physical_device:GPU:0", "/physical_device:GPU:1"]


def test_one_gpu_needs_no_cross_device_ops():
    strategy, ops = strategy_module._gpu_strategy(FakeTF(1), gpu_plan(1))
    assert (ops, strategy.ops) == ("none (one GPU)", None)


@pytest.mark.parametrize(("cuda_build", "words"), [
    (True, "TensorFlow sees no GPU: TensorFlow was installed without its CUDA libraries. "
           "Install the project's cuda extra (pip install 'mgpu-gui[cuda]')"),
    (False, "this TensorFlow build has no CUDA support"),
])
def test_tensorflow_without_cuda_says_to_install_the_extra(cuda_build, words):
    with pytest.raises(DeviceError) as info:
        strategy_module._gpu_strategy(FakeTF(0, cuda_build), gpu_plan(2))
    assert words in str(info.value)
    assert str(info.value).startswith("The NVIDIA driver lists GPU 0: NVIDIA H100 (GPU-0), "
                                      "GPU 1: NVIDIA H100 (GPU-1), but")
    assert "--cpu" in str(info.value)


def test_tensorflow_seeing_other_gpu_count_is_an_error():
    with pytest.raises(DeviceError, match="TensorFlow sees 1 GPU"):
        strategy_module._gpu_strategy(FakeTF(1), gpu_plan(2))
