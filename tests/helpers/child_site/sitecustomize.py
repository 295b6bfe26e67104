"""Loaded at start-up by a child whose PYTHONPATH leads with this folder: the child
then behaves as on a machine where TensorFlow is not installed (the JAX-only GPU
machine the JAX engine must also run on), though the test venv has it."""

import importlib.abc
import sys

HIDDEN = ("tensorflow", "tf_keras", "tensorboard")


class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Hidden())
