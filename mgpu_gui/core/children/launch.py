"""The registry of child entries: the one place that names the modules children run.

Every child process the app starts (worker, probes, export, queue runner) is a
`Child` here; `module_command(Child.X, ...)` gives its command line. From a
Python install a child is `python -m MODULE ...`. Inside a frozen bundle
(PyInstaller) there is no `python -m`: the bundle's own executable is started
with `--mgpu-module MODULE ...`, and `run_module_from_argv` at the top of the
frozen entry point dispatches to that module's `main`, for registry entries
only: a command line cannot make the bundle run any other module.
"""

from __future__ import annotations

import runpy
import sys
from enum import StrEnum

MODULE_FLAG = "--mgpu-module"


class Child(StrEnum):
    """The child entries (`mgpu_gui.processes`), by the module each runs."""

    TRAINING_WORKER = "mgpu_gui.processes.training_worker"
    SCALING_WORKER = "mgpu_gui.processes.scaling_worker"
    BATCH_PROBE = "mgpu_gui.processes.batch_probe"
    MODEL_PROBE = "mgpu_gui.processes.model_probe"
    TF_FACTS = "mgpu_gui.processes.tf_facts"
    QUEUE_RUNNER = "mgpu_gui.processes.queue_runner"
    EXPORT = "mgpu_gui.processes.export"
    EXPORT_VERIFIER = "mgpu_gui.processes.export_verifier"
    INSPECTOR = "mgpu_gui.processes.inspector"
    DATA_CHECK = "mgpu_gui.processes.data_check"
    EVALUATOR = "mgpu_gui.processes.evaluator"
    DATA_OVERVIEW = "mgpu_gui.processes.data_overview"
    SAMPLE_IMAGES = "mgpu_gui.processes.sample_images"
    AUGMENT_PREVIEW = "mgpu_gui.processes.augment_preview"


class UnknownChildError(ValueError):
    """A frozen bundle was asked to run a module that is no child entry."""


def module_command(child: Child, *args: str) -> list[str]:
    """The command line that runs `python -m <child's module> args...` here, frozen or not."""
    module = Child(child).value
    if getattr(sys, "frozen", False):
        return [sys.executable, MODULE_FLAG, module, *args]
    return [sys.executable, "-m", module, *args]


def run_module_from_argv() -> bool:
    """In a frozen entry point: run the child entry a parent asked for, if it asked.

    Returns False when this process is the app itself (no module asked for);
    raises UnknownChildError for a module that is not in the registry.
    """
    if len(sys.argv) < 3 or sys.argv[1] != MODULE_FLAG:
        return False
    module = sys.argv[2]
    if module not in {child.value for child in Child}:
        raise UnknownChildError(f"{module!r} is not a child entry of mgpu-gui; "
                                f"{MODULE_FLAG} runs only {', '.join(Child)}")
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return True
