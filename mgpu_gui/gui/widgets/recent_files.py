"""Recently picked files, newest first, listed in an editable combo box and kept in QSettings."""

from __future__ import annotations

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QComboBox

MAX_RECENT = 8


class RecentFiles:
    """The combo lists `first` (always there), then the recent paths stored under `key`.

    Loading refills the combo and keeps the text typed in its line edit.
    """

    def __init__(self, combo: QComboBox, key: str, first: str, limit: int = MAX_RECENT) -> None:
        self._combo, self._key, self._first, self._limit = combo, key, first, limit

    def paths(self) -> list[str]:
        return [self._combo.itemText(i) for i in range(1, self._combo.count())]

    def load(self, settings: QSettings | None = None) -> None:
        settings = settings or QSettings()
        value = settings.value(self._key, [])
        recent = [value] if isinstance(value, str) else list(value or [])
        edit = self._combo.lineEdit()
        text = edit.text()
        self._combo.clear()
        self._combo.addItem(self._first)
        self._combo.addItems([str(p) for p in recent[:self._limit] if p])
        edit.setText(text)

    def add(self, path: str) -> None:
        """Put `path` first (`first` itself is not recorded)."""
        if not path or path == self._first:
            return
        recent = [path, *(p for p in self.paths() if p != path)][:self._limit]
        settings = QSettings()
        settings.setValue(self._key, recent)
        settings.sync()
        self.load(settings)
