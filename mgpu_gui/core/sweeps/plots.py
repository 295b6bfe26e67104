"""The Sweep view's figures as data: a scatter of each swept setting against the metric,
and parallel coordinates over the swept settings; one point or line per finished trial,
at its values. The view draws them with pyqtgraph; `sweep show --json` can print them.

An axis spans the setting's declared values (a range's ends), not only the finished
trials', so it does not move while a sweep runs; a log range gets a log axis; settings
that are no numbers (optimizer, on/off, a None among numbers) are categories in the
order they were given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mgpu_gui.core.runs.compare import setting_text
from mgpu_gui.core.sweeps.results import SweepResults
from mgpu_gui.core.sweeps.space import Parameter, Scale


@dataclass(frozen=True)
class Axis:
    """A number scale (linear or log) from `low` to `high`, or `categories` (as shown)."""

    name: str
    low: float = 0.0
    high: float = 1.0
    log: bool = False
    categories: tuple[str, ...] = ()

    def coordinate(self, value: Any) -> float:
        """Where a value is plotted: the number itself, or its category's index."""
        if self.categories:
            return float(self.categories.index(setting_text(value)))
        return float(value)

    def position(self, value: Any) -> float:
        """The value on the axis normalised to 0..1 (the middle when the axis has no span)."""
        if self.categories:
            count = len(self.categories)
            return self.coordinate(value) / (count - 1) if count > 1 else 0.5
        low, high, x = self.low, self.high, float(value)
        if self.log:
            low, high, x = math.log10(low), math.log10(high), math.log10(x)
        return (x - low) / (high - low) if high > low else 0.5


@dataclass(frozen=True)
class Scatter:
    """One swept setting against the metric: x a coordinate on `axis`, y the trial's best."""

    axis: Axis
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    trials: tuple[int, ...]  # trial indices, one per point


@dataclass(frozen=True)
class ParallelLine:
    trial: int
    positions: tuple[float, ...]  # 0..1 on each axis: the swept settings, then the metric
    value: float  # the trial's best metric (for colouring)
    is_best: bool


@dataclass(frozen=True)
class ParallelCoordinates:
    axes: tuple[Axis, ...]  # the swept settings in sweep order, then the metric
    lines: tuple[ParallelLine, ...]


def setting_axis(parameter: Parameter, seen: Sequence[Any] = ()) -> Axis:
    """A swept setting's axis over its declared values and any `seen` beside them."""
    values = list(dict.fromkeys([*parameter.values, *seen]))
    if not parameter.setting.numeric or None in values:
        return Axis(parameter.name, categories=tuple(dict.fromkeys(map(setting_text, values))))
    ends = [*values, *(v for v in (parameter.low, parameter.high) if v is not None)]
    return Axis(parameter.name, float(min(ends)), float(max(ends)),
                log=parameter.scale is Scale.LOG)


def scatter_data(results: SweepResults, parameters: Sequence[Parameter]) -> tuple[Scatter, ...]:
    """One scatter per swept setting, one point per finished trial."""
    rows = results.finished
    found = []
    for parameter in parameters:
        axis = setting_axis(parameter, [row.trial.values[parameter.name] for row in rows])
        found.append(Scatter(axis, tuple(axis.coordinate(row.trial.values[parameter.name])
                                         for row in rows),
                             tuple(row.best.best for row in rows),
                             tuple(row.trial.index for row in rows)))
    return tuple(found)


def parallel_data(results: SweepResults, parameters: Sequence[Parameter]
                  ) -> ParallelCoordinates:
    """Parallel coordinates: an axis per swept setting and the metric's last, a line per
    finished trial through its values and its best."""
    rows = results.finished
    axes = [setting_axis(p, [row.trial.values[p.name] for row in rows]) for p in parameters]
    bests = [row.best.best for row in rows]
    axes.append(Axis(results.metric, min(bests, default=0.0), max(bests, default=1.0)))
    lines = tuple(ParallelLine(
        row.trial.index,
        tuple(axis.position(row.trial.values[p.name])
              for axis, p in zip(axes[:-1], parameters, strict=True))
        + (axes[-1].position(row.best.best),),
        row.best.best, row.is_best) for row in rows)
    return ParallelCoordinates(tuple(axes), lines)
