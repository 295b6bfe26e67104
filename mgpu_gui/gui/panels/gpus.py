"""The GPU panel: which GPUs to train on, and how busy each one is right now.

Dense like nvitop: per GPU a checkbox, utilization and memory bars, temperature,
power, fan, P-state, a two-minute sparkline and the compute processes on it
(this app's worker highlighted). Rows are built once per inventory; each
telemetry update only changes texts and values, so it stays cheap at any rate.
Without a usable GPU the panel says why and offers a CPU replica count instead.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.config import DeviceKind, DeviceSelection
from mgpu_gui.core.devices.nvml import NA, GpuInfo, GpuInventory, NvmlState
from mgpu_gui.core.devices.plan import DEFAULT_CPU_REPLICAS
from mgpu_gui.core.devices.telemetry import HISTORY_WINDOW_S, GpuSnapshot, TelemetryHistory
from mgpu_gui.core.runs.claims import DeviceUse
from mgpu_gui.gui.theme import on_background
from mgpu_gui.gui.widgets.gauges import FULL_COLOR, MEMORY_COLOR, WARN_COLOR, Meter, Sparkline

GiB = 2**30
MAX_CPU_REPLICAS = 64
OWN_COLOR = "#1a7f37"
FOREIGN_COLOR = "#9a6700"
INDENT = 22  # under the GPU name, past the checkbox
WAITING = "<span style='color:gray'>processes: …</span>"  # before the first snapshot


def _gib(size: int | None) -> str:
    return NA if size is None else f"{size / GiB:.1f}"


def _short_name(name: str | None) -> str:
    return NA if not name else name.removeprefix("NVIDIA ").strip()


def _memory_color(fraction: float | None) -> QColor:
    if fraction is not None and fraction >= 0.95:
        return FULL_COLOR
    if fraction is not None and fraction >= 0.8:
        return WARN_COLOR
    return MEMORY_COLOR


class _GpuRow:
    """The widgets of one GPU, placed on three lines of the panel's grid."""

    def __init__(self, gpu: GpuInfo, grid: QGridLayout, line: int, parent: QWidget):
        self.gpu = gpu
        self.snapshot: GpuSnapshot | None = None
        self.use = DeviceUse()  # the app's run holding it, jobs waiting for it
        name = _short_name(gpu.name)
        self.check = QCheckBox(f"{gpu.index}  {name}", parent)
        self.check.setChecked(True)
        self.check.setAccessibleName(f"Train on GPU {gpu.index}")
        self.check.setToolTip(f"Train on this GPU.\n{gpu.label}"
                              + ("\nMIG mode is on: training uses its first MIG instance."
                                 if gpu.mig_enabled else ""))
        self.utilization = Meter(parent=parent)
        self.utilization.setAccessibleName(f"GPU {gpu.index} utilization")
        self.utilization.setToolTip("GPU utilization: share of the last sample period in "
                                    "which a kernel ran")
        self.memory = Meter(MEMORY_COLOR, parent)
        self.memory.setAccessibleName(f"GPU {gpu.index} memory used")
        self.memory.setToolTip("Memory used / total (GiB)")
        self.stats = self._label(parent, "GPU temperature · power draw / enforced limit")
        self.detail = self._label(parent, "Performance state (P0 = fastest) · fan speed")
        self.memory_busy = self._label(
            parent, "Memory controller busy: share of time memory was being read or written "
            "(NVML's 'memory utilization'; how full it is shows in the bar)")
        for label in (self.stats, self.detail, self.memory_busy):
            label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.sparkline = Sparkline(HISTORY_WINDOW_S, parent)
        self.sparkline.setAccessibleName(f"GPU {gpu.index} history")
        self.sparkline.setToolTip("Last 2 minutes: utilization (solid blue), "
                                  "memory used (dashed purple)")
        self.processes = QLabel(parent)
        self.processes.setTextFormat(Qt.TextFormat.RichText)
        self.processes.setIndent(INDENT)
        self.processes.setWordWrap(True)
        self.processes.setContentsMargins(0, 0, 0, 6)  # a gap before the next GPU
        # A grid does not ask a word-wrapped label for its height: reserve one line at least.
        self.processes.setMinimumHeight(self.processes.fontMetrics().lineSpacing() + 6)
        self.processes.setAccessibleName(f"GPU {gpu.index} processes")
        self.processes.setToolTip("Compute processes on this GPU: pid (GPU memory)")
        util_label, memory_label = QLabel("util", parent), QLabel("mem", parent)
        for label in (util_label, memory_label):
            label.setIndent(INDENT)
            label.setEnabled(False)  # greyed: a caption, not a value
        self._captions = [util_label, memory_label]
        grid.addWidget(self.check, line, 0, 1, 2)
        grid.addWidget(self.stats, line, 2)
        grid.addWidget(self.sparkline, line, 3, 3, 1)
        grid.addWidget(util_label, line + 1, 0)
        grid.addWidget(self.utilization, line + 1, 1)
        grid.addWidget(self.detail, line + 1, 2)
        grid.addWidget(memory_label, line + 2, 0)
        grid.addWidget(self.memory, line + 2, 1)
        grid.addWidget(self.memory_busy, line + 2, 2)
        grid.addWidget(self.processes, line + 3, 0, 1, 4)
        self._texts: dict[QLabel, str] = {}
        # A line from the start: the window sizes this panel before the first snapshot.
        self._set(self.processes, WAITING)

    @staticmethod
    def _label(parent: QWidget, tooltip: str) -> QLabel:
        label = QLabel(parent)
        label.setToolTip(tooltip)
        label.setTextFormat(Qt.TextFormat.PlainText)
        return label

    def _set(self, label: QLabel, text: str) -> None:
        if self._texts.get(label) != text:  # setText relayouts; skip when unchanged
            self._texts[label] = text
            label.setText(text)

    def widgets(self) -> list[QWidget]:
        return [self.check, self.utilization, self.memory, self.stats, self.detail,
                self.memory_busy, self.sparkline, self.processes, *self._captions]

    def display(self, snap: GpuSnapshot | None, own_pids: set[int]) -> None:
        self.snapshot = snap
        if snap is None or snap.lost:
            lost = snap is not None
            self.utilization.set_value(None, "lost" if lost else NA)
            self.memory.set_value(None, NA)
            self._set(self.stats, NA)
            self._set(self.detail, NA)
            self._set(self.memory_busy, NA)
            self._set(self.processes, "<i>GPU lost: NVML cannot reach it; check nvidia-smi"
                      "</i>" if lost else self._claim_html() or WAITING)
            return
        util = snap.utilization_gpu
        self.utilization.set_value(None if util is None else util / 100,
                                   NA if util is None else f"{util}%")
        fraction = snap.memory_fraction
        self.memory.set_value(fraction, f"{_gib(snap.memory_used)}/{_gib(snap.memory_total)} GiB",
                              _memory_color(fraction))
        temperature = NA if snap.temperature_c is None else f"{snap.temperature_c}°C"
        power = NA if snap.power_w is None else f"{snap.power_w:.0f}"
        limit = NA if snap.power_limit_w is None else f"{snap.power_limit_w:.0f}"
        self._set(self.stats, f"{temperature}  {power}/{limit} W")
        fan = NA if snap.fan_percent is None else f"{snap.fan_percent}%"
        self._set(self.detail, f"{snap.performance_state or NA}  fan {fan}")
        busy = NA if snap.memory_busy is None else f"{snap.memory_busy}%"
        self._set(self.memory_busy, f"busy {busy}")
        claim = self._claim_html()
        self._set(self.processes, (f"{claim} · " if claim else "")
                  + _process_text(snap, own_pids | self._claimed_pids()))

    def _claim_html(self) -> str:
        return f"<b>{html.escape(self.use.text)}</b>" if self.use.text else ""

    def _claimed_pids(self) -> set[int]:
        """A GPU one of the app's runs holds: its processes are that run's."""
        snap = self.snapshot
        if not self.use.holder or snap is None or not snap.processes:
            return set()
        return {p.pid for p in snap.processes}

    def foreign_processes(self, own_pids: set[int]) -> list[str]:
        snap = self.snapshot
        if snap is None or not snap.processes or self.use.holder:
            return []
        return [_process(p.pid, p.used_memory) for p in snap.processes if p.pid not in own_pids]


