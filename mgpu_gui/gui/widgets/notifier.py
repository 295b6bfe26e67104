"""Short notices for things that end while the user looks elsewhere: one way to say them.

Every source (an export, a queued run starting, a run ending) hands a `Notice` to
the window's one `Notifier`, which says it in the status bar and in a toast over
the plots' lower right corner (the window's, when the plots are dragged away) that
fades after a few seconds. The toast takes neither focus nor clicks (they reach
what lies under it), and it sits far from the toolbar, so it never covers Train; one
that offers an action (View evaluation) takes the clicks on its button, and stays longer.
Other sinks listen to `Notifier.noticed` and hear the same notices: desktop
notifications (gui/desktop_notify.py) take those marked `alert`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from PySide6.QtCore import (
    QEasingCurve,
    QEvent,
    QObject,
    QPauseAnimation,
    QPoint,
    QPropertyAnimation,
    QSequentialAnimationGroup,
    Qt,
    Signal,
)
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsOpacityEffect,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

SHOW_MS = 5_000  # long enough to read two lines
FAILED_SHOW_MS = 9_000  # a failure also stays in the banner; the toast points at it
FADE_MS = 700
TOAST_WIDTH = 380
MARGIN = 12


class NoticeKind(StrEnum):
    DONE = "done"  # finished well: an export written, a run completed
    INFO = "info"  # began or ended as asked: a queued run started, a run stopped
    FAILED = "failed"


KIND_COLOR = {NoticeKind.DONE: "#2e7d32", NoticeKind.INFO: "#1565c0",
              NoticeKind.FAILED: "#c62828"}


@dataclass(frozen=True)
class Notice:
    kind: NoticeKind
    title: str
    text: str = ""
    alert: bool = False  # a run's end: also said on the desktop while the window is behind
    action: str = ""  # the label of the toast's one button; its callback goes to `notify`

    @property
    def line(self) -> str:
        """The notice on one line (the status bar)."""
        return f"{self.title}: {self.text}" if self.text else self.title


def elide_long_words(text: str, metrics: QFontMetrics, width: int) -> str:
    """`text` with each word wider than `width` (a path) elided in the middle, so a word
    wrapped label shows its start and its end instead of cutting it off."""
    return " ".join(
        metrics.elidedText(word, Qt.TextElideMode.ElideMiddle, width)
        if metrics.horizontalAdvance(word) > width else word for word in text.split(" "))


class Toast(QFrame):
    """A notice over the lower right corner of `anchor` (else of the window's central
    area); fades, takes no focus and no clicks."""

    def __init__(self, window: QMainWindow, anchor: QWidget | None = None):
        super().__init__(window)
        self.host = window
        self.anchor = anchor
        self.setObjectName("toast")
        self.setAccessibleName("Notice")
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setFixedWidth(TOAST_WIDTH)
        self.title = QLabel()
        self.title.setStyleSheet("font-weight: bold;")
        self.text = QLabel(wordWrap=True)
        self.button = QPushButton()
        self.button.setAccessibleName("The notice's action")
        self.button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.button.clicked.connect(self._act)
        self._on_action: Callable[[], object] | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 8)
        layout.setSpacing(2)
        layout.addWidget(self.title)
        layout.addWidget(self.text)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignRight)
        self.kind = NoticeKind.INFO
        self._opacity = QGraphicsOpacityEffect(self)
        self.setGraphicsEffect(self._opacity)
        self._pause = QPauseAnimation(SHOW_MS, self)
        fade = QPropertyAnimation(self._opacity, b"opacity", self)
        fade.setDuration(FADE_MS)
        fade.setStartValue(1.0)
        fade.setEndValue(0.0)
        fade.setEasingCurve(QEasingCurve.Type.InQuad)
        self._life = QSequentialAnimationGroup(self)
        self._life.addAnimation(self._pause)
        self._life.addAnimation(fade)
        self._life.finished.connect(self.hide)
        for watched in (window, anchor):  # follow their sizes
            if watched is not None:
                watched.installEventFilter(self)
        self.hide()

    def show_notice(self, notice: Notice, on_action: Callable[[], object] | None = None
                    ) -> None:
        """Show `notice` (replacing the one shown) and start its fade; its button, when it
        offers an action, calls `on_action` and dismisses it."""
        self._life.stop()
        acts = bool(notice.action) and on_action is not None
        self._on_action = on_action if acts else None
        self.button.setText(notice.action)
        self.button.setVisible(acts)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, not acts)
        self.kind = notice.kind
        self.setStyleSheet(
            f"#toast {{ background: palette(base); border: 1px solid palette(mid); "
            f"border-left: 5px solid {KIND_COLOR[notice.kind]}; border-radius: 4px; }} "
            f"#toast QLabel {{ color: palette(text); }}")
        self.title.setText(notice.title)
        inner = TOAST_WIDTH - 30
        self.text.setText(elide_long_words(notice.text, self.text.fontMetrics(), inner))
        self.text.setVisible(bool(notice.text))
        self.setAccessibleDescription(notice.line)
        self._opacity.setOpacity(1.0)
        self._pause.setDuration(FAILED_SHOW_MS if notice.kind is NoticeKind.FAILED or acts
                                else SHOW_MS)
        self.adjustSize()
        self._place()
        self.show()
        self.raise_()
        self._life.start()

    def dismiss(self) -> None:
        self._life.stop()
        self.hide()

    def _act(self) -> None:
        act, self._on_action = self._on_action, None
        self.dismiss()
        if act is not None:
            act()

    def is_fading(self) -> bool:
        return self._life.state() is QSequentialAnimationGroup.State.Running

    def _place(self) -> None:
        """Where the eye is and the hand is not: the plots' lower right corner, or the
        central area's when the plots are too small for it; never the toolbar."""
        anchor = self.anchor
        if anchor is None or not anchor.isVisible() or anchor.height() < (
                self.height() + 2 * MARGIN):
            anchor = self.host.centralWidget() or self.host
        corner = anchor.mapTo(self.host, QPoint(anchor.width(), anchor.height()))
        self.move(corner.x() - self.width() - MARGIN, corner.y() - self.height() - MARGIN)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Resize and self.isVisible():
            self._place()
        return super().eventFilter(watched, event)


