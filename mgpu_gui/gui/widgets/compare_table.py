"""The Compare dialog's table: one row per run, sortable by any column.

The cells come from core/runs/compare.py's `comparison_table`; this model
only shows them. A column sorts by the cell's key (numbers as numbers), runs
without a value last in either order. Marked cells (the best value of a "best"
column, an environment fact unlike most runs') are bold and tinted; a column
whose values differ has a bold header when all settings are shown.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from mgpu_gui.core.runs.compare import Cell, ColumnKind, ComparisonTable

KEY_ROLE = Qt.ItemDataRole.UserRole + 1
MARK_TINT = (230, 159, 0, 70)  # Okabe-Ito orange, see-through: readable on light and dark
_HEADER_TIPS = {
    ColumnKind.RUN: "The run's name",
    ColumnKind.SETTING: "A setting of the run",
    ColumnKind.BEST: "The run's best value of this metric (bold: the best of these runs)",
    ColumnKind.FINAL: "The metric at the run's last epoch",
    ColumnKind.ENVIRONMENT: "The run's environment record (tinted: unlike most of these runs)",
}

Index = QModelIndex | QPersistentModelIndex


class ComparisonModel(QAbstractTableModel):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.table = ComparisonTable((), ())
        self.highlight_differences = False

    def set_table(self, table: ComparisonTable, *, highlight_differences: bool) -> None:
        self.beginResetModel()
        self.table = table
        self.highlight_differences = highlight_differences
        self.endResetModel()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008 (Qt's)
        return 0 if parent.isValid() else len(self.table.cells)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008 (Qt's)
        return 0 if parent.isValid() else len(self.table.columns)

    def cell(self, row: int, column: int) -> Cell:
        return self.table.cells[row][column]

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        cell = self.cell(index.row(), index.column())
        if role == Qt.ItemDataRole.DisplayRole:
            return cell.text
        if role == Qt.ItemDataRole.ToolTipRole:
            return cell.tip or None
        if role == KEY_ROLE:
            return cell.key
        if role == Qt.ItemDataRole.TextAlignmentRole and isinstance(cell.key, float):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if cell.mark and role == Qt.ItemDataRole.FontRole:
            font = QFont()
            font.setBold(True)
            return font
        if cell.mark and role == Qt.ItemDataRole.BackgroundRole:
            return QBrush(QColor(*MARK_TINT))
        return None

    def header_tip(self, section: int) -> str:
        """A column's tooltip (the Sweep view's table words its own)."""
        column = self.table.columns[section]
        return _HEADER_TIPS[column.kind] + (
            "; it differs between these runs" if column.differs else "")

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802 (Qt's)
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation is not Qt.Orientation.Horizontal:
            return None
        column = self.table.columns[section]
        if role == Qt.ItemDataRole.DisplayRole:
            return column.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return self.header_tip(section)
        if role == Qt.ItemDataRole.FontRole and self.highlight_differences and column.differs:
            font = QFont()
            font.setBold(True)
            return font
        return None


class ComparisonSort(QSortFilterProxyModel):
    """Numbers as numbers, text as text; a run without a value after the others."""

    def lessThan(self, left: Index, right: Index) -> bool:  # noqa: N802 (Qt's name)
        a, b = left.data(KEY_ROLE), right.data(KEY_ROLE)
        if a is None and b is None:
            return False
        if a is None or b is None:
            # Missing last in both orders: Qt reverses lessThan for a descending sort.
            descending = self.sortOrder() is Qt.SortOrder.DescendingOrder
            return (b is None and a is not None) != descending
        if isinstance(a, float) and isinstance(b, float):
            return a < b
        return str(a).casefold() < str(b).casefold()


def comparison_view(model: ComparisonModel) -> QTableView:
    proxy = ComparisonSort(model)
    proxy.setSourceModel(model)
    view = QTableView()
    view.setModel(proxy)
    view.setAccessibleName("Compared runs")
    view.setSortingEnabled(True)
    view.sortByColumn(-1, Qt.SortOrder.AscendingOrder)  # the runs' own order until asked
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    rows = view.verticalHeader()
    rows.setVisible(False)
    rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)  # one line each: more runs show
    rows.setDefaultSectionSize(view.fontMetrics().height() + 8)
    view.setWordWrap(False)
    view.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
    header = view.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setStretchLastSection(True)
    return view
