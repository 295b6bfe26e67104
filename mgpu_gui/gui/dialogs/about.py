"""About mgpu-gui: this app's versions, and TensorFlow's, Keras's, CUDA's and cuDNN's as
TensorFlow reports them, with the NVIDIA driver's from NVML.

The dialog opens at once. TensorFlow is asked in a child process
(`TfFactsJob` on a `ChildJobRunner`); until it answers, its rows say "asking TensorFlow…". The
driver version comes from the GPU inventory the window already has (NVML).
"""

from __future__ import annotations

import importlib.metadata
import platform

import PySide6
from PySide6.QtCore import Qt, Signal, qVersion
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui import __version__
from mgpu_gui.core.devices.nvml import GpuInventory
from mgpu_gui.core.tools.doctor import NvmlFacts, TfFacts
from mgpu_gui.core.tools.doctor_report import version_rows
from mgpu_gui.core.tools.tf_facts import TfFactsJob
from mgpu_gui.gui.jobs.child_job import ChildJobRunner

ROW_TIPS = {
    "CUDA": "The CUDA version TensorFlow was built with (tf.sysconfig.get_build_info()); "
            "the driver must support it or a newer one.",
    "cuDNN": "The cuDNN version TensorFlow was built with (tf.sysconfig.get_build_info()).",
    "NVIDIA driver": "From NVML, the library behind nvidia-smi.",
    "GPUs TensorFlow sees": "tf.config.list_physical_devices('GPU') in a fresh process with "
                            "this app's environment.",
    "NCCL": "The library MirroredStrategy uses to sum gradients across GPUs.",
    "JAX": "The optional second engine (--engine jax) and the devices it sees, asked in the "
           "same process as TensorFlow.",
}


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


class AboutDialog(QDialog):
    """Non-modal; `check_setup_requested` when the user asks for "Check my setup…"."""

    check_setup_requested = Signal()

    def __init__(self, inventory: GpuInventory | None = None, parent: QWidget | None = None,
                 *, ask: bool = True):
        super().__init__(parent)
        self.setWindowTitle("About mgpu-gui")
        self.setAccessibleName("About mgpu-gui")
        self._nvml = NvmlFacts.from_inventory(inventory) if inventory is not None else None
        self.tf: TfFacts | None = None
        self.probe = ChildJobRunner(self)
        self.probe.finished.connect(self.set_tf_facts)

        title = QLabel(f"<h3>mgpu-gui {__version__}</h3>Data-parallel Keras training on this "
                       "workstation's GPUs (tf.distribute.MirroredStrategy), watched live.")
        title.setWordWrap(True)
        title.setAccessibleName("mgpu-gui version")
        self.form = QFormLayout()
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.values: dict[str, QLabel] = {}
        for label, value in [
            ("Python", platform.python_version()),
            ("Qt", f"{qVersion()} (PySide6 {PySide6.__version__})"),
            ("pyqtgraph", _version("pyqtgraph")),
            *version_rows(self._nvml, None),
        ]:
            self._add_row(label, value)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy these versions to the clipboard (for a bug report)")
        self.check_button = QPushButton("Check my setup…")
        self.check_button.setToolTip("Compare what the driver, CUDA, TensorFlow, NCCL and JAX "
                                     "say, and what to fix when they disagree")
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.check_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        self.copy_button.clicked.connect(self.copy)
        self.check_button.clicked.connect(self.check_setup_requested)
        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addLayout(self.form)
        layout.addWidget(buttons)
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance("0") * 60)  # in characters
        if ask:
            self.probe.start(TfFactsJob())

    def _add_row(self, label: str, value: str) -> None:
        field = QLabel(value)
        field.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        field.setWordWrap(True)
        field.setAccessibleName(label)
        if label in ROW_TIPS:
            field.setToolTip(ROW_TIPS[label])
        self.form.addRow(f"{label}:", field)
        self.values[label] = field

    def _set_row(self, label: str, value: str) -> None:
        if label in self.values:
            self.values[label].setText(value)
        else:
            self._add_row(label, value)

    def set_inventory(self, inventory: GpuInventory) -> None:
        self._nvml = NvmlFacts.from_inventory(inventory)
        self._show_rows()

    def set_tf_facts(self, facts: TfFacts) -> None:
        self.tf = facts
        self._show_rows()

    def _show_rows(self) -> None:
        for label, value in version_rows(self._nvml, self.tf):
            self._set_row(label, value)

    def text(self) -> str:
        return "\n".join(f"{label}: {field.text()}" for label, field in self.values.items())

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(f"mgpu-gui {__version__}\n{self.text()}")

    def done(self, result: int) -> None:
        self.probe.shutdown()  # closed before TensorFlow answered: no orphan child
        super().done(result)
