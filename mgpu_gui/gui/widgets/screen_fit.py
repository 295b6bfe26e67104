"""A dialog's first size: what it would like, but never more than the screen it opens on."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QWidget


def fit_to_screen(widget: QWidget, preferred: QSize) -> None:
    """Resize `widget` (a window about to open) to `preferred`, clamped to the available
    area of the screen of the window it opens over, less that window's frame (title bar
    and borders; a dialog gets the same): a size chosen for a large screen still opens
    whole on a 1024x700 one. Qt keeps it at least the layout's minimum size."""
    parent = widget.parentWidget()
    anchor = parent.window() if parent is not None else widget
    frame = anchor.frameGeometry().size() - anchor.geometry().size()
    room = anchor.screen().availableGeometry().size() - frame
    widget.resize(preferred.boundedTo(room))
