"""How much a sweep is before it starts: trials x epochs, and a time from past runs.

The time goes by the last similar run (same model and data): its seconds per epoch, and
the time outside the epochs (starting the engine, building and rehearsing, the test set,
the exports; for a sweep's trial, also the queue runner picking it up), which every trial
pays again: the mean of the last OVERHEAD_RUNS similar runs', as one trial's start can
take seconds more than the next's (the runner starting). Left out, a 2-trial demo sweep
was estimated at 5 s and took 28 (issue 30). Trials of other settings (batch, GPUs) may
train faster or slower, so it is a guide, and says which run it goes by, or that there is
none.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.progress import format_duration
from mgpu_gui.core.sweeps.trials import Trial

OVERHEAD_RUNS = 3


@dataclass(frozen=True)
class PastRun:
    """What the estimate needs of an earlier run (from the store: its record and epochs)."""

    name: str
    model: str
    data: str
    ended: float  # the latest similar run is the guide
    seconds_per_epoch: float
    overhead_s: float = 0.0  # its wall time outside its epochs (0: not known)


@dataclass(frozen=True)
class SweepEstimate:
    trials: int
    epochs: int  # the trials' epochs in all
    per_trial: int | None  # every trial's epochs, when they are the same
    at_once: int
    seconds: float | None  # trials side by side, `at_once` at a time; None: nothing to go by
    guides: tuple[PastRun, ...]  # the runs timed by, one per (model, data) swept
    missing: tuple[tuple[str, str], ...]  # (model, data) never run before

    @property
    def text(self) -> str:
        counts = f"{self.trials} trial{'s' if self.trials != 1 else ''}"
        total = (f"{counts} x {self.per_trial} epochs = {self.epochs} epochs"
                 if self.per_trial is not None else f"{counts}, {self.epochs} epochs in all")
        if self.seconds is None:
            model, data = self.missing[0]
            return (f"{total}; no earlier run of {Path(model).name} on {Path(data).name} to "
                    "time it by")
        guides = ", ".join(
            f"{g.seconds_per_epoch:.3g} s per epoch"
            + (f" and {format_duration(g.overhead_s)} to start and finish" if g.overhead_s
               else "") + f" as run {g.name}" for g in self.guides)
        return (f"{total}; about {format_duration(self.seconds)} with {self.at_once} at a time "
                f"({guides})")


def estimate(trials: Sequence[Trial], past: Iterable[PastRun], *, at_once: int
             ) -> SweepEstimate:
    """The sweep's size, and its time with `at_once` trials running side by side (each
    starts when the earliest slot frees) at the last similar run's pace."""
    similar: dict[tuple[str, str], list[PastRun]] = {}
    for run in past:
        similar.setdefault((run.model, run.data), []).append(run)
    latest = {key: _guide(sorted(runs, key=lambda r: r.ended)) for key, runs in similar.items()}
    needed = list(dict.fromkeys((t.config.model, t.config.data) for t in trials))
    missing = tuple(key for key in needed if key not in latest)
    epochs = sum(t.config.epochs for t in trials)
    each = {t.config.epochs for t in trials}
    per_trial = each.pop() if len(each) == 1 else None
    at_once = max(1, at_once)
    if missing:
        return SweepEstimate(len(trials), epochs, per_trial, at_once, None, (), missing)
    slots = [0.0] * at_once
    for trial in trials:
        guide = latest[(trial.config.model, trial.config.data)]
        slots[slots.index(min(slots))] += (guide.overhead_s
                                           + trial.config.epochs * guide.seconds_per_epoch)
    return SweepEstimate(len(trials), epochs, per_trial, at_once, max(slots),
                         tuple(latest[key] for key in needed), ())


def _guide(runs: list[PastRun]) -> PastRun:
    """The latest of `runs` (oldest first), its overhead the mean of the last known ones."""
    known = [r.overhead_s for r in runs[-OVERHEAD_RUNS:] if r.overhead_s > 0]
    return dataclasses.replace(runs[-1], overhead_s=statistics.fmean(known) if known else 0.0)
