"""One GPU's row in the GPU panel: its widgets on two lines of the panel's grid (a third for
its processes, on demand), and the texts they show (readings, processes, this app's runs
holding it).

Built once per inventory; `display` changes only texts and values, and a label's text only
when it changed (setText relayouts).
"""

from __future__ import annotations

import html

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QCheckBox, QGridLayout, QHBoxLayout, QLabel, QToolButton, QWidget

from mgpu_gui.core.devices.nvml import NA, GpuInfo
from mgpu_gui.core.devices.telemetry import HISTORY_WINDOW_S, GpuSnapshot
from mgpu_gui.core.runs.claims import DeviceUse
from mgpu_gui.gui.theme import on_background
from mgpu_gui.gui.widgets.gauges import FULL_COLOR, MEMORY_COLOR, WARN_COLOR, Meter, Sparkline

GiB = 2**30
OWN_COLOR = "#1a7f37"
FOREIGN_COLOR = "#9a6700"
INDENT = 22  # under the GPU name, past the checkbox
# The panel's grid: the meters under the GPU's name, its readings beside them in two
# columns (the processes button over the memory controller's), the sparkline last.
COLUMNS = 5
COLUMN_UTILIZATION, COLUMN_MEMORY, COLUMN_READINGS, COLUMN_MEMORY_BUSY, COLUMN_SPARKLINE = (
    range(COLUMNS))
LINES = 4  # grid lines of one GPU: readings, meters, processes (on demand), a gap
GAP = 4  # px between two GPUs
WAITING = "<span style='color:gray'>processes: …</span>"  # before the first snapshot


def _gib(size: int | None) -> str:
    return NA if size is None else f"{size / GiB:.1f}"


def short_name(name: str | None) -> str:
    return NA if not name else name.removeprefix("NVIDIA ").strip()


def _memory_color(fraction: float | None) -> QColor:
    if fraction is not None and fraction >= 0.95:
        return FULL_COLOR
    if fraction is not None and fraction >= 0.8:
        return WARN_COLOR
    return MEMORY_COLOR


