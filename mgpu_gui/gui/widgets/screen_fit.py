"""A window's size: what it would like, but never more than the screen it opens on."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QWidget


def room_on_screen(widget: QWidget) -> QSize:
    """The available area of the screen of the window `widget` opens over (its own, for a
    top-level window), less that window's frame (title bar and borders; a dialog gets the
    same)."""
    parent = widget.parentWidget()
    anchor = parent.window() if parent is not None else widget
    frame = anchor.frameGeometry().size() - anchor.geometry().size()
    return anchor.screen().availableGeometry().size() - frame


def fit_to_screen(widget: QWidget, preferred: QSize) -> None:
    """Resize `widget` (a window about to open) to `preferred`, clamped to `room_on_screen`:
    a size chosen for a large screen still opens whole on a 1024x700 one. Qt keeps it at
    least the layout's minimum size."""
    widget.resize(preferred.boundedTo(room_on_screen(widget)))
