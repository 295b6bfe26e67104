"""The median stopping rule: stop a trial that is clearly worse than the sweep's others.

After a grace of at least 2 epochs, a trial whose best value of the sweep's metric up to
epoch k is worse than the median of the other trials' values at k, with at least 3 other
trials reported at k, is stopped. The queue runner applies it (the app may be closed)
each time a trial ends an epoch, judging that trial at its latest epoch; a pure function,
so a replay of stored curves gives the same verdicts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from mgpu_gui.core.runs.compare import Direction, direction

MIN_GRACE = 2  # epochs every trial trains before it can be judged
MIN_OTHERS = 3  # a median of fewer trials says little
MEDIAN_STOPPED = "stopped early (median rule)"

Key = TypeVar("Key")


@dataclass(frozen=True)
class MedianVerdict:
    """Why a trial is stopped: at `epoch` (0-based) its best was worse than the median of
    `others` other trials' values at that epoch."""

    metric: str
    epoch: int
    best: float
    median: float
    others: int

    text: ClassVar[str] = MEDIAN_STOPPED

    @property
    def reason(self) -> str:
        return (f"{MEDIAN_STOPPED}: best {self.metric} {self.best:.4g} by epoch {self.epoch + 1} "
                f"was worse than the median {self.median:.4g} of {self.others} other trials "
                f"at that epoch")


def median_verdict(curve: Sequence[float], others: Iterable[Sequence[float]], metric: str,
                   *, grace: int = MIN_GRACE) -> MedianVerdict | None:
    """The rule for one trial at its latest epoch. `curve` and each of `others` are a
    trial's per-epoch values of `metric` (index = 0-based epoch; NaN: not a value).
    None: keep training. A grace under MIN_GRACE counts as MIN_GRACE."""
    epoch = len(curve) - 1
    if epoch < max(grace, MIN_GRACE):
        return None
    way = direction(metric)
    seen = [v for v in curve if math.isfinite(v)]
    if not seen:
        return None  # a trial with no value yet (NaN losses) fails by itself, not by this
    best = min(seen) if way is Direction.MIN else max(seen)
    at_epoch = [c[epoch] for c in others if len(c) > epoch and math.isfinite(c[epoch])]
    if len(at_epoch) < MIN_OTHERS:
        return None
    median = statistics.median(at_epoch)
    if not way.better(median, best):
        return None
    return MedianVerdict(metric, epoch, best, median, len(at_epoch))


def median_verdicts(curves: Mapping[Key, Sequence[float]], judged: Collection[Key],
                    metric: str, *, grace: int = MIN_GRACE) -> dict[Key, MedianVerdict]:
    """The rule for each `judged` trial (the running ones) at its latest epoch, against
    every other trial that reported (finished, stopped or running): those to stop."""
    found = {}
    for key in judged:
        others = (curve for other, curve in curves.items() if other != key)
        verdict = median_verdict(curves.get(key, ()), others, metric, grace=grace)
        if verdict is not None:
            found[key] = verdict
    return found
