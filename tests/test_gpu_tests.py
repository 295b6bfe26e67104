"""tests/gpu, checked where there is no GPU: its modules import neither Qt nor TensorFlow
nor JAX (the GPU machine has no Qt and no TensorFlow; JAX runs in their children), and
every test there is marked `gpu`, so it is skipped where NVML lists no GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.without_tensorflow import env_without_tensorflow

ROOT = Path(__file__).parent.parent
HEAVY = ("PySide6", "pyqtgraph", "tensorflow", "keras", "jax")

CHECK = """
import importlib, json, pathlib, sys
names = sorted(p.stem for p in pathlib.Path("tests/gpu").glob("test_*.py"))
unmarked = []
for name in ["conftest", *names]:
    module = importlib.import_module(f"tests.gpu.{name}")
    marks = getattr(module, "pytestmark", [])
    marks = marks if isinstance(marks, list) else [marks]
    if name != "conftest" and "gpu" not in [m.name for m in marks]:
        unmarked.append(name)
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
print(json.dumps({"modules": names, "unmarked": unmarked, "heavy": heavy}))
"""


def test_gpu_tests_import_no_qt_tensorflow_or_jax_and_are_all_marked():
    done = subprocess.run([sys.executable, "-c", CHECK, *HEAVY], capture_output=True,
                          text=True, cwd=ROOT, env=env_without_tensorflow(), timeout=60)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert {"test_gpu_panel", "test_jax_training", "test_find_batch"} <= set(found["modules"])
    assert found["unmarked"] == []
    assert found["heavy"] == []
