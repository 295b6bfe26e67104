"""The Log and Model-summary tabs: what happened, in words, and what is being trained."""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QAbstractSlider, QPlainTextEdit, QTabWidget, QWidget

from mgpu_gui.core.events import Event, RunStarted
from mgpu_gui.core.eventtext import event_lines, is_noise

MAX_LINES = 20_000  # older lines scroll away; worker.log in the run folder keeps all


class FollowingLog(QPlainTextEdit):
    """A read-only log that shows its newest line until the user scrolls away from it.

    QPlainTextEdit follows appended lines only while its scroll bar sits at the bottom.
    A relayout (the pane resized, long lines wrapped anew) left the bar off the bottom,
    and the log then showed a run's first lines for the rest of the run.
    """

    def __init__(self) -> None:
        super().__init__(readOnly=True)
        self.following = True
        bar = self.verticalScrollBar()
        bar.actionTriggered.connect(self._scrolled_by_user)  # drag, wheel, arrows
        bar.rangeChanged.connect(self._keep_following)

    def _scrolled_by_user(self, action: int) -> None:
        if action != QAbstractSlider.SliderAction.SliderNoAction.value:
            bar = self.verticalScrollBar()  # its position is the action's, its value not yet
            self.following = bar.sliderPosition() >= bar.maximum()

    def _keep_following(self, _minimum: int, _maximum: int) -> None:
        # After the event that changed the range: a resize moves the bar back to the
        # first visible line once this signal has been handled.
        QTimer.singleShot(0, self, self._to_end_if_following)

    def _to_end_if_following(self) -> None:
        if self.following:
            bar = self.verticalScrollBar()
            bar.setValue(bar.maximum())


class LogPanel(QTabWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.log = FollowingLog()
        self.log.setMaximumBlockCount(MAX_LINES)
        self.log.setFont(fixed)
        self.log.setAccessibleName("Training log")
        self.summary = QPlainTextEdit(readOnly=True)
        self.summary.setFont(fixed)
        self.summary.setAccessibleName("Model summary")
        self.summary.setPlaceholderText("The picked model's summary appears here after "
                                        "\"Show summary\" in the Run panel, or when a run "
                                        "starts.")
        self.setAccessibleName("Log, model summary and runs")
        self.tabBar().setAccessibleName("Log tabs")
        self.addTab(self.log, "Log")
        self.addTab(self.summary, "Model summary")

    def append_event(self, event: Event) -> None:
        if isinstance(event, RunStarted) and event.summary:
            self.set_summary(event.summary)
        stamp = time.strftime("%H:%M:%S", time.localtime(event.t))
        for line in event_lines(event, verbose=True):
            self.log.appendPlainText(f"{stamp} {line}")

    def append_output(self, line: str) -> None:
        """A line the worker printed (TensorFlow, Keras, user code)."""
        if line.strip() and not is_noise(line):
            self.log.appendPlainText(f"         | {line}")

    def append_message(self, text: str) -> None:
        self.log.appendPlainText(time.strftime("%H:%M:%S ") + text)

    def set_summary(self, text: str) -> None:
        """The summary of the model picked now; "" when the model changed (none known yet)."""
        self.summary.setPlainText(text)