class Notifier(QObject):
    """The window's one way to say that something finished; see the module's docstring."""

    noticed = Signal(object)  # every Notice, for other sinks (desktop notifications)

    def __init__(self, window: QMainWindow, anchor: QWidget | None = None):
        super().__init__(window)
        self.host = window
        self.toast = Toast(window, anchor)
        self.last: Notice | None = None

    def notify(self, notice: Notice, on_action: Callable[[], object] | None = None) -> None:
        self.last = notice
        self.host.statusBar().showMessage(notice.line)
        self.toast.show_notice(notice, on_action)
        self.noticed.emit(notice)

    def withdraw(self, notice: Notice) -> None:
        """`notice` is no longer true (a queued run's start, once the run has ended): off the
        status bar, where it would stay, unless something else has been said since."""
        bar = self.host.statusBar()
        if bar.currentMessage() == notice.line:
            bar.clearMessage()

    def shutdown(self) -> None:
        """For the window's close: no fade left running."""
        self.toast.dismiss()


def window_notifier(widget: QWidget) -> Notifier | None:
    """The notifier of `widget`'s window, or of the window that opened its dialog."""
    window: QWidget | None = widget.window()
    while window is not None:
        found = window.findChild(Notifier, "", Qt.FindChildOption.FindDirectChildrenOnly)
        if found is not None:
            return found
        opener = window.parentWidget()
        window = opener.window() if opener is not None else None
    return None


def notify_from(widget: QWidget, notice: Notice) -> None:
    """Say `notice` in the notifier of `widget`'s window; a dialog with no window behind
    it (opened on its own) still shows a failure, in a message box."""
    notifier = window_notifier(widget)
    if notifier is not None:
        notifier.notify(notice)
    elif notice.kind is NoticeKind.FAILED:
        QMessageBox.warning(widget.window(), notice.title, notice.text)
