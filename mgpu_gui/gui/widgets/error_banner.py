"""A banner over the plots for errors: the message where the user looks, details a click away."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QWidget,
)


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
        close = QPushButton("Dismiss")
        close.setAccessibleName("Dismiss error")
        close.clicked.connect(self.clear)
        layout.addWidget(self.message, 1)
        layout.addWidget(self.details_button)
        layout.addWidget(close)
        self._details = ""
        self.hide()

    def show_error(self, message: str, details: str = "") -> None:
        self.message.setText(message)
        self._details = details
        self.details_button.setVisible(bool(details))
        self.show()

    def clear(self) -> None:
        self.message.clear()
        self._details = ""
        self.hide()

    def _show_details(self) -> None:
        box = QMessageBox(QMessageBox.Icon.Critical, "Error details", self.message.text(),
                          parent=self)
        box.setDetailedText(self._details)
        box.open()
