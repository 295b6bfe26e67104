"""A collapsible section of a form: a header to click, a body of form rows, state kept.

The run setup keeps the simple path on top and the rest in these sections.
Whether a section is open is kept in QSettings, so the form looks the way the
user left it. A problem inside a closed section is shown in its header (a
one-line marker) instead of opening the section: opening it would push every
row below it away from under the cursor.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QSettings, QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

SETTINGS_GROUP = "run_setup/sections"


class CollapsibleSection(QWidget):
    """A titled header that opens and closes `body`, whose rows go into `form`."""

    toggled = Signal(bool)  # opened (True) or closed, by the user or `set_open`

    def __init__(self, title: str, key: str, *, opened: bool = False,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._key = f"{SETTINGS_GROUP}/{key}"
        self._title = title
        self.header = QToolButton()
        self.header.setText(title)
        self.header.setAccessibleName(f"{title} settings")
        self.header.setCheckable(True)
        self.header.setAutoRaise(True)
        self.header.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.header.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        # Checkable, so screen readers say whether it is open; drawn flat, not pressed.
        self.header.setStyleSheet("QToolButton { border: none; padding: 3px 2px; }")
        font = self.header.font()
        font.setBold(True)
        self.header.setFont(font)
        self.note = QLabel()  # a short fact about its settings: one line, like the marker
        self.note.setProperty("role", "hint")
        self.marker = QLabel()  # "⚠ 1 problem": one line, so it never changes the height
        self.marker.setProperty("role", "error")
        self.marker.setAccessibleName(f"{title} problems")
        self.body = QWidget()
        self.form = QFormLayout(self.body)
        self.form.setContentsMargins(0, 0, 0, 4)
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.header)
        top.addWidget(self.note)
        top.addStretch(1)
        top.addWidget(self.marker)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addLayout(top)
        column.addWidget(self.body)

        stored = QSettings().value(self._key)
        self._show_open(opened if stored is None else str(stored).lower() == "true")
        self.header.toggled.connect(self._user_toggled)

    def is_open(self) -> bool:
        return self.header.isChecked()

    def set_open(self, opened: bool) -> None:
        """Open or close the section and remember it (as a click on the header does)."""
        self.header.setChecked(opened)  # `_user_toggled` follows when it changes

    def show_problems(self, fields: Sequence[str]) -> None:
        """Name the fields of this section that have a problem (none: no marker)."""
        count = len(fields)
        self.marker.setText(f"⚠ {count} problem{'s' if count != 1 else ''}" if count else "")
        self.marker.setToolTip(", ".join(fields))
        self.header.setAccessibleDescription(
            f"{count} problem{'s' if count != 1 else ''}: {', '.join(fields)}" if count else "")

    def set_note(self, text: str) -> None:
        """A short fact about the settings inside, seen in the header even while closed
        (e.g. that the model file brings its own optimizer); "" removes it."""
        self.note.setText(text)
        self.header.setAccessibleDescription(text)

    def _user_toggled(self, opened: bool) -> None:
        self._show_open(opened)
        settings = QSettings()
        settings.setValue(self._key, opened)
        settings.sync()
        self.toggled.emit(opened)

    def _show_open(self, opened: bool) -> None:
        with QSignalBlocker(self.header):
            self.header.setChecked(opened)
        self.header.setArrowType(Qt.ArrowType.DownArrow if opened else Qt.ArrowType.RightArrow)
        self.header.setToolTip(f"{'Hide' if opened else 'Show'} the {self._title.lower()} "
                               "settings")
        self.body.setVisible(opened)

