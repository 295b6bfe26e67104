"""How a model file was compiled, and which optimizer a run really trains with.

A compiled file brings its own optimizer, learning rate, loss and metrics, and
training uses them unless the user overrides them (`RunConfig.override_compile`).
`CompileFacts` holds what the file says, read from its JSON without Keras (a
`.keras` zip's `compile_config`, a legacy `.h5`'s `training_config`);
`optimizer_text` says in one line what a run used and where it came from, for
the run log and the CLI alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class CompileSource(StrEnum):
    """Where a run's optimizer and learning rate came from."""

    RUN = "run"  # the run's settings: the file was not compiled (or its settings failed)
    FILE = "file"  # the model file's own compile settings
    OVERRIDE = "override"  # the run's settings, chosen over the file's


@dataclass(frozen=True)
class CompileFacts:
    """A compiled model file's training settings as saved in it.

    `learning_rate` is None when the file saved a schedule (`schedule`) or no
    rate (the optimizer's default); `loss` None when it names no single loss.
    """

    optimizer: str  # the class name, e.g. "RMSprop"
    learning_rate: float | None = None
    loss: str | None = None
    metrics: tuple[str, ...] = ()
    schedule: bool = False

    def describe(self) -> str:
        """E.g. "RMSprop, lr 0.001, categorical_crossentropy"."""
        parts = [self.optimizer]
        if self.learning_rate is not None or self.schedule:
            parts.append(f"lr {self.learning_rate:.3g}" if self.learning_rate is not None
                         else "lr schedule")
        if self.loss:
            parts.append(self.loss)
        return ", ".join(parts)


def compile_facts(optimizer: Any, loss: str | None, metrics: Any) -> CompileFacts | None:
    """From a serialized optimizer (Keras 3 `compile_config["optimizer"]` or a Keras 2
    `training_config["optimizer_config"]`), the loss's name and the metrics' configs."""
    if isinstance(optimizer, str):
        return CompileFacts(optimizer, None, loss, _metric_names(metrics))
    if not isinstance(optimizer, dict) or not isinstance(optimizer.get("class_name"), str):
        return None
    settings = optimizer.get("config") or {}
    rate = settings.get("learning_rate", settings.get("lr"))  # "lr" up to Keras 2.2
    return CompileFacts(
        optimizer=optimizer["class_name"].split(">")[-1],  # "Custom>RMSprop" in tf_keras files
        learning_rate=float(rate) if isinstance(rate, int | float) else None,
        loss=loss, metrics=_metric_names(metrics), schedule=isinstance(rate, dict))


def _metric_names(metrics: Any) -> tuple[str, ...]:
    """Names of metrics as saved: strings, serialized metrics, lists or dicts per output."""
    if isinstance(metrics, str):
        return (metrics,)
    if isinstance(metrics, dict):
        if "class_name" in metrics:  # one serialized metric
            config = metrics.get("config")
            name = config.get("name") if isinstance(config, dict) else None
            return (name if isinstance(name, str) else str(metrics["class_name"]),)
        metrics = list(metrics.values())  # per output
    if isinstance(metrics, list):
        return tuple(name for metric in metrics for name in _metric_names(metric))
    return ()


def optimizer_text(optimizer: str, learning_rate: float | None, source: CompileSource,
                   file_optimizer: str = "") -> str:
    """E.g. "RMSprop, lr 0.001 (from the model file)" or "Adam, lr 0.01 (overriding the
    file's RMSprop)"."""
    rate = f"lr {learning_rate:.3g}" if learning_rate is not None else "lr schedule"
    why = {CompileSource.FILE: " (from the model file)",
           CompileSource.OVERRIDE: f" (overriding the file's {file_optimizer or 'settings'})",
           CompileSource.RUN: ""}[source]
    return f"{optimizer}, {rate}{why}"
