"""The numbers behind the training curves: series of one run, fed by its events.

No Qt: the curves panel draws what `SeriesStore` holds, and asks it what
changed since the last redraw. Each series is a `SeriesBuffer`, a preallocated
numpy array that grows by doubling, so an event costs an amortised O(1) append.

Series names:
- ``"loss"``: train per batch (raw), ``"loss:smoothed"``: its EMA,
  ``"loss:epoch"``: train per epoch, ``"val_loss"``: validation per epoch;
  the same for every other metric family (``"accuracy"``, ``"auc"``, ...).
- ``"learning_rate"`` and ``"samples_per_s"``.
"""

from __future__ import annotations

import math
from enum import StrEnum

import numpy as np

from mgpu_gui.core.events import (
    BatchEnd,
    EpochEnd,
    Event,
    RunFinished,
    RunStarted,
    StageStarted,
)

LR_NAMES = ("learning_rate", "lr")  # Keras may log the LR as a metric: not a metric family
X_EPOCH, X_STEP, X_WALL, Y = range(4)


class XAxis(StrEnum):
    EPOCH = "epoch"
    STEP = "step"
    WALL = "time"


X_COLUMNS = {XAxis.EPOCH: X_EPOCH, XAxis.STEP: X_STEP, XAxis.WALL: X_WALL}


class SeriesBuffer:
    """Rows of (x by epoch, x by step, x by wall time, y) in a preallocated array that
    grows by doubling, so appending is amortised O(1) and reading is a view.

    float32 halves the memory of long runs (a million batch points in a handful of
    series stay under 100 MB) and is finer than any screen: wall time resolves a
    quarter second after a month, the step count is exact up to 16 million.
    """

    def __init__(self, capacity: int = 256) -> None:
        self._data = np.empty((capacity, 4), dtype=np.float32)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def capacity(self) -> int:
        return len(self._data)

    def append(self, x_epoch: float, x_step: float, x_wall: float, y: float) -> None:
        if self._n == len(self._data):
            grown = np.empty((2 * len(self._data), 4), dtype=np.float32)
            grown[: self._n] = self._data
            self._data = grown  # views handed out earlier keep the old array alive
        self._data[self._n] = (x_epoch, x_step, x_wall, y)
        self._n += 1

    def column(self, index: int) -> np.ndarray:
        return self._data[: self._n, index]

    def truncate(self, n: int) -> None:
        self._n = max(0, min(n, self._n))


def ema(values: np.ndarray, weight: float) -> tuple[np.ndarray, float, int]:
    """TensorBoard's debiased exponential moving average; non-finite values stay NaN
    and do not disturb the average. Also returns the running state (sum, count)."""
    out = np.full(len(values), np.nan)
    last, count = 0.0, 0
    for i, value in enumerate(values.tolist()):
        if math.isfinite(value):
            last, count = last * weight + (1 - weight) * value, count + 1
            out[i] = last / (1 - weight**count)
    return out, last, count


def family_of(name: str) -> str:
    return name.removeprefix("val_")


def without_lr(metrics: dict[str, float], lr: float | None) -> tuple[dict[str, float],
                                                                    float | None]:
    """Keras puts the learning rate among the metrics: it gets its own plot, not a family."""
    if lr is None:
        lr = next((v for n, v in metrics.items() if n in LR_NAMES), None)
    return {n: v for n, v in metrics.items() if n not in LR_NAMES}, lr


