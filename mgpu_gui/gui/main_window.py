"""The main window; for now the device overview and how to train from the CLI."""

from __future__ import annotations

from PySide6.QtGui import QFont
from PySide6.QtWidgets import QLabel, QMainWindow, QPlainTextEdit, QVBoxLayout, QWidget

from mgpu_gui.core.devices import format_inventory, query_inventory


class MainWindow(QMainWindow):
    def __init__(self) -> None:
        super().__init__()
        self.setWindowTitle("mgpu-gui")
        self.resize(900, 560)
        central = QWidget(self)
        layout = QVBoxLayout(central)
        heading = QLabel("<h2>mgpu-gui</h2>Data-parallel Keras training on this machine's GPUs.")
        layout.addWidget(heading)
        self.devices_view = devices = QPlainTextEdit(format_inventory(query_inventory()))
        devices.setReadOnly(True)
        devices.setFont(QFont("monospace"))
        devices.setAccessibleName("GPU inventory")
        layout.addWidget(devices)
        hint = QLabel("Training from the window arrives with the desktop-app issue; until then "
                      "run <code>mgpu-train</code> (e.g. <code>mgpu-train --replicas 2</code>).")
        hint.setWordWrap(True)
        layout.addWidget(hint)
        self.setCentralWidget(central)
