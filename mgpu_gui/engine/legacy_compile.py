"""Compile a model as a legacy Keras 2 file's `training_config` says, in Keras 3.

Used for loaded `.h5` files (engine.models) and for templates recovered from
multi-GPU wrappers (engine.unwrap); its own module so that neither of those
imports the other.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import keras

Log = Callable[[str], None]


def compile_from_training_config(model: keras.Model, training: dict[str, Any], log: Log,
                                 source: str = "the file") -> bool:
    """Compile as a Keras 2 `training_config` says; False (logged) when it cannot be used."""

    try:
        opt_cfg = training["optimizer_config"]
        cls_name = opt_cfg["class_name"].split(">")[-1]  # "Custom>Adam" in tf_keras files
        cls = getattr(keras.optimizers, cls_name)
        settings = dict(opt_cfg.get("config") or {})
        if "lr" in settings:  # Keras <= 2.2
            settings.setdefault("learning_rate", settings.pop("lr"))
        if isinstance(settings.get("learning_rate"), dict):
            settings["learning_rate"] = keras.optimizers.schedules.deserialize(
                settings["learning_rate"])
        accepted = inspect.signature(cls.__init__).parameters
        optimizer = cls(**{k: v for k, v in settings.items() if k in accepted})
        loss = training.get("loss")
        if isinstance(loss, dict) and "class_name" in loss:
            loss = keras.losses.deserialize(loss)
        metrics = _legacy_metrics(training.get("metrics"), len(model.outputs or [None]))
        model.compile(optimizer=optimizer, loss=loss, metrics=metrics, steps_per_execution=1)
    except Exception as exc:  # an old or custom file; the run's settings still work
        log(f"could not compile from the file's training settings ({type(exc).__name__}: "
            f"{exc}); using the run's settings instead")
        return False
    log(f"compiled as saved in {source}: {cls_name}, loss {describe_loss(loss)}, "
        f"metrics {metrics}; the optimizer and loss settings are not used")
    return True


def _legacy_metrics(metrics: Any, n_outputs: int) -> Any:
    """Keras 2 metric configs as names Keras 3 resolves from the loss and labels."""
    if metrics is None:
        return None
    if n_outputs == 1 and isinstance(metrics, list) and all(isinstance(m, list) for m in metrics):
        metrics = [m for per_output in metrics for m in per_output]
    if isinstance(metrics, list):
        return [_legacy_metrics(m, n_outputs) if isinstance(m, list) else _legacy_metric(m)
                for m in metrics]
    return {k: _legacy_metrics(v, n_outputs) for k, v in metrics.items()}


def _legacy_metric(metric: Any) -> Any:

    if not isinstance(metric, dict):
        return metric
    cfg = metric.get("config") or {}
    # tf_keras stores "accuracy" as MeanMetricWrapper(fn="categorical_accuracy") before
    # fit resolves it; the name is what the user asked for.
    if cfg.get("name") in ("accuracy", "acc"):
        return "accuracy"
    if metric.get("class_name") == "MeanMetricWrapper" and isinstance(cfg.get("fn"), str):
        return cfg["fn"]
    return keras.metrics.deserialize(metric)


def describe_loss(loss: Any) -> str:
    """A loss as a log names it: its name, with from_logits when set."""
    if isinstance(loss, str):
        return loss
    name = getattr(loss, "name", None) or getattr(loss, "__name__", None) or type(loss).__name__
    return f"{name}(from_logits=True)" if getattr(loss, "from_logits", False) else str(name)
