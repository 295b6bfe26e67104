"""The curves' key above the plots: what each line and marker is, and the best epoch.

It sits outside the plots, so it never hides a curve. The best epoch's dashed line and
star are drawn on every metric plot; which epoch that was and its monitored value are
said here, once: a label on the line sat on the curves (issue 30). The key wraps in a
narrow window instead of running past its edge.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from mgpu_gui.gui.theme import PlotColors


class CurveKey(QLabel):
    """The key's entries, each in its curve's colour; `set_best` names the best epoch."""

    def __init__(self, colors: PlotColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Curve key")
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self._colors = colors
        self._best = ""
        self._update()

    def set_colors(self, colors: PlotColors) -> None:
        self._colors = colors
        self._update()

    def set_best(self, text: str) -> None:
        """The best epoch in words ("epoch 7, val_loss 0.2431"); "": none yet."""
        if text != self._best:
            self._best = text
            self._update()

    def best(self) -> str:
        return self._best

    def _update(self) -> None:
        colors = self._colors
        entries = ((colors.train, "━ train (smoothed; raw faint)"),
                   (colors.train, "┄● train (epoch)"), (colors.val, "━● validation"),
                   (colors.best, f"★ best: {self._best}" if self._best else "★ best epoch"))
        # Lines break between entries only (the spaces inside are non-breaking).
        self.setText(" &nbsp;".join(
            f'<span style="color:{color}">{text.replace(" ", "&nbsp;")}</span>'
            for color, text in entries))
