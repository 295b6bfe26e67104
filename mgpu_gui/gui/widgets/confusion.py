"""The confusion matrix as a table: counts or row shares, each cell shaded by its row share.

Rows are true classes and columns predicted ones, headed by the class names, as
`mgpu-train evaluate` prints them. Shading by the row share (not the count) lets
a small class's mistakes show as clearly as a large one's.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from mgpu_gui.core.evaluation.metrics import ClassifierMetrics

Index = QModelIndex | QPersistentModelIndex
STRETCH_CLASSES = 30


class CellText(StrEnum):
    COUNTS = "Counts"
    ROW_SHARE = "Row %"


class ConfusionModel(QAbstractTableModel):
    def __init__(self, metrics: ClassifierMetrics, palette: QPalette):
        super().__init__()
        self.metrics = metrics
        self.counts = np.asarray(metrics.confusion_matrix)
        self.shares = metrics.normalised()
        self.text = CellText.COUNTS
        self._base = palette.color(QPalette.ColorRole.Base)
        self._high = palette.color(QPalette.ColorRole.Highlight)
        self._light_text = palette.color(QPalette.ColorRole.HighlightedText)

    def set_text(self, text: CellText) -> None:
        self.text = text
        self.dataChanged.emit(self.index(0, 0),
                              self.index(self.rowCount() - 1, self.columnCount() - 1))

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 (Qt's signature)
        return 0 if parent.isValid() else len(self.counts)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.counts)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        true, predicted = index.row(), index.column()
        share = float(self.shares[true, predicted])
        if role == Qt.ItemDataRole.DisplayRole:
            if self.text is CellText.COUNTS:
                return str(int(self.counts[true, predicted]))
            return f"{share:.0%}"
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(Qt.AlignmentFlag.AlignCenter)
        if role == Qt.ItemDataRole.BackgroundRole:
            return _blend(self._base, self._high, share)
        if role == Qt.ItemDataRole.ForegroundRole and share > 0.5:
            return self._light_text
        if role == Qt.ItemDataRole.ToolTipRole:
            names = self.metrics.class_names
            return (f"True {names[true]}, predicted {names[predicted]}: "
                    f"{int(self.counts[true, predicted])} sample(s), {share:.1%} of "
                    f"{names[true]}. Click to list them.")
        return None

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if role == Qt.ItemDataRole.DisplayRole:
            return self.metrics.class_names[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            side = "True" if orientation == Qt.Orientation.Vertical else "Predicted"
            return f"{side} class {section}: {self.metrics.class_names[section]}"
        return None


class ConfusionView(QTableView):
    """Rows: true class; columns: predicted class; a click selects one cell."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Confusion matrix: rows are true classes, columns predicted")
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectItems)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)

    def setModel(self, model) -> None:  # noqa: N802 (Qt's name)
        """Up to STRETCH_CLASSES the cells share the view's room; beyond, they fit their
        text and the view scrolls."""
        super().setModel(model)
        mode = (QHeaderView.ResizeMode.Stretch if model.rowCount() <= STRETCH_CLASSES
                else QHeaderView.ResizeMode.ResizeToContents)
        for header in (self.horizontalHeader(), self.verticalHeader()):
            header.setSectionResizeMode(mode)


def _blend(low: QColor, high: QColor, amount: float) -> QColor:
    # A floor of 15 % makes any non-zero cell visibly shaded.
    amount = 0.0 if amount <= 0 else 0.15 + 0.85 * min(amount, 1.0)
    return QColor.fromRgbF(*(a + (b - a) * amount for a, b in zip(
        low.getRgbF()[:3], high.getRgbF()[:3], strict=True)))
