"""One GPU's row in the GPU panel: its widgets on four lines of the panel's grid, and the
texts they show (readings, processes, this app's runs holding it).

Built once per inventory; `display` changes only texts and values, and a label's text only
when it changed (setText relayouts).
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QCheckBox, QGridLayout, QLabel, QWidget

from mgpu_gui.core.devices.nvml import NA, GpuInfo
from mgpu_gui.core.devices.telemetry import HISTORY_WINDOW_S, GpuSnapshot
from mgpu_gui.core.runs.claims import DeviceUse
from mgpu_gui.gui.theme import on_background
from mgpu_gui.gui.widgets.gauges import FULL_COLOR, MEMORY_COLOR, WARN_COLOR, Meter, Sparkline

GiB = 2**30
OWN_COLOR = "#1a7f37"
FOREIGN_COLOR = "#9a6700"
INDENT = 22  # under the GPU name, past the checkbox
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
    """The widgets of one GPU, placed on three lines of the panel's grid."""

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
