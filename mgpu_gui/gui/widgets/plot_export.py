"""Any plot to a PNG or SVG file, from its context menu: "Export as PNG…", "Export as SVG…".

pyqtgraph's own "Export..." entry (its scene's one context action) is replaced by
these two, so there is one export path: its image exporter sizes the PNG in
logical pixels (half the pixels the screen shows at 200 % scaling) and its SVG
exporter fails on the paths Qt 6 writes (pyqtgraph 0.14: a ValueError in
`correctCoordinates`). Here the PNG is the view as painted (`QWidget.grab`: its
size times the device pixel ratio, on the plot's background, which the theme
sets), and the SVG is the view painted into a `QSvgGenerator` (curves and markers
as paths, text as text).

Both are written on the GUI thread, once, after the file dialog: measured on 2 busy
cores at QT_SCALE_FACTOR=2, a 600x400 plot with a few curves (1200x800 pixels)
takes ~25 ms to grab and ~25 ms to encode; a 640x410 loss plot with 10,000 batch
points ~120 ms to grab (painting it, which only the GUI thread can do) and ~40 ms to
encode. Its SVG takes 3-25 ms (the curves are already thinned to the pixels). What
happened goes to the window's notifier.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRect
from PySide6.QtGui import QAction, QPainter
from PySide6.QtSvg import QSvgGenerator

from mgpu_gui.core.errors import UserError
from mgpu_gui.gui.widgets.notifier import Notice, NoticeKind, notify_from
from mgpu_gui.gui.widgets.save_file import ask_save_path

RunFolder = Callable[[], Path | None]  # the folder of the run a plot shows, if any


class ImageFormat(StrEnum):
    PNG = "png"
    SVG = "svg"

    @property
    def filter(self) -> str:
        return {ImageFormat.PNG: "PNG image (*.png)",
                ImageFormat.SVG: "SVG drawing (*.svg)"}[self]


def install_export(widget: pg.PlotWidget, run_folder: RunFolder | None = None) -> None:
    """Give `widget`'s context menu the two export entries in place of pyqtgraph's; the
    file dialog suggests a name beside `run_folder()` (the run shown), else in the home
    folder."""
    actions = []
    for fmt in ImageFormat:
        action = QAction(f"Export as {fmt.name}…", widget)
        action.setStatusTip(f"Save this plot as a {fmt.name} file, as it is shown")
        action.triggered.connect(
            lambda _=False, f=fmt: ask_and_export(widget, f, run_folder))
        actions.append(action)
    # The scene appends these to every menu its items raise (the view's, the axes').
    widget.scene().contextMenu = actions


def ask_and_export(widget: pg.PlotWidget, fmt: ImageFormat,
                   run_folder: RunFolder | None = None) -> Path | None:
    """Ask where, write, and say so; the file written, or None."""
    target = ask_save_path(widget, f"Export plot as {fmt.name}",
                           suggested_path(widget, fmt, run_folder), fmt.filter, f".{fmt}")
    if target is None:
        return None
    try:
        export_plot(widget, target, fmt)
    except UserError as error:
        notify_from(widget, Notice(NoticeKind.FAILED, "Plot export failed", str(error)))
        return None
    notify_from(widget, Notice(NoticeKind.DONE, "Plot exported", str(target)))
    return target


def export_plot(widget: pg.PlotWidget, path: Path, fmt: ImageFormat) -> None:
    """Write the widget as shown to `path`; UserError says why it could not be written."""
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if fmt is ImageFormat.PNG:
        widget.grab().save(buffer, "PNG")  # device pixels, the view's background
    else:
        generator = QSvgGenerator()
        generator.setOutputDevice(buffer)
        generator.setSize(widget.size())
        generator.setViewBox(QRect(0, 0, widget.width(), widget.height()))
        generator.setResolution(widget.logicalDpiX())  # else text and view scale apart
        generator.setTitle(plot_name(widget))
        # In export mode pyqtgraph draws markers as shapes, not from its pixmap atlas
        # (which would put raster images into the SVG).
        items = [i for i in widget.scene().items() if hasattr(i, "setExportMode")]
        for item in items:
            item.setExportMode(True, {"antialias": True})
        painter = QPainter(generator)
        try:
            widget.render(painter)
        finally:
            painter.end()
            for item in items:
                item.setExportMode(False)
    buffer.close()
    try:
        path.write_bytes(data.data())
    except OSError as error:
        raise UserError(f"Could not write {path}: {error.strerror or error}. Choose another "
                        "file or folder.") from None


def plot_name(widget: pg.PlotWidget) -> str:
    """The plot's title ("Loss", "Devices (%)"), else its accessible name without
    " plot" and any explanation after a colon ("Residuals: each sample's ...")."""
    title = widget.getPlotItem().titleLabel.text
    return title or re.sub(r" plot$", "", widget.accessibleName().split(":")[0]) or "plot"


def suggested_path(widget: pg.PlotWidget, fmt: ImageFormat,
                   run_folder: RunFolder | None = None) -> Path:
    """`<run folder name>-<plot>.<fmt>` beside the run's folder (as a model export is
    suggested), else `<plot>.<fmt>` in the home folder."""
    stem = re.sub(r"[^0-9a-z]+", "-", plot_name(widget).lower()).strip("-") or "plot"
    folder = run_folder() if run_folder is not None else None
    if folder is None:
        return Path.home() / f"{stem}.{fmt}"
    return folder.parent / f"{folder.name}-{stem}.{fmt}"
