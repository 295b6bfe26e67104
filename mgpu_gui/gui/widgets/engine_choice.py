"""The run setup's Engine choice: the Keras backend a run trains on.

Whether each engine is installed is looked up, not imported (`installed_engines`),
so building the choice costs the window nothing. An engine that is not installed
stays listed, disabled; `InstallNote` under the choice says so and holds the command
that installs it into this Python environment, to copy. A saved setting that names
it still shows, and the setup check says what is wrong (`engine_problems`).
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit, QVBoxLayout, QWidget

from mgpu_gui.core.engines import (
    JAX_CUDA_EXTRA_HINT,
    JAX_EXTRA_HINT,
    Engine,
    installed_engines,
    pip_install,
)
from mgpu_gui.gui.widgets.field_cells import row

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
# What is missing, and the commands (for this Python) that install it: (for what, command).
NOT_INSTALLED = {
    Engine.TENSORFLOW: "TensorFlow is not installed in this Python environment. To train on "
                       "it, run this, then start mgpu-gui again:",
    Engine.JAX: "JAX is not installed in this Python environment. To train on it, run one of "
                "these, then start mgpu-gui again:",
}
INSTALL = {Engine.TENSORFLOW: (("", pip_install("mgpu-gui")),),
           Engine.JAX: (("CPU", JAX_EXTRA_HINT), ("NVIDIA GPUs", JAX_CUDA_EXTRA_HINT))}
# On JAX the XLA and synchronized BatchNorm boxes show what the engine does anyway.
XLA_ON_JAX = "JAX compiles every step with XLA already."
SYNC_BN_ON_JAX = ("JAX runs one program over all devices, so BatchNormalization's mean and "
                  "variance are always over the global batch: synchronized BatchNorm is implied.")


class EngineCombo(QComboBox):
    """TensorFlow and JAX, each with its tooltip; those not installed cannot be chosen."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        installed = installed_engines()
        self.missing = [engine for engine in Engine if engine not in installed]
        model: QStandardItemModel = self.model()  # a QComboBox's own model
        for index, engine in enumerate(Engine):
            self.addItem(LABELS[engine], engine.value)
            usable = engine in installed
            model.item(index).setEnabled(usable)
            self.setItemData(index, TIPS[engine] if usable else install_text(engine),
                             Qt.ItemDataRole.ToolTipRole)

    def engine(self) -> Engine:
        return Engine(self.currentData())

    def set_engine(self, name: str) -> None:
        """Show `name`, also when it is not installed (the setup check then says so)."""
        self.setCurrentIndex(max(self.findData(name), 0))

    def hint(self) -> str:
        return HINTS[self.engine()]


def install_text(engine: Engine) -> str:
    """That `engine` is not installed, and how to install it, in one paragraph."""
    return " ".join([NOT_INSTALLED[engine], *(f"{what}: {command}." if what else f"{command}."
                                              for what, command in INSTALL[engine])])


class InstallNote(QWidget):
    """Under the engine choice, for each engine it refuses: that it is not installed, and
    the commands that install it here, in read-only fields (selectable, and no wider than
    the form whatever the path's length). Hidden when every engine is installed."""

    def __init__(self, missing: Sequence[Engine], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.commands: list[QLineEdit] = []
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        for engine in missing:
            text = QLabel(NOT_INSTALLED[engine], wordWrap=True)
            text.setProperty("role", "hint")
            column.addWidget(text)
            for what, line in INSTALL[engine]:
                command = QLineEdit(line)
                command.setReadOnly(True)
                command.setCursorPosition(0)  # the start shows: the interpreter, then pip
                command.setAccessibleName(f"Command that installs {LABELS[engine]}"
                                          + (f" for {what}" if what else ""))
                command.setToolTip(line)
                self.commands.append(command)
                column.addLayout(row([QLabel(what), command] if what else [command]))
        self.setVisible(bool(missing))
