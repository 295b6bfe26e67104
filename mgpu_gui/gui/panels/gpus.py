"""The GPU panel: which GPUs to train on, and how busy each one is right now.

Dense like nvitop: per GPU two lines, a checkbox with its index and name, utilization and
memory bars, temperature, power, fan, P-state, a two-minute sparkline, and the compute
processes on it (this app's worker highlighted) on demand. Rows are built once per
inventory; each telemetry update only changes texts and values, so it stays cheap at any
rate. Without a usable GPU the panel says why and offers a CPU replica count instead.

Watching the GPUs is half of what the app is for: the panel asks room for `SHOWN_GPUS`
rows, every GPU of an 8-GPU machine; when the window gives less, the rows scroll, the
header and the notes below them stay in view, and every height is asked for at the
panel's width (texts wrap).

The first choice leaves out the GPUs other work uses (`core.devices.busy`), decided at
the first readings, since utilization comes with the snapshots, not the inventory; a
line says which and why. When every GPU is busy, all stay ticked and the warning says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from PySide6.QtCore import QCoreApplication, QEvent, QSize, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.config import DeviceKind, DeviceSelection
from mgpu_gui.core.devices.busy import busy_gpus, indices_text, left_out_text
from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, NvmlState
from mgpu_gui.core.devices.plan import DEFAULT_CPU_REPLICAS, cpu_replicas_warning, usable_cores
from mgpu_gui.core.devices.telemetry import HISTORY_WINDOW_S, GpuSnapshot, TelemetryHistory
from mgpu_gui.core.runs.claims import DeviceUse
from mgpu_gui.gui.panels.gpu_row import (
    COLUMN_MEMORY,
    COLUMN_SPARKLINE,
    COLUMN_UTILIZATION,
    LINES,
    GpuRow,
    short_name,
)

MAX_CPU_REPLICAS = 64
SHOWN_GPUS = 8  # rows the panel asks room for; more scroll
MIN_SHOWN_GPUS = 4  # rows it keeps in the smallest window (1024x576)


def _warning_label(name: str, parent: QWidget) -> QLabel:
    """A hidden warning box; shown while it has something to say."""
    label = QLabel(parent)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setAccessibleName(name)
    label.setStyleSheet("QLabel { background: #fff8c5; color: #4d2d00; "
                        "border: 1px solid #d4a72c; border-radius: 3px; padding: 3px; }")
    label.hide()
    return label


class _RowsArea(QScrollArea):
    """The GPU rows (or the CPU page), scrolling up and down, never sideways: it asks for
    the height of `SHOWN_GPUS` rows and, at least, of `MIN_SHOWN_GPUS`."""

    def __init__(self, pages: QStackedWidget, panel: GpuPanel):
        super().__init__(panel)
        self._panel = panel
        self.setWidget(pages)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(self.widget().sizeHint().width() + self._bar(),
                     self._height_of(SHOWN_GPUS))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(self.widget().minimumSizeHint().width() + self._bar(),
                     self._height_of(MIN_SHOWN_GPUS))

    def _bar(self) -> int:
        """Room for the vertical scroll bar, whether it shows or not: no sideways jump."""
        return self.verticalScrollBar().sizeHint().width()

    def _height_of(self, shown: int) -> int:
        pages = self.widget()
        width = max(self.viewport().width() if self.isVisible() else 0,
                    pages.minimumSizeHint().width())
        full = pages.heightForWidth(width) if pages.hasHeightForWidth() else -1
        full = full if full >= 0 else pages.sizeHint().height()
        rows = self._panel._rows
        if len(rows) <= shown:
            return full
        grid = self._panel._grid_host
        every = grid.heightForWidth(width) if grid.hasHeightForWidth() else -1
        every = every if every >= 0 else grid.sizeHint().height()
        if grid.isVisible():  # laid out: down to the next row's first line (lines may wrap)
            return full - every + rows[shown].check.y()
        return full - every + math.ceil(every * shown / len(rows))  # rows of even height


class GpuPanel(QWidget):
    """Choose the GPUs (or CPU replicas) to train on, watching their load live."""

    selection_changed = Signal()

    def __init__(self, inventory: GpuInventory | None = None, parent: QWidget | None = None,
                 history_interval_s: float = 1.0):
        super().__init__(parent)
        self.setAccessibleName("GPU panel")
        self._inventory: GpuInventory | None = None
        self._rows: list[GpuRow] = []
        self._own_pids: set[int] = set()
        self._history = TelemetryHistory(HISTORY_WINDOW_S, history_interval_s)
        self._enabled_for_run = True
        self._first_choice_pending = False  # leave out busy GPUs at the first readings
        self._left_out: set[int] = set()  # GPUs the first choice left out, while unticked

        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 4, 4, 4)
        self.header = QLabel("Looking for GPUs…", self)
        self.header.setWordWrap(True)
        outer.addWidget(self.header)
        self._pages = QStackedWidget()
        self._scroll = _RowsArea(self._pages, self)
        outer.addWidget(self._scroll, 1)

        self._gpu_page = QWidget(self._pages)
        gpu_layout = QVBoxLayout(self._gpu_page)
        gpu_layout.setContentsMargins(0, 0, 0, 0)
        self._grid_host = QWidget(self._gpu_page)
        self._grid = QGridLayout(self._grid_host)
        self._grid.setContentsMargins(0, 0, 0, 0)
        # Narrow: the rows fit the run setup's own width below (380 px), so the column
        # takes no width from the curves.
        self._grid.setHorizontalSpacing(4)
        self._grid.setVerticalSpacing(2)
        for column in (COLUMN_UTILIZATION, COLUMN_MEMORY, COLUMN_SPARKLINE):
            self._grid.setColumnStretch(column, 1)
        gpu_layout.addWidget(self._grid_host)
        pick = QHBoxLayout()
        pick.addWidget(QLabel("Use", self._gpu_page))
        self.least_busy_count = QSpinBox(self._gpu_page)
        self.least_busy_count.setRange(1, 1)
        self.least_busy_count.setAccessibleName("Number of least busy GPUs")
        self.least_busy_count.setToolTip("How many GPUs 'Use least busy' checks")
        pick.addWidget(self.least_busy_count)
        self.least_busy_button = QPushButton("least busy GPUs", self._gpu_page)
        self.least_busy_button.setAccessibleName("Use least busy GPUs")
        self.least_busy_button.setToolTip("Check the GPUs with the lowest utilization "
                                          "(ties: least memory used) and uncheck the rest")
        self.least_busy_button.clicked.connect(
            lambda: self.use_least_busy(self.least_busy_count.value()))
        pick.addWidget(self.least_busy_button)
        pick.addStretch(1)
        gpu_layout.addLayout(pick)
        gpu_layout.addStretch(1)
        self.note = QLabel(self)
        self.note.setWordWrap(True)
        self.note.setTextFormat(Qt.TextFormat.PlainText)
        self.note.setAccessibleName("GPUs left out")
        self.note.hide()
        outer.addWidget(self.note)
        self.warning = _warning_label("GPU warning", self)
        outer.addWidget(self.warning)  # below the rows, always in view
        self._pages.addWidget(self._gpu_page)

        self._cpu_page = QWidget(self._pages)
        cpu_layout = QVBoxLayout(self._cpu_page)
        cpu_layout.setContentsMargins(0, 0, 0, 0)
        self.reason = QLabel(self._cpu_page)
        self.reason.setWordWrap(True)
        self.reason.setTextFormat(Qt.TextFormat.PlainText)
        self.reason.setAccessibleName("Why no GPU is used")
        cpu_layout.addWidget(self.reason)
        cpu_row = QHBoxLayout()
        cpu_label = QLabel("CPU replicas:", self._cpu_page)
        cpu_row.addWidget(cpu_label)
        self.cpu_replicas = QSpinBox(self._cpu_page)
        self.cpu_replicas.setRange(1, MAX_CPU_REPLICAS)
        self.cpu_replicas.setValue(DEFAULT_CPU_REPLICAS)
        self.cpu_replicas.setAccessibleName("CPU replicas")
        self.cpu_replicas.setToolTip("How many logical CPU devices train in parallel "
                                     "(data-parallel replicas on this machine's CPU)")
        cpu_label.setBuddy(self.cpu_replicas)
        self.cpu_replicas.valueChanged.connect(self.selection_changed)
        cpu_row.addWidget(self.cpu_replicas)
        cpu_row.addStretch(1)
        cpu_layout.addLayout(cpu_row)
        self._cores = usable_cores()  # a syscall; the affinity does not change under us
        self.cpu_warning = _warning_label("CPU replicas warning", self._cpu_page)
        self.cpu_replicas.valueChanged.connect(self._update_cpu_warning)
        cpu_layout.addWidget(self.cpu_warning)  # below the spin box: nothing above moves
        cpu_layout.addStretch(1)
        self._pages.addWidget(self._cpu_page)
        self._scroll.hide()
        # Rows growing (a process list wraps) change the height the panel wants.
        self._pages.installEventFilter(self)
        self._grid_host.installEventFilter(self)
        if inventory is not None:
            self.set_inventory(inventory)

    # -- size ------------------------------------------------------------------

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """The height of `SHOWN_GPUS` rows, the header and the warning at this width."""
        return QSize(super().sizeHint().width(), self._height_with(self._scroll.sizeHint()))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(super().minimumSizeHint().width(),
                     self._height_with(self._scroll.minimumSizeHint()))

    def _height_with(self, rows: QSize) -> int:
        layout = self.layout()
        margins = layout.contentsMargins()
        width = (self.width() if self.isVisible() else super().sizeHint().width())
        width -= margins.left() + margins.right()
        labels = [label for label in (self.header, self.note, self.warning)
                  if not label.isHidden()]
        heights = [label.heightForWidth(width) for label in labels]
        if not self._scroll.isHidden():
            heights.append(rows.height())
        return (sum(heights) + layout.spacing() * (len(heights) - 1)
                + margins.top() + margins.bottom())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._wanted_height_changed()  # texts wrap anew

    def eventFilter(self, watched, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.LayoutRequest:
            self._wanted_height_changed()
        return super().eventFilter(watched, event)

    def _wanted_height_changed(self) -> None:
        """Say so the way a layout change says it: a LayoutRequest to this panel (what the
        window watches to give the panel its height) and to its parent."""
        self._scroll.updateGeometry()  # its hints follow the rows: drop the layout's cache
        self.updateGeometry()
        QCoreApplication.postEvent(self, QEvent(QEvent.Type.LayoutRequest))

    # -- inventory -------------------------------------------------------------

    @property
    def inventory(self) -> GpuInventory | None:
        return self._inventory

    def set_inventory(self, inventory: GpuInventory) -> None:
        """Build the rows for these GPUs (or the CPU page); the only rebuild there is."""
        if inventory == self._inventory:
            return
        self._inventory = inventory
        for row in self._rows:
            row.remove()
        self._rows = []
        self._left_out = set()
        self._history.clear()
        versions = [f"driver {inventory.driver_version}" if inventory.driver_version else "",
                    f"CUDA {inventory.cuda_driver_version}"
                    if inventory.cuda_driver_version else ""]
        versions_text = " · ".join(v for v in versions if v)
        if inventory.state is NvmlState.OK and inventory.gpus:
            for position, gpu in enumerate(inventory.gpus):
                row = GpuRow(gpu, self._grid, LINES * position, self._grid_host)
                row.check.toggled.connect(self._on_check_toggled)
                row.check.setEnabled(self._enabled_for_run)
                row.display(None, self._own_pids)
                self._rows.append(row)
            count = len(self._rows)
            self.least_busy_count.setRange(1, count)
            self.least_busy_count.setValue(count)
            self.header.setText(f"<b>GPUs</b> · {count} found"
                                + (f" · {versions_text}" if versions_text else ""))
            self._pages.setCurrentWidget(self._gpu_page)
            self._first_choice_pending = self._enabled_for_run
        else:
            self.header.setText("<b>GPUs</b> · none available: training on CPU replicas"
                                + (f" · {versions_text}" if versions_text else ""))
            self.reason.setText(inventory.message or "No GPU found: training runs on CPU "
                                "replicas.")
            self._pages.setCurrentWidget(self._cpu_page)
        self._scroll.show()
        self._refresh_warning()
        self.selection_changed.emit()

    # -- telemetry -------------------------------------------------------------

    def update_snapshots(self, snapshots: Iterable[GpuSnapshot]) -> None:
        """Show one round of telemetry (connect TelemetrySource.snapshots here)."""
        snapshots = list(snapshots)
        self._history.add(snapshots)
        by_index = {row.gpu.index: row for row in self._rows}
        for snap in snapshots:
            row = by_index.get(snap.index)
            if row is None:
                continue
            row.display(snap, self._own_pids)
            row.sparkline.set_series(*self._history.series(snap.index))
        if self._first_choice_pending and all(row.snapshot is not None for row in self._rows):
            self._leave_out_busy()
        self._refresh_warning()

    def _leave_out_busy(self) -> None:
        """The first choice: the GPUs other work uses stay unticked, and the note says which
        and why; when every GPU is busy, all stay ticked (the warning names them)."""
        self._first_choice_pending = False
        busy = busy_gpus((row.snapshot for row in self._rows), self._own_pids)
        if not busy or len(busy) == len(self._rows):
            return
        self._left_out = {b.index for b in busy}
        self.note.setText(f"{left_out_text(busy)}.")
        self.least_busy_count.setValue(len(self._rows) - len(busy))
        self._set_checks({row.gpu.index: row.gpu.index not in self._left_out
                          for row in self._rows})

    def set_claims(self, uses: dict[int, DeviceUse]) -> None:
        """The app's runs and queue on each GPU (connect QueuePanel.claims_changed)."""
        for row in self._rows:
            use = uses.get(row.gpu.index, DeviceUse())
            if use != row.use:
                row.use = use
                row.display(row.snapshot, self._own_pids)
        self._refresh_warning()

    def set_own_pids(self, pids: Iterable[int]) -> None:
        """The processes of this app's run, highlighted and never warned about."""
        pids = set(pids)
        if pids == self._own_pids:
            return
        self._own_pids = pids
        for row in self._rows:
            if row.snapshot is not None:
                row.display(row.snapshot, pids)
        self._refresh_warning()

    # -- choice ----------------------------------------------------------------

    def checked_gpus(self) -> list[GpuInfo]:
        return [row.gpu for row in self._rows if row.check.isChecked()]

    def set_checked(self, indices: Iterable[int]) -> None:
        wanted = set(indices)
        self._set_checks({row.gpu.index: row.gpu.index in wanted for row in self._rows})

    def device_selection(self) -> DeviceSelection:
        """What to train on: the checked GPUs by UUID, or CPU replicas.

        Before the GPUs are listed this is AUTO. With GPUs but none checked it
        asks for 0 replicas, so planning refuses it rather than using every GPU.
        """
        if self._inventory is None:
            return DeviceSelection()
        if not self._rows:
            return DeviceSelection(kind=DeviceKind.CPU, replicas=self.cpu_replicas.value())
        checked = self.checked_gpus()
        if not checked:
            return DeviceSelection(kind=DeviceKind.GPU, replicas=0)
        # UUIDs survive a renumbering; indices only where NVML gave no UUID.
        return DeviceSelection(kind=DeviceKind.GPU,
                               gpus=tuple(g.uuid or str(g.index) for g in checked))

    def replicas(self) -> int:
        """Replicas the selection means: checked GPUs, or CPU replicas; 0 when the
        GPUs are not listed yet or none is checked (nothing to train on)."""
        if self._inventory is None:
            return 0
        if not self._rows:
            return self.cpu_replicas.value()
        return len(self.checked_gpus())

    def use_least_busy(self, count: int) -> list[int]:
        """Check the `count` GPUs with the lowest utilization (ties: least memory
        used, then index); unknown readings count as busiest. Returns the indices."""
        def load(row: GpuRow) -> tuple[int, float, float, int]:
            snap = row.snapshot
            if snap is None or snap.lost:
                return (1, float("inf"), float("inf"), row.gpu.index)
            util = float("inf") if snap.utilization_gpu is None else snap.utilization_gpu
            used = float("inf") if snap.memory_used is None else snap.memory_used
            return (0, util, used, row.gpu.index)

        chosen = {row.gpu.index for row in sorted(self._rows, key=load)[:max(count, 0)]}
        self._set_checks({row.gpu.index: row.gpu.index in chosen for row in self._rows})
        return sorted(chosen)

    def set_enabled_for_run(self, enabled: bool) -> None:
        """False while a run uses the selection: choices lock, telemetry goes on."""
        self._enabled_for_run = enabled
        if not enabled:  # a run uses the selection now: too late for a first choice
            self._first_choice_pending = False
        for row in self._rows:
            row.check.setEnabled(enabled)
        for widget in (self.least_busy_count, self.least_busy_button, self.cpu_replicas):
            widget.setEnabled(enabled)

    def _set_checks(self, wanted: dict[int, bool]) -> None:
        self._first_choice_pending = False  # chosen: the first choice is not to change it
        changed = False
        for row in self._rows:
            state = wanted.get(row.gpu.index, row.check.isChecked())
            if row.check.isChecked() != state:
                row.check.blockSignals(True)  # one selection_changed for the lot
                row.check.setChecked(state)
                row.check.blockSignals(False)
                changed = True
        if changed:
            self._refresh_warning()
            self.selection_changed.emit()

    def _on_check_toggled(self, _checked: bool) -> None:
        self._first_choice_pending = False  # the user chose
        self._refresh_warning()
        self.selection_changed.emit()

    def _update_cpu_warning(self, replicas: int) -> None:
        text = cpu_replicas_warning(replicas, self._cores)
        self.cpu_warning.setText(f"⚠ {text}" if text else "")
        self.cpu_warning.setVisible(bool(text))

    def _refresh_warning(self) -> None:
        """The warning, and the note on the GPUs left out while they all stay unticked."""
        if any(row.check.isChecked() for row in self._rows if row.gpu.index in self._left_out):
            self._left_out = set()  # ticked again: the note no longer holds
        self.note.setVisible(bool(self._left_out))
        lines, held, busy = [], [], []
        if self._rows and not any(row.check.isChecked() for row in self._rows):
            lines.append("No GPU checked: check at least one GPU to train on.")
        for row in self._rows:
            if not row.check.isChecked():
                continue
            snap = row.snapshot
            name = f"GPU {row.gpu.index} ({short_name(row.gpu.name)})"
            if snap is not None and snap.lost:
                lines.append(f"{name} is lost: NVML cannot reach it. Uncheck it, and check "
                             "nvidia-smi (it may need a reset).")
                continue
            if row.use.holder:
                held.append(row.gpu.index)
            foreign = row.foreign_processes(self._own_pids)
            if foreign:
                busy.append((row.gpu.index, f"{name} is busy with another process: "
                             f"{', '.join(foreign)}. Training there shares its compute and "
                             "memory."))
        if len(busy) == 1:
            lines.append(busy[0][1])
        elif busy:  # one line for them all: each row's ▸ lists its processes
            lines.append(f"GPUs {indices_text(index for index, _ in busy)} are busy with other "
                         "processes (▸ on a row lists them). Training there shares their "
                         "compute and memory.")
        if held and self._enabled_for_run:
            which = f"GPU {held[0]} is" if len(held) == 1 else f"GPUs {indices_text(held)} are"
            lines.append(f"{which} in use by another run (shown above). Uncheck "
                         f"{'it' if len(held) == 1 else 'them'}, or Run ▸ Add to queue: the run "
                         f"starts when {'it is' if len(held) == 1 else 'they are'} free.")
        text = "\n".join(f"⚠ {line}" for line in lines)
        if text != self.warning.text():
            self.warning.setText(text)
        self.warning.setVisible(bool(text))
