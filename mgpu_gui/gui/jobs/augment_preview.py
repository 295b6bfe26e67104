"""The augmentation preview's pictures, made in their child and shown as they come.

`AugmentPreviewLoader.load(request)` runs an `AugmentPreviewJob` on a
`ChildJobRunner` thread; each image arrives as `row(PreviewRow)`, its PNGs decoded
into QImages on the job's thread (QImage, unlike QPixmap, may be made there), so the
GUI thread only puts them on screen. A newer `load` or `shutdown` kills the running
child and drops its reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QImage

from mgpu_gui.core.augment_preview import PreviewRequest
from mgpu_gui.core.children.augment_preview import AugmentPreviewJob
from mgpu_gui.core.events import AugmentPreviewFailed, AugmentPreviewRow
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.jobs.sample_images import decoded_png


@dataclass(frozen=True)
class PreviewRow:
    event: AugmentPreviewRow
    images: tuple[QImage, ...]  # the original, then its variants; none when it failed


class AugmentPreviewLoader(QObject):
    row = Signal(object)  # a PreviewRow of the latest load
    failed = Signal(str)  # what to show instead
    finished = Signal()  # the latest load ended (after its last `row` or `failed`)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runner = ChildJobRunner(self)
        self.runner.reported.connect(self.row)
        self.runner.finished.connect(self._finished)

    def load(self, request: PreviewRequest) -> None:
        self.runner.start_reporting(lambda report: AugmentPreviewJob(request, lambda event: report(
            PreviewRow(event, tuple(decoded_png(png) for png in event.pngs)))))

    def is_running(self) -> bool:
        return self.runner.is_running()

    def cancel(self) -> None:
        self.runner.cancel()

    def shutdown(self) -> None:
        self.runner.shutdown()

    def _finished(self, outcome: object) -> None:
        if isinstance(outcome, AugmentPreviewFailed):
            self.failed.emit(outcome.message if outcome.user_error else
                             f"The augmentation preview failed unexpectedly: {outcome.message}")
        self.finished.emit()


__all__ = ["AugmentPreviewLoader", "PreviewRow"]
