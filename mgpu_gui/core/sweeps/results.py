"""A sweep's results table: each trial's settings, status, best metric and its epoch; the
best trial; repeats grouped as mean and spread.

The callers hand in each trial's curves as a ComparedRun (from the store's epochs, as the
Compare dialog reads them), so the best value and its epoch are compare's, and repeats are
grouped and banded by seed_bands: one implementation of each.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mgpu_gui.core.runs.compare import ComparedRun, Direction, MetricSummary, direction
from mgpu_gui.core.runs.seed_bands import SEED, BandKind, SeedBand, seed_band, seed_groups
from mgpu_gui.core.sweeps.median import MEDIAN_STOPPED
from mgpu_gui.core.sweeps.trials import DEFAULT_METRIC, Trial


class TrialStatus(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    COMPLETED = "completed"
    EARLY_STOPPED = "early_stopped"  # its own early stopping ended it: a finished run
    MEDIAN_STOPPED = "median_stopped"  # the sweep's median rule ended it
    FAILED = "failed"  # out of memory is a batch sweep's expected end
    STOPPED = "stopped"  # stopped by the user or a cancel; resumable
    DROPPED = "dropped"  # cancelled before it started

    @property
    def finished(self) -> bool:
        """Whether its metric counts: it trained to its own end or the sweep's rule's."""
        return self in (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED,
                        TrialStatus.MEDIAN_STOPPED)

    @property
    def text(self) -> str:
        if self is TrialStatus.MEDIAN_STOPPED:
            return MEDIAN_STOPPED
        return self.value.replace("_", " ")


@dataclass(frozen=True)
class TrialOutcome:
    """What the store knows of one trial: its status and, once it trained, its curves."""

    trial: Trial
    status: TrialStatus
    run: ComparedRun | None = None  # None: no epoch yet
    message: str = ""  # why it failed or stopped, as the run says


@dataclass(frozen=True)
class TrialRow:
    trial: Trial
    status: TrialStatus
    message: str
    best: MetricSummary | None  # the metric's best and its (0-based) epoch; None: no value
    is_best: bool = False  # the sweep's best finished trial


@dataclass(frozen=True)
class RepeatGroup:
    """The trials of one setting (they differ only by seed): the mean and spread of their
    finished bests, and their curves as a seed band."""

    values: Mapping[str, Any]
    trials: tuple[int, ...]  # trial indices
    finished: int  # how many of them have a finished best
    mean: float | None
    low: float | None
    high: float | None
    band: SeedBand | None  # per epoch over every repeat that reported; None: none yet
    is_best: bool = False


@dataclass(frozen=True)
class SweepResults:
    metric: str
    direction: Direction
    swept: tuple[str, ...]
    rows: tuple[TrialRow, ...]  # in trial order
    best: TrialRow | None  # None: no trial finished with a value
    groups: tuple[RepeatGroup, ...]

    @property
    def finished(self) -> tuple[TrialRow, ...]:
        """The trials whose best counts (for the scatter and parallel coordinates)."""
        return tuple(row for row in self.rows if row.status.finished and row.best is not None)


def sweep_results(outcomes: Sequence[TrialOutcome], metric: str = DEFAULT_METRIC, *,
                  band: BandKind = BandKind.SD) -> SweepResults:
    """The table of `outcomes` ranked by `metric` (its direction from its name)."""
    way = direction(metric)
    ordered = sorted(outcomes, key=lambda o: o.trial.index)
    summaries = [o.run.summary(metric) if o.run is not None else None for o in ordered]
    finished = [i for i, o in enumerate(ordered) if o.status.finished and summaries[i]]
    champion = _best(finished, lambda i: summaries[i].best, way)
    rows = tuple(TrialRow(o.trial, o.status, o.message, summaries[i], i == champion)
                 for i, o in enumerate(ordered))
    groups = [_group(ordered, summaries, members, metric, band)
              for members in seed_groups([{**o.trial.values, SEED: o.trial.seed}
                                          for o in ordered])]
    top = _best([i for i, g in enumerate(groups) if g.mean is not None],
                lambda i: groups[i].mean, way)
    if top is not None and len(groups) < len(ordered):  # repeats: the best setting on average
        groups[top] = dataclasses.replace(groups[top], is_best=True)
    swept = tuple(dict.fromkeys(name for o in ordered for name in o.trial.values))
    return SweepResults(metric, way, swept, rows, rows[champion] if champion is not None else None,
                        tuple(groups))


def _best(candidates: Sequence[int], value: Callable[[int], float], way: Direction
          ) -> int | None:
    """The candidate with the best value; a tie goes to the first (the earlier trial)."""
    best = None
    for index in candidates:
        if best is None or way.better(value(index), value(best)):
            best = index
    return best


def _group(ordered: Sequence[TrialOutcome], summaries: Sequence[MetricSummary | None],
           members: Sequence[int], metric: str, band: BandKind) -> RepeatGroup:
    bests = [summaries[i].best for i in members
             if ordered[i].status.finished and summaries[i] is not None]
    # Each best as a one-epoch curve: seed_band's mean and spread, not a second formula.
    spread = seed_band([((0,), (b,)) for b in bests], band) if bests else None
    curves = [(run.epochs, run.metrics[metric]) for i in members
              if (run := ordered[i].run) is not None and metric in run.metrics]
    first = ordered[members[0]].trial
    return RepeatGroup(
        values=first.values, trials=tuple(ordered[i].trial.index for i in members),
        finished=len(bests), mean=_value(spread, "mean"), low=_value(spread, "low"),
        high=_value(spread, "high"), band=seed_band(curves, band) if curves else None)


def _value(spread: SeedBand | None, part: str) -> float | None:
    if spread is None:
        return None
    value = float(getattr(spread, part)[0])
    return value if math.isfinite(value) else None
