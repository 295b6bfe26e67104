"""The frameworks' optional imports of JAX and scikit-learn are refused in engine
processes (mgpu_gui/engine/optional_imports.py); every other import of them goes through."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mgpu_gui.engine import optional_imports


def _find_as(importer: str, package: str):
    """The finder asked for `package` by an import statement in `importer`'s code."""
    finder = optional_imports._RefuseOptionalImports()
    scope = {"__name__": importer, "finder": finder}
    exec(f"result = finder.find_spec({package!r})", scope)
    return scope["result"]


def test_only_the_named_importers_are_refused():
    with pytest.raises(ModuleNotFoundError, match="tensorflow.lite.python.util"):
        _find_as(optional_imports.TFLITE_UTIL, "jax")
    with pytest.raises(ModuleNotFoundError, match="sklearn"):
        _find_as("keras.src.wrappers.utils", "sklearn")
    with pytest.raises(ModuleNotFoundError, match="scipy"):
        _find_as("tensorflow.python.keras.engine.training_arrays_v1", "scipy")
    for importer in ("mgpu_gui.processes.tf_facts", "keras.src.backend.jax", "__main__",
                     "tensorflow.python.framework.ops", "my_model", "keras.src.wrappersx"):
        assert _find_as(importer, "jax") is None, importer
        assert _find_as(importer, "sklearn") is None, importer
        assert _find_as(importer, "scipy") is None, importer
    assert _find_as(optional_imports.TFLITE_UTIL, "numpy") is None


def test_install_is_idempotent():
    optional_imports.install()
    optional_imports.install()
    finders = [f for f in sys.meta_path if isinstance(f, optional_imports._RefuseOptionalImports)]
    assert len(finders) == 1


@pytest.mark.slow
def test_keras_on_tensorflow_starts_without_them_and_both_still_import_after():
    """The point (a TensorFlow child 1 s faster) and the guard: what refuses TensorFlow's
    and Keras's imports lets the doctor's and a user's through."""
    script = ("import sys, json, mgpu_gui.engine, keras, tensorflow\n"
              "before = [sys.modules.get(m) is not None for m in ('jax', 'sklearn', 'scipy')]\n"
              "keras.callbacks.ModelCheckpoint\n"
              "import jax, sklearn, scipy.sparse\n"
              "print(json.dumps([keras.backend.backend(), before,"
              " jax.numpy.ones(2).sum().item(), bool(sklearn.__version__)]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "KERAS_BACKEND": "tensorflow"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [
        "tensorflow", [False, False, False], 2.0, True]
