"""The line beside Train: ready, or the first problem itself, its field a link to it.

The full list of problems sits below the whole form, where a message that comes
and goes moves no field; at 1280x720 it is off screen once a section is open. So
this line says the first problem in words (a red ⚠ for a value that is wrong; no
red for a field not filled in yet: that is the next step, not a mistake), names
the others, and each name is a link: a click goes to the field (`field_clicked`).
Two lines are reserved and a long message is cut to fit them, so the rows below
never move; the tooltip has every message whole.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QRect, Qt, Signal
from PySide6.QtGui import QFontMetrics, QResizeEvent, QShowEvent
from PySide6.QtWidgets import QLabel

from mgpu_gui.gui.widgets.field_cells import ERROR_COLOR, hint_label

LINES = 2
NAMED = 2  # after the first problem, the fields named before "and N more"


@dataclass(frozen=True)
class Problem:
    field: str  # the config field, the link's target ("": no field to go to)
    name: str  # the field as the form labels it
    message: str
    awaits_input: bool = False  # a blank field nobody has typed in: said as the next step


def fit_lines(head: str, text: str, tail: str, metrics: QFontMetrics, width: int,
              lines: int) -> str:
    """`text` shortened with "…" in its middle (where a message's path is: its file name
    stays, as the app elides paths) so that `head + text + tail` wraps to at most `lines`
    lines `width` pixels wide (whole when it fits, or while the width is not known)."""
    limit = lines * metrics.lineSpacing()

    def cut(n: int) -> str:
        if n >= len(text):
            return text
        end = min(n // 3, 40)  # the file name, or the end of the message
        return text[:n - end].rstrip() + "…" + text[len(text) - end:] if end else text[:n] + "…"

    def fits(n: int) -> bool:
        box = QRect(0, 0, width, 100_000)
        return metrics.boundingRect(box, Qt.TextFlag.TextWordWrap,
                                    head + cut(n) + tail).height() <= limit

    if width <= 0 or fits(len(text)):
        return text
    low, high = 0, len(text) - 1  # the longest cut that fits: a binary search
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return cut(low)


class ProblemLine(QLabel):
    """`show_problems`, or any other text by `setText` (after `show_problems([])`)."""

    field_clicked = Signal(str)  # the config field whose name was clicked

    def __init__(self) -> None:
        super().__init__()
        hint_label("Settings check", lines=LINES, role=None, label=self)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse
                                     | Qt.TextInteractionFlag.LinksAccessibleByKeyboard)
        self.linkActivated.connect(self.field_clicked)
        self._problems: list[Problem] = []

    def show_problems(self, problems: Sequence[Problem]) -> None:
        """Say the first problem (a wrong value before a field not filled in) and name the
        rest; none: the caller says what is ready."""
        self._problems = sorted(problems, key=lambda problem: problem.awaits_input)
        if self._problems:
            self._fill()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if self._problems:
            self._fill()  # cut to the new width

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if self._problems:
            self._fill()  # hidden, its width was not known

    def _fill(self) -> None:
        first, rest = self._problems[0], self._problems[1:]
        head = f"{'' if first.awaits_input else '⚠ '}{first.name}: "
        message = fit_lines(head, first.message, _also(rest, lambda p: p.name),
                            self.fontMetrics(),
                            self.contentsRect().width() if self.isVisible() else 0, LINES)
        warning = "" if first.awaits_input else f"<span style='color:{ERROR_COLOR}'>⚠</span> "
        self.setText(f"{warning}{_link(first)}: {html.escape(message)}{_also(rest, _link)}")
        # The line whole (what a shortened line leaves out), then every problem whole.
        whole = f"{head}{first.message}{_also(rest, lambda p: p.name)}"
        self.setToolTip("\n".join([whole, *(f"{p.name}: {p.message}" for p in rest)]))


def _link(problem: Problem) -> str:
    """The field's name, a link to the field where it has one."""
    name = html.escape(problem.name)
    return f'<a href="{html.escape(problem.field)}">{name}</a>' if problem.field else name


def _also(rest: Sequence[Problem], name: Callable[[Problem], str]) -> str:
    """" (also Data, Epochs and 2 more)": the problems after the first, each by `name`."""
    if not rest:
        return ""
    more = len(rest) - NAMED
    return (f" (also {', '.join(name(p) for p in rest[:NAMED])}"
            f"{f' and {more} more' if more > 0 else ''})")
