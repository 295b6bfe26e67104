"""XLA (`jit_compile`) for a run's model under MirroredStrategy, with a way back.

Keras' own `compile(jit_compile=True)` compiles the whole distributed step,
`strategy.run` included, as one XLA cluster on one device. With MirroredStrategy
that fails at the first step (measured, TF 2.21, Keras 3.15, 2 CPU replicas:
"Trying to access resource .../replica_1 located in device CPU:1 from device
CPU:0", XLA's known issue with variables on another device); that is why
Keras' "auto" turns XLA off under tf.distribute. So XLA compiles the model's
call (the forward pass, and with it its gradient) inside each replica: each
replica's compiled function reads its own copy of the variables, while the
all-reduce, the loss and the optimizer's update stay outside XLA. Measured on
2 CPU replicas: the same losses as without XLA, step for step.

A model XLA cannot compile (an op with no XLA kernel, e.g. `tf.numpy_function`)
fails at its first step; `compile_error` recognises that, and training.py
turns XLA off (`disable`) and trains on without it.
"""

from __future__ import annotations

import re
from typing import Any

_UNSUPPORTED = re.compile(
    r"unsupported operations when trying to compile graph \S+ on (\S+?):\s*([\w, ]+?)\s*[(\n]")
_XLA_WORDS = re.compile(r"tf2xla|XLA_\w+_JIT|xla_compiler|could not be compiled|"
                        r"Function invoked by the following node is not compilable|"
                        r"xla/known_issues", re.IGNORECASE)
_ERROR_TYPES = {"InvalidArgumentError", "UnimplementedError", "InternalError", "UnknownError",
                "NotFoundError"}


def unsupported_layers(model: Any) -> list[str]:
    """Layers that declare they cannot be compiled (Keras' `supports_jit = False`)."""
    return [layer.name for layer in model._flatten_layers(include_self=True, recursive=True)
            if not getattr(layer, "supports_jit", True)]


def enable(model: Any) -> None:
    """Compile the model's call with XLA from its next trace on."""

    import tensorflow as tf  # the tensorflow engine only: JAX compiles every step anyway

    disable(model)
    model.call = tf.function(model.call, jit_compile=True, reduce_retracing=True)
    _forget_traces(model)


def disable(model: Any) -> None:
    """Back to the model's own call (plain TensorFlow graphs)."""
    if "call" in vars(model):
        del model.call
    _forget_traces(model)


def enabled(model: Any) -> bool:
    return "call" in vars(model)


def _forget_traces(model: Any) -> None:
    # fit, evaluate and predict trace their step functions again with the current call.
    model.train_function = model.test_function = model.predict_function = None


def compile_error(error: BaseException) -> str | None:
    """Why XLA could not compile the model, when `error` says so; else None.

    E.g. "no XLA kernel for PyFunc on XLA_CPU_JIT". Only TensorFlow's op errors count.
    """
    if type(error).__name__ not in _ERROR_TYPES:
        return None
    text = str(error)
    found = _UNSUPPORTED.search(text)
    if found:
        device, ops = found.group(1), found.group(2).strip().rstrip(",")
        return f"no XLA kernel for {ops} on {device}"
    if _XLA_WORDS.search(text):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        first = next((line for line in lines if _XLA_WORDS.search(line)), lines[0])
        return first[:300]
    return None
