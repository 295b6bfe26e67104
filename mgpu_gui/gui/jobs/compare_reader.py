"""The compared runs read off the GUI thread: their epochs, settings and environment.

Each run's per-epoch rows come from the run store (they grow with the run),
its settings from the store too (its folder may be gone), its environment
record from its folder. Run by `ChildJobRunner` (a QThread; the outcome is
queued to the GUI thread), with a store connection of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.errors import ConfigError, UserError
from mgpu_gui.core.runs.compare import ComparedRun, flatten
from mgpu_gui.core.runs.environment import read_environment
from mgpu_gui.core.runs.store import RunRecord, RunStore


@dataclass(frozen=True)
class CompareRequest:
    record: RunRecord
    label: str


class CompareReadJob:
    """`run()` returns the runs in the requests' order, or what went wrong, in words."""

    def __init__(self, store: Path, requests: Sequence[CompareRequest]):
        self.store = store
        self.requests = list(requests)

    def run(self) -> list[ComparedRun] | str:
        try:
            with RunStore(self.store) as store:
                return [self._read(store, request) for request in self.requests]
        except UserError as error:  # a run deleted meanwhile (another window, the CLI)
            return str(error)
        except Exception as error:  # a broken or locked store must not break the app
            return f"Could not read the runs to compare: {error}"

    def cancel(self) -> None:
        """Nothing to stop: the reads take milliseconds per run."""

    @staticmethod
    def _read(store: RunStore, request: CompareRequest) -> ComparedRun:
        record = request.record
        try:
            settings = flatten(store.config(record.id))
        except (ConfigError, TypeError, ValueError):  # another version's: curves only
            settings = {}
        return ComparedRun.from_events(
            request.label, store.series_events(record.id, batches=False), settings=settings,
            environment=read_environment(record.run_dir), run_id=record.id)
