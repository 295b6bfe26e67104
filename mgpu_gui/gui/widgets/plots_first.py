"""The curves, the progress and the tabs (log, runs, queue) stacked, the plots served first.

On a laptop screen (1280x720 at 125 %: 1024x576 logical) the tabs' own minimum (their
largest page's, the Runs tab's) took 193 px and the plots got 80 px each. Here the tabs can
fold to their bar: they start folded where opening them would leave the plots less than
their readable height, at a few lines where it would not. A click on a tab of the folded
bar (or the app showing a tab) opens them to a third of the height (at least what their
pages need), a click on the open current tab folds them, and a drag sets any size. The
user's sizes are kept with the window's (`save_state`/`restore_state`).

Opened to a third at 1280x720 at 125 %, the tabs squeezed the plots to 65 px and still
showed only 5 rows of the Runs table. So where opening would take the plots under their
readable height, a tab opens expanded: over the whole column, the curves and
progress hidden (20 rows there); the corner button does the same at any height. A click
on the current tab, the button again, or the curves being wanted (`expand(False)`: a run
starts, a past run is shown) brings the curves back as they were.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QByteArray, QSignalBlocker, Qt
from PySide6.QtWidgets import QSplitter, QTabWidget, QToolButton, QWidget

TABS_HEIGHT = 180  # the tabs' first height where the plots keep their readable height
OPEN_SHARE = 3  # a click on a folded tab opens them to 1/OPEN_SHARE of the height


class PlotsFirstSplitter(QSplitter):
    def __init__(self, plots: QWidget, progress: QWidget, tabs: QTabWidget,
                 plots_need: Callable[[], int], parent: QWidget | None = None):
        """`plots_need()`: the height under which the plots are no longer readable."""
        super().__init__(Qt.Orientation.Vertical, parent)
        self.tabs = tabs
        self._plots_need = plots_need
        for widget in (plots, progress, tabs):
            self.addWidget(widget)
        self.setStretchFactor(0, 1)
        # No drag hides the plots or the progress bars; the tabs fold to their bar, no less.
        self.setChildrenCollapsible(False)
        tabs.setMinimumHeight(self.folded_height())
        self.setHandleWidth(max(self.handleWidth(), 7))  # a wide line, easy to find
        self.setObjectName("lowerSplitter")
        self.setStyleSheet("#lowerSplitter::handle { background: palette(mid); margin: 2px 0; }")
        self._placed = False  # the first sizes wait for the first show (or a restored state)
        # Open when a tab is clicked or shown by the app; a click on the open current tab
        # folds them again.
        tabs.tabBarClicked.connect(self._clicked)
        tabs.currentChanged.connect(self._open)
        self.expand_button = QToolButton(text="Expand", checkable=True)
        self.expand_button.setToolTip("The tabs over the whole height, the curves hidden "
                                      "until Restore, a run's start or a run shown")
        self.expand_button.toggled.connect(self.expand)
        tabs.setCornerWidget(self.expand_button, Qt.Corner.TopRightCorner)
        self._expanded = False
        self._sizes_before_expanding: list[int] = []

    def folded_height(self) -> int:
        return self.tabs.tabBar().sizeHint().height() + 2

    def is_folded(self) -> bool:
        return self.sizes()[2] <= self.folded_height() + 4

    def restore_state(self, state: object) -> None:
        if isinstance(state, QByteArray) and self.restoreState(state):
            self._placed = True

    def save_state(self) -> QByteArray:
        self.expand(False)  # the window opens with its curves
        return self.saveState()

    def is_expanded(self) -> bool:
        return self._expanded

    def expand(self, on: bool) -> None:
        """The tabs over the whole column (`on`), or the curves and progress back."""
        if on == self._expanded:
            return
        self._expanded = on
        if on:
            self._sizes_before_expanding = self.sizes()
        with QSignalBlocker(self.expand_button):
            self.expand_button.setChecked(on)
        self.expand_button.setText("Restore" if on else "Expand")
        for index in (0, 1):
            self.widget(index).setVisible(not on)
        if not on:
            self.setSizes(self._sizes_before_expanding)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if not self._placed:
            self._placed = True
            self.setSizes(self._first_sizes(self.height()))

    def _first_sizes(self, height: int) -> list[int]:
        room = height - 2 * self.handleWidth() - self.widget(1).sizeHint().height()
        tabs = max(TABS_HEIGHT, self.tabs.minimumSizeHint().height())
        if room - tabs < self._plots_need():
            tabs = self.folded_height()
        return [max(room - tabs, 0), self.widget(1).sizeHint().height(), tabs]

    def fold(self) -> None:
        sizes = self.sizes()
        folded = self.folded_height()
        self.setSizes([sizes[0] + sizes[2] - folded, sizes[1], folded])

    def _clicked(self, index: int) -> None:
        if index != self.tabs.currentIndex():
            return  # `currentChanged` opens them
        if self.is_expanded():
            self.expand(False)
        elif not self.is_folded():
            self.fold()
        else:
            self._open(index)

    def _open(self, index: int) -> None:
        if index < 0 or not self._placed or not self.is_folded() or self.is_expanded():
            return
        sizes = self.sizes()
        opened = max(sum(sizes) // OPEN_SHARE, self.tabs.minimumSizeHint().height())
        plots = sizes[0] - opened + sizes[2]
        if plots < self._plots_need():
            self.expand(True)  # no room for both on this screen: one at a time
        else:
            self.setSizes([plots, sizes[1], opened])
