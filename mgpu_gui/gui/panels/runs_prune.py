"""The Runs tab's "Prune checkpoints…": asks first, saying what it frees; prunes off the GUI thread.

What a prune would free comes with the rows (the reader measures each folder:
`RunSize.prunable`), so asking walks no folder on the GUI thread. The prune
itself (core/runs/disk.py) plans afresh under each run's lock, in a
`BackgroundJob`: a run that started meanwhile is left alone, and a second
prune of the same run removes nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from mgpu_gui.core.runs import disk
from mgpu_gui.core.runs.checkpoints import format_bytes
from mgpu_gui.core.runs.store import RunRecord, RunState
from mgpu_gui.gui.jobs.background_job import BackgroundJob
from mgpu_gui.gui.widgets.runs_table import short_name

PRUNE_TIP = ("Free disk space: remove the selected runs' old checkpoints and image caches; "
             "best, last, the resume backup and exported models stay (asks first)")
KEPT = "Best, last, the resume backup, the exported models, events and logs stay."

Pruned = list[tuple[RunRecord, disk.PrunePlan]]


class _PruneRunner:
    """`BackgroundJob`'s runner: prunes one run after another; a cancel ends after the
    run under way."""

    def __init__(self, records: Sequence[RunRecord]):
        self.records = list(records)
        self.on_progress = self.on_report = None  # set by the job; nothing to report
        self._cancelled = False

    def run(self) -> Pruned:
        done: Pruned = []
        for record in self.records:
            if self._cancelled:
                break
            done.append((record, disk.prune(record.run_dir)))
        return done

    def cancel(self) -> None:
        self._cancelled = True


class RunsPruner(QObject):
    """Asks, prunes in the background, says what it freed (`finished`, for the tab's
    message line; the tab reads the rows again, with their new sizes)."""

    finished = Signal(str)

    def __init__(self, parent: QWidget, sizes: Callable[[], dict[int, disk.RunSize | None]]):
        super().__init__(parent)
        self.parent_widget = parent
        self.sizes = sizes  # the rows' sizes by run id, as last read
        self.job = BackgroundJob(self, factory=_PruneRunner, what="prune")
        self.job.failed.connect(self._failed)
        self.job.finished.connect(self._done)
        self._failure = ""

    def prunable(self, selected: Sequence[RunRecord]) -> list[RunRecord]:
        sizes = self.sizes()
        return [r for r in selected if r.status is not RunState.RUNNING
                and (size := sizes.get(r.id)) is not None and size.prunable]

    def state(self, selected: Sequence[RunRecord]) -> tuple[bool, str]:
        """(enabled, why not) for the action."""
        if self.job.is_running():
            return False, "A prune is under way"
        if not selected:
            return False, "Select the runs to prune"
        if self.prunable(selected):
            return True, ""
        if all(r.status is RunState.RUNNING for r in selected):
            return False, "A running run is never pruned"
        return False, "Nothing to prune: only best, last, the resume backup and exports are left"

    def ask(self, selected: Sequence[RunRecord]) -> None:
        records = self.prunable(selected)
        if records and not self.job.is_running() and self.confirm(records, len(selected)):
            self._failure = ""
            self.job.start(records)

    def confirm(self, records: Sequence[RunRecord], selected: int) -> bool:
        sizes = self.sizes()
        frees = sum(size.prunable for r in records if (size := sizes.get(r.id)) is not None)
        whose = (f"the run “{short_name(records[0])}”" if len(records) == 1
                 else f"these {len(records)} runs")
        text = (f"Prune the checkpoints of {whose}? This frees {format_bytes(frees)}: old "
                f"epoch checkpoints, backups never committed, temporary files of crashed "
                f"writers and decoded-image caches (a resume rebuilds them).\n\n{KEPT}")
        if (left := selected - len(records)) > 0:
            text += (f"\n\n{left} of the selected runs {'has' if left == 1 else 'have'} "
                     f"nothing to prune or {'is' if left == 1 else 'are'} running: "
                     f"{'it is' if left == 1 else 'they are'} left alone.")
        answer = QMessageBox.question(
            self.parent_widget, "Prune checkpoints", text,
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel)
        return answer == QMessageBox.StandardButton.Yes

    def shutdown(self) -> None:
        """For the window's close: the run under way finishes (file removals), no other."""
        self.job.shutdown()

    def _failed(self, message: str) -> None:
        self._failure = message

    def _done(self, pruned: Pruned | None) -> None:
        self.finished.emit(self._failure if pruned is None else outcome(pruned))


def outcome(pruned: Pruned) -> str:
    """'Freed 1.2 GiB in 2 runs.', with the runs left alone and the files that stayed."""
    freed = [plan for _, plan in pruned if not plan.skipped]
    text = (f"Freed {format_bytes(sum(plan.frees for plan in freed))} in "
            f"{len(freed)} run{'s' if len(freed) != 1 else ''}.")
    for record, plan in pruned:
        if plan.skipped:
            text += f" “{short_name(record)}” was left alone: {plan.skipped}."
        if plan.problems:
            text += (f" Could not remove {'; '.join(plan.problems)}: check its permissions, "
                     f"or remove it in the file manager.")
    return text
