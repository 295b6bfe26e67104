"""The augmentation preview: a few images of the folder, each beside random variants of it.

Opened from the run setup's Augmentation section ("Preview…"). A row is a real
image of the picked folder as training resizes it, then variants made in a child
by the training's own augmentation layers (engine/augmentation.py): what epochs
might show the model. "New samples" picks other images and draws new variants.
While it is open, a change of the transforms, their strengths, the folder or the
image size draws the same images again once the edits pause. Nothing here reads
a file: the GUI thread only lays out what arrives.
"""

from __future__ import annotations

import html
from dataclasses import replace

from PySide6.QtCore import QEvent, QSize, Qt, QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.augment import parse_augment
from mgpu_gui.core.augment_preview import PreviewRequest
from mgpu_gui.gui.jobs.augment_preview import AugmentPreviewLoader, PreviewRow
from mgpu_gui.gui.jobs.background_job import source_name
from mgpu_gui.gui.theme import is_palette_change, on_background
from mgpu_gui.gui.widgets.field_cells import ERROR_COLOR
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen
from mgpu_gui.gui.widgets.thumbnail_grid import PAD, ThumbnailGrid, ThumbnailRow

THUMB_PX = 96  # a picture's longer side: a transform's effect must be visible
DEBOUNCE_MS = 400  # after the last edit of a strength: one child per pause, not per step
STARTING = "Starting TensorFlow…"


