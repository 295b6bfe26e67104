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

import contextlib
import importlib
import importlib.machinery
import os
import runpy
import sys
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

MODULE_FLAG = "--mgpu-module"
CHILD_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}  # added to every child's
LOG_DIR_ENV = "MGPU_GUI_LOG_DIR"


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
    WARM_STARTER = "mgpu_gui.processes.warm_starter"


# The children that import TensorFlow and Keras for their work: where they see no GPU,
# they are forked from a warm starter that has imported both (core/children/warm_start.py).
# Not TF_FACTS: it reports what TensorFlow logs while it is imported.
WARM_CHILDREN = frozenset({
    Child.TRAINING_WORKER, Child.SCALING_WORKER, Child.BATCH_PROBE, Child.MODEL_PROBE,
    Child.EXPORT, Child.EXPORT_VERIFIER, Child.EVALUATOR, Child.AUGMENT_PREVIEW})
# What the warm starter imports for them: the engine and the modules their entries import
# once it is chosen; mgpu_gui.engine first, which keeps the optional imports out.
WARM_PRELOAD = ("mgpu_gui.engine", "keras", "tensorflow", "mgpu_gui.engine.training",
                "mgpu_gui.engine.export", "mgpu_gui.engine.evaluation",
                "mgpu_gui.engine.prediction", "mgpu_gui.engine.augmentation", *WARM_CHILDREN)


def command_log(name: str) -> Path:
    """The log file of a command's children outside a run: `<log folder>/<name>.log`
    ($MGPU_GUI_LOG_DIR, else the user's log folder), rewritten by each new job."""
    folder = os.environ.get(LOG_DIR_ENV)
    if not folder:
        import platformdirs

        folder = platformdirs.user_log_dir("mgpu-gui", appauthor=False)
    return Path(folder).expanduser() / f"{name}.log"


def pythonpath_for_child(environ: Mapping[str, str]) -> str | None:
    """The PYTHONPATH for a child that starts in a folder of its own (the export verifier):
    this package's folder first where only the folder this process started in finds it
    (`python -m mgpu_gui` in a source checkout that is not installed). An installed one,
    editable too, is found anyway: a PYTHONPATH changed for nothing would also make the
    warm starter refuse the child (core/children/warm_server.py)."""
    current = environ.get("PYTHONPATH")
    if getattr(sys, "frozen", False) or _found_anywhere():
        return current
    root = str(Path(__file__).resolve().parents[3])
    return os.pathsep.join(p for p in (root, current) if p)


def _found_anywhere() -> bool:
    """Whether this very package is found without the folder this process started in."""
    here = Path(__file__).resolve().parents[2] / "__init__.py"
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder:
            spec = finder.find_spec(__package__.split(".")[0], sys.path[1:])
        elif hasattr(finder, "find_spec"):  # an editable install's finder, a bundle's
            spec = finder.find_spec(__package__.split(".")[0], None)
        else:
            continue
        if spec is not None and spec.origin:
            return Path(spec.origin).resolve() == here
    return False


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
    run_as_main(module)
    return True


def run_as_main(module: str) -> None:
    """Run a child entry's module as `python -m` does (the warm starter's forks too)."""
    sys.modules.pop(module, None)  # imported already (preloaded): run it afresh
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def preload_warm_modules() -> None:
    """Import `WARM_PRELOAD`; one that fails is left to the children that need it."""
    for module in WARM_PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
