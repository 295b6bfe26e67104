"""The Data view: what a dataset holds before training, shown as the child reads it.

Opened from the run setup ("Preview…" beside Data) for the data picked there. It
opens at once; `DataOverviewLoader` reads the data in a child and reports in
stages: the class counts (bars, and a warning when the largest class has 5x
the samples of the smallest) within moments, then a few samples per class,
then the value range and, for an image folder, the distribution of image
sizes. What was read from a sample says so. Nothing here reads a file: the GUI
thread only lays out what arrives. Closing the view kills its child.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import QEvent, QSize, Qt, QTimer
from PySide6.QtGui import QImage, QPaintEvent, QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.datasets.inspection import DataKind
from mgpu_gui.core.datasets.overview import (
    SIZES_SHOWN,
    THUMB_PX,
    DataOverview,
    OverviewRequest,
    Stage,
)
from mgpu_gui.gui.jobs.background_job import source_name
from mgpu_gui.gui.jobs.data_overview import DataOverviewLoader, OverviewFigures
from mgpu_gui.gui.theme import is_palette_change, on_background
from mgpu_gui.gui.widgets.class_bars import ClassBars
from mgpu_gui.gui.widgets.field_cells import ERROR_COLOR
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen
from mgpu_gui.gui.widgets.thumbnail_grid import ThumbnailGrid, ThumbnailRow

WARNING_COLOR = "#9a6700"  # amber, made readable on a dark background
SPLIT_NAMES = {"train": "Training data", "val": "Validation data", "test": "Test data"}
OTHER_SPLITS = {"val": "validation", "test": "test"}
READING = "…"


class DataView(QWidget):
    """The figures of one `DataOverview`, updated in place as later stages arrive.

    Made in two steps, so that opening it never holds the GUI thread for long: the
    headline and status at once, everything below them by `build_content()` (the
    dialog calls it once that has been painted). The content is put together in a
    hidden container and added in one piece: one polish and one layout pass, not one
    per widget.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Data view")
        self.overview: DataOverview | None = None
        self.built = False
        self._thumbs_key: tuple = ()
        self.headline = _label("Data summary")
        self.status = _label("Data view status")
        self.status.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        top = QHBoxLayout()
        top.addWidget(self.headline, 3)
        top.addWidget(self.status, 1)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.addLayout(top)
        self._layout.addStretch(1)  # the content's place until it is built
        self._color_texts()

    def build_content(self) -> None:
        """The warning, the bars, the facts and the samples, below the headline."""
        content = QWidget()
        self.warning = _label("Data warning")
        self.warning.hide()
        self.error = _label("Data view error")
        self.error.hide()
        self.split_combo = QComboBox()
        self.split_combo.setAccessibleName("Split shown")
        self.split_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.split_combo.setToolTip("Whose class counts the bars show; the warning is about "
                                    "the training data, the split the model learns from.")
        self.split_combo.currentIndexChanged.connect(self._show_split)
        self.bars = ClassBars("Samples per class")
        self.bars_area = _scroll(self.bars, "Samples per class, scrollable")
        self.counts_note = _label("Counts note")
        self.counts_note.hide()
        self.shape_label, self.stored_label = _label("Input shape"), _label("Stored as")
        self.range_label, self.sizes_label = _label("Value range"), _label("Image sizes")
        for label in (self.shape_label, self.stored_label, self.range_label, self.sizes_label):
            label.setText(READING)
        self.facts = QFormLayout()
        self.facts.addRow("Input shape", self.shape_label)
        self.facts.addRow("Stored as", self.stored_label)
        self.facts.addRow("Value range", self.range_label)
        self.facts.addRow("Image sizes", self.sizes_label)
        self.thumbs_note = _label("Samples note")
        self.thumbs = ThumbnailGrid("Samples of each class", THUMB_PX)
        self.thumbs_area = _scroll(self.thumbs, "Samples of each class, scrollable")
        self._lay_out(content)
        self.built = True
        self._color_texts()
        self._layout.takeAt(1)  # the stretch that held the place
        self._layout.addWidget(content, 1)

    def _lay_out(self, content: QWidget) -> None:
        counts_row = QHBoxLayout()
        counts_row.addWidget(_heading("Samples per class"), 1)
        counts_row.addWidget(self.split_combo)
        left = QVBoxLayout()
        left.addLayout(counts_row)
        left.addWidget(self.bars_area, 1)
        left.addWidget(self.counts_note)
        left.addLayout(self.facts)
        right = QVBoxLayout()
        right.addWidget(_heading("Samples"))
        right.addWidget(self.thumbs_area, 1)
        right.addWidget(self.thumbs_note)
        columns = QHBoxLayout()
        columns.addLayout(left, 1)
        columns.addLayout(right, 1)
        layout = QVBoxLayout(content)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.warning)
        layout.addWidget(self.error)
        layout.addLayout(columns, 1)

    # -- what arrives --------------------------------------------------------------
    def show_waiting(self, source: str) -> None:
        self.headline.setText(f"<b>{html.escape(source_name(source))}</b>")
        self.status.setText("Counting the classes…")

    def show_failure(self, message: str) -> None:
        self.status.setText("")
        self.error.setText(message)
        self.error.show()

    def show_figures(self, figures: OverviewFigures) -> None:
        """A stage's figures; the thumbnails are rebuilt only when they changed."""
        overview = figures.overview
        first = self.overview is None
        self.overview = overview
        self.headline.setText(_headline(overview))
        self.status.setText(_status(overview))
        message = " ".join(filter(None, (overview.imbalance, overview.label_note)))
        self.warning.setText(message)
        self.warning.setVisible(bool(message))
        self.counts_note.setText(overview.counts_note())
        self.counts_note.setVisible(bool(overview.estimated))
        if first:
            self._fill_splits(overview)
        self._show_split()
        self._show_facts(overview)
        key = tuple((t.label, t.name) for t in overview.thumbnails)
        if overview.stage is not Stage.COUNTS and key != self._thumbs_key:
            self._thumbs_key = key
            self._show_thumbnails(overview, figures.images)
        self.thumbs_note.setText(overview.thumbs_note)
        self.thumbs_note.setVisible(bool(overview.thumbs_note))

    def _fill_splits(self, overview: DataOverview) -> None:
        self.split_combo.blockSignals(True)
        self.split_combo.clear()
        for split in overview.splits:
            self.split_combo.addItem(f"{SPLIT_NAMES.get(split.split, split.split)} "
                                     f"({split.samples:,})", split.split)
        self.split_combo.blockSignals(False)
        self.split_combo.setVisible(len(overview.splits) > 1)

    def _show_split(self) -> None:
        if self.overview is None or not self.overview.splits:
            return
        split = self.overview.splits[max(0, self.split_combo.currentIndex())]
        names = self.overview.class_names if split.counts else ()
        self.bars.set_counts(names, split.counts, len(names) - self.overview.estimated)

    def _show_facts(self, overview: DataOverview) -> None:
        shape = "×".join(str(d) for d in overview.input_shape or ()) or "?"
        if overview.kind is DataKind.IMAGES:
            shape += " (each image resized to the Image size set in the run setup)"
        self.shape_label.setText(shape)
        self.stored_label.setText(f"{overview.stored}; dtype {overview.dtype}")
        if overview.value_min is not None and overview.value_max is not None:
            self.range_label.setText(f"{overview.value_min:.4g} to {overview.value_max:.4g}, "
                                     f"from {overview.values_note()}")
        else:
            self.range_label.setText(READING if overview.stage is not Stage.DONE else "unknown")
        images = overview.kind is DataKind.IMAGES
        self.facts.setRowVisible(self.sizes_label, images)
        if images:
            self.sizes_label.setText(_sizes_text(overview) if overview.stage is Stage.DONE
                                     else READING)

    def _show_thumbnails(self, overview: DataOverview, images: Sequence[QImage]) -> None:
        rows: dict[int, tuple[list[QImage], list[str]]] = {}  # class -> its samples
        for thumb, image in zip(overview.thumbnails, images, strict=True):
            pictures, captions = rows.setdefault(thumb.label, ([], []))
            pictures.append(image)
            captions.append(thumb.name)
        names = overview.class_names
        self.thumbs.set_rows([ThumbnailRow(names[label] if label < len(names) else str(label),
                                           tuple(pictures), tuple(captions))
                              for label, (pictures, captions) in rows.items()])

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if is_palette_change(event):
            self._color_texts()

    def _color_texts(self) -> None:
        """Colours by palette, not style sheet: a style sheet makes every polish slower."""
        palette = self.palette()
        base = palette.color(QPalette.ColorRole.Window)
        hint = palette.color(QPalette.ColorRole.PlaceholderText)
        colors = [(self.status, hint)]
        if self.built:
            colors += [(self.warning, on_background(WARNING_COLOR, base)),
                       (self.error, on_background(ERROR_COLOR, base)),
                       (self.thumbs_note, hint), (self.counts_note, hint)]
        for label, color in colors:
            own = QPalette(palette)
            own.setColor(QPalette.ColorRole.WindowText, color)
            label.setPalette(own)


