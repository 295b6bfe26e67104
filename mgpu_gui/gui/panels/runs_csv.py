"""The Runs tab's "Export CSV…": the selected runs' epochs and settings, as the CLI writes them.

Asks for the file, writes it in the background (gui/jobs/csv_export.py) and says
in the window's notifier when it is written or why it is not.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtWidgets import QWidget

from mgpu_gui.core.runs.store import RunRecord
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.jobs.csv_export import CsvOutcome, EpochCsvJob
from mgpu_gui.gui.widgets.notifier import Notice, NoticeKind, notify_from
from mgpu_gui.gui.widgets.save_file import ask_save_path

SHOWN_IDS = 4  # a suggested name lists this many run ids at most
CSV_TIP = ("Write the selected runs' per-epoch metrics and settings to a CSV file, as "
           "`mgpu-train runs export` does")


class RunsCsvExport:
    """Exports runs of the store at `store` for `panel` (the dialogs' parent, the notices'
    source)."""

    def __init__(self, panel: QWidget, store: Path):
        self.panel = panel
        self.store = store
        self.jobs = ChildJobRunner(panel)
        self.jobs.finished.connect(self._finished)

    def ask_and_export(self, records: Sequence[RunRecord]) -> None:
        target = ask_save_path(self.panel, "Export runs as CSV", suggested_path(records),
                               "CSV (*.csv)", ".csv")
        if target is not None:
            self.export(records, target)

    def export(self, records: Sequence[RunRecord], target: Path) -> None:
        self.jobs.start(EpochCsvJob(self.store, [r.id for r in records], target))

    def shutdown(self) -> None:
        self.jobs.shutdown()

    def _finished(self, outcome: CsvOutcome) -> None:
        notify_from(self.panel, Notice(NoticeKind.DONE, "CSV exported", outcome.text)
                    if outcome.written else
                    Notice(NoticeKind.FAILED, "CSV export failed", outcome.text))


def suggested_path(records: Sequence[RunRecord]) -> Path:
    """One run: `<its name>.csv`, else `runs-3-5-8.csv`; in the first run's output folder."""
    first = records[0]
    if len(records) == 1:
        name = first.name
    else:
        ids = [str(r.id) for r in records[:SHOWN_IDS]]
        name = "runs-" + "-".join(ids) + ("-and-more" if len(records) > SHOWN_IDS else "")
    return first.run_dir.parent / f"{name}.csv"
