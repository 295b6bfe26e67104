"""The curves' place in the window, filled once the window has painted its GPUs.

The curves panel is pyqtgraph and five plots: its import and build took 0.4 s of a 1.1 s
start (process start to the first painted window, two cores; issue 30, finding 11). The
window paints with the row above the curves (plain Qt) and the plots' room under it; the
main window has the panel built once it has painted its GPUs, or at once when anything
asks for it (`panel()`: a run's first event, a past run's curves, a test), in the same
place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QVBoxLayout, QWidget

from mgpu_gui.gui.theme import plot_colors
from mgpu_gui.gui.widgets.curve_controls import CurveControls

if TYPE_CHECKING:
    from mgpu_gui.gui.panels.curves import CurvesPanel

FIRST_ROWS = 2  # the plot rows a new panel shows: loss and accuracy, then lr and the rest


class CurvesSlot(QWidget):
    """Holds the controls row until the CurvesPanel (built on demand) takes it over."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Training curves")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self.controls = CurveControls(plot_colors(self.palette()))
        self._layout.addWidget(self.controls)
        self._layout.addStretch(1)
        self._panel: CurvesPanel | None = None

    def panel(self) -> CurvesPanel:
        if self._panel is None:
            from mgpu_gui.gui.panels.curves import CurvesPanel

            self._layout.takeAt(1)  # the stretch: the panel fills the slot
            self._panel = CurvesPanel(controls=self.controls)
            self._layout.addWidget(self._panel)
            if self.isVisible():  # shown and in place at once, for whoever asked
                self._panel.show()
                self._layout.activate()
        return self._panel

    def is_built(self) -> bool:
        return self._panel is not None

    def readable_height(self) -> int:
        """What the plots need to stay readable (the splitter's first sizes ask at the first
        show): the panel's, or as it will be (its first rows under the same row)."""
        if self._panel is not None:
            return self._panel.readable_height()
        return self.controls.readable_height(FIRST_ROWS)

