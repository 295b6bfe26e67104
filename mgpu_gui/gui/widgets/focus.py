"""The focus goes back to the window a dialog of ours opened over, when the dialog closes.

Hiding the active dialog leaves no window of ours active on X11 unless the window
manager hands the focus to the dialog's parent (none does without one, and not every
one does): the window's shortcuts (Ctrl+Shift+B, ...) then did nothing until it was
clicked. When the dialog's `finished` arrives the application is still active (its
state changes only when the platform's focus-out arrives), so taking the focus back
then never takes it from another program.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDialog, QWidget


def take_back_focus(window: QWidget) -> None:
    """Activate `window` if this application still has the focus and it is on screen."""
    active = QGuiApplication.applicationState() is Qt.ApplicationState.ApplicationActive
    if active and window.isVisible() and not window.isMinimized():
        window.activateWindow()


def return_focus_on_close(dialog: QDialog) -> None:
    """When `dialog` finishes, the window of its parent takes the focus back."""
    parent = dialog.parentWidget()
    if parent is not None:
        window = parent.window()
        dialog.finished.connect(lambda _=None: take_back_focus(window))
