"""Pictures of evaluated samples, drawn in their child and shown as they come.

`SampleImagesLoader.load(request)` runs a `SampleImagesJob` on a
`ChildJobRunner` thread; each chunk of pictures arrives as `drawn(first,
images)`, decoded into QImages on the job's thread (QImage, unlike QPixmap, may
be made there), so the GUI thread only puts them on screen. A newer `load` or
`shutdown` kills the running child and drops its reports.
"""

from __future__ import annotations

import base64

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QImage

from mgpu_gui.core.children.sample_images import SampleImagesJob
from mgpu_gui.core.evaluation.samples import DrawRequest
from mgpu_gui.core.events import SamplesDrawFailed
from mgpu_gui.gui.jobs.child_job import ChildJobRunner


def decoded_png(png: str) -> QImage:
    """A child's base64 PNG as a QImage; a null one for "" (a sample that could not be
    decoded)."""
    return QImage.fromData(base64.b64decode(png), "PNG") if png else QImage()


class SampleImagesLoader(QObject):
    drawn = Signal(int, list)  # the first pick's position, QImages in pick order
    failed = Signal(str)  # what to show instead

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runner = ChildJobRunner(self)
        self.runner.reported.connect(lambda part: self.drawn.emit(*part))
        self.runner.finished.connect(self._finished)

    def load(self, request: DrawRequest) -> None:
        self.runner.start_reporting(lambda report: SampleImagesJob(
            request, lambda first, pngs: report((first, [decoded_png(png) for png in pngs]))))

    def shutdown(self) -> None:
        self.runner.shutdown()

    def _finished(self, outcome: SamplesDrawFailed | None) -> None:
        if outcome is not None:
            self.failed.emit(outcome.message if outcome.user_error else
                             f"Drawing the samples failed unexpectedly: {outcome.message}")


__all__ = ["SampleImagesLoader"]
