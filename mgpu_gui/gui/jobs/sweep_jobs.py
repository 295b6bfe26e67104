"""Sweeps in the run store, read and written off the GUI thread.

A `StoreJob` runs one function of core/sweeps/store.py in `ChildJobRunner`'s thread
with a store connection of its own (`RunStore` is one connection per thread): loading
a sweep reads every trial's epochs, and listing them grows with the history. What
the store refuses comes back as a `Refused` holding the error, so the window can say
it where the user looks (and ask about a GPU busy outside the app). Starting and
extending also start the queue runner, as `mgpu-train sweep start` does: the trials
are queued jobs, and the runner starts them whether or not the window stays open.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.children.queue_runner import ensure_runner
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.core.sweeps.estimate import PastRun
from mgpu_gui.core.sweeps.space import Parameter
from mgpu_gui.core.sweeps.store import (
    SweepRecord,
    extend_sweep,
    list_sweeps,
    load_sweep,
    past_runs,
    start_sweep,
)
from mgpu_gui.core.sweeps.trials import SweepSpec


@dataclass(frozen=True)
class Refused:
    """What the store refused, or why it could not be used."""

    error: UserError

    @property
    def message(self) -> str:
        return str(self.error)


class StoreJob:
    """`work(store)` on its own connection to the store at `path`: its result, or Refused."""

    def __init__(self, path: Path, work: Callable[[RunStore], object]):
        self.path = path
        self.work = work

    def run(self) -> object:
        try:
            with RunStore(self.path) as store:
                return self.work(store)
        except UserError as error:
            return Refused(error)
        except Exception as error:  # a broken or locked store must not break the window
            return Refused(UserError(f"Could not use the run history: {error}"))

    def cancel(self) -> None:
        """Nothing to stop: a store query ends on its own."""


def start_and_run(store: RunStore, spec: SweepSpec, name: str, *, inventory: GpuInventory,
                  allow_busy: bool, compiled_model: bool) -> int:
    """Queue the sweep's trials, then make sure the queue runner runs; the sweep's id."""
    sweep_id = start_sweep(store, spec, name, inventory=inventory, allow_busy=allow_busy,
                           compiled_model=compiled_model)
    ensure_runner(store.path)
    return sweep_id


def extend_and_run(store: RunStore, sweep_id: int, more: Sequence[Parameter], *,
                   samples: int, repeats: int | None,
                   inventory: GpuInventory | None) -> list[int]:
    """Queue the extension's new trials, then make sure the queue runner runs."""
    added = extend_sweep(store, sweep_id, more, samples=samples, repeats=repeats,
                         inventory=inventory)
    ensure_runner(store.path)
    return added


def past_runs_of(path: Path, base: RunConfig) -> Callable[[], list[PastRun]]:
    """The Sweep dialog's `past_runs`: ended runs of the base's model and data, read on a
    connection of the calling thread's own."""
    def read() -> list[PastRun]:
        with RunStore(path) as store:
            return past_runs(store, {(base.model, base.data)})

    return read


@dataclass(frozen=True)
class SweepSummary:
    """A sweep as the Sweeps tab lists it: its record and its best trial so far."""

    record: SweepRecord
    best: float | None  # the metric's best value of the best finished trial
    best_trial: int | None  # that trial's number (Trial.number, from 1)

    @property
    def best_text(self) -> str:
        if self.best is None or self.best_trial is None:
            return ""
        return f"{self.record.spec.metric} {self.best:.4g} (trial #{self.best_trial})"


def sweep_summaries(store: RunStore, known: Mapping[int, SweepSummary]) -> list[SweepSummary]:
    """Every sweep, newest first, with its best; a sweep that has ended and is unchanged
    since `known` keeps its known best (reading its trials' epochs again gives the same)."""
    found = []
    for record in list_sweeps(store):
        old = known.get(record.id)
        if old is not None and record.ended and old.record == record:
            found.append(old)
            continue
        best = load_sweep(store, record.id).results.best
        found.append(SweepSummary(
            record, None if best is None or best.best is None else best.best.best,
            None if best is None else best.trial.number))
    return found
