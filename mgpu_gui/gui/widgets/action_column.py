"""A column of buttons for a panel's actions, the rarer ones under one "More" menu button.

The Runs tab's column must fit the tab's height at 1280x720 and scale 1.25
(seven buttons do); every action stays in the table's context menu too.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractButton,
    QHBoxLayout,
    QMenu,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)


def lay_out_panel(panel: QWidget, note: QWidget, main: QWidget,
                  buttons: list[QAbstractButton]) -> None:
    """A tab's panel as the Queue and Sweeps tabs have it: a note over its table (or
    what stands for it), the buttons in a column beside it, top-aligned."""
    column = QVBoxLayout()
    for button in buttons:
        column.addWidget(button)
    column.addStretch(1)
    body = QHBoxLayout()
    body.setContentsMargins(0, 0, 0, 0)
    body.addWidget(main, 1)
    body.addLayout(column)
    layout = QVBoxLayout(panel)
    layout.setContentsMargins(2, 2, 2, 2)
    layout.addWidget(note)
    layout.addLayout(body, 1)


def _button(parent: QWidget, name: str) -> QToolButton:
    button = QToolButton(parent)
    button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
    button.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
    button.setAccessibleName(name)
    return button


def action_column(parent: QWidget, actions: dict[str, QAction],
                  more: tuple[str, ...]) -> tuple[QVBoxLayout, dict[str, QToolButton]]:
    """A button per action in order, those keyed in `more` in a menu on a last "More" button;
    the buttons by key ("more" for the menu's)."""
    column = QVBoxLayout()
    column.setSpacing(2)
    buttons: dict[str, QToolButton] = {}
    menu = QMenu(parent)
    menu.setToolTipsVisible(True)  # a disabled entry's tooltip says why
    for key, action in actions.items():
        if key in more:
            menu.addAction(action)
            continue
        button = _button(parent, action.text().replace("&", "").rstrip("…"))
        button.setDefaultAction(action)
        column.addWidget(button)
        buttons[key] = button
    if more:
        button = _button(parent, "More actions")
        button.setText("More")
        button.setToolTip("More for the selected runs: " + ", ".join(
            actions[key].text().replace("&", "").rstrip("…").lower() for key in more))
        button.setMenu(menu)
        button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        column.addWidget(button)
        buttons["more"] = button
    column.addStretch(1)
    return column, buttons
