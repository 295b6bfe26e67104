"""Compile the run's model: its optimizer and learning rate, and a loss fit for its output
when the run names none; compile again with another optimizer (an override, a transfer
stage)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras

from mgpu_gui.core.config import RunConfig
from mgpu_gui.engine.legacy_compile import describe_loss
from mgpu_gui.engine.output_head import probed_head

Log = Callable[[str], None]


def optimizer_in_use(model: keras.Model) -> tuple[str, float | None]:
    """The class of the optimizer `model` trains with, and its learning rate now (None: a
    schedule), looking through a LossScaleOptimizer."""
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    if isinstance(optimizer.get_config().get("learning_rate"), dict):
        return type(optimizer).__name__, None
    return type(optimizer).__name__, float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def compile_model(model: keras.Model, config: RunConfig, input_shape: tuple[int, ...],
                  log: Log) -> None:
    """Compile with the run's optimizer and learning rate, loss (or one fit for the output)."""

    optimizer = _run_optimizer(config)
    loss = (config.loss if config.loss is not None
            else _auto_loss(model, input_shape, log))
    metrics = [_metric_for(m, loss) for m in config.metrics]
    model.compile(optimizer=optimizer, loss=loss, metrics=metrics, steps_per_execution=1)
    log(f"compiled with {type(optimizer).__name__}(learning_rate={config.learning_rate}), "
        f"loss {describe_loss(loss)}, metrics {list(config.metrics)}")


def _run_optimizer(config: RunConfig) -> keras.optimizers.Optimizer:
    return type(keras.optimizers.get(config.optimizer.lower()))(
        learning_rate=config.learning_rate)


def override_optimizer(model: keras.Model, config: RunConfig, log: Log) -> None:
    """Compile a compiled model again with the run's optimizer and learning rate; its loss
    and metrics stay, its optimizer (and the state saved for it) goes."""
    replaced = optimizer_in_use(model)[0]
    recompile(model, _run_optimizer(config))
    log(f"overriding the file's compile settings: {optimizer_in_use(model)[0]}"
        f"(learning_rate={config.learning_rate}) instead of {replaced}; the file's loss "
        f"({describe_loss(model.loss)}) and metrics are kept")


def recompile(model: keras.Model, optimizer: keras.optimizers.Optimizer) -> None:
    """Compile a compiled model again with `optimizer`; its loss and metrics stay. Call
    inside the strategy's scope."""
    compile_config = model.get_compile_config()
    compile_config["optimizer"] = keras.optimizers.serialize(optimizer)
    model.compile_from_config(compile_config)


def _auto_loss(model: keras.Model, input_shape: tuple[int, ...], log: Log) -> Any:

    units, activation = probed_head(model, input_shape)
    if units == 1 and activation == "sigmoid":
        loss, why = "binary_crossentropy", "1 sigmoid output"
    elif activation == "softmax":
        loss, why = "sparse_categorical_crossentropy", "softmax output"
    elif units == 1:
        loss = keras.losses.BinaryCrossentropy(from_logits=True)
        why = f"1 output with {activation or 'unknown'} activation, taken as a logit"
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        why = f"{units or '?'} outputs with {activation or 'unknown'} activation, taken as logits"
    log(f"loss chosen from the output layer ({why}): {describe_loss(loss)}")
    return loss


def _metric_for(name: str, loss: Any) -> Any:

    # "accuracy" thresholds a binary output at 0.5, which is wrong for logits.
    if name in ("accuracy", "acc") and getattr(loss, "from_logits", False) and isinstance(
            loss, keras.losses.BinaryCrossentropy):
        return keras.metrics.BinaryAccuracy(name="accuracy", threshold=0.0)
    return name
