"""The Data view's figures, loaded off the GUI thread as they become known.

`DataOverviewLoader.load(request)` runs a `DataOverviewJob` (its child reads the
data) on a `ChildJobRunner` thread. Each stage the child reports arrives as
`updated(OverviewFigures)`: the counts first, then the thumbnails, then the
rest. The thumbnails' PNGs are decoded into QImages on the job's thread (QImage,
unlike QPixmap, may be made there), so the GUI thread only puts them on screen.
A newer `load` or `shutdown` kills the running child and drops its reports.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QImage

from mgpu_gui.core.children.data_overview import DataOverviewJob, DataOverviewOutcome
from mgpu_gui.core.datasets.overview import DataOverview, OverviewRequest
from mgpu_gui.core.events import DataOverviewFailed
from mgpu_gui.gui.jobs.child_job import ChildJobRunner


@dataclass(frozen=True)
class OverviewFigures:
    overview: DataOverview
    images: tuple[QImage, ...]  # one per `overview.thumbnails`, in order

    @classmethod
    def of(cls, overview: DataOverview) -> OverviewFigures:
        return cls(overview, tuple(QImage.fromData(base64.b64decode(thumb.png), "PNG")
                                   for thumb in overview.thumbnails))


class _FiguresJob:
    """A `DataOverviewJob` whose outcomes come with their thumbnails decoded."""

    def __init__(self, request: OverviewRequest, on_update) -> None:
        self.job = DataOverviewJob(request, lambda part: on_update(OverviewFigures.of(part)))

    def run(self) -> OverviewFigures | DataOverviewFailed:
        outcome: DataOverviewOutcome = self.job.run()
        return outcome if isinstance(outcome, DataOverviewFailed) else OverviewFigures.of(outcome)

    def cancel(self) -> None:
        self.job.cancel()


class DataOverviewLoader(QObject):
    """One overview at a time; `updated` per stage, then `finished`."""

    updated = Signal(object)  # OverviewFigures, partial or final
    failed = Signal(str)  # what to show instead
    finished = Signal()  # the latest load ended (after its last `updated` or `failed`)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runner = ChildJobRunner(self)
        self.runner.reported.connect(self.updated)
        self.runner.finished.connect(self._finished)

    def load(self, request: OverviewRequest) -> None:
        self.runner.start_reporting(lambda report: _FiguresJob(request, report))

    def is_running(self) -> bool:
        return self.runner.is_running()

    def shutdown(self) -> None:
        self.runner.shutdown()

    def _finished(self, outcome: OverviewFigures | DataOverviewFailed) -> None:
        if isinstance(outcome, DataOverviewFailed):
            self.failed.emit(outcome.message if outcome.user_error else
                             f"The data overview failed unexpectedly: {outcome.message}")
        else:
            self.updated.emit(outcome)
        self.finished.emit()