def _process(pid: int, used: int | None) -> str:
    return f"pid {pid}" + ("" if used is None else f" ({_gib(used)} GiB)")


def _process_text(snap: GpuSnapshot, own_pids: set[int]) -> str:
    if snap.processes is None:
        return "<span style='color:gray'>processes: N/A</span>"
    if not snap.processes:
        return "<span style='color:gray'>no compute processes</span>"
    parts = []
    window = QGuiApplication.palette().color(QPalette.ColorRole.Window)
    own, foreign = (on_background(c, window).name() for c in (OWN_COLOR, FOREIGN_COLOR))
    for p in snap.processes:
        text = html.escape(_process(p.pid, p.used_memory))
        if p.pid in own_pids:
            parts.append(f"<b style='color:{own}'>{text} · this run</b>")
        else:  # someone else's: stands out, the warning below says more when checked
            parts.append(f"<span style='color:{foreign}'>{text}</span>")
    return " · ".join(parts)


class GpuPanel(QWidget):
    """Choose the GPUs (or CPU replicas) to train on, watching their load live."""

    selection_changed = Signal()

    def __init__(self, inventory: GpuInventory | None = None, parent: QWidget | None = None,
                 history_interval_s: float = 1.0):
        super().__init__(parent)
        self.setAccessibleName("GPU panel")
        self._inventory: GpuInventory | None = None
        self._rows: list[_GpuRow] = []
        self._own_pids: set[int] = set()
        self._history = TelemetryHistory(HISTORY_WINDOW_S, history_interval_s)
        self._enabled_for_run = True

        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 4, 4, 4)
        self.header = QLabel("Looking for GPUs…", self)
        self.header.setWordWrap(True)
        outer.addWidget(self.header)
        self._pages = QStackedWidget(self)
        outer.addWidget(self._pages)

        self._gpu_page = QWidget(self._pages)
        gpu_layout = QVBoxLayout(self._gpu_page)
        gpu_layout.setContentsMargins(0, 0, 0, 0)
        self._grid_host = QWidget(self._gpu_page)
        self._grid = QGridLayout(self._grid_host)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setHorizontalSpacing(8)
        self._grid.setVerticalSpacing(2)
        self._grid.setColumnStretch(1, 1)
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
        self.warning = QLabel(self._gpu_page)
        self.warning.setWordWrap(True)
        self.warning.setTextFormat(Qt.TextFormat.PlainText)
        self.warning.setAccessibleName("GPU warning")
        self.warning.setStyleSheet("QLabel { background: #fff8c5; color: #4d2d00; "
                                   "border: 1px solid #d4a72c; border-radius: 3px; "
                                   "padding: 3px; }")
        self.warning.hide()
        gpu_layout.addWidget(self.warning)
        gpu_layout.addStretch(1)
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
        cpu_layout.addStretch(1)
        self._pages.addWidget(self._cpu_page)
        self._pages.hide()
        if inventory is not None:
            self.set_inventory(inventory)

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
            for widget in row.widgets():
                self._grid.removeWidget(widget)
                widget.deleteLater()
        self._rows = []
        self._history.clear()
        versions = [f"driver {inventory.driver_version}" if inventory.driver_version else "",
                    f"CUDA {inventory.cuda_driver_version}"
                    if inventory.cuda_driver_version else ""]
        versions_text = " · ".join(v for v in versions if v)
        if inventory.state is NvmlState.OK and inventory.gpus:
            for position, gpu in enumerate(inventory.gpus):
                row = _GpuRow(gpu, self._grid, 4 * position, self._grid_host)
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
        else:
            self.header.setText("<b>GPUs</b> · none available: training on CPU replicas"
                                + (f" · {versions_text}" if versions_text else ""))
            self.reason.setText(inventory.message or "No GPU found: training runs on CPU "
                                "replicas.")
            self._pages.setCurrentWidget(self._cpu_page)
        self._pages.show()
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
        self._refresh_warning()

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
        def load(row: _GpuRow) -> tuple[int, float, float, int]:
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
        for row in self._rows:
            row.check.setEnabled(enabled)
        for widget in (self.least_busy_count, self.least_busy_button, self.cpu_replicas):
            widget.setEnabled(enabled)

    def _set_checks(self, wanted: dict[int, bool]) -> None:
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
        self._refresh_warning()
        self.selection_changed.emit()

    def _refresh_warning(self) -> None:
        lines, held = [], []
        if self._rows and not any(row.check.isChecked() for row in self._rows):
            lines.append("No GPU checked: check at least one GPU to train on.")
        for row in self._rows:
            if not row.check.isChecked():
                continue
            snap = row.snapshot
            name = f"GPU {row.gpu.index} ({_short_name(row.gpu.name)})"
            if snap is not None and snap.lost:
                lines.append(f"{name} is lost: NVML cannot reach it. Uncheck it, and check "
                             "nvidia-smi (it may need a reset).")
                continue
            if row.use.holder:
                held.append(str(row.gpu.index))
            foreign = row.foreign_processes(self._own_pids)
            if foreign:
                lines.append(f"{name} is busy with another process: {', '.join(foreign)}. "
                             "Training there shares its compute and memory.")
        if held and self._enabled_for_run:
            which = (f"GPU {held[0]} is" if len(held) == 1 else
                     f"GPUs {', '.join(held[:-1])} and {held[-1]} are")
            lines.append(f"{which} in use by another run (shown above). Uncheck "
                         f"{'it' if len(held) == 1 else 'them'}, or Run ▸ Add to queue: the run "
                         f"starts when {'it is' if len(held) == 1 else 'they are'} free.")
        text = "\n".join(f"⚠ {line}" for line in lines)
        if text != self.warning.text():
            self.warning.setText(text)
        self.warning.setVisible(bool(text))
