"""The process boundaries the design rests on, enforced.

The core never imports Qt; only the worker-side modules import TensorFlow; the
GUI process never loads TensorFlow or Keras (the window must open at once and a
training crash must not take it down).
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import textwrap

import mgpu_gui.core

WORKER_ONLY = {"training", "callbacks"}  # import TensorFlow at module level, by design


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=120, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "QT_QPA_PLATFORM": "offscreen", "CUDA_VISIBLE_DEVICES": ""}


def core_modules() -> list[str]:
    return [m.name for m in pkgutil.iter_modules(mgpu_gui.core.__path__)]


def test_core_imports_neither_qt_nor_tensorflow():
    light = [m for m in core_modules() if m not in WORKER_ONLY]
    out = run_python(f"""
        import importlib, sys
        for name in {light!r}:
            importlib.import_module("mgpu_gui.core." + name)
        importlib.import_module("mgpu_gui.cli")
        importlib.import_module("mgpu_gui.worker")
        heavy = sorted(m for m in ("tensorflow", "keras", "PySide6", "pyqtgraph")
                       if m in sys.modules)
        print(",".join(heavy))
    """)
    assert out.strip() == ""


def test_worker_side_modules_never_import_qt():
    out = run_python(f"""
        import importlib, sys
        for name in {sorted(WORKER_ONLY)!r}:
            importlib.import_module("mgpu_gui.core." + name)
        print("PySide6" in sys.modules, "tensorflow" in sys.modules)
    """)
    assert out.split() == ["False", "True"]


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
        print(",".join(m for m in ("tensorflow", "keras") if m in sys.modules))
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
