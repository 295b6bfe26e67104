"""The run history as a table model: one row per stored run, in words a person reads.

Status has a label and a colour (a coloured dot, so it does not rest on colour
alone); sorting uses raw values (times, fractions), not the displayed text.
A run's name is followed by the settings that set it apart from the run before it
of that name ("demo  lr=0.01": core/runs/run_differences.py). Model and data are
shown as paths (home as ~), so two runs of "model.keras" on
different data tell apart; the view elides them in the middle, keeping the file
name, and their tooltips hold the whole path. A run's tags have a column; its
note, free text of any length, is in the tooltips of its name and tags. Its folder's
size (measured with the rows, off the GUI thread) has a column, by kind in its tooltip.
`RunsFilter` keeps the rows a search (core/runs/search.py) matches.
"""

from __future__ import annotations

import re
import time
from enum import IntEnum
from pathlib import Path

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QBrush, QColor, QGuiApplication, QIcon, QPainter, QPalette, QPixmap

from mgpu_gui.core.config import DEMO
from mgpu_gui.core.eventtext import best_text as best_of
from mgpu_gui.core.runs.checkpoints import format_bytes
from mgpu_gui.core.runs.disk import RunSize
from mgpu_gui.core.runs.folder import folder_label
from mgpu_gui.core.runs.run_differences import RunDifference
from mgpu_gui.core.runs.search import RunQuery
from mgpu_gui.core.runs.store import RunRecord, RunState
from mgpu_gui.gui.theme import on_background

STATUS_TEXT = {
    RunState.RUNNING: ("Running", "#1565c0"),
    RunState.COMPLETED: ("Completed", "#2e7d32"),
    RunState.EARLY_STOPPED: ("Early stopped", "#00796b"),
    RunState.STOPPED: ("Stopped", "#b45309"),
    RunState.FAILED: ("Failed", "#c62828"),
    RunState.INTERRUPTED: ("Interrupted", "#8e24aa"),
}


class Column(IntEnum):
    STATUS = 0
    STARTED = 1
    NAME = 2
    TAGS = 3
    MODEL = 4
    DATA = 5
    DEVICES = 6
    EPOCHS = 7
    BEST = 8
    SIZE = 9


COLUMNS = tuple(column.name.capitalize() for column in Column)
# They share the width the others leave, elided in the middle, whole in their tooltips.
PATH_COLUMNS = (Column.NAME, Column.TAGS, Column.MODEL, Column.DATA)
SORT_ROLE = Qt.ItemDataRole.UserRole
ID_ROLE = Qt.ItemDataRole.UserRole + 1
# Every text a cell may come to show while its run lives: its column is sized for the
# widest, so a live row's changes do not shift the others (issue 30, finding 7).
WIDEST_ROLE = Qt.ItemDataRole.UserRole + 2
_GPU_NAME = re.compile(r"^GPU (\d+(?: MIG \d+)?)")
MISSING = "#888888"
_SIZE_ROLES = (Qt.ItemDataRole.DisplayRole, SORT_ROLE, Qt.ItemDataRole.ToolTipRole,
               Qt.ItemDataRole.TextAlignmentRole)


def short_name(record: RunRecord) -> str:
    return folder_label(record.name)


def path_text(path: str, demo: str) -> str:
    """A model or data path as a person reads it: the home folder as ~; `demo` for the
    bundled one."""
    if path == DEMO:
        return demo
    home = str(Path.home())
    if path == home or path.startswith(home.rstrip("/") + "/"):
        return "~" + path[len(home.rstrip("/")):]
    return path


def devices_text(record: RunRecord) -> str:
    n = record.replicas
    if not n:
        return "–"
    if record.device_kind != "gpu":
        return f"{n} CPU replica{'s' if n != 1 else ''}"
    indexes = [m.group(1) for m in map(_GPU_NAME.match, record.devices) if m]
    if indexes and len(indexes) == n:
        return ("GPU " if n == 1 else "GPUs ") + index_ranges(indexes)
    return f"{n} GPU{'s' if n != 1 else ''}"


