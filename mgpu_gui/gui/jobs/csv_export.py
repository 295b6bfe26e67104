"""The Runs tab's CSV export written off the GUI thread: the store read grows with the runs.

The same table, file and words as `mgpu-train runs export` (core/runs/epoch_table.py),
read with a store connection of its own; run by `ChildJobRunner` (a QThread; the
outcome is queued to the GUI thread).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.errors import UserError
from mgpu_gui.core.runs.epoch_table import export_csv
from mgpu_gui.core.runs.store import RunStore


@dataclass(frozen=True)
class CsvOutcome:
    written: bool
    text: str  # what was written, or why not, in words


class EpochCsvJob:
    """`run()` writes the runs' epochs and settings to `target`."""

    def __init__(self, store: Path, run_ids: Sequence[int], target: Path):
        self.store = store
        self.run_ids = list(run_ids)
        self.target = target

    def run(self) -> CsvOutcome:
        try:
            with RunStore(self.store) as store:
                return CsvOutcome(True, export_csv(store, self.run_ids, self.target))
        except UserError as error:  # an unwritable file; a run deleted meanwhile
            return CsvOutcome(False, str(error))
        except Exception as error:  # a broken or locked store must not break the app
            return CsvOutcome(False, f"Could not read the runs to export: {error}")

    def cancel(self) -> None:
        """Nothing to stop: the reads take milliseconds per run."""
