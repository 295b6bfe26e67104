"""What an export is checked on: a sample batch in the model's own input shape and dtype.

A SavedModel's signature takes its input dtype and nothing else; a model file exported
without data gets a deterministic random batch shaped like its input.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from mgpu_gui.core.errors import ExportError


def random_sample(model: Any, rows: int = 8, seed: int = 0) -> np.ndarray:
    """A deterministic batch shaped like the model's single input (unknown sizes -> 32)."""
    inputs = model_inputs(model)
    shape = tuple(32 if d is None else int(d) for d in inputs[0].shape[1:])
    dtype = np.dtype(dtype_name(inputs[0].dtype))
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 2, size=(rows, *shape)).astype(dtype)  # valid for any Embedding
    return rng.random((rows, *shape)).astype(dtype)


def as_sample(model: Any, sample_x: np.ndarray) -> np.ndarray:
    """The sample in the model's input dtype: a SavedModel's signature accepts nothing else."""
    x = np.asarray(sample_x)
    if x.ndim == 0 or len(x) == 0:
        raise ExportError("The verification sample is empty; pass at least one input row.")
    try:
        dtype = dtype_name(model.inputs[0].dtype)
    except (AttributeError, IndexError, ValueError, TypeError):
        dtype = "float32" if np.issubdtype(x.dtype, np.floating) else x.dtype.name
    return np.ascontiguousarray(x.astype(dtype, copy=False))


def dtype_name(dtype: Any) -> str:
    return getattr(dtype, "name", None) or str(dtype)


def model_inputs(model: Any) -> list[Any]:
    try:
        inputs = list(model.inputs)
    except (AttributeError, ValueError) as e:
        # A subclassed model has no symbolic inputs; one built (`model.build(shape)`, or
        # called once) records the shape it was built for, and its file keeps it.
        built = (model.get_build_config() or {}) if hasattr(model, "get_build_config") else {}
        if not built.get("input_shape"):
            raise ExportError("The model has no defined inputs; build it (call it once) "
                              "before exporting.") from e
        inputs = [keras.KerasTensor(tuple(built["input_shape"]), dtype="float32")]
    if len(inputs) != 1:
        raise ExportError(f"Only single-input models can be exported; this one has {len(inputs)}.")
    return inputs