def index_ranges(indexes: list[str]) -> str:
    """'0,1,2,3,6' -> '0-3,6': eight GPUs fit in a narrow column."""
    if not all(i.isdigit() for i in indexes):
        return ",".join(indexes)  # MIG instances: as NVML names them
    numbers = sorted(int(i) for i in indexes)
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ",".join(f"{a}" if a == b else f"{a},{b}" if b == a + 1 else f"{a}-{b}"
                    for a, b in spans)


def best_text(record: RunRecord) -> str:
    return best_of(record.best_metric, record.best_value, record.best_epoch) or "–"


def started_text(record: RunRecord, now: float | None = None) -> str:
    """'today 14:02', 'Mar 03 09:15' (this year), else '2024-12-30'; the tooltip has all."""
    when = time.localtime(record.started or record.created)
    today = time.localtime(now)
    if when[:3] == today[:3]:
        return time.strftime("today %H:%M", when)
    if when.tm_year == today.tm_year:
        return time.strftime("%b %d %H:%M", when)
    return time.strftime("%Y-%m-%d", when)


def _status_icon(color: str) -> QIcon:
    """A 12-pixel dot, drawn at 1x, 2x and 3x so it is crisp on high-DPI screens."""
    icon = QIcon()
    for scale in (1, 2, 3):
        pixmap = QPixmap(12 * scale, 12 * scale)
        pixmap.setDevicePixelRatio(scale)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(color))
        painter.drawEllipse(1, 1, 10, 10)  # logical pixels: the painter scales
        painter.end()
        icon.addPixmap(pixmap)
    return icon


def _text_color(color: str) -> QBrush:
    """A status colour readable on the table's background, light or dark."""
    base = QGuiApplication.palette().color(QPalette.ColorRole.Base)
    return QBrush(on_background(color, base))