class DataViewDialog(QDialog):
    """A non-modal window around a DataView, loading once it is on screen.

    Opening it runs in steps, each after the previous one has been painted, so the
    GUI thread is never held for long (the Data view's benchmark: no stall over 16 ms):
    the click shows the headline, the next step builds the view's content, the last
    starts the loader (its thread and child).
    """

    def __init__(self, source: str, image_size: tuple[int, int],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Data: {source_name(source)}")
        self.setAccessibleName("Data view")
        self.view = DataView(self)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.view, 1)
        layout.addWidget(buttons)
        fit_to_screen(self, QSize(920, 620))
        self.loader = DataOverviewLoader(self)
        self.loader.updated.connect(self.view.show_figures)
        self.loader.failed.connect(self.view.show_failure)
        self.view.show_waiting(source)
        request = OverviewRequest(source, (int(image_size[0]), int(image_size[1])))
        self._steps = [self.view.build_content, lambda: self.loader.load(request)]
        self._step_queued = False
        self._closed = False

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        super().paintEvent(event)
        if self._steps and not self._step_queued:  # the next step once this paint is done
            self._step_queued = True
            QTimer.singleShot(0, self, self._next_step)

    def _next_step(self) -> None:
        self._step_queued = False
        if not self._closed:
            self._steps.pop(0)()
            if self._steps:
                self.update()  # the paint that brings the next step, even where none was due

    def done(self, result: int) -> None:  # Close, Escape and the window's close button
        self._closed = True
        self.loader.shutdown()
        super().done(result)


