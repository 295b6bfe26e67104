"""QMessageBox.question answered by a test: the texts asked are kept, the answer is set."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox


class Questions:
    """Put in place of QMessageBox.question with `answer(monkeypatch, choice)`."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def answer(self, monkeypatch, choice: QMessageBox.StandardButton) -> None:
        def question(parent, title, text, *args):
            self.asked.append(text)
            return choice
        monkeypatch.setattr(QMessageBox, "question", question)
