"""What a child that imports TensorFlow costs to start, fresh against warm (forked from the
warm starter), measured in the same run.

The child is an export verifier asked to reload a file that does not exist: it imports
its modules, reads its request, answers `ExportFailed` and ends, so its time is nearly
all start-up. Each phase runs the children one after another and prints the median wall
time per child and the machine's busy CPU-seconds per child (/proc/stat, every process:
the starter's forks are not this process's children, so its rusage would miss them).
The starter is started before the warm phase and is ready when it begins (its own import
is printed apart: it is paid once per app, CLI or pytest worker).

    python tests/benchmarks/child_start.py [--children 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the children a starter serves see no GPU
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's shell has it

from mgpu_gui.core.children import warm_start  # noqa: E402
from mgpu_gui.core.children.launch import Child, module_command  # noqa: E402
from mgpu_gui.core.children.runner import ChildProcesses  # noqa: E402


def busy_seconds() -> float:
    """CPU-seconds every core has been busy since boot."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def verify_missing(folder: Path) -> tuple[float, str]:
    request = {"format": "keras", "path": str(folder / "missing.keras"),
               "x": str(folder / "missing.npy"), "y": str(folder / "y.npz"),
               "safe_mode": True, "custom_objects": None}
    began = time.perf_counter()
    ended = ChildProcesses().run(
        lambda fd: module_command(Child.EXPORT_VERIFIER, "--events-fd", str(fd)), request,
        {"CUDA_VISIBLE_DEVICES": ""}, lambda message: message.get("error_type"))
    assert ended is not None and ended.result == "FileNotFoundError", ended
    return time.perf_counter() - began, ended.result


def phase(name: str, children: int, folder: Path) -> tuple[float, float]:
    busy = busy_seconds()
    walls = [verify_missing(folder)[0] for _ in range(children)]
    cpu = (busy_seconds() - busy) / children
    wall = statistics.median(walls)
    print(f"{name:>6}: {wall:6.3f} s wall per child (median of {children}), "
          f"{cpu:5.2f} CPU-s per child (machine)")
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        os.environ[warm_start.OFF_ENV] = "0"
        fresh_wall, fresh_cpu = phase("fresh", args.children, folder)
        del os.environ[warm_start.OFF_ENV]
        busy, began = busy_seconds(), time.perf_counter()
        verify_missing(folder)  # the first: fresh, and counts toward the starter
        verify_missing(folder)  # the second starts the starter
        address = os.environ[warm_start.STARTER_ENV]
        while not os.path.exists(address):
            time.sleep(0.05)
        print(f"starter: ready {time.perf_counter() - began:.1f} s after the first child, "
              f"{busy_seconds() - busy:.1f} CPU-s with those two children")
        warm_wall, warm_cpu = phase("warm", args.children, folder)
    print(f"warm / fresh: {warm_wall / fresh_wall:.2f}x the wall time, "
          f"{warm_cpu / fresh_cpu:.2f}x the CPU per child")


if __name__ == "__main__":
    main()