class RunsTableModel(QAbstractTableModel):
    """The store's runs as table rows; `set_records` updates rows in place when it can."""

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.records: list[RunRecord] = []
        self.sizes: dict[int, RunSize | None] = {}  # by run id; None: no folder
        self.differences: dict[int, RunDifference] = {}  # by run id
        self._icons = {state: _status_icon(color) for state, (_, color) in STATUS_TEXT.items()}

    def set_records(self, records: list[RunRecord],
                    sizes: dict[int, RunSize | None] | None = None,
                    differences: dict[int, RunDifference] | None = None) -> bool:
        """Show `records` (with their folders' `sizes` and what `differences` sets each
        apart from the run before it); returns whether any row changed."""
        sizes, differences = sizes or {}, differences or {}
        if [r.id for r in records] == [r.id for r in self.records]:
            changed = [i for i, (new, old) in enumerate(zip(records, self.records, strict=True))
                       if new != old or sizes.get(new.id) != self.sizes.get(new.id)
                       or differences.get(new.id) != self.differences.get(new.id)]
            self.records, self.sizes, self.differences = records, sizes, differences
            for row in changed:  # selection and scroll position stay as they are
                self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))
            return bool(changed)
        self.beginResetModel()
        self.records, self.sizes, self.differences = records, sizes, differences
        self.endResetModel()
        return True

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.records)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802
                   role: int = Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex,
             role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        record, column = self.records[index.row()], index.column()
        if column == Column.SIZE and role in _SIZE_ROLES:
            return self._size_data(self.sizes.get(record.id), role)
        if role == Qt.ItemDataRole.DisplayRole:
            if column == Column.NAME and record.id in self.differences:
                return f"{self._text(record, column)}  {self.differences[record.id].text}"
            return self._text(record, column)
        if role == SORT_ROLE:
            return self._sort_key(record, column)
        if role == ID_ROLE:
            return record.id
        if role == WIDEST_ROLE:
            return self._widest(record, column)
        if role == Qt.ItemDataRole.DecorationRole and column == Column.STATUS:
            return self._icons[record.status]
        if role == Qt.ItemDataRole.ForegroundRole:
            if not record.folder_exists:
                return _text_color(MISSING)
            if column == Column.STATUS:
                return _text_color(STATUS_TEXT[record.status][1])
        if role == Qt.ItemDataRole.ToolTipRole:
            tip = self._tooltip(record, column)
            if column == Column.NAME and record.id in self.differences:
                tip += "\n" + self.differences[record.id].tip
            return tip
        if role == Qt.ItemDataRole.TextAlignmentRole and column == Column.EPOCHS:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    @staticmethod
    def _size_data(size: RunSize | None, role: int):
        if role == Qt.ItemDataRole.DisplayRole:
            return "–" if size is None else format_bytes(size.total)
        if role == SORT_ROLE:
            return -1 if size is None else size.total
        if role == Qt.ItemDataRole.ToolTipRole:
            return "Its folder no longer exists." if size is None else size.describe()
        return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    @staticmethod
    def _text(record: RunRecord, column: int) -> str:
        if column == Column.STATUS:
            return STATUS_TEXT[record.status][0]
        if column == Column.STARTED:
            return started_text(record)
        if column == Column.NAME:
            return short_name(record) + ("" if record.folder_exists else " (folder deleted)")
        if column == Column.MODEL:
            return path_text(record.model, "demo")
        if column == Column.DATA:
            return path_text(record.data, "Digits (demo)")
        if column == Column.TAGS:
            return ", ".join(record.tags)
        if column == Column.DEVICES:
            return devices_text(record)
        if column == Column.EPOCHS:
            return f"{record.epochs_done}/{record.epochs}"
        return best_text(record)

    @staticmethod
    def _widest(record: RunRecord, column: int) -> list[str]:
        if column == Column.STATUS:  # any run may come to any state
            return [label for label, _ in STATUS_TEXT.values()]
        if column == Column.EPOCHS:
            return [f"{record.epochs}/{record.epochs}"]
        return [RunsTableModel._text(record, column)]

    @staticmethod
    def _sort_key(record: RunRecord, column: int):
        if column == Column.STARTED:
            return record.started or record.created
        if column == Column.EPOCHS:
            return record.epochs_done / max(record.epochs, 1)
        if column == Column.BEST:
            return record.best_value if record.best_value is not None else float("inf")
        return RunsTableModel._text(record, column).lower()

    @staticmethod
    def _tooltip(record: RunRecord, column: int) -> str:
        lines = [f"Run {record.id}: {record.run_dir}"]
        if column == Column.STARTED:
            stamp = time.localtime(record.started or record.created)
            lines.insert(0, time.strftime("Started %Y-%m-%d %H:%M:%S", stamp))
        if not record.folder_exists:
            lines.append("Its folder no longer exists.")
        if column == Column.MODEL:
            lines = [f"Model: {record.model}", f"Data: {record.data}"]
        elif column == Column.DATA:
            lines = [f"Data: {record.data}", f"Model: {record.model}"]
        elif column == Column.DEVICES and record.devices:
            lines = list(record.devices)
        elif column == Column.EPOCHS and record.global_batch:
            lines = [f"{record.epochs_done} of {record.epochs} epochs done; "
                     f"global batch {record.global_batch}"]
        elif column == Column.BEST and record.test_metrics:
            lines.append("Test: " + ", ".join(f"{k} {v:.4g}"
                                              for k, v in record.test_metrics.items()))
        if record.message and column in (Column.STATUS, Column.NAME):
            lines.append(record.message)
        if column in (Column.NAME, Column.TAGS):
            if record.tags:
                lines.append("Tags: " + ", ".join(record.tags))
            if record.note:
                lines += ["", record.note]
        return "\n".join(lines)


class RunsFilter(QSortFilterProxyModel):
    """The table's sorting, and its rows narrowed to the runs a search matches."""

    def __init__(self, model: RunsTableModel, parent: QObject | None = None):
        super().__init__(parent)
        self.setSourceModel(model)
        self.setSortRole(SORT_ROLE)
        self.runs = model
        self.query = RunQuery()

    def set_query(self, query: RunQuery) -> None:
        if query == self.query:
            return
        if hasattr(self, "endFilterChange"):  # Qt 6.10; it deprecates invalidateRowsFilter
            self.beginFilterChange()
            self.query = query
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:  # Qt 6.8 and 6.9, which the app supports too
            self.query = query
            self.invalidateRowsFilter()

    def filterAcceptsRow(self, source_row: int,  # noqa: N802 (Qt's name)
                         source_parent: QModelIndex | QPersistentModelIndex) -> bool:
        return self.query.matches(self.runs.records[source_row])
