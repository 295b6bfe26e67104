"""Form cells that show a problem where it is: an outline, the message below, the tooltip.

A cell holds a field's widgets in a row, optional lines below them, and an
error label; `FieldCell.show` outlines the widgets (the `invalid` property,
styled by `STYLE`), shows the message and puts it first in their tooltips.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QVBoxLayout, QWidget

ERROR_COLOR = "#d93025"
STYLE = f"""
*[invalid="true"] {{ border: 2px solid {ERROR_COLOR}; border-radius: 3px; }}
QAbstractSpinBox[invalid="true"]::up-button, QAbstractSpinBox[invalid="true"]::down-button {{
    width: 14px; }}
QLabel[role="error"] {{ color: {ERROR_COLOR}; }}
QLabel[role="hint"] {{ color: palette(placeholder-text); }}
"""


@dataclass
class FieldCell:
    """The widgets outlined when a field is wrong, and the label for its message."""

    widgets: tuple[QWidget, ...]
    error: QLabel
    tooltips: tuple[str, ...]

    def show(self, message: str | None) -> None:
        """Show `message` (None or "": the field is fine)."""
        self.error.setText(message or "")
        self.error.setVisible(bool(message))
        for widget, tooltip in zip(self.widgets, self.tooltips, strict=True):
            widget.setProperty("invalid", bool(message))
            widget.setToolTip(f"{message}\n\n{tooltip}" if message else tooltip)
            widget.setAccessibleDescription(message or "")
            widget.style().unpolish(widget)
            widget.style().polish(widget)


def field_cell(label: str, widgets: list[QWidget], *, outline: list[QWidget] | None = None,
               extra: list[QWidget] | None = None, below: list[QWidget] | None = None
               ) -> tuple[QWidget, FieldCell]:
    """A form cell: the widgets in a row, an extra row, lines below, the error message.

    `outline`: the widgets a problem outlines (default: the first); `label`
    names the error label for screen readers.
    """
    cell = QWidget()
    column = QVBoxLayout(cell)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(2)
    column.addLayout(row(widgets))
    if extra:
        column.addLayout(row(extra))
    for widget in below or []:
        column.addWidget(widget)
    error = QLabel()
    error.setProperty("role", "error")
    error.setWordWrap(True)
    error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    error.setAccessibleName(f"{label} problem")
    error.hide()
    column.addWidget(error)
    targets = tuple(outline if outline is not None else widgets[:1])
    return cell, FieldCell(targets, error, tuple(w.toolTip() for w in targets))


def row(widgets: list[QWidget]) -> QHBoxLayout:
    """Widgets side by side; text fields and labels take the spare width."""
    layout = QHBoxLayout()
    grows = [w for w in widgets if isinstance(w, (QLineEdit, QComboBox, QLabel))
             and w.maximumWidth() > 10_000]
    for widget in widgets:
        layout.addWidget(widget, 1 if widget in grows else 0)
    if not grows:
        layout.addStretch()
    return layout
