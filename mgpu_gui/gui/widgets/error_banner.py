"""A banner over the plots for errors: the message where the user looks, details a click away."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QWidget,
)


@dataclass(frozen=True)
class BannerAction:
    """A button in the banner: what to do about the error, in one click."""

    label: str
    run: Callable[[], object]


class ErrorBanner(QFrame):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("errorBanner")
        self.setStyleSheet("#errorBanner { background: #fdecea; border: 1px solid #e0b4b4; "
                           "border-radius: 4px; } #errorBanner QLabel { color: #611a15; }")
        self.setAccessibleName("Error message")
        layout = QHBoxLayout(self)
        self.message = QLabel(wordWrap=True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_button = QPushButton("Details…")
        self.details_button.setAccessibleName("Show error details")
        self.details_button.setToolTip("The technical details (traceback) for a bug report")
        self.details_button.clicked.connect(self._show_details)
        self.action_button = QPushButton()
        self.action_button.setAccessibleName("What to do about the error")  # named when shown
        self.action_button.clicked.connect(self._act)
        self.action_button.hide()
        close = QPushButton("Dismiss")
        close.setAccessibleName("Dismiss error")
        close.clicked.connect(self.clear)
        layout.addWidget(self.message, 1)
        layout.addWidget(self.action_button)
        layout.addWidget(self.details_button)
        layout.addWidget(close)
        self._details = ""
        self._action: Callable[[], object] | None = None
        self.hide()

    def show_error(self, message: str, details: str = "",
                   action: BannerAction | None = None) -> None:
        """`action`: what the user can do about it at once, as a button (it also dismisses)."""
        self.message.setText(message)
        self._details = details
        self.details_button.setVisible(bool(details))
        self._action = None if action is None else action.run
        self.action_button.setText("" if action is None else action.label)
        self.action_button.setAccessibleName(self.action_button.text())
        self.action_button.setVisible(action is not None)
        self.show()

    def clear(self) -> None:
        self.message.clear()
        self._details = ""
        self._action = None
        self.action_button.hide()
        self.hide()

    def _act(self) -> None:
        action = self._action
        self.clear()
        if action is not None:
            action()

    def _show_details(self) -> None:
        box = QMessageBox(QMessageBox.Icon.Critical, "Error details", self.message.text(),
                          parent=self)
        box.setDetailedText(self._details)
        box.open()
