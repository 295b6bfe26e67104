"""Recently picked files, newest first, listed in an editable combo box and kept in QSettings."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QComboBox

MAX_RECENT = 8


class RecentFiles:
    """The combo lists the `fixed` entries (always there: 'demo', the built-in
    architectures; each a (text, tooltip) pair), then the recent paths stored under
    `key`, after a separator.

    Loading refills the combo and keeps the text typed in its line edit.
    """

    def __init__(self, combo: QComboBox, key: str, fixed: Sequence[tuple[str, str]],
                 limit: int = MAX_RECENT) -> None:
        self._combo, self._key, self._fixed, self._limit = combo, key, tuple(fixed), limit

    def paths(self) -> list[str]:
        # The separator, when there is one, is an item too (with no text).
        return [text for i in range(len(self._fixed), self._combo.count())
                if (text := self._combo.itemText(i))]

    def load(self, settings: QSettings | None = None) -> None:
        settings = settings or QSettings()
        value = settings.value(self._key, [])
        recent = [value] if isinstance(value, str) else list(value or [])
        edit = self._combo.lineEdit()
        text = edit.text()
        self._combo.clear()
        for index, (entry, tooltip) in enumerate(self._fixed):
            self._combo.addItem(entry)
            self._combo.setItemData(index, tooltip, Qt.ItemDataRole.ToolTipRole)
        paths = [str(p) for p in recent[:self._limit] if p]
        if paths:
            self._combo.insertSeparator(self._combo.count())
            self._combo.addItems(paths)
        edit.setText(text)

    def add(self, path: str) -> None:
        """Put `path` first (the fixed entries are not recorded)."""
        if not path or any(path == entry for entry, _ in self._fixed):
            return
        recent = [path, *(p for p in self.paths() if p != path)][:self._limit]
        settings = QSettings()
        settings.setValue(self._key, recent)
        settings.sync()
        self.load(settings)
