"""A run's note and tags, edited together (the Runs tab's "Note and tags…").

Tags are typed as words separated by commas or spaces; the word being typed is
completed from the tags the other runs have, most used first.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCompleter,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QWidget,
)

from mgpu_gui.core.runs.store import RunRecord
from mgpu_gui.core.runs.tags import split_tags
from mgpu_gui.gui.widgets.runs_table import short_name

_WORD_START = re.compile(r"[^\s,]*$")  # the word the cursor ends


def known_tags(records: Iterable[RunRecord]) -> list[str]:
    """Every tag in use, the most used first (then by name)."""
    counts = Counter(tag for record in records for tag in record.tags)
    return sorted(counts, key=lambda tag: (-counts[tag], tag.casefold()))


class TagCompleter(QCompleter):
    """Completes the word under the cursor of a line of several tags, not the whole line."""

    def __init__(self, tags: list[str], line: QLineEdit):
        super().__init__(tags, line)  # a list model of its own
        self.line = line
        self.setWidget(line)
        self.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
        line.textEdited.connect(self._typed)
        self.activated[str].connect(self.insert)

    def _word(self) -> tuple[int, str]:
        """Where the word being typed starts, and the word."""
        before = self.line.text()[:self.line.cursorPosition()]
        match = _WORD_START.search(before)
        assert match is not None  # the pattern matches the empty word
        return match.start(), match.group()

    def _typed(self, _text: str) -> None:
        start, word = self._word()
        if not word:
            self.popup().hide()
            return
        self.setCompletionPrefix(word)
        if self.completionCount() and self.currentCompletion() != word:
            self.complete()
        else:
            self.popup().hide()

    def insert(self, tag: str) -> None:
        """The chosen tag in place of the word being typed, and a separator after it."""
        start, _ = self._word()
        text, end = self.line.text(), self.line.cursorPosition()
        rest = text[end:]
        self.line.setText(text[:start] + tag + ", " + rest.lstrip(", "))
        self.line.setCursorPosition(start + len(tag) + 2)


class RunNotesDialog(QDialog):
    """Edits one run's note and tags; the caller stores them when it is accepted."""

    def __init__(self, record: RunRecord, tags_in_use: list[str],
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.record = record
        title = f"Note and tags of {short_name(record)}"
        self.setWindowTitle(title)
        self.setAccessibleName(title)
        self.note = QPlainTextEdit(record.note)
        self.note.setAccessibleName("Note")
        self.note.setPlaceholderText("What this run tried, and what came of it")
        self.note.setTabChangesFocus(True)  # Tab moves on, as in every other field
        self.tags = QLineEdit(", ".join(record.tags))
        self.tags.setAccessibleName("Tags")
        self.tags.setPlaceholderText("baseline, lr-sweep")
        self.tags.setToolTip("Words separated by commas or spaces; the tags of other runs "
                             "are offered as you type. Search the Runs tab with tag:NAME.")
        self.completer = TagCompleter(tags_in_use, self.tags)
        hint = QLabel("Separate tags with commas or spaces.")
        hint.setStyleSheet("color: palette(placeholder-text);")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("&Note:", self.note)
        form.addRow("&Tags:", self.tags)
        form.addRow("", hint)
        form.addRow(buttons)
        self.resize(self.fontMetrics().averageCharWidth() * 60, self.sizeHint().height())

    def note_text(self) -> str:
        return self.note.toPlainText().strip()

    def tag_list(self) -> list[str]:
        return split_tags(self.tags.text())
