"""Progress, ETA and metric text derived from events; shared by the CLI and the GUI."""

from __future__ import annotations

import time
from dataclasses import dataclass

from mgpu_gui.core.events import BatchEnd, EpochEnd, Event, RunStarted

METRIC_ABBREVIATIONS = {"accuracy": "acc", "sparse_categorical_accuracy": "acc",
                        "categorical_accuracy": "acc", "learning_rate": "lr"}


@dataclass
class Progress:
    """Where a run stands: fractions for the bars and seconds left for the ETAs."""

    epochs: int = 0
    steps: int = 0
    epoch: int = 0  # 0-based epoch in progress
    step: int = 0  # steps done in that epoch
    initial_epoch: int = 0
    samples_per_s: float = 0.0
    _epoch_started: float = 0.0
    _epoch_seconds: float = 0.0  # mean duration of completed epochs (incl. validation)
    _epochs_timed: int = 0
    _last_epoch_end: float = 0.0

    def update(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.epochs, self.steps = event.epochs, event.steps_per_epoch
            self.epoch = self.initial_epoch = event.initial_epoch
            self._epoch_started = self._last_epoch_end = event.t
        elif isinstance(event, BatchEnd):
            if event.epoch != self.epoch:
                self.epoch, self._epoch_started = event.epoch, self._last_epoch_end
            self.step = event.batch + 1
            self.samples_per_s = event.samples_per_s
        elif isinstance(event, EpochEnd):
            took = event.t - self._last_epoch_end
            self._epochs_timed += 1
            self._epoch_seconds += (took - self._epoch_seconds) / self._epochs_timed
            self._last_epoch_end = self._epoch_started = event.t
            self.epoch, self.step = event.epoch + 1, 0
            self.samples_per_s = event.samples_per_s

    @property
    def done(self) -> bool:
        """Every epoch asked for has ended."""
        return bool(self.epochs) and self.epoch >= self.epochs

    @property
    def epoch_fraction(self) -> float:
        if self.done:
            return 1.0
        return self.step / self.steps if self.steps else 0.0

    @property
    def total_fraction(self) -> float:
        if not self.epochs:
            return 0.0
        return min(1.0, (self.epoch + self.epoch_fraction) / self.epochs)

    def epoch_eta(self, now: float | None = None) -> float | None:
        if not self.step:
            return None
        elapsed = (now or time.time()) - self._epoch_started
        return elapsed / self.step * (self.steps - self.step)

    def total_eta(self, now: float | None = None) -> float | None:
        """None once every epoch ended: what follows (the test set, the exports) has no
        measure to go by."""
        if self.done:
            return None
        epoch_left = self.epoch_eta(now)
        if self._epochs_timed:
            per_epoch = self._epoch_seconds
        elif epoch_left is not None and self.step:
            per_epoch = epoch_left + ((now or time.time()) - self._epoch_started)
        else:
            return None
        rest = max(0, self.epochs - self.epoch - 1) * per_epoch
        return rest + (epoch_left if epoch_left is not None else per_epoch)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} m {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} m"


def format_rate(samples_per_s: float) -> str:
    if samples_per_s >= 1000:
        return f"{samples_per_s / 1000:.1f}k samples/s"
    return f"{samples_per_s:.0f} samples/s"


def format_metrics(metrics: dict[str, float]) -> str:
    parts = []
    order = sorted(metrics, key=lambda n: (n.startswith("val_"), not n.endswith("loss")))
    for name in order:
        value = metrics[name]
        short = name
        for long, abbr in METRIC_ABBREVIATIONS.items():
            if name == long or name == f"val_{long}":
                short = name.replace(long, abbr)
        parts.append(f"{short} {value:.4g}")
    return "  ".join(parts)