# -- text ---------------------------------------------------------------------------
def _headline(overview: DataOverview) -> str:
    name = html.escape(source_name(overview.source))
    train = overview.splits[0].samples if overview.splits else 0
    about = "about " if overview.estimated else ""
    what = (f"{len(overview.class_names)} classes" if overview.class_names
            else "no classes")
    others = "".join(f", {s.samples:,} {OTHER_SPLITS.get(s.split, s.split)} samples"
                     for s in overview.splits[1:])
    return f"<b>{name}</b>: {about}{train:,} training samples in {what}{others}"


def _status(overview: DataOverview) -> str:
    if overview.stage is Stage.COUNTS:
        return "Counting the files…" if overview.estimated else "Drawing samples…"
    if overview.stage is Stage.SAMPLES:
        return ("Reading image sizes…" if overview.kind is DataKind.IMAGES
                else "Reading the values…")
    took = f"{overview.seconds:.1f} s" if overview.seconds >= 0.1 else "under 0.1 s"
    return f"Read in {took}"


def _sizes_text(overview: DataOverview) -> str:
    if not overview.sizes:
        return f"none could be read, from {overview.sizes_note()}"
    read = max(sum(s.files for s in overview.sizes), 1)
    lines = [f"{s.width}×{s.height} px: {s.files:,} ({100 * s.files / read:.0f} %)"
             for s in overview.sizes[:SIZES_SHOWN]]
    rest = overview.sizes[SIZES_SHOWN:]
    if rest:
        lines.append(f"{len(rest)} other sizes: {sum(s.files for s in rest):,} files")
    widths = [s.width for s in overview.sizes]
    heights = [s.height for s in overview.sizes]
    lines.append(f"width {min(widths)}–{max(widths)} px, height {min(heights)}–"
                 f"{max(heights)} px, from {overview.sizes_note()}")
    return "\n".join(lines)


# -- widgets ------------------------------------------------------------------------
def _label(name: str) -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setAccessibleName(name)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _heading(text: str) -> QLabel:
    label = QLabel(f"<b>{text}</b>")
    label.setAccessibleName(text)
    return label


def _scroll(widget: QWidget, name: str) -> QScrollArea:
    area = QScrollArea()
    area.setAccessibleName(name)
    area.setWidgetResizable(True)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
    area.setWidget(widget)
    return area
