"""Ask where to save a file of one kind: Qt's own dialog, the suffix added when left off."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget


def ask_save_path(parent: QWidget, title: str, suggested: Path, file_filter: str,
                  suffix: str) -> Path | None:
    """The file to write (ending in `suffix`), or None when cancelled."""
    # Qt's dialog, not the platform's: the same on every desktop, and testable offscreen.
    path, _ = QFileDialog.getSaveFileName(parent, title, str(suggested), file_filter,
                                          options=QFileDialog.Option.DontUseNativeDialog)
    if not path:
        return None
    target = Path(path)
    if target.suffix.lower() != suffix:
        target = target.with_name(target.name + suffix)
    return target
