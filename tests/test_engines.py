"""The engine choice without JAX: validation, the worker's environment, the CLI flag."""

from __future__ import annotations

import sys

import pytest

from mgpu_gui.cli.common import add_train_arguments, config_from_args
from mgpu_gui.core import engines
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.devices.plan import plan_devices
from mgpu_gui.core.engines import Engine, engine_env
from mgpu_gui.engine.strategy import apply_device_env


def test_a_cpu_run_on_jax_gets_its_devices_and_keeps_other_xla_flags():
    env = engine_env(Engine.JAX, cpu_replicas=4,
                     environ={"XLA_FLAGS": "--xla_dump_to=/tmp/x "
                                           "--xla_force_host_platform_device_count=8"})
    assert env == {"KERAS_BACKEND": "jax", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                   "JAX_PLATFORMS": "cpu",
                   "XLA_FLAGS": "--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=4"}


def test_a_gpu_run_on_jax_takes_no_memory_up_front_and_no_cpu_fallback():
    env = engine_env(Engine.JAX, cpu_replicas=None, environ={})
    assert env == {"KERAS_BACKEND": "jax", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                   "JAX_PLATFORMS": "cuda"}


def test_the_tensorflow_engine_names_its_backend_against_a_users_keras_json():
    assert engine_env(Engine.TENSORFLOW, cpu_replicas=2, environ={}) == {
        "KERAS_BACKEND": "tensorflow"}


def test_the_worker_environment_joins_the_device_plan_and_the_engine(monkeypatch):
    for name in ("tensorflow", "keras", "jax"):  # as in a fresh worker
        monkeypatch.delitem(sys.modules, name, raising=False)
    plan = plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=3),
                        GpuInventory(NvmlState.NO_DRIVER))
    environ: dict[str, str] = {}
    apply_device_env(plan, environ, engine=Engine.JAX)
    assert environ["CUDA_VISIBLE_DEVICES"] == ""
    assert environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=3"
    assert environ["KERAS_BACKEND"] == "jax"


def test_refuses_after_jax_started(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", object())
    plan = plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=2),
                        GpuInventory(NvmlState.NO_DRIVER))
    with pytest.raises(RuntimeError, match="already imported") as refused:
        apply_device_env(plan, {}, engine=Engine.JAX)
    # In the whole suite TensorFlow and Keras are imported too: they are named with it.
    assert "JAX" in str(refused.value).split("is already imported")[0]


def test_jax_missing_is_a_problem_that_names_the_extra(monkeypatch):
    monkeypatch.setattr(engines, "installed", lambda engine: engine is not Engine.JAX)
    problems = dict(RunConfig(engine="jax").problems())
    assert "pip install 'mgpu-gui[jax]'" in problems["engine"]
    assert RunConfig(engine="tensorflow").problems() == []


def test_what_jax_cannot_do_is_refused_before_the_run(monkeypatch):
    monkeypatch.setattr(engines, "installed", lambda engine: True)
    problems = dict(RunConfig(engine="jax", jit_compile=True).problems())
    assert "compiles every step with XLA already" in problems["jit_compile"]
    assert dict(RunConfig(engine="pytorch").problems())["engine"].startswith(
        "unknown engine 'pytorch'")


def test_the_engine_flag_reaches_the_config():
    import argparse

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    assert config_from_args(parser.parse_args(["--engine", "jax"])).engine == "jax"
    assert config_from_args(parser.parse_args([])).engine == "tensorflow"
    with pytest.raises(SystemExit):
        parser.parse_args(["--engine", "torch"])


def test_a_cluster_worker_refuses_jax(tmp_path, capsys):
    from mgpu_gui.cli.main import main

    code = main(["worker", "--cluster", "127.0.0.1:1,127.0.0.1:2", "--index", "1",
                 "--engine", "jax", "--cpu", "-o", str(tmp_path)])
    assert code == 2
    assert "--engine: a run across several machines" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())

