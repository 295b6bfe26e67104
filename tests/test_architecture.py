"""The house rules (README, "How the code is laid out"), enforced.

The import contracts in `pyproject.toml` (import-linter) say which layer may
import what, statically, function-level imports included. The tests below add
what a static graph cannot see: a module loaded by name at run time, a module
grown past one concern, and the GUI process as it really runs (no TensorFlow).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mgpu_gui"
MAX_LINES = 500
# The one place that turns a child's name into a module: the registry of child entries.
REGISTRY = PACKAGE / "core" / "children" / "launch.py"


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=120, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "QT_QPA_PLATFORM": "offscreen", "CUDA_VISIBLE_DEVICES": ""}


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_import_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is in the dev extra: pip install -e '.[dev]'"
    result = subprocess.run([lint, "--no-cache"], capture_output=True, text=True, timeout=300,
                            cwd=PACKAGE.parent)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_no_module_over_500_lines():
    big = {str(p.relative_to(PACKAGE.parent)): n for p in _sources()
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}


def _dynamic_imports(path: Path) -> list[int]:
    """Lines that may load one of ours by name (importlib, __import__, runpy).

    A literal third-party name (`import_module("pynvml")`) is no such line; a
    computed name could be anything, so it counts.
    """
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in ("import_module", "__import__", "run_module", "run_path"):
            continue
        first = node.args[0] if node.args else None
        third_party = (isinstance(first, ast.Constant) and isinstance(first.value, str)
                       and not first.value.startswith("mgpu_gui"))
        if not third_party:
            lines.append(node.lineno)
    return lines


def test_modules_are_loaded_by_name_only_in_the_registry_of_child_entries():
    found = {str(p.relative_to(PACKAGE.parent)): lines for p in _sources()
             if p != REGISTRY and (lines := _dynamic_imports(p))}
    assert found == {}


@pytest.mark.parametrize("layer", ["core", "cli"])
def test_light_layers_load_neither_qt_nor_tensorflow(layer):
    out = run_python(f"""
        import importlib, pkgutil, sys
        import mgpu_gui.{layer} as layer
        for m in pkgutil.walk_packages(layer.__path__, "mgpu_gui.{layer}."):
            if m.name != "mgpu_gui.cli.scale":  # draws its figure with the GUI's plot
                importlib.import_module(m.name)
        heavy = sorted(m for m in ("tensorflow", "keras", "PySide6", "pyqtgraph")
                       if m in sys.modules)
        print(",".join(heavy))
    """)
    assert out.strip() == ""


@pytest.mark.slow
def test_engine_and_processes_never_import_qt():
    out = run_python("""
        import importlib, pkgutil, sys
        import mgpu_gui.engine, mgpu_gui.processes
        for pkg in (mgpu_gui.engine, mgpu_gui.processes):
            for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
                importlib.import_module(m.name)
        print("PySide6" in sys.modules, "tensorflow" in sys.modules)
    """)
    assert out.split() == ["False", "True"]


@pytest.mark.slow
def test_gui_process_never_loads_tensorflow():
    out = run_python("""
        import sys
        from PySide6.QtWidgets import QApplication
        from mgpu_gui.gui.main_window import MainWindow
        app = QApplication([])
        window = MainWindow()
        window.show()
        app.processEvents()
        window.close()
        print(",".join(m for m in ("tensorflow", "keras", "h5py", "mgpu_gui.testing")
                       if m in sys.modules))
    """)
    assert out.strip() == ""


def test_tens_of_thousands_of_signal_emits_do_not_crash():
    """PySide6 6.12.0 on Python 3.11 aborted after ~600 emits (bool_dealloc)."""
    out = run_python("""
        from PySide6.QtCore import QCoreApplication, QObject, Signal

        class Source(QObject):
            fired = Signal(bool, int)

        app = QCoreApplication([])
        source = Source()
        seen = []
        source.fired.connect(lambda flag, n: seen.append(n))
        for i in range(50_000):
            source.fired.emit(i % 2 == 0, i)
        print(len(seen))
    """)
    assert out.strip() == "50000"
