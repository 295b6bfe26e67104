"""The devices a run used, under its curves: utilization and memory, in % over wall time.

One colour per device (solid: utilization, dashed: memory used as a share of the
device's memory); the latest readings, power and temperature included, are in the
plot's tooltip. A CPU run's row is its worker process: its CPU use as a share of the
cores it may run on, and its resident memory as a share of the machine's.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from mgpu_gui.core.runs.telemetry_store import (
    CPU_DEVICE,
    MEMORY,
    POWER,
    TEMPERATURE,
    UTILIZATION,
    RunTelemetry,
    T,
    TelemetryDevice,
)
from mgpu_gui.gui.theme import PlotColors
from mgpu_gui.gui.widgets.plots import SparseAxis, color_plot, set_title, style_plot

TITLE = "Devices (%)"


class TelemetryPlot:
    """A small plot of one run's device telemetry; x is wall time in minutes from the
    origin the curves use, so it lines up with the throughput plot."""

    def __init__(self, colors: PlotColors) -> None:
        self.widget = pg.PlotWidget(axisItems={"bottom": SparseAxis()})
        self.widget.setAccessibleName("Device telemetry plot")
        style_plot(self.widget, "devices %")  # named by its axis too: a short plot folds its title
        self.widget.setTitle(TITLE, size="10pt")
        view = self.widget.getPlotItem().getViewBox()
        view.enableAutoRange(x=False)  # x follows the throughput plot it is linked to
        self._colors = colors
        self._devices: dict[int, TelemetryDevice] = {}
        self._samples: dict[int, np.ndarray] = {}
        self._curves: dict[int, tuple[pg.PlotDataItem, pg.PlotDataItem]] = {}
        self._origin: float | None = None
        self.apply_colors(colors)

    def add(self, telemetry: RunTelemetry, replace: bool) -> None:
        """Samples read from the store: a whole run (replace), or what is new since."""
        if replace:
            self.clear()
        self._devices.update(telemetry.devices)
        for device, rows in telemetry.samples.items():
            known = self._samples.get(device)
            self._samples[device] = rows if known is None else np.concatenate([known, rows])
        self.redraw()

    def set_origin(self, origin: float | None) -> None:
        """The time at wall time 0 (the curves'); None: the first sample's."""
        if origin != self._origin:
            self._origin = origin
            self.redraw()

    def clear(self) -> None:
        self._devices, self._samples = {}, {}
        for curves in self._curves.values():
            for curve in curves:
                self.widget.removeItem(curve)
        self._curves = {}
        self.widget.setToolTip("")
        set_title(self.widget.getPlotItem(), TITLE, color=self._colors.text, size="10pt")

    def series(self, device: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x in minutes, utilization %, memory %) of one device as drawn."""
        rows = self._samples.get(device)
        if rows is None:
            return np.empty(0), np.empty(0), np.empty(0)
        origin = self._origin if self._origin is not None else self._first_t()
        total = self._devices.get(device, TelemetryDevice(device)).memory_total
        memory = rows[:, MEMORY] * 100 / total if total else np.full(len(rows), np.nan)
        return (rows[:, T] - origin) / 60, rows[:, UTILIZATION], memory

    def redraw(self) -> None:
        if not self._samples:
            return
        top = 100.0
        for device in sorted(self._samples):
            utilization, memory = self._curves_of(device)
            x, busy, used = self.series(device)
            for curve, y in ((utilization, busy), (memory, used)):
                keep = np.isfinite(y)
                curve.setData(x[keep], y[keep])
                if keep.any():
                    top = max(top, float(y[keep].max()))
        self.widget.getPlotItem().getViewBox().setYRange(0, top, padding=0.04)
        self._describe()

    def apply_colors(self, colors: PlotColors) -> None:
        self._colors = colors
        color_plot(self.widget, colors, "10pt")
        for device, (utilization, memory) in self._curves.items():
            color = self._color(device)
            utilization.setPen(pg.mkPen(color, width=1.5))
            memory.setPen(pg.mkPen(color, width=1.5, style=Qt.PenStyle.DashLine))
        self._describe()

    # -- inside -------------------------------------------------------------------------

    def _first_t(self) -> float:
        return min(float(rows[0, T]) for rows in self._samples.values() if len(rows))

    def _color(self, device: int) -> str:
        series = self._colors.series
        return series[sorted(self._samples).index(device) % len(series)]

    def _curves_of(self, device: int) -> tuple[pg.PlotDataItem, pg.PlotDataItem]:
        if device not in self._curves:
            self._curves[device] = (pg.PlotDataItem(antialias=True),
                                    pg.PlotDataItem(antialias=True))
            for curve in self._curves[device]:
                self.widget.addItem(curve)
            self.apply_colors(self._colors)
        return self._curves[device]

    def _label(self, device: int) -> str:
        return self._devices.get(device, TelemetryDevice(device)).label

    def _describe(self) -> None:
        """The title names each device in its colour; the tooltip gives the latest readings."""
        if not self._samples:
            return
        # Short, for a narrow plot: "GPU 1 2 ━busy ┄mem", each number in its curves' colour.
        devices = sorted(self._samples)
        kind = "CPU" if devices == [CPU_DEVICE] else "GPU"
        names = " ".join(f'<span style="color:{self._color(d)}">'
                         f'{"CPU" if d == CPU_DEVICE else d}</span>' for d in devices)
        if kind == "GPU":
            names = f"GPU {names}"
        set_title(self.widget.getPlotItem(), f"{names} &nbsp;━busy ┄mem",
                  color=self._colors.text, size="10pt")
        lines = ["Solid: utilization; dashed: memory used, % of the device's "
                 "(the training process's CPU and resident memory on a CPU run)."]
        for device in sorted(self._samples):
            rows = self._samples[device]
            if not len(rows):
                continue
            last = rows[-1]
            info = self._devices.get(device, TelemetryDevice(device))
            parts = [f"{_whole(last[UTILIZATION])} % busy",
                     f"{_whole(last[MEMORY])} of {info.memory_total or '?'} MiB"]
            if np.isfinite(last[POWER]):
                parts.append(f"{_whole(last[POWER])} W")
            if np.isfinite(last[TEMPERATURE]):
                parts.append(f"{_whole(last[TEMPERATURE])} °C")
            lines.append(f"{info.label} {info.name}: {', '.join(parts)}".replace("  ", " "))
        self.widget.setToolTip("\n".join(lines))


def _whole(value: float) -> str:
    return f"{value:.0f}" if np.isfinite(value) else "?"
