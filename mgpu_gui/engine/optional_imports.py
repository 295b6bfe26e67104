"""Keep the frameworks' optional imports of what this app never uses out of every engine
process.

When they are installed, `import keras` on the TensorFlow backend imports JAX twice over
and scikit-learn and SciPy, for nothing this app asks of them: TensorFlow for its
TFLite converter's `jit` of JAX functions (`tensorflow/lite/python/util.py`:
`try: from jax import jit`), Keras's Orbax checkpoint callback for a JAX-backend patch
(`keras/src/callbacks/orbax_checkpoint.py`), Keras's scikit-learn estimator wrappers
(`keras/src/wrappers/`) and TensorFlow's own Keras 2 for sparse inputs
(`tensorflow/python/keras/engine/`). Measured on two cores: JAX 0.44-0.64 s,
scikit-learn 0.51 s and SciPy 0.13 s of CPU in every child that starts TensorFlow (the
worker, each export check, probe and evaluation), where TensorFlow itself takes about
2.6 s; each import already falls
back quietly where the package is missing. So those importers are refused those
packages, the Orbax callback only off the JAX backend (on it, JAX is imported already and
no finder is asked). Anyone else's import goes through: a JAX run, the doctor's JAX
facts, Keras on the JAX backend, a user's model code that imports scikit-learn.
"""

from __future__ import annotations

import importlib.abc
import sys

TFLITE_UTIL = "tensorflow.lite.python.util"
ORBAX_CALLBACK = "keras.src.callbacks.orbax_checkpoint"
SKLEARN_WRAPPERS = "keras.src.wrappers"
LEGACY_TF_KERAS = "tensorflow.python.keras"  # TensorFlow's own Keras 2, for tf.compat.v1
# (importing module or package, package imported): refused whatever the backend.
REFUSED = ((TFLITE_UTIL, "jax"), (SKLEARN_WRAPPERS, "sklearn"), (LEGACY_TF_KERAS, "scipy"))
PACKAGES = frozenset({"jax", *(package for _, package in REFUSED)})


def _importer() -> str:
    """The module whose code runs the import statement under way (the first frame
    outside importlib's machinery and this module)."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_globals.get("__name__") == __name__):
        frame = frame.f_back
    return "" if frame is None else frame.f_globals.get("__name__", "")


def _refused(importer: str, package: str) -> bool:
    if any(package == refused and (importer == by or importer.startswith(f"{by}."))
           for by, refused in REFUSED):
        return True
    backend = sys.modules.get("keras.src.backend")
    return (importer, package) == (ORBAX_CALLBACK, "jax") and backend is not None \
        and backend.backend() != "jax"


class _RefuseOptionalImports(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        importer = _importer() if name in PACKAGES else ""
        if importer and _refused(importer, name):
            raise ModuleNotFoundError(f"{importer}'s optional import of {name} is refused "
                                      f"(mgpu_gui.engine.optional_imports)", name=name)
        return None


def install() -> None:
    """Idempotent: one finder per process, ahead of the ones that would find the packages."""
    if not any(isinstance(finder, _RefuseOptionalImports) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RefuseOptionalImports())
