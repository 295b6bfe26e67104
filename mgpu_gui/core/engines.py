"""Which Keras backend a run trains on, and the environment its worker needs for it.

Plain Python (no Keras, no JAX): the supervisor validates the choice instantly, and
the worker sets the environment before anything imports Keras, which reads
KERAS_BACKEND once, at import. JAX reads its XLA_* variables once too, when its
backend starts.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from collections.abc import Mapping
from enum import StrEnum


def pip_install(requirement: str, *options: str) -> str:
    """The command that installs `requirement` into the Python running this: a bare `pip`
    may be another environment's (the system's, or a different venv's)."""
    return shlex.join([sys.executable, "-m", "pip", "install", *options, requirement])


JAX_EXTRA = "mgpu-gui[jax]"
JAX_CUDA_EXTRA = "mgpu-gui[jax-cuda]"  # JAX's NVIDIA build
JAX_EXTRA_HINT = pip_install(JAX_EXTRA)
JAX_CUDA_EXTRA_HINT = pip_install(JAX_CUDA_EXTRA)
# JAX otherwise takes 75 % of every GPU it sees at start: the GPU panel, claims of other
# runs and the batch finder would all see a full GPU. Every JAX child sets it.
NO_PREALLOCATION = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
# Appended to XLA_FLAGS: JAX's CPU backend shows one device unless told to make N.
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


class Engine(StrEnum):
    TENSORFLOW = "tensorflow"  # MirroredStrategy, tf.data (engine/strategy.py)
    JAX = "jax"  # keras.distribution.DataParallel (engine/jax_strategy.py)


class InputPipeline(StrEnum):
    """What feeds the batches: tf.data (engine/pipeline.py), or a keras.utils.PyDataset that
    needs no TensorFlow (engine/py_pipeline.py; the JAX engine only). AUTO: tf.data where
    TensorFlow is installed, else the Python one."""

    AUTO = "auto"
    TF_DATA = "tf.data"
    PYTHON = "python"


ENGINES = tuple(e.value for e in Engine)
INPUT_PIPELINES = tuple(p.value for p in InputPipeline)
CLUSTER_REFUSAL = ("engine", "a run across several machines (mgpu-train worker) trains on the "
                             "tensorflow engine only; JAX's multi-process training is not "
                             "supported yet")


def installed(engine: Engine) -> bool:
    """Whether `engine`'s framework can be imported here (looked up, not imported)."""
    try:
        return importlib.util.find_spec(engine.value) is not None
    except ImportError:  # an import hook that hides the package says so by raising
        return False


def resolve_pipeline(engine: str, choice: str) -> InputPipeline:
    """The pipeline a run on `engine` uses for `choice` (AUTO resolved here: this process's
    TensorFlow decides, so the worker resolves it again where it runs)."""
    wanted = InputPipeline(choice)
    if wanted is not InputPipeline.AUTO:
        return wanted
    if engine == Engine.JAX and not installed(Engine.TENSORFLOW):
        return InputPipeline.PYTHON
    return InputPipeline.TF_DATA


def pipeline_problems(engine: str, choice: str, *, augment: bool, cache: str,
                      export_formats: tuple[str, ...]) -> list[tuple[str, str]]:
    """What the run's input pipeline (and, without TensorFlow, its export) cannot do here,
    as RunConfig.problems pairs: refused at setup, never mid-run."""
    if choice not in INPUT_PIPELINES:
        return [("input_pipeline", f"unknown input pipeline {choice!r}; use one of "
                                   f"{', '.join(INPUT_PIPELINES)}")]
    if engine not in ENGINES:
        return []  # engine_problems says so
    has_tf = installed(Engine.TENSORFLOW)
    found = []
    pipeline = resolve_pipeline(engine, choice)
    if pipeline is InputPipeline.TF_DATA and not has_tf:
        found.append(("input_pipeline", "the tf.data pipeline needs TensorFlow, which is not "
                                        "installed here; use --input-pipeline python (or auto)"))
    if pipeline is InputPipeline.PYTHON:
        if engine != Engine.JAX:
            found.append(("input_pipeline", "the python input pipeline feeds the jax engine "
                                            "only; the tensorflow engine takes tf.data"))
        why = ("TensorFlow is not installed" if not has_tf
               else "the python input pipeline was chosen")
        if augment:
            found.append(("augment", f"augmentation runs in tf.data and {why}; turn "
                                     f"augmentation off or train with TensorFlow installed"))
        if cache == "disk":
            found.append(("cache", f"the disk cache is tf.data's and {why}; use auto or "
                                   f"memory"))
    if engine == Engine.JAX and not has_tf and "savedmodel" in export_formats:
        found.append(("export_formats", "a SavedModel export needs TensorFlow, which is not "
                                        "installed here; export keras or h5"))
    return found


def installed_engines() -> list[Engine]:
    return [e for e in Engine if installed(e)]


def engine_problems(engine: str, *, jit_compile: bool) -> list[tuple[str, str]]:
    """What a run on `engine` cannot do here, as RunConfig.problems pairs."""
    if engine not in ENGINES:
        return [("engine", f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")]
    if engine != Engine.JAX:
        return []
    found = []
    if not installed(Engine.JAX):
        found.append(("engine", f"JAX is not installed in this Python environment; install "
                                f"it with {JAX_EXTRA_HINT} (NVIDIA GPUs: {JAX_CUDA_EXTRA_HINT}), "
                                f"or train on the tensorflow engine"))
    if jit_compile:
        found.append(("jit_compile", "the JAX engine compiles every step with XLA already; "
                                     "turn XLA (--xla) off"))
    return found


def backend_env(engine: Engine | str) -> dict[str, str]:
    """The engine a child runs on, in its environment from its start: a child forked from
    a warm starter has Keras imported already, on the starter's backend, so the starter
    must see which one the child needs (core/children/warm_server.py)."""
    return {"KERAS_BACKEND": Engine(engine).value}


def engine_env(engine: Engine, *, cpu_replicas: int | None,
               environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a worker on `engine` sets before Keras starts.

    `cpu_replicas`: the CPU devices a CPU run splits into (None: a GPU run, whose GPUs
    the device plan's CUDA_VISIBLE_DEVICES chooses). `environ` is read for XLA_FLAGS,
    which is extended rather than replaced.
    """
    env = backend_env(engine)
    if engine is not Engine.JAX:
        return env
    env.update(NO_PREALLOCATION)
    if cpu_replicas is None:
        env["JAX_PLATFORMS"] = "cuda"  # fail at start, not fall back to CPU silently
        return env
    env["JAX_PLATFORMS"] = "cpu"  # no search for a CUDA plugin on a CPU run
    flags = [f for f in environ.get("XLA_FLAGS", "").split()
             if not f.startswith(HOST_DEVICES_FLAG)]
    env["XLA_FLAGS"] = " ".join([*flags, f"{HOST_DEVICES_FLAG}={cpu_replicas}"])
    return env

