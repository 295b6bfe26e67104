"""The run history's table view and the search bar over it.

Columns fit their contents, and keep their widths while a live run's row changes
(a status column as wide as its widest state, no shrinking while the same runs are
shown; issue 30, finding 7: "Mode" and "d…o" as a run went on); names, tags and
paths share the width the other columns leave, so the whole row fits where it can,
and are elided in the middle when it is short (a path keeps its file name), with
the whole text in their tooltips. The search bar takes the search language of
core/runs/search.py and says how many runs it lets through.
"""

from __future__ import annotations

from PySide6.QtCore import (
    QEvent,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QToolButton,
    QWidget,
)

from mgpu_gui.core.runs.search import RunQuery
from mgpu_gui.gui.widgets.runs_table import PATH_COLUMNS, WIDEST_ROLE, Column

# Names get at least this many average characters, tags, model and data paths fewer:
# at 1280x720 all ten columns then fit the Runs tab (the elided rest is in the tooltips).
FLOOR_CHARS = {Column.NAME: 10, Column.TAGS: 6, Column.MODEL: 6, Column.DATA: 6}
FIT_ROWS = 50  # rows measured for the column widths besides the visible ones (~0.5 ms a row)
SEARCH_HELP = ("Show only the runs that match: tag:NAME (has that tag), status:failed (or "
               "completed, stopped, …; several: any of them), name:, model:, data:, note: "
               "(text in that field), and plain words, found in names, model and data paths, "
               "notes and tags. Quotes keep spaces: note:\"lr sweep\". Ctrl+F comes here.")


class RunsSearchBar(QWidget):
    """A search box and, while it narrows the table, how many runs it shows."""

    query_changed = Signal(object)  # RunQuery

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.edit = QLineEdit()
        self.edit.setAccessibleName("Search runs")
        self.edit.setPlaceholderText("Search: tag:baseline status:failed model:… or any words "
                                     "in names, paths, notes")
        self.edit.setToolTip(SEARCH_HELP)
        self.edit.setClearButtonEnabled(True)
        for button in self.edit.findChildren(QToolButton):  # Qt's clear button: named
            button.setAccessibleName("Clear the search")
        self.edit.textChanged.connect(lambda text: self.query_changed.emit(RunQuery.parse(text)))
        self.matches = QLabel()
        self.matches.setAccessibleName("Runs shown")
        self.matches.hide()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.matches)

    def show_counts(self, shown: int, total: int) -> None:
        """No history, no search; the count only while the search hides runs or might."""
        self.setVisible(bool(total or self.edit.text()))
        self.matches.setText(f"{shown} of {total} run{'s' if total != 1 else ''}")
        self.matches.setVisible(bool(RunQuery.parse(self.edit.text())) and bool(total))


class _ElideRight(QStyledItemDelegate):
    """Tags read from the start: the first tags whole, not both ends cut as paths are."""

    def initStyleOption(self, option: QStyleOptionViewItem,  # noqa: N802 (Qt's name)
                        index: QModelIndex | QPersistentModelIndex) -> None:
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideRight


class _SizedForWidest(QStyledItemDelegate):
    """Measured on the widest text the cell may come to show (the model's WIDEST_ROLE),
    painted with what it shows: "Running" is measured as "Early stopped", "3/60" as
    "60/60"."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._sizing = False

    def initStyleOption(self, option: QStyleOptionViewItem,  # noqa: N802 (Qt's name)
                        index: QModelIndex | QPersistentModelIndex) -> None:
        super().initStyleOption(option, index)
        if self._sizing:
            texts = index.data(WIDEST_ROLE) or [option.text]
            option.text = max(texts, key=option.fontMetrics.horizontalAdvance)

    def sizeHint(self, option: QStyleOptionViewItem,  # noqa: N802 (Qt's name)
                 index: QModelIndex | QPersistentModelIndex):
        self._sizing = True
        try:
            return super().sizeHint(option, index)
        finally:
            self._sizing = False


class RunsTableView(QTableView):
    """Rows of runs, several selectable, sorted newest first until the user sorts."""

    def __init__(self, model: QSortFilterProxyModel, parent: QWidget | None = None):
        super().__init__(parent)
        self._wanted: dict[Column, int] = {}  # each column's contents, measured on changes
        self._widths: dict[Column, int] = {}  # as last fitted; a user's drag stands till then
        self.setAccessibleName("Run history")
        self.setToolTip("Past and running runs; select one or more (Ctrl/Shift-click)")
        self.setModel(model)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setSortingEnabled(True)
        self.sortByColumn(Column.STARTED, Qt.SortOrder.DescendingOrder)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a path keeps its file name
        self.setShowGrid(False)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.verticalHeader().hide()
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        header = self.horizontalHeader()
        header.setHighlightSections(False)
        header.setResizeContentsPrecision(FIT_ROWS)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        self.setItemDelegateForColumn(Column.TAGS, _ElideRight(self))
        widest = _SizedForWidest(self)
        for column in (Column.STATUS, Column.EPOCHS):
            self.setItemDelegateForColumn(column, widest)
        self._measured_rows: tuple[int, ...] = ()  # the run ids the widths were measured on

    def measure_columns(self, *, changed: bool) -> None:
        """What each column's contents need, when rows changed (measuring is the costly
        part: the model is asked for every role of every measured cell)."""
        if not changed and self._wanted:
            return
        header = self.horizontalHeader()
        wanted = {c: max(self.sizeHintForColumn(c), header.sectionSizeHint(c)) for c in Column}
        rows = tuple(r.id for r in self.model().sourceModel().records)
        if rows == self._measured_rows:  # the same runs, a live one's row changed: no shrinking
            wanted = {c: max(width, self._wanted.get(c, 0)) for c, width in wanted.items()}
        self._wanted, self._measured_rows = wanted, rows
        self._fit_columns()

    def _fit_columns(self) -> None:
        """Every column as wide as its contents ("Completed", "2 CPU replicas" whole, as
        rows change); names and paths share what the others leave in proportion to
        their lengths, down to a floor, elided in the middle below their contents. Past
        the floors the table scrolls sideways. Sections are set only when the fitted
        widths change, so a user's drag stands until then."""
        header, wanted = self.horizontalHeader(), self._wanted
        if not wanted:
            return
        char = self.fontMetrics().averageCharWidth()
        # A floor never cuts the column's title ("Mode" for Model); the room Qt keeps in
        # every title for the sort arrow is left out: an unsorted column shows none.
        margin = 2 * self.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin, None, header)
        base = {c: min(wanted[c], max(char * FLOOR_CHARS[c], margin + header.fontMetrics(
            ).horizontalAdvance(str(self.model().headerData(c, Qt.Orientation.Horizontal)))))
                for c in PATH_COLUMNS}
        room = self.viewport().width() - sum(base.values()) - sum(
            width for c, width in wanted.items() if c not in PATH_COLUMNS)
        more = sum(wanted[c] - base[c] for c in PATH_COLUMNS)
        scale = min(1.0, max(room, 0) / more) if more else 0.0
        widths = wanted | {c: base[c] + int((wanted[c] - base[c]) * scale)
                           for c in PATH_COLUMNS}
        if widths != self._widths:
            self._widths = widths
            for column, width in widths.items():
                header.resizeSection(column, width)

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Resize:  # its width: refit the columns
            self._fit_columns()
        return super().viewportEvent(event)