class SeriesStore:
    """Every series of one run, the best epoch, and what changed since it was last asked.

    `ingest` takes the run's events in order. A RunStarted of a resumed run
    (initial epoch > 0) continues the series: what the stopped session did of
    its unfinished epoch is dropped, and wall time goes on from where it stopped.
    """

    def __init__(self, smoothing: float = 0.6) -> None:
        self._smoothing = smoothing
        self.reset()

    def reset(self) -> None:
        """Forget all data (a new run); the smoothing stays."""
        self._series: dict[str, SeriesBuffer] = {}
        self._ema_state: dict[str, tuple[float, int]] = {}
        self._changed: set[str] = set()
        self._families: set[str] = set()
        self.steps = 0
        self.epochs = 0  # known from RunStarted: fixes the x range by epoch or step
        self._t_origin: float | None = None
        self._last_wall = 0.0
        self.best_epoch: int | None = None  # 0-based, as in the events
        self.best_metric: str | None = None
        self._best_changed = True
        # A transfer-learning run's first fine-tune epoch (0-based), where its curves mark
        # the stages' boundary: from its StageStarted, or a past run's config.
        self.fine_tune_epoch: int | None = None

    # -- reading -----------------------------------------------------------------

    def names(self) -> list[str]:
        return list(self._series)

    @property
    def t_origin(self) -> float | None:
        """The time (time.time()) at wall time 0, once known; other wall-time plots (the
        device telemetry) place their samples by it."""
        return self._t_origin

    def has_data(self) -> bool:
        return any(len(b) for b in self._series.values())

    def xy(self, name: str, axis: XAxis) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of a series against `axis` (wall time in minutes); empty if none."""
        buffer = self._series.get(name)
        if buffer is None:
            return np.empty(0), np.empty(0)
        x = buffer.column(X_COLUMNS[axis])
        return (x / 60.0 if axis is XAxis.WALL else x), buffer.column(Y)

    def epoch_point(self, family: str, epoch: int, axis: XAxis
                    ) -> tuple[float, float, str] | None:
        """Where epoch `epoch` ended on the validation curve (else the train epoch curve):
        x against `axis`, y, and the series' name (without ":epoch")."""
        for name in (f"val_{family}", f"{family}:epoch"):
            buffer = self._series.get(name)
            if buffer is None or not len(buffer):
                continue
            hits = np.flatnonzero(buffer.column(X_EPOCH) == epoch + 1.0)
            if len(hits):
                x, y = self.xy(name, axis)
                return float(x[hits[-1]]), float(y[hits[-1]]), name.removesuffix(":epoch")
        return None

    def fine_tune_x(self, axis: XAxis) -> float | None:
        """Where the fine-tuning stage begins against `axis`: the end of the last frozen
        epoch (by wall time, once an epoch-end point shows when that was)."""
        epoch = self.fine_tune_epoch
        if epoch is None:
            return None
        if axis is XAxis.EPOCH:
            return float(epoch)
        if axis is XAxis.STEP:
            return float(epoch * max(self.steps, 1))
        for name, buffer in self._series.items():
            if name.endswith(":epoch") or name.startswith("val_"):
                hits = np.flatnonzero(buffer.column(X_EPOCH) == float(epoch))
                if len(hits):
                    return float(buffer.column(X_WALL)[hits[-1]]) / 60.0
        return None

    def take_changed(self) -> set[str]:
        """The series whose data changed since the last call."""
        changed, self._changed = self._changed, set()
        return changed

    def take_best_changed(self) -> bool:
        """Whether the best epoch (or the data it is drawn on) changed since the last call."""
        changed, self._best_changed = self._best_changed, False
        return changed

    # -- feeding -----------------------------------------------------------------

    def ingest(self, event: Event) -> list[str]:
        """Take one event; returns the metric families it brought first.

        A RunStarted of a new run (initial epoch 0) when there are data: call
        `reset` first.
        """
        new: list[str] = []
        if isinstance(event, RunStarted):
            self._start(event)
        elif isinstance(event, BatchEnd):
            self.steps = event.steps or self.steps
            steps = max(self.steps, 1)
            xs = (event.epoch + (event.batch + 1) / steps, event.epoch * steps + event.batch + 1,
                  self._wall(event.t))
            metrics, lr = without_lr(event.metrics, event.learning_rate)
            for name, value in metrics.items():
                new += self._see(family_of(name))
                self._append(name, *xs, value)
                self._append_smoothed(name, xs, value)
            if lr is not None:
                self._append("learning_rate", *xs, lr)
            self._append("samples_per_s", *xs, event.samples_per_s)
        elif isinstance(event, EpochEnd):
            steps = max(self.steps, 1)
            xs = (event.epoch + 1.0, (event.epoch + 1.0) * steps, self._wall(event.t))
            metrics, lr = without_lr(event.metrics, event.learning_rate)
            for name, value in metrics.items():
                new += self._see(family_of(name))
                key = name if name.startswith("val_") else f"{name}:epoch"
                self._append(key, *xs, value)
            if lr is not None:
                self._append("learning_rate", *xs, lr)
            if event.best:
                self.best_epoch, self._best_changed = event.epoch, True
        elif isinstance(event, StageStarted) and event.stage == 2:
            self.fine_tune_epoch, self._best_changed = event.first_epoch, True
        elif isinstance(event, RunFinished) and event.best_epoch is not None:
            self.best_epoch, self.best_metric = event.best_epoch, event.best_metric
            self._best_changed = True
        return new

    def set_smoothing(self, weight: float) -> None:
        """Smooth every per-batch series again with `weight`."""
        self._smoothing = weight
        for name in list(self._series):
            if name.endswith(":smoothed"):
                self._recompute_smoothing(name.removesuffix(":smoothed"))

    def _see(self, family: str) -> list[str]:
        if family in self._families:
            return []
        self._families.add(family)
        self._best_changed = True
        return [family]

    def _append(self, name: str, x_epoch: float, x_step: float, x_wall: float,
                y: float) -> None:
        buffer = self._series.get(name)
        if buffer is None:
            buffer = self._series[name] = SeriesBuffer()
        buffer.append(x_epoch, x_step, x_wall, y)
        self._changed.add(name)

    def _wall(self, t: float) -> float:
        if self._t_origin is None:
            self._t_origin = t
        self._last_wall = max(self._last_wall, t - self._t_origin)
        return t - self._t_origin

    def _start(self, event: RunStarted) -> None:
        self.steps = event.steps_per_epoch or self.steps
        self.epochs = event.epochs
        if not self.has_data():
            self._t_origin = event.t
            return
        for name, buffer in self._series.items():
            keep = int(np.searchsorted(buffer.column(X_EPOCH), event.initial_epoch + 1e-9))
            if keep < len(buffer):
                buffer.truncate(keep)
                self._changed.add(name)
                if name.endswith(":smoothed"):
                    self._recompute_smoothing(name.removesuffix(":smoothed"))
        if self.best_epoch is not None and self.best_epoch >= event.initial_epoch:
            self.best_epoch = None
        self._best_changed = True
        self._t_origin = event.t - self._last_wall

    def _append_smoothed(self, name: str, xs: tuple[float, float, float], value: float) -> None:
        last, count = self._ema_state.get(name, (0.0, 0))
        weight = self._smoothing
        smoothed = math.nan
        if math.isfinite(value):
            last, count = last * weight + (1 - weight) * value, count + 1
            smoothed = last / (1 - weight**count)
        self._ema_state[name] = (last, count)
        self._append(f"{name}:smoothed", *xs, smoothed)

    def _recompute_smoothing(self, name: str) -> None:
        raw, smooth = self._series.get(name), self._series.get(f"{name}:smoothed")
        if raw is None or smooth is None:
            return
        values = raw.column(Y)
        smooth.truncate(len(values))
        smooth.column(Y)[:], last, count = ema(values, self._smoothing)
        self._ema_state[name] = (last, count)
        self._changed.add(f"{name}:smoothed")
