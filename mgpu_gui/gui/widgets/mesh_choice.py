"""The run's mesh (issue 31): data replicas x model shards over the chosen devices.

The choice lists the meshes the device count allows (data parallelism first), and the
grid beside it draws them: a row per data replica, a column per model shard, each cell a
chosen device. A model axis above 1 splits the large variables over a row's devices
(Keras 3's ModelParallel): JAX only, so on TensorFlow the choice holds data parallelism
and says why. A mesh the settings asked for (a past run's) is kept until a device count
allows it.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QPainter, QPalette
from PySide6.QtWidgets import QComboBox, QSizePolicy, QWidget

from mgpu_gui.core.mesh.settings import MODEL_PARALLEL_JAX_ONLY
from mgpu_gui.core.mesh.shape import MeshShape, meshes_for

CELL = QSize(26, 15)  # one device of the grid, logical pixels
GAP = 2
MAX_CELLS = 8  # wider meshes draw their first rows and columns, then "…"


def mesh_label(shape: MeshShape) -> str:
    if shape.model == 1:
        return f"{shape.data}×1: data parallel"
    if shape.data == 1:
        return f"1×{shape.model}: {shape.model} shards"
    return f"{shape.data}×{shape.model}: {shape.data} replicas × {shape.model} shards"


class MeshCombo(QComboBox):
    """The meshes of the run's device count; `mesh()` is the config's value."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._wanted: str | None = None  # the mesh asked for ("2x2"), across device counts
        self._model_parallel = True
        self.activated.connect(lambda _: self._want(self.shape()))
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        self.set_devices(1)
        self.set_model_parallel(True)  # its tooltip

    def set_devices(self, count: int) -> None:
        """List the meshes of `count` devices, keeping the one asked for where it is one of
        them, else its model axis where that still divides, else data parallelism."""
        previous = self.shape()
        self.blockSignals(True)
        self.clear()
        for shape in meshes_for(max(count, 1)):
            self.addItem(mesh_label(shape), shape)
        self.blockSignals(False)
        self._show_wanted(previous)

    def set_model_parallel(self, allowed: bool) -> None:
        """False on TensorFlow: data parallelism only, the reason in the tooltip; the mesh
        asked for comes back on JAX."""
        self._model_parallel = allowed
        self.setToolTip(
            "Data replicas × model shards over the chosen devices. A × above 1 on the right "
            "splits the large variables (Dense, Conv, Embedding) over that many devices, "
            "for models larger than one GPU; each row trains on its own part of the batch."
            + ("" if allowed else f"\n{MODEL_PARALLEL_JAX_ONLY.split('; ')[0]}: choose the "
               "JAX engine above."))
        self._show_wanted(self.shape())

    def set_mesh(self, mesh: str | None) -> None:
        self._wanted = None if mesh is None else mesh.strip().lower().replace("×", "x")
        self._show_wanted(None)

    def shape(self) -> MeshShape | None:
        return self.currentData()

    def mesh(self) -> str | None:
        """The config's `mesh`: None for data parallelism."""
        shape = self.shape()
        return None if shape is None or shape.model == 1 else shape.flag

    def _want(self, shape: MeshShape | None) -> None:
        self._wanted = None if shape is None else shape.flag

    def _show_wanted(self, previous: MeshShape | None) -> None:
        shapes = [self.itemData(i) for i in range(self.count())]
        choice = next((s for s in shapes if s.flag == self._wanted), None)
        if choice is None and previous is not None:
            choice = next((s for s in shapes if s.model == previous.model), None)
        if not self._model_parallel or choice is None:
            choice = shapes[0]  # data parallelism
        self.setCurrentIndex(shapes.index(choice))
        self.setEnabled(self._model_parallel and len(shapes) > 1)


class MeshGrid(QWidget):
    """The chosen devices as the mesh lays them out: rows are data replicas, columns model
    shards."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._shape = MeshShape(1, 1)
        self._names: tuple[str, ...] = ("0",)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.setAccessibleName("Mesh of the devices")

    def show_mesh(self, shape: MeshShape | None, names: Sequence[str]) -> None:
        """`names`: the devices in mesh order (row by row), e.g. GPU indices."""
        self._shape = shape or MeshShape(max(len(names), 1), 1)
        self._names = tuple(names) or ("0",)
        rows = "\n".join(", ".join(self._names[r * self._shape.model:(r + 1) * self._shape.model])
                         for r in range(self._shape.data))
        self.setToolTip(f"Each row is a data replica; its devices share the model:\n{rows}")
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        columns, rows = (min(n, MAX_CELLS) for n in (self._shape.model, self._shape.data))
        return QSize(columns * (CELL.width() + GAP), rows * (CELL.height() + GAP))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return self.sizeHint()

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        painter = QPainter(self)
        palette = self.palette()
        font = painter.font()
        font.setPointSizeF(max(font.pointSizeF() * 0.75, 6.0))
        painter.setFont(font)
        for row in range(min(self._shape.data, MAX_CELLS)):
            for column in range(min(self._shape.model, MAX_CELLS)):
                rect = QRectF(column * (CELL.width() + GAP), row * (CELL.height() + GAP),
                              CELL.width(), CELL.height())
                index = row * self._shape.model + column
                cut = (row == MAX_CELLS - 1 < self._shape.data - 1
                       or column == MAX_CELLS - 1 < self._shape.model - 1)
                painter.setPen(palette.color(QPalette.ColorRole.Mid))
                painter.setBrush(palette.color(QPalette.ColorRole.AlternateBase))
                painter.drawRect(rect)
                painter.setPen(palette.color(QPalette.ColorRole.Text))
                text = "…" if cut else (self._names[index] if index < len(self._names) else "")
                painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, text)
        painter.end()
