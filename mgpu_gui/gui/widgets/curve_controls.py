"""The row above the curves: smoothing, log scale, x axis and the curves' key; and how
tall the curves must be to stay readable.

Plain Qt, no pyqtgraph: the window shows this row at its first paint, with the room the
plots will take under it, and builds the plots right after (gui/panels/curves_slot.py).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QSlider, QWidget

from mgpu_gui.core.series import XAxis
from mgpu_gui.gui.theme import PlotColors
from mgpu_gui.gui.widgets.curve_key import CurveKey

SMOOTHING = 0.6
READABLE_DATA_PX = 120  # of data height per plot: less, and the tabs start folded
AXIS_ROW_PX = 44  # a plot's x axis (ticks and title) and the grid's spacing


class CurveControls(QWidget):
    """What the user sets about the curves, said by signal; `key` names the lines."""

    smoothing_changed = Signal(float)
    log_y_changed = Signal(bool)
    x_axis_changed = Signal(object)  # XAxis

    def __init__(self, colors: PlotColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 6, 0)  # the right-aligned key keeps off the window's edge
        row.addWidget(QLabel("Smoothing"))
        self.smoothing_slider = slider = QSlider(Qt.Orientation.Horizontal)
        slider.setRange(0, 99)
        slider.setValue(round(SMOOTHING * 100))
        slider.setMaximumWidth(160)
        # In characters, not pixels: stays usable when the row is crowded, at any font size.
        slider.setMinimumWidth(slider.fontMetrics().horizontalAdvance("0") * 8)
        slider.setAccessibleName("Smoothing")
        slider.setToolTip("Exponential moving average of the per-batch train curve; "
                          "the raw curve stays visible, faint")
        slider.valueChanged.connect(self._smoothing_moved)
        row.addWidget(slider)
        self.smoothing_label = QLabel(f"{SMOOTHING:.2f}")
        self.smoothing_label.setMinimumWidth(32)
        row.addWidget(self.smoothing_label)
        row.addSpacing(12)
        self.log_check = QCheckBox("Log scale")
        self.log_check.setToolTip("Logarithmic y axis on the metric plots; values <= 0 "
                                  "are left out")
        self.log_check.toggled.connect(self.log_y_changed)
        row.addWidget(self.log_check)
        row.addSpacing(12)
        row.addWidget(QLabel("X axis"))
        self.x_combo = QComboBox()
        self.x_combo.addItems(["Epoch", "Step", "Wall time"])
        self.x_combo.setAccessibleName("X axis")
        self.x_combo.currentIndexChanged.connect(
            lambda index: self.x_axis_changed.emit(list(XAxis)[index]))
        row.addWidget(self.x_combo)
        self.key = CurveKey(colors)
        row.addWidget(self.key, 1)

    def set_smoothing(self, weight: float) -> None:
        self.smoothing_slider.setValue(round(weight * 100))

    def set_log_y(self, on: bool) -> None:
        self.log_check.setChecked(on)

    def set_x_axis(self, mode: XAxis | str) -> None:
        self.x_combo.setCurrentIndex(list(XAxis).index(XAxis(mode)))

    def readable_height(self, rows: int) -> int:
        """The height under which `rows` rows of plots under this row would show less than
        READABLE_DATA_PX of data each (titles folded, rows equal)."""
        return self.sizeHint().height() + rows * (READABLE_DATA_PX + AXIS_ROW_PX)

    def _smoothing_moved(self, value: int) -> None:
        self.smoothing_label.setText(f"{value / 100:.2f}")
        self.smoothing_changed.emit(value / 100)
