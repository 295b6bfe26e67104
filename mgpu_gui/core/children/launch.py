"""How the app starts its child processes (worker, probe, export verifier, CLI).

From a Python install a child is `python -m MODULE ...`. Inside a frozen
bundle (PyInstaller) there is no `python -m`: the bundle's own executable is
started with `--mgpu-module MODULE ...`, and `run_module_from_argv` at the top
of the frozen entry point dispatches to that module's `main`.
"""

from __future__ import annotations

import runpy
import sys

MODULE_FLAG = "--mgpu-module"


def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs `python -m module args...` here, frozen or not."""
    if getattr(sys, "frozen", False):
        return [sys.executable, MODULE_FLAG, module, *args]
    return [sys.executable, "-m", module, *args]


def run_module_from_argv() -> bool:
    """In a frozen entry point: run the module a parent asked for, if it asked.

    Returns False when this process is the app itself (no module asked for).
    """
    if len(sys.argv) < 3 or sys.argv[1] != MODULE_FLAG:
        return False
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return True
