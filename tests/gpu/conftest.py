"""Tests on a real NVIDIA GPU, marked `gpu`: skipped where NVML (the app's own layer,
mgpu_gui.core.devices) lists no GPU.

They run on a machine with a GPU, JAX's CUDA build and nvidia-ml-py but no TensorFlow,
no Qt and no network (tests/gpu/run), and in the full suite on a GPU workstation.
Nothing here imports Qt, TensorFlow or JAX: JAX runs in child processes, each given its
GPU explicitly (CUDA_VISIBLE_DEVICES), since tests/conftest.py hides every GPU from the
test process. Only this conftest is needed (`--confcutdir tests/gpu` works too): children
get a run store and log folder of their own here.

Each test says its figures with `figure(...)`: printed at the end of the session and
appended to $OUT/gpu_figures.txt where OUT is set (the device tool brings that folder
back, even from a run stopped at its time limit).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, NvmlState, query_inventory

FIGURES_FILE = "gpu_figures.txt"
# Variables that would decide for the app what the tests check it decides itself.
_UNSET = ("MGPU_GUI_FAKE_GPUS", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
          "XLA_PYTHON_CLIENT_ALLOCATOR", "JAX_PLATFORMS", "KERAS_BACKEND")
_figures: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [item for item in items if item.get_closest_marker("gpu")]
    if not marked:
        return
    inventory = query_inventory()
    if inventory.state is NvmlState.OK:
        return
    skip = pytest.mark.skip(reason=f"needs an NVIDIA GPU, and NVML lists none: "
                                   f"{inventory.reason or inventory.message}")
    for item in marked:
        item.add_marker(skip)


def pytest_terminal_summary(terminalreporter) -> None:
    if _figures:
        terminalreporter.section("GPU figures")
        for line in _figures:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def inventory() -> GpuInventory:
    found = query_inventory()
    assert found.state is NvmlState.OK, found.message  # the skip above makes this hold
    return found


@pytest.fixture(scope="session")
def gpu(inventory: GpuInventory) -> GpuInfo:
    """The GPU the tests load: the first NVML lists."""
    return inventory.gpus[0]


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Say a figure: kept for the session's summary and $OUT/gpu_figures.txt."""

    def say(text: str) -> None:
        line = f"{request.node.name}: {text}"
        _figures.append(line)
        print(line)
        if os.environ.get("OUT"):
            with (Path(os.environ["OUT"]) / FIGURES_FILE).open("a", encoding="utf-8") as out:
                out.write(line + "\n")

    return say


@pytest.fixture(scope="module")
def child_env(gpu: GpuInfo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a child that uses `gpu`: that GPU only, a store and logs of the
    module's own, and none of the variables the app must set itself."""
    folder = tmp_path_factory.mktemp("children")
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    env.update(CUDA_VISIBLE_DEVICES=gpu.uuid or str(gpu.index), CUDA_DEVICE_ORDER="PCI_BUS_ID",
               MGPU_GUI_STORE=str(folder / "runs.sqlite3"),
               MGPU_GUI_LOG_DIR=str(folder / "logs"), PYTHONUNBUFFERED="1")
    return env


@pytest.fixture
def mgpu_train(child_env: dict[str, str], tmp_path: Path
               ) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs `mgpu-train ARGS` in a child (cwd: the test's folder, so the installed project,
    a carried wheel on the GPU machine, is what it imports) and returns it, ended."""

    def run(*args: str, timeout: float = 280) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "mgpu_gui.cli.main", *args],
                              capture_output=True, text=True, env=child_env, cwd=tmp_path,
                              timeout=timeout)
        print(done.stderr[-4000:], file=sys.stderr)
        return done

    return run


@pytest.fixture(scope="session")
def smi() -> Callable[[str, str], list[dict[str, str]]]:
    """nvidia-smi, asked (what the GPU panel's figures are checked against)."""
    return _nvidia_smi


def _nvidia_smi(query: str, fields: str) -> list[dict[str, str]]:
    """`nvidia-smi --query-<query>=FIELDS` as rows of field -> text (csv, no units)."""
    program = shutil.which("nvidia-smi")
    if program is None:
        pytest.skip("nvidia-smi is not on the PATH: nothing to compare NVML's figures with")
    done = subprocess.run([program, f"--query-{query}={fields}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=60, check=True)
    names = fields.split(",")
    # (a row of another length is a remark, e.g. that no process runs)
    return [dict(zip(names, (cell.strip() for cell in row), strict=True))
            for row in csv.reader(io.StringIO(done.stdout)) if len(row) == len(names)]
