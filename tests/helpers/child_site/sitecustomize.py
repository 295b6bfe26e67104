"""Loaded at start-up by every child of a test (tests/conftest.py puts this folder first
on PYTHONPATH, tests/helpers/engine_starts.py keeps it there for a child's own environment).

- MGPU_GUI_TEST_ENGINE_LOG: the child notes which test started it when it imports
  TensorFlow or JAX (an import, not a `find_spec` asking whether one is installed), so a
  test that starts an engine without the `slow` marker fails.
  A child forked by the warm starter (mgpu_gui/core/children/warm_start.py) has the
  engine imported already: it notes the engines its audit event names.
- MGPU_GUI_TEST_HIDE_TENSORFLOW: the child behaves as on a machine where TensorFlow is
  not installed (the JAX-only GPU machine the JAX engine must also run on), though the
  test venv has it (tests/helpers/without_tensorflow.py).
"""

import importlib.abc
import os
import sys

HIDDEN = ("tensorflow", "tf_keras", "tensorboard")
ENGINES = ("tensorflow", "jax")
WARM_START = "mgpu_gui.warm_start"  # mgpu_gui/core/children/warm_server.py's EVENT


class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _note_engine_imports(log: str):
    def note(engine: str) -> None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
        with open(log, "a", encoding="utf-8") as out:  # one short line: atomic
            out.write(f"{test}\t{engine}\t{os.getpid()}\t{' '.join(sys.argv)[:300]}\n")

    def on_event(event: str, args: tuple) -> None:
        if event == "import" and args[0] in ENGINES and args[0] not in sys.modules:
            note(args[0])
        elif event == WARM_START:  # forked with the engine imported, in the test's env
            for engine in args[1]:
                if engine in ENGINES:
                    note(engine)

    return on_event


if os.environ.get("MGPU_GUI_TEST_HIDE_TENSORFLOW") == "1":
    sys.meta_path.insert(0, _Hidden())
if os.environ.get("MGPU_GUI_TEST_ENGINE_LOG"):
    sys.addaudithook(_note_engine_imports(os.environ["MGPU_GUI_TEST_ENGINE_LOG"]))