class AugmentPreviewDialog(QDialog):
    """Non-modal; loading from the moment it is made. `follow` what the run setup says now."""

    def __init__(self, request: PreviewRequest | None, reason: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Augmentation preview")
        self.setAccessibleName("Augmentation preview")
        self.request: PreviewRequest | None = None
        self.seed = 0
        self._fresh = False  # the next row starts a new set
        self._rows: list[ThumbnailRow] = []
        self._errors: list[str] = []
        self.about = QLabel()
        self.about.setWordWrap(True)
        self.about.setAccessibleName("What the preview shows")
        self.grid = ThumbnailGrid("Images, each followed by its augmented variants", THUMB_PX)
        # Over the grid's columns: which picture is the image, which are its variants.
        self.original_head = QLabel("<b>As resized</b>")
        self.original_head.setFixedWidth(THUMB_PX + PAD)
        self.variants_head = QLabel("<b>Random variants, as epochs may show them</b>")
        self.heads = QHBoxLayout()
        self.heads.setSpacing(0)
        self.heads.addWidget(self.original_head)
        self.heads.addWidget(self.variants_head, 1)
        self.area = QScrollArea()
        self.area.setAccessibleName("Images and their variants, scrollable")
        self.area.setWidgetResizable(True)
        self.area.setWidget(self.grid)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setTextFormat(Qt.TextFormat.PlainText)  # paths are not markup
        self.message.setAccessibleName("Preview problem")
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.hide()
        self.progress = QProgressBar()
        self.progress.setAccessibleName("Preview progress")
        self.progress.setTextVisible(False)
        self.progress.setMaximumWidth(160)
        self.status = QLabel()
        self.status.setAccessibleName("Preview status")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.again = QPushButton("New samples")
        self.again.setToolTip("Other images of the folder, with new random variants.")
        buttons.addButton(self.again, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        self.again.clicked.connect(self.new_samples)
        bottom = QHBoxLayout()
        bottom.addWidget(self.progress)
        bottom.addWidget(self.status, 1)  # the buttons stay put when the bar goes
        bottom.addWidget(buttons)
        layout = QVBoxLayout(self)
        layout.addWidget(self.about)
        layout.addLayout(self.heads)
        layout.addWidget(self.area, 1)
        layout.addWidget(self.message)
        layout.addLayout(bottom)
        self._color_message()
        fit_to_screen(self, QSize(800, 600))
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self._load)
        self.loader = AugmentPreviewLoader(self)
        self.loader.row.connect(self._add_row)
        self.loader.failed.connect(self._show_failure)
        self.loader.finished.connect(self._done)
        self.follow(request, reason)
        self._timer.start(0)  # once on screen: its thread and child start while nothing else runs

    def follow(self, request: PreviewRequest | None, reason: str = "") -> None:
        """Preview `request` (its seed is the dialog's) after the edits pause; None: say
        `reason` instead (no transform ticked, not an image folder)."""
        if request is None:
            self._timer.stop()
            self.loader.cancel()
            self.request = None
            self._clear()
            self.about.setText(reason)
            self._show_progress(None, "")
            self.again.setEnabled(False)
            return
        request = replace(request, seed=self.seed, px=THUMB_PX)
        if request == self.request:
            return
        self.request = request
        self.again.setEnabled(True)
        self._describe(request)
        self._show_progress(0, STARTING)
        self._timer.start(DEBOUNCE_MS)

    def new_samples(self) -> None:
        if self.request is None:
            return
        self.seed += 1
        self.request = replace(self.request, seed=self.seed)
        self._load()

    def done(self, result: int) -> None:  # Close, Escape and the window's close button
        self._timer.stop()
        self.loader.shutdown()
        super().done(result)

    # -- what arrives ----------------------------------------------------------------
    def _load(self) -> None:
        if self.request is None:
            return
        self._fresh = True
        self.loader.load(self.request)
        self._show_progress(0, STARTING)  # busy: the child's TensorFlow takes seconds to start

    def _add_row(self, row: PreviewRow) -> None:
        if self._fresh:  # the old set stays until the new one has something to show
            self._fresh = False
            self._clear()
        event = row.event
        if event.error:
            self._errors.append(event.error[:1].upper() + event.error[1:])
            self._show_message("\n".join(self._errors))
        else:
            variants = len(row.images) - 1
            self._rows.append(ThumbnailRow(event.label, row.images, (
                f"{event.name} as training resizes it",
                *(f"{event.name}, variant {k + 1} of {variants}" for k in range(variants)))))
            self.grid.set_rows(self._rows)
            self._align_heads()
        self._show_progress(event.index + 1, f"Image {event.index + 1} of {event.total}",
                            event.total)

    def _show_failure(self, message: str) -> None:
        self._clear()
        self._show_message(message)

    def _done(self) -> None:
        if self.request is not None and self._rows:
            self._show_progress(None, "Each epoch draws new variants like these.")
        else:
            self._show_progress(None, "")

    # -- showing -----------------------------------------------------------------------
    def _describe(self, request: PreviewRequest) -> None:
        height, width = request.image_size
        what = parse_augment(request.spec).describe().removeprefix("training images ")
        self.about.setText(
            f"Images of <b>{html.escape(source_name(request.folder))}</b> as training resizes "
            f"them ({width}×{height}), each followed by {request.variants} random variants "
            f"made by the training's own augmentation: {html.escape(what)}.")

    def _align_heads(self) -> None:
        indent = self.area.frameWidth() + self.grid.name_width + PAD
        self.heads.setContentsMargins(indent, 0, 0, 0)

    def _clear(self) -> None:
        self._rows, self._errors = [], []
        self.grid.set_rows([])
        self.message.hide()

    def _show_message(self, text: str) -> None:
        self.message.setText(text)
        self.message.show()

    def _show_progress(self, value: int | None, text: str, total: int = 0) -> None:
        """value None: no bar; 0 with no total: busy (TensorFlow is starting)."""
        self.progress.setVisible(value is not None)
        if value is not None:
            self.progress.setRange(0, total)
            self.progress.setValue(value)
        self.status.setText(text)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if is_palette_change(event):
            self._color_message()

    def _color_message(self) -> None:
        """By palette, not style sheet (as the Data view): readable on a dark background."""
        palette = QPalette(self.palette())
        palette.setColor(QPalette.ColorRole.WindowText, on_background(
            ERROR_COLOR, palette.color(QPalette.ColorRole.Window)))
        self.message.setPalette(palette)


__all__ = ["AugmentPreviewDialog"]
