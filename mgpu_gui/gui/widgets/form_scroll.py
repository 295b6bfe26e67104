"""A scroll area for a form: it scrolls up and down, never sideways.

A form that is wider than its view is cut or needs a sideways scroll bar,
and tabbing through it then shifts the whole form left and right. This area
asks for at least the form's minimum width plus room for the vertical scroll
bar, so the splitter that holds it can never make it narrower than that.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtWidgets import QScrollArea, QWidget


class FormScrollArea(QScrollArea):
    """Holds `form`, as wide as the view (or the form's minimum width, if wider)."""

    def __init__(self, form: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidget(form)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        form.installEventFilter(self)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        hint = super().minimumSizeHint()
        form = self.widget()
        if form is None:
            return hint
        # The scroll bar's room is kept even while it is hidden: it appears when a
        # section opens, and must not cut the form then.
        width = (form.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width()
                 + 2 * self.frameWidth())
        return QSize(max(hint.width(), width), hint.height())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # the form's minimum width may have changed
        return super().eventFilter(watched, event)
