"""Mixed precision: applying the run's policy to its model, in the worker.

Which policy the hardware supports (the hint the run setup shows) is plain
Python: `mgpu_gui.core.devices.precision_hint`. The policy must be set
before the model is built or loaded:

- `set_global_policy` first: layers built by the demo or a `.py` builder take it.
- `apply_policy` after building or loading. A `.keras`/`.h5` file's layers keep
  the policy they were saved with (measured, Keras 3.15: a float32 file loaded
  under `mixed_bfloat16` stays float32), so a loaded model's layers are
  switched in place (their variables stay float32, which is what a mixed policy
  keeps them in). A file saved under the chosen policy keeps its per-layer choices.
  Then the output layer is set to float32, as the Keras guide advises (a
  softmax in float16 can overflow or lose small probabilities); the model's
  own policy follows, so compiling under `mixed_float16` wraps the optimizer in
  a `LossScaleOptimizer` (Keras does that when the model's policy is
  `mixed_float16`; `ensure_loss_scaling` checks and does it otherwise).
- `float32_policies` is a context: the export writes the model with every
  layer back in float32, so it loads and predicts in float32 anywhere, CPUs
  without bfloat16 or float16 kernels included. The weights are the same
  float32 variables; the predictions differ from the mixed model's only by
  its rounding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import keras
import numpy as np

from mgpu_gui.core.config import PRECISIONS
from mgpu_gui.core.devices.precision_hint import BFLOAT16, FLOAT16, FLOAT32, MIXED

Log = Callable[[str], None]


def set_global_policy(precision: str) -> None:
    """Set Keras' global dtype policy; before anything is built or loaded, every run
    (a process may run several jobs, so float32 is set explicitly too)."""

    keras.mixed_precision.set_global_policy(precision)


def apply_policy(model: keras.Model, precision: str, *, loaded: bool, input_shape: Sequence[int],
                 log: Log) -> None:
    """Give `model` the run's policy, its output in float32; call inside the strategy's scope."""

    layers = _policy_layers(model)
    plain = [layer for layer in layers if not isinstance(layer, keras.Model)]
    # A file saved under the chosen mixed policy keeps its own float32 layers (its output).
    saved_so = precision in MIXED and any(_policy(layer) == precision for layer in plain)
    if loaded and not saved_so:
        switched = [layer for layer in plain if _policy(layer) in PRECISIONS
                    and _policy(layer) != precision]
        was = sorted({_policy(layer) for layer in switched})
        for layer in switched:
            layer.dtype_policy = precision
        if switched:
            log(f"precision: {len(switched)} layer(s) of the file were saved with the "
                f"{' and '.join(was)} policy (a loaded layer keeps it); switched to {precision}")
    for inner in (layer for layer in layers if isinstance(layer, keras.Model)):
        if _policy(inner) in PRECISIONS:
            inner.dtype_policy = precision  # LossScaleOptimizer follows the model's policy
    if precision == FLOAT32:
        return
    outputs = _float32_outputs(model)
    names = ", ".join(f"'{layer.name}'" for layer in outputs) or "none found"
    dtypes = _output_dtypes(model, input_shape)
    low = [d for d in dtypes if d != "float32"]
    if low:
        log(f"precision {precision}: the model's output comes out in {low[0]}, not float32: "
            "its last layer could not be found (a subclassed model?). Give the output layer "
            "dtype='float32'; the loss is computed in float32 all the same.")
    else:
        log(f"precision {precision}: layers compute in {_compute_dtype(precision)} and keep "
            f"float32 weights; the output layer ({names}) computes in float32")


def ensure_loss_scaling(model: keras.Model, precision: str, log: Log) -> None:
    """Under mixed_float16 the optimizer must scale the loss; compiled models included."""

    if precision != FLOAT16 or model.optimizer is None:
        return
    if not isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer):
        model.optimizer = keras.optimizers.LossScaleOptimizer(model.optimizer)
    log(f"precision {FLOAT16}: loss scaling on (LossScaleOptimizer around "
        f"{type(model.optimizer.inner_optimizer).__name__})")


@contextlib.contextmanager
def float32_policies(model: keras.Model) -> Iterator[int]:
    """Every mixed-policy layer computes in float32 inside the block; yields how many.

    For exports: the file then records float32 for every layer. The policies
    are put back afterwards.
    """
    changed = [(layer, _policy(layer)) for layer in _policy_layers(model)
               if _policy(layer) in MIXED]
    for layer, _ in changed:
        layer.dtype_policy = FLOAT32
    try:
        yield len(changed)
    finally:
        for layer, policy in changed:
            layer.dtype_policy = policy


def layer_policies(model: keras.Model) -> dict[str, str]:
    """Layer path -> dtype policy name, for logs and tests."""
    return {getattr(layer, "path", layer.name): _policy(layer)
            for layer in _policy_layers(model)}


def _policy_layers(model: Any) -> list[Any]:

    layers = [model, *model._flatten_layers(include_self=False, recursive=True)]
    return [layer for layer in layers if not isinstance(layer, keras.layers.InputLayer)]


def _policy(layer: Any) -> str:
    return getattr(getattr(layer, "dtype_policy", None), "name", "")


def _compute_dtype(precision: str) -> str:
    return {BFLOAT16: "bfloat16", FLOAT16: "float16"}.get(precision, "float32")


def _float32_outputs(model: Any) -> list[Any]:
    """Set the layers that produce the model's outputs to float32; the layers changed."""
    try:
        outputs = list(model.outputs or [])
    except (AttributeError, ValueError):  # a subclassed model has no graph to follow
        return []
    found = []
    for tensor in outputs:
        layer = tensor._keras_history[0]
        while hasattr(layer, "outputs") and layer.outputs and len(layer.outputs) == 1:
            layer = layer.outputs[0]._keras_history[0]  # a nested model as the last layer
        if _policy(layer) in MIXED:
            layer.dtype_policy = FLOAT32
        found.append(layer)
    return found


def _output_dtypes(model: Any, input_shape: Sequence[int]) -> list[str]:
    """The dtypes a real call gives: the in-place policies are read at call time, not
    in the functional graph's symbolic tensors."""

    try:
        dtype = str(getattr(model.inputs[0].dtype, "name", model.inputs[0].dtype))
    except (AttributeError, IndexError, ValueError, TypeError):
        dtype = "float32"
    try:
        outputs = model(np.zeros((1, *input_shape), dtype=dtype), training=False)
    except Exception:  # e.g. several inputs: the data check that follows says what is wrong
        return []
    return [keras.backend.standardize_dtype(t.dtype) for t in keras.tree.flatten(outputs)]
