"""Work that a paint must not wait for, run right after that paint.

A zero timer started when a widget is shown runs before its first paint (Qt posts the
paint after it), so work begun there (building the plots, preloading a view's modules)
delayed the first painted window (issue 30, finding 11). Watching for the paint event
itself puts the work after it.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QWidget


class _NextPaint(QObject):
    def __init__(self, widget: QWidget, then: Callable[[], object]):
        super().__init__(widget)
        self._then = then
        widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Paint:
            watched.removeEventFilter(self)
            QTimer.singleShot(0, watched, self._then)
            self.deleteLater()
        return False


def after_next_paint(widget: QWidget, then: Callable[[], object]) -> None:
    """`then()` at the event loop's next turn after `widget` next paints (its first, for
    one not shown yet; never, if it never paints; a widget that goes takes `then` along)."""
    _NextPaint(widget, then)
