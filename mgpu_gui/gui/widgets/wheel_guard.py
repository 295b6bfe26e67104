"""The mouse wheel scrolls a form; it changes a field only while that field has the focus.

Qt hands the wheel to whatever spin box, combo box or slider is under the pointer, so
scrolling a form changed the settings that passed under it (issue 30). One filter on the
application covers every form and dialog: a field without the focus ignores the wheel, and
Qt passes the event on to its parents as it does any ignored wheel event, up to the scroll
area that scrolls. Qt, not this filter, thus keeps doing the routing: a touchpad's scroll
phases, an inner area at its end giving way to an outer one, the stop at the window (and,
by Qt's rule, a wheel event the app sends a field itself goes no further). Scroll bars are
sliders too, and keep the wheel.

The fields' focus policy becomes StrongFocus (spin and combo boxes come with WheelFocus)
as they are polished: Qt gives the wheel's focus before any filter sees the event, and a
field that took the focus would then take the wheel too.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt
from PySide6.QtWidgets import QAbstractSlider, QAbstractSpinBox, QComboBox, QScrollBar

FIELDS = (QAbstractSpinBox, QComboBox, QAbstractSlider)
WHEEL, POLISH = QEvent.Type.Wheel, QEvent.Type.Polish


class WheelGuard(QObject):
    """Sees every event of the application: the two it acts on are checked first."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        kind = event.type()
        if kind != WHEEL and kind != POLISH:
            return False
        if not isinstance(watched, FIELDS) or isinstance(watched, QScrollBar):
            return False
        if kind == POLISH:
            if watched.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                watched.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            return False
        if watched.hasFocus():
            return False
        event.ignore()  # not the field's: on to its parents
        return True


def install(app: QCoreApplication) -> WheelGuard:
    """The application's guard, installed by the first call only (the app and each window ask)."""
    guard = app.findChild(WheelGuard)
    if guard is None:
        guard = WheelGuard(app)
        app.installEventFilter(guard)
    return guard
