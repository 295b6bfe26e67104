"""Form cells that show a problem on the field itself: an outline and the tooltip.

A cell holds a field's widgets in a row and optional lines below them;
`FieldCell.show` outlines the widgets (the `invalid` property, styled by
`STYLE`) and puts the message first in their tooltips and accessible
descriptions. The message text itself is shown in one place the form keeps
for all messages (see `RunSetupForm`), not under the field: a line that comes
and goes under a field moves every row below it, under the user's cursor.
For the same reason `hint_label` reserves the lines a changing hint needs.
A text field still blank that nobody has typed in awaits input: it is not
outlined red for the value it still lacks (a path, a sweep's values) until the
user types in it or asks for it (`FieldCell.reveal`), as forms do.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

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
    """The widgets outlined when a field is wrong, and their own tooltips."""

    widgets: tuple[QWidget, ...]
    tooltips: tuple[str, ...]
    typed: bool = False  # text was typed or set in it once (or `reveal`)

    def __post_init__(self) -> None:
        for widget in self.widgets:
            edit = _text_edit(widget)
            if edit is not None:
                edit.textChanged.connect(self.reveal)

    def reveal(self) -> None:
        """From now on the field's problem is outlined, also while it is blank."""
        self.typed = True

    def awaits_input(self) -> bool:
        """Blank text fields nobody has typed in: their problem is what they still lack."""
        edits = [_text_edit(widget) for widget in self.widgets]
        return not self.typed and all(edit is not None and not edit.text().strip()
                                      for edit in edits)

    def show(self, message: str | None) -> None:
        """Outline the field and explain it in the tooltip (None or "": the field is fine);
        a field that awaits input gets the tooltip, not the outline."""
        outlined = bool(message) and not self.awaits_input()
        for widget, tooltip in zip(self.widgets, self.tooltips, strict=True):
            widget.setProperty("invalid", outlined)
            widget.setToolTip(f"{message}\n\n{tooltip}" if message else tooltip)
            widget.setAccessibleDescription(message or "")
            widget.style().unpolish(widget)
            widget.style().polish(widget)


def _text_edit(widget: QWidget) -> QLineEdit | None:
    """Where the user types in `widget`: itself, an editable combo's line; else None."""
    if isinstance(widget, QComboBox):
        return widget.lineEdit()
    return widget if isinstance(widget, QLineEdit) else None


def field_cell(widgets: list[QWidget], *, outline: list[QWidget] | None = None,
               below: list[QWidget] | None = None) -> tuple[QWidget, FieldCell]:
    """A form cell: the widgets in a row, then the widgets `below` (one per line).

    `outline`: the widgets a problem outlines (default: the first).
    """
    cell = QWidget()
    column = QVBoxLayout(cell)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(2)
    column.addLayout(row(widgets))
    for widget in below or []:
        column.addWidget(widget)
    targets = tuple(outline if outline is not None else widgets[:1])
    return cell, FieldCell(targets, tuple(w.toolTip() for w in targets))


def hint_label(name: str, lines: int = 1, role: str | None = "hint",
               label: QLabel | None = None) -> QLabel:
    """A word-wrapped label (grey: a hint) that always takes at least `lines` lines;
    `label`: one to set up so (a subclass's), else a new QLabel.

    Hints change with every edit (steps per epoch, the scaled learning rate) or
    appear later (a model's parameter count); the reserved lines keep the rows
    below in place when they do.
    """
    label = QLabel() if label is None else label
    if role is not None:
        label.setProperty("role", role)
    label.setWordWrap(True)
    label.setAccessibleName(name)
    label.setMinimumHeight(label.fontMetrics().lineSpacing() * lines)
    label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
    return label


def align_labels(forms: list[QFormLayout]) -> None:
    """One label column for several forms (the run setup's sections), so fields line up."""
    labels = [form.itemAt(i, QFormLayout.ItemRole.LabelRole) for form in forms
              for i in range(form.rowCount())]
    widgets = [item.widget() for item in labels if item is not None and item.widget()]
    width = max((w.sizeHint().width() for w in widgets), default=0)
    for widget in widgets:
        widget.setMinimumWidth(width)


def row(widgets: list[QWidget]) -> QHBoxLayout:
    """Widgets side by side; text fields and labels take the spare width."""
    layout = QHBoxLayout()
    layout.setContentsMargins(0, 0, 0, 0)
    grows = [w for w in widgets if isinstance(w, (QLineEdit, QComboBox, QLabel))
             and w.maximumWidth() > 10_000]
    for widget in widgets:
        layout.addWidget(widget, 1 if widget in grows else 0)
    if not grows:
        layout.addStretch()
    return layout