class GpuRow:
    """The widgets of one GPU on `LINES` lines of the panel's grid: two always shown, one
    for its processes, shown on demand or when the app has something to say there (one of
    its runs holds the GPU, jobs wait for it, the GPU is lost), and a gap."""

    def __init__(self, gpu: GpuInfo, grid: QGridLayout, line: int, parent: QWidget):
        self.gpu = gpu
        self.snapshot: GpuSnapshot | None = None
        self.use = DeviceUse()  # the app's run holding it, jobs waiting for it
        name = short_name(gpu.name)
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
        self.memory_busy.setAlignment(Qt.AlignmentFlag.AlignRight
                                      | Qt.AlignmentFlag.AlignVCenter)
        self.sparkline = Sparkline(HISTORY_WINDOW_S, parent)
        self.sparkline.setAccessibleName(f"GPU {gpu.index} history")
        self.sparkline.setToolTip("Last 2 minutes: utilization (solid blue), "
                                  "memory used (dashed purple)")
        self.more = QToolButton(parent)  # the processes, on demand
        self.more.setCheckable(True)
        self.more.setAutoRaise(True)
        self.more.setArrowType(Qt.ArrowType.RightArrow)
        self.more.setIconSize(QSize(8, 8))
        self.more.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.more.setAccessibleName(f"Show GPU {gpu.index} processes")
        # No taller than the text beside it: the row stays two text lines high.
        self.more.setStyleSheet("QToolButton { border: none; padding: 0px; }")
        self.more.toggled.connect(self._more_toggled)
        self.processes = QLabel(parent)
        self.processes.setTextFormat(Qt.TextFormat.RichText)
        self.processes.setIndent(INDENT)
        self.processes.setWordWrap(True)
        self.processes.setAccessibleName(f"GPU {gpu.index} processes")
        self.processes.setToolTip("Compute processes on this GPU: pid (GPU memory)")
        top = QHBoxLayout()  # the button beside the readings: no column of its own
        top.setSpacing(grid.horizontalSpacing())
        top.addWidget(self.stats, 1)
        top.addWidget(self.more)
        grid.addWidget(self.check, line, COLUMN_UTILIZATION, 1, 2)
        grid.addLayout(top, line, COLUMN_READINGS, 1, 2)
        grid.addWidget(self.sparkline, line, COLUMN_SPARKLINE, 2, 1)
        grid.addWidget(self.utilization, line + 1, COLUMN_UTILIZATION)
        grid.addWidget(self.memory, line + 1, COLUMN_MEMORY)
        grid.addWidget(self.detail, line + 1, COLUMN_READINGS)
        grid.addWidget(self.memory_busy, line + 1, COLUMN_MEMORY_BUSY)
        grid.addWidget(self.processes, line + 2, 0, 1, COLUMNS)
        grid.setRowMinimumHeight(line + LINES - 1, GAP)
        self._grid, self._line, self._top = grid, line, top
        self._texts: dict[QWidget, str] = {}
        self._set(self.processes, WAITING)
        self._set_more(None)
        self._update_processes_shown()

    @staticmethod
    def _label(parent: QWidget, tooltip: str) -> QLabel:
        label = QLabel(parent)
        label.setToolTip(tooltip)
        label.setTextFormat(Qt.TextFormat.PlainText)
        return label

    def _set(self, widget: QLabel | QToolButton, text: str) -> None:
        if self._texts.get(widget) != text:  # setText relayouts; skip when unchanged
            self._texts[widget] = text
            widget.setText(text)

    def widgets(self) -> list[QWidget]:
        return [self.check, self.utilization, self.memory, self.stats, self.detail,
                self.memory_busy, self.sparkline, self.more, self.processes]

    def remove(self) -> None:
        """Take the row off the grid (a new inventory): its widgets, layout and gap."""
        for widget in self.widgets():
            self._grid.removeWidget(widget)
            widget.deleteLater()
        self._grid.removeItem(self._top)
        self._top.deleteLater()
        self._grid.setRowMinimumHeight(self._line + LINES - 1, 0)

    def _more_toggled(self, shown: bool) -> None:
        self.more.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self._update_processes_shown()

    def _update_processes_shown(self) -> None:
        """The processes line shows when asked for, or when it says what the app knows of
        the GPU: one of its runs holds it, jobs wait for it, it is lost."""
        lost = self.snapshot is not None and self.snapshot.lost
        self.processes.setHidden(not (self.more.isChecked() or self.use.text or lost))

    def display(self, snap: GpuSnapshot | None, own_pids: set[int]) -> None:
        self.snapshot = snap
        self._update_processes_shown()
        if snap is None or snap.lost:
            lost = snap is not None
            self.utilization.set_value(None, "lost" if lost else NA)
            self.memory.set_value(None, NA)
            self._set(self.stats, NA)
            self._set(self.detail, NA)
            self._set(self.memory_busy, NA)
            self._set(self.processes, "<i>GPU lost: NVML cannot reach it; check nvidia-smi"
                      "</i>" if lost else self._claim_html() or WAITING)
            self._set_more(snap)
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
        self._set_more(snap)

    def _set_more(self, snap: GpuSnapshot | None) -> None:
        """The button says how many processes run there; its tooltip, what a click shows."""
        if snap is None:
            text, tooltip = "…", "No reading yet"
        elif snap.processes is None:
            text, tooltip = NA, "NVML does not say which processes run on this GPU"
        else:
            count = len(snap.processes)
            text, tooltip = str(count), (f"{count} compute process{'' if count == 1 else 'es'}"
                                         " on this GPU: click to list them under the row")
        self._set(self.more, text)
        if self.more.toolTip() != tooltip:
            self.more.setToolTip(tooltip)

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
        return [_pid_text(p.pid, p.used_memory) for p in snap.processes if p.pid not in own_pids]


def _pid_text(pid: int, used: int | None) -> str:
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
        text = html.escape(_pid_text(p.pid, p.used_memory))
        if p.pid in own_pids:
            parts.append(f"<b style='color:{own}'>{text} · this run</b>")
        else:  # someone else's: stands out, the warning below says more when checked
            parts.append(f"<span style='color:{foreign}'>{text}</span>")
    return " · ".join(parts)
