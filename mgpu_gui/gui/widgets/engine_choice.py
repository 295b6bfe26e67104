"""The run setup's Engine choice: the Keras backend a run trains on.

Whether each engine is installed is looked up, not imported (`installed_engines`),
so building the choice costs the window nothing. An engine that is not installed
stays listed, disabled, its tooltip naming the install command; a saved setting
that names it still shows, and the setup check says what is wrong
(`engine_problems`).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QWidget

from mgpu_gui.core.engines import JAX_CUDA_EXTRA_HINT, JAX_EXTRA_HINT, Engine, installed_engines

LABELS = {Engine.TENSORFLOW: "TensorFlow", Engine.JAX: "JAX"}
# Beside the choice, in two lines: what the engine does with the replicas.
HINTS = {
    Engine.TENSORFLOW: "MirroredStrategy: a model copy per replica",
    Engine.JAX: "XLA always; BatchNorm synchronized (implied)",
}
TIPS = {
    Engine.TENSORFLOW: "TensorFlow's MirroredStrategy, the default. Runs across several "
                       "machines (mgpu-train worker) need it.",
    Engine.JAX: "Keras on JAX: keras.distribution.DataParallel, one program over all "
                "devices, compiled with XLA. A model trained on either engine loads on the "
                "other.",
}
NOT_INSTALLED = {
    Engine.TENSORFLOW: "TensorFlow is not installed in this Python environment: pip install "
                       "mgpu-gui installs it; then start mgpu-gui again.",
    Engine.JAX: f"JAX is not installed in this Python environment: {JAX_EXTRA_HINT} (NVIDIA "
                f"GPUs: {JAX_CUDA_EXTRA_HINT}), then start mgpu-gui again.",
}
# On JAX the XLA and synchronized BatchNorm boxes show what the engine does anyway.
XLA_ON_JAX = "JAX compiles every step with XLA already."
SYNC_BN_ON_JAX = ("JAX runs one program over all devices, so BatchNormalization's mean and "
                  "variance are always over the global batch: synchronized BatchNorm is implied.")


class EngineCombo(QComboBox):
    """TensorFlow and JAX, each with its tooltip; those not installed cannot be chosen."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        installed = installed_engines()
        model: QStandardItemModel = self.model()  # a QComboBox's own model
        for index, engine in enumerate(Engine):
            self.addItem(LABELS[engine], engine.value)
            usable = engine in installed
            model.item(index).setEnabled(usable)
            self.setItemData(index, TIPS[engine] if usable else NOT_INSTALLED[engine],
                             Qt.ItemDataRole.ToolTipRole)

    def engine(self) -> Engine:
        return Engine(self.currentData())

    def set_engine(self, name: str) -> None:
        """Show `name`, also when it is not installed (the setup check then says so)."""
        self.setCurrentIndex(max(self.findData(name), 0))

    def hint(self) -> str:
        return HINTS[self.engine()]
