"""Colour compared runs by one setting: a colour scale for numbers, a palette for the rest.

A number setting (learning rate, batch size) maps onto viridis, on a log scale
when its values span a factor of 10 or more (learning rates do); the scale's
end that would vanish into the background is left out (the bright end on a
light plot, the dark end on a dark one), and every colour is kept at 3:1
contrast. Categories (optimizer, on/off) take the plot palette in order of
first appearance. The legend lists the values, at most LEGEND_MAX of a scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QColor

from mgpu_gui.core.runs.compare import numeric, setting_text
from mgpu_gui.gui.theme import MIN_CURVE_CONTRAST, PlotColors, readable

LEGEND_MAX = 6
_RANGE = {False: (0.0, 0.8), True: (0.25, 1.0)}  # viridis' part for (light, dark) plots


@dataclass(frozen=True)
class SettingColors:
    colors: tuple[str, ...]  # one per run
    legend: tuple[tuple[str, str], ...]  # (text, colour), in the scale's or first order


def color_by_setting(name: str, values: Sequence[Any], plot: PlotColors) -> SettingColors:
    """The colours of runs whose setting `name` has these `values` (None: unknown, grey)."""
    present = [v for v in values if v is not None]
    if numeric(present) and len(set(present)) > 1:
        return _scale(name, values, plot)
    order = list(dict.fromkeys(present))
    palette = {value: plot.series[i % len(plot.series)] for i, value in enumerate(order)}
    return SettingColors(
        tuple(palette.get(v, plot.axis) if v is not None else plot.axis for v in values),
        tuple((f"{name} = {setting_text(v)}", palette[v]) for v in order))


def _scale(name: str, values: Sequence[Any], plot: PlotColors) -> SettingColors:
    distinct = sorted({float(v) for v in values if v is not None})
    low, high = distinct[0], distinct[-1]
    log = low > 0 and high / low >= 10
    start, end = _RANGE[plot.dark]
    background = QColor(plot.background)
    colormap = pg.colormap.get("viridis")

    def color(value: float) -> str:
        t = ((math.log(value) - math.log(low)) / (math.log(high) - math.log(low)) if log
             else (value - low) / (high - low))
        mapped = colormap.map(start + t * (end - start), mode="qcolor")
        return readable(mapped, background, MIN_CURVE_CONTRAST).name()

    shown = distinct if len(distinct) <= LEGEND_MAX else [
        distinct[round(i)] for i in np.linspace(0, len(distinct) - 1, LEGEND_MAX)]
    return SettingColors(
        tuple(color(float(v)) if v is not None else plot.axis for v in values),
        tuple((f"{name} = {setting_text(v)}", color(v)) for v in shown))
