"""What a model's single output is: its units and last activation, from the layer that
makes it, or, for a subclassed model that names no output layer, from what it gives.

Why it matters: the loss the app picks, the evaluation's judging and the prediction's
reading all depend on whether the outputs are probabilities or logits. A subclassed model
ending in softmax was trained as logits (issue 29's zoo) because its layers were not known.
"""

from __future__ import annotations

import keras
import numpy as np

_PROBE_ROWS = 4
_SUMS_TO_ONE = 1e-2  # float16 outputs of a softmax sum to 1 within this


def output_layer_info(model: keras.Model) -> tuple[int | None, str | None]:
    """Units and activation of the single output, looking into nested models."""
    outputs = getattr(model, "outputs", None) or []
    if len(outputs) != 1:
        return None, None
    units = outputs[0].shape[-1]
    layer = outputs[0]._keras_history[0]
    while hasattr(layer, "outputs") and layer.outputs and len(layer.outputs) == 1:
        layer = layer.outputs[0]._keras_history[0]  # a nested model as the last layer
    if type(layer).__name__ == "Softmax":
        return units, "softmax"
    activation = getattr(layer, "activation", None)
    return units, getattr(activation, "__name__", None) if activation is not None else None


def probed_head(model: keras.Model, input_shape: tuple[int, ...]
                ) -> tuple[int | None, str | None]:
    """`output_layer_info`, else the units of the outputs on random inputs and "softmax"
    when every row is non-negative and sums to one (logits do so only by accident). A
    single unit stays unknown: a sigmoid's outputs lie where a logit's can."""
    units, activation = output_layer_info(model)
    if units is not None:
        return units, activation
    x = np.random.default_rng(0).random((_PROBE_ROWS, *input_shape), dtype=np.float32)
    try:
        outputs = np.asarray(keras.ops.convert_to_numpy(model(x, training=False)), np.float64)
    except Exception:  # inputs it does not take (token ids): the first step says why
        return None, None
    if outputs.ndim != 2:
        return None, None
    probabilities = (outputs.shape[1] > 1 and bool((outputs >= 0).all())
                     and bool(np.allclose(outputs.sum(axis=1), 1.0, atol=_SUMS_TO_ONE)))
    return outputs.shape[1], "softmax" if probabilities else None
